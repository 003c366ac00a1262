"""Language models on characters: n-gram counts, a neural MLP model, causal and masked objectives.

A language model assigns a probability to every token sequence through the chain rule
p(x_1..x_T) = prod_t p(x_t | x_<t) (eq. 18.1); what distinguishes models is how they estimate
the conditionals. This module holds the two classic estimators of the formula sheet (chapter 18):
add-alpha smoothed n-gram counts (eq. 18.2) and the neural MLP language model of Bengio et al.
(eq. 18.5), trained with the cross-entropy of eq. 18.3 and judged by the perplexity of eq. 18.4
(computed by :func:`mlbook.foundations.information.perplexity`). Beside the causal objective sits BERT's
masked-LM objective: corrupt 15 % of the positions (80 % [MASK], 10 % random, 10 % unchanged) and
score only those. Sampling with a temperature reuses the Gumbel-max sampler of chapter 6.

Shape legend
    V      vocabulary size (characters here; the [MASK] id, if any, is one more)
    N      number of predicted positions (a flattened stream or batch)
    B, T   batch size and sequence length
    C      context length: the number of previous tokens a model sees (n-gram: C = n - 1)
    D      embedding width;  H  hidden width of the MLP
    X      (N, C) int64 context windows;  y  (N,) int64 targets, X[i] the C tokens before y[i]

Every optimised function sits beside a naive reference: :func:`ngram_counts` (one bincount)
beside :func:`ngram_counts_naive` (a Python loop), :func:`mlp_lm_logits` (an embedding gather)
beside :func:`mlp_lm_logits_naive` (one-hot products, one window at a time). Bad input raises
``TypeError`` or ``ValueError`` naming the offending shapes or values.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..foundations.probability import gumbel_max_sample
from ..nn.softmax import cross_entropy, cross_entropy_grad, log_softmax

__all__ = [
    "toy_corpus",
    "build_vocab",
    "encode",
    "decode",
    "context_windows",
    "centered_windows",
    "sequence_log_prob",
    "ngram_counts",
    "ngram_counts_naive",
    "add_alpha_probs",
    "ngram_log_probs",
    "lm_loss",
    "lm_loss_grad",
    "MLPLMConfig",
    "mlp_lm_logits",
    "mlp_lm_logits_naive",
    "MLPLanguageModel",
    "train_lm",
    "mask_tokens",
    "masked_lm_loss",
    "causal_lm_loss",
    "sample",
]

_MAX_TABLE = 2**25  # largest n-gram table (cells) the dense counts may allocate, 256 MiB
IGNORE_INDEX = -100  # label of positions that carry no loss (the convention of F.cross_entropy)


# --- data: a rule-generated corpus and a character vocabulary -----------------------------------

_DET_SG = ["the", "a", "every", "my", "one"]
_DET_PL = ["the", "two", "many", "some", "my"]
_ADJ = ["small", "old", "red", "quiet", "happy", "green", "tall", "young", "brave", "lazy"]
_NOUN = [
    "cat",
    "dog",
    "bird",
    "child",
    "teacher",
    "farmer",
    "horse",
    "girl",
    "boy",
    "fox",
    "baker",
    "sailor",
]
_PLACE = ["river", "garden", "house", "tree", "bridge", "market", "hill", "road"]
_VERB_TR = ["see", "like", "follow", "help", "find", "watch", "call", "visit"]
_VERB_IN = ["sleep", "sing", "run", "wait", "laugh", "dance", "rest", "swim"]
_PREP = ["near", "under", "behind", "beside", "across", "over"]
_ADV = ["slowly", "often", "quietly", "never", "always", "today"]


def _third_person(verb: str) -> str:
    return verb + ("es" if verb.endswith(("s", "sh", "ch", "x")) else "s")


def _noun_phrase(rng: random.Random, plural: bool, nouns: Sequence[str]) -> str:
    det = rng.choice(_DET_PL if plural else _DET_SG)
    words = [rng.choice(_ADJ)] if rng.random() < 0.4 else []
    noun = rng.choice(nouns)
    words.append(noun + ("s" if plural and not noun.endswith("x") else "es" if plural else ""))
    if det == "a" and words[0][0] in "aeiou":
        det = "an"
    return " ".join([det, *words])


def toy_corpus(n_sentences: int, seed: int = 0) -> str:
    """English sentences from a small random grammar, one per line (the chapter's corpus).

    Subjects are singular or plural and the verb agrees with them ("the dog sees", "two dogs
    see"), so a model must look several characters back to spell a verb right; "a" becomes "an"
    before a vowel. Generated with Python's ``random.Random(seed)``, so the text is the same on
    every machine.

    Args:
        n_sentences: number of sentences (lines), >= 1.
        seed: the seed of the generator.

    Returns:
        The text: lowercase letters, spaces, commas, full stops and a newline after each sentence.
    """
    if not isinstance(n_sentences, int) or n_sentences < 1:
        raise ValueError(f"n_sentences must be a positive int, got {n_sentences!r}")
    rng = random.Random(seed)
    lines = []
    for _ in range(n_sentences):
        plural = rng.random() < 0.35
        subject = _noun_phrase(rng, plural, _NOUN)
        if rng.random() < 0.55:
            verb = rng.choice(_VERB_TR)
            rest = _noun_phrase(rng, rng.random() < 0.3, _NOUN + _PLACE)
        else:
            verb = rng.choice(_VERB_IN)
            rest = ""
        verb = verb if plural else _third_person(verb)
        parts = [subject]
        if rng.random() < 0.25:
            parts.append(rng.choice(_ADV))
        parts.append(verb)
        if rest:
            parts.append(rest)
        if rng.random() < 0.5:
            parts += [rng.choice(_PREP), _noun_phrase(rng, False, _PLACE)]
        sentence = " ".join(parts)
        if rng.random() < 0.2:
            sentence += (
                ", and "
                + _noun_phrase(rng, False, _NOUN)
                + " "
                + _third_person(rng.choice(_VERB_IN))
            )
        lines.append(sentence + ".\n")
    return "".join(lines)


def build_vocab(text: str) -> list[str]:
    """The sorted list of distinct characters of ``text``; a character's id is its index."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text:
        raise ValueError("text is empty: no vocabulary")
    return sorted(set(text))


def encode(text: str, vocab: Sequence[str]) -> torch.Tensor:
    """Characters to ids: (len(text),) int64 with ids[i] = vocab.index(text[i])."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    index = {ch: i for i, ch in enumerate(vocab)}
    unknown = sorted(set(text) - index.keys())
    if unknown:
        raise ValueError(f"characters not in the vocabulary: {unknown[:10]}")
    return torch.tensor([index[ch] for ch in text], dtype=torch.int64)


def decode(ids, vocab: Sequence[str]) -> str:
    """Ids to characters; ids outside the vocabulary (a [MASK] id) print as '_'."""
    return "".join(vocab[i] if 0 <= i < len(vocab) else "_" for i in torch.as_tensor(ids).tolist())


# --- validation ----------------------------------------------------------------------------------


def _check_ids(ids, name: str, vocab_size: int | None = None, ndim: int | None = None):
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise TypeError(f"{name} must be an integer tensor, got dtype {ids.dtype}")
    if ndim is not None and ids.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes, got shape {tuple(ids.shape)}")
    if (
        vocab_size is not None
        and ids.numel()
        and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size)
    ):
        raise ValueError(
            f"{name} must lie in [0, {vocab_size}), got range [{int(ids.min())}, {int(ids.max())}]"
        )
    return ids.long()


def _check_int(value, name: str, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


# --- eq. 18.1: the chain rule, context windows ---------------------------------------------------


def context_windows(tokens: torch.Tensor, context: int, pad_id: int) -> torch.Tensor:
    """The C tokens before every position: X[..., t, :] = (x_{t-C}, ..., x_{t-1}).

    Positions before the start are filled with ``pad_id`` (here the newline that ends every
    sentence, so the first character is predicted as if a line had just ended). Row t is the
    context of the model's conditional q(x_t | x_<t) in the chain rule (eq. 18.1).

    Args:
        tokens: (T,) or (B, T) token ids.
        context: C >= 0; C = 0 gives (..., T, 0), a unigram model's empty context.
        pad_id: the id to fill in before position 0.

    Returns:
        (..., T, C) int64 windows.
    """
    t = _check_ids(tokens, "tokens")
    if t.ndim not in (1, 2):
        raise ValueError(f"tokens must be (T,) or (B, T), got shape {tuple(t.shape)}")
    c = _check_int(context, "context", 0)
    pad = torch.full((*t.shape[:-1], c), int(pad_id), dtype=torch.int64)
    padded = torch.cat([pad, t], dim=-1)  # (..., C + T)
    return padded.unfold(-1, c, 1)[..., : t.shape[-1], :]  # (..., T + 1, C) -> (..., T, C)


def centered_windows(tokens: torch.Tensor, k: int, pad_id: int) -> torch.Tensor:
    """The k tokens on each side of every position and the position itself (a masked LM's view).

    W[..., t, :] = (x_{t-k}, ..., x_{t-1}, x_t, x_{t+1}, ..., x_{t+k}), padded with ``pad_id``
    beyond both ends. Built from :func:`context_windows` of the sequence and of its reverse.

    Args:
        tokens: (T,) or (B, T) token ids (for a masked LM: the corrupted inputs).
        k: the half-width, >= 1.

    Returns:
        (..., T, 2k + 1) int64 windows.
    """
    t = _check_ids(tokens, "tokens")
    _check_int(k, "k", 1)
    left = context_windows(t, k, pad_id)  # (..., T, k): x_{t-k} .. x_{t-1}
    right = context_windows(t.flip(-1), k, pad_id).flip(-2).flip(-1)  # (..., T, k): x_{t+1}..
    return torch.cat([left, t.unsqueeze(-1), right], dim=-1)  # (..., T, 2k + 1)


def sequence_log_prob(log_probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(x_1..x_T) = sum_t log q(x_t | x_<t): the chain rule in log space (eq. 18.1).

    Args:
        log_probs: (..., T, V) row t holds log q(. | x_<t), normalised over V.
        tokens: (..., T) the sequence(s) x.

    Returns:
        (...) log-probabilities of the sequences, in log_probs' dtype.
    """
    if not isinstance(log_probs, torch.Tensor) or not log_probs.is_floating_point():
        raise TypeError("log_probs must be a floating-point torch.Tensor")
    t = _check_ids(tokens, "tokens", vocab_size=log_probs.shape[-1])
    if log_probs.shape[:-1] != t.shape:
        raise ValueError(
            f"log_probs {tuple(log_probs.shape)} must be tokens' shape "
            f"{tuple(t.shape)} plus a vocabulary axis"
        )
    return log_probs.gather(-1, t.unsqueeze(-1)).squeeze(-1).sum(dim=-1)  # (..., T) -> (...)


# --- eq. 18.2: n-gram counts with add-alpha smoothing --------------------------------------------


def ngram_counts(X: torch.Tensor, y: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Counts c[x_{t-C}, ..., x_{t-1}, x_t] of every (context, next token) pair, by one bincount.

    Args:
        X: (N, C) context windows; y: (N,) the tokens that follow them.
        vocab_size: V.

    Returns:
        (V,) * (C + 1) float64 counts; for a bigram model (C = 1) the (V, V) matrix c_ij of
        eq. 18.2, with i the previous token and j the next.
    """
    v = _check_int(vocab_size, "vocab_size", 1)
    X = _check_ids(X, "X", v, ndim=2)
    y = _check_ids(y, "y", v, ndim=1)
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows for {y.shape[0]} targets")
    c = X.shape[1]
    if v ** (c + 1) > _MAX_TABLE:
        raise ValueError(
            f"a table of V^(C+1) = {v}^{c + 1} cells exceeds {_MAX_TABLE:.0e}: "
            f"use a shorter context"
        )
    flat = torch.zeros_like(y)
    for k in range(c):  # the (C+1)-digit number in base V: x_{t-C} ... x_{t-1} x_t
        flat = flat * v + X[:, k]
    flat = flat * v + y
    counts = torch.bincount(flat, minlength=v ** (c + 1)).double()
    return counts.reshape((v,) * (c + 1))  # (V^(C+1),) -> (V, ..., V)


def ngram_counts_naive(X: torch.Tensor, y: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The reference for :func:`ngram_counts`: a Counter over (context, token) tuples."""
    v = _check_int(vocab_size, "vocab_size", 1)
    X = _check_ids(X, "X", v, ndim=2)
    y = _check_ids(y, "y", v, ndim=1)
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows for {y.shape[0]} targets")
    tally = Counter(tuple(row) + (tok,) for row, tok in zip(X.tolist(), y.tolist(), strict=True))
    counts = torch.zeros((v,) * (X.shape[1] + 1), dtype=torch.float64)
    for key, n in tally.items():
        counts[key] = n
    return counts


def add_alpha_probs(counts: torch.Tensor, alpha: float) -> torch.Tensor:
    """q(j | i) = (c_ij + alpha) / (sum_k c_ik + alpha V) along the last axis (eq. 18.2).

    alpha = 0 is maximum likelihood (rows never seen become uniform, their 0/0 defined as 1/V);
    alpha = 1 is Laplace's add-one rule; alpha -> infinity tends to the uniform distribution.

    Args:
        counts: (..., V) non-negative counts, the last axis the next token.
        alpha: the pseudo-count added to every cell, >= 0.

    Returns:
        (..., V) float64 conditional probabilities; every row sums to 1.
    """
    if not isinstance(counts, torch.Tensor) or counts.ndim < 1:
        raise TypeError("counts must be a torch.Tensor with a last (next-token) axis")
    a = float(alpha)
    if not (math.isfinite(a) and a >= 0):
        raise ValueError(f"alpha must be finite and >= 0, got {alpha!r}")
    c = counts.double()
    if (c < 0).any() or not torch.isfinite(c).all():
        raise ValueError("counts must be finite and non-negative")
    v = c.shape[-1]
    num = c + a  # (..., V)
    den = c.sum(dim=-1, keepdim=True) + a * v  # (..., 1)
    uniform = torch.full_like(num, 1.0 / v)
    return torch.where(den > 0, num / den.clamp(min=torch.finfo(c.dtype).tiny), uniform)


def ngram_log_probs(probs: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Look up log q(. | context) for every context window: row i is log probs[X[i]].

    Args:
        probs: (V,) * (C + 1) conditional table from :func:`add_alpha_probs`.
        X: (N, C) context windows.

    Returns:
        (N, V) float64 log-probabilities (-inf where alpha = 0 left a zero).
    """
    if not isinstance(probs, torch.Tensor) or not probs.is_floating_point():
        raise TypeError("probs must be a floating-point torch.Tensor")
    v = probs.shape[-1]
    X = _check_ids(X, "X", v, ndim=2)
    if probs.ndim != X.shape[1] + 1 or any(s != v for s in probs.shape):
        raise ValueError(
            f"probs of shape {tuple(probs.shape)} does not fit contexts of length "
            f"{X.shape[1]}: need {(v,) * (X.shape[1] + 1)}"
        )
    rows = probs[tuple(X.T)] if X.shape[1] else probs.expand(X.shape[0], v)  # (N, V)
    return torch.log(rows)


# --- eq. 18.3: the cross-entropy loss and its gradient -------------------------------------------


def lm_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """L = -(1/N) sum_n log q_{n, y_n} with q_n = softmax(z_n) (eq. 18.3, left).

    Args:
        logits: (N, V) one row of logits per predicted position; y: (N,) the targets.

    Returns:
        0-d tensor, nats per token (via :func:`mlbook.nn.softmax.cross_entropy`).
    """
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
        raise ValueError(f"logits must be an (N, V) tensor, got {getattr(logits, 'shape', None)}")
    _check_ids(y, "y", logits.shape[1], ndim=1)
    return cross_entropy(logits, y, dim=-1, reduction="mean")


def lm_loss_grad(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dL/dz_n = (q_n - e_{y_n}) / N for the mean loss of :func:`lm_loss` (eq. 18.3, right).

    Args:
        logits: (N, V); y: (N,).

    Returns:
        (N, V) the gradient; each row sums to 0.
    """
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
        raise ValueError(f"logits must be an (N, V) tensor, got {getattr(logits, 'shape', None)}")
    _check_ids(y, "y", logits.shape[1], ndim=1)
    return cross_entropy_grad(logits, y, dim=-1) / logits.shape[0]


# --- eq. 18.5: the neural (MLP) language model ---------------------------------------------------


@dataclass(frozen=True)
class MLPLMConfig:
    """Sizes of the MLP language model: vocabulary V, context C, embedding D, hidden H."""

    vocab_size: int
    context: int
    d_embed: int
    d_hidden: int

    def __post_init__(self):
        for name in ("vocab_size", "context", "d_embed", "d_hidden"):
            _check_int(getattr(self, name), name, 1)


def _check_mlp_params(X, E, W1, b1, W2, b2) -> None:
    v, d = E.shape
    n_in, h = W1.shape
    if X.ndim != 2 or n_in != X.shape[1] * d:
        raise ValueError(
            f"W1 {tuple(W1.shape)} needs C*D = {n_in} inputs, but X "
            f"{tuple(X.shape)} with D = {d} gives {X.shape[-1] * d}"
        )
    if b1.shape != (h,) or W2.shape[0] != h or b2.shape != (W2.shape[1],):
        raise ValueError(
            f"inconsistent shapes: b1 {tuple(b1.shape)}, W2 {tuple(W2.shape)}, "
            f"b2 {tuple(b2.shape)} for H = {h}"
        )
    _check_ids(X, "X", v)


def mlp_lm_logits(
    X: torch.Tensor,
    E: torch.Tensor,
    W1: torch.Tensor,
    b1: torch.Tensor,
    W2: torch.Tensor,
    b2: torch.Tensor,
) -> torch.Tensor:
    """z = tanh([E_{x_{t-C}}; ...; E_{x_{t-1}}] W1 + b1) W2 + b2, so q_t = softmax(z) (eq. 18.5).

    Args:
        X: (N, C) context windows.
        E: (V, D) embedding table; W1: (C*D, H); b1: (H,); W2: (H, V_out); b2: (V_out,).

    Returns:
        (N, V_out) logits.
    """
    _check_mlp_params(X, E, W1, b1, W2, b2)
    x = E[X]  # (N, C, D): one embedding row per context token
    x = x.reshape(X.shape[0], -1)  # (N, C*D): the concatenation [E_{x_{t-C}}; ...; E_{x_{t-1}}]
    h = torch.tanh(x @ W1 + b1)  # (N, H)
    return h @ W2 + b2  # (N, V_out)


def mlp_lm_logits_naive(
    X: torch.Tensor,
    E: torch.Tensor,
    W1: torch.Tensor,
    b1: torch.Tensor,
    W2: torch.Tensor,
    b2: torch.Tensor,
) -> torch.Tensor:
    """The reference for :func:`mlp_lm_logits`: one window at a time, lookups as one-hot products.

    e_x E selects row x of E (eq. 17.3); the rows are concatenated with ``torch.cat``.
    """
    _check_mlp_params(X, E, W1, b1, W2, b2)
    v = E.shape[0]
    rows = []
    for window in X:
        parts = [torch.nn.functional.one_hot(tok, v).to(E.dtype) @ E for tok in window]  # (D,)
        h = torch.tanh(torch.cat(parts) @ W1 + b1)  # (H,)
        rows.append(h @ W2 + b2)  # (V_out,)
    return torch.stack(rows)


class MLPLanguageModel(nn.Module):
    """Bengio et al.'s neural language model: embed C tokens, concatenate, tanh layer, softmax.

    Parameters use the sheet's row-vector convention (x W + b), so ``W1`` is (C*D, H) and ``W2``
    is (H, V). The output layer starts small (std 0.01 / sqrt(H)), so every initial q_t is close
    to uniform and the loss at initialisation is close to log V.
    """

    def __init__(
        self,
        config: MLPLMConfig,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        if not isinstance(config, MLPLMConfig):
            raise TypeError(f"config must be an MLPLMConfig, got {type(config).__name__}")
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.config = config
        v, c, d, h = config.vocab_size, config.context, config.d_embed, config.d_hidden

        def randn(*shape, std):  # drawn in float64: the same initial values for either dtype
            draw = torch.randn(*shape, generator=generator, dtype=torch.float64) * std
            return nn.Parameter(draw.to(dtype))

        self.E = randn(v, d, std=1.0)
        self.W1 = randn(c * d, h, std=1.0 / math.sqrt(c * d))  # tanh layer: unit-scale inputs
        self.b1 = nn.Parameter(torch.zeros(h, dtype=dtype))
        self.W2 = randn(h, v, std=0.01 / math.sqrt(h))
        self.b2 = nn.Parameter(torch.zeros(v, dtype=dtype))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """X: (N, C) context windows -> (N, V) logits (eq. 18.5)."""
        if X.ndim != 2 or X.shape[1] != self.config.context:
            raise ValueError(f"X must be (N, {self.config.context}), got {tuple(X.shape)}")
        return mlp_lm_logits(X, self.E, self.W1, self.b1, self.W2, self.b2)


def train_lm(
    model: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    generator: torch.Generator,
    weight_decay: float = 0.0,
) -> list[float]:
    """Minimise :func:`lm_loss` with AdamW on random mini-batches of (X, y); return the losses.

    Args:
        model: maps (B, C) windows to (B, V) logits.
        X: (N, C) windows; y: (N,) targets.
        steps, batch_size: number of updates and examples per update.
        lr, weight_decay: AdamW's step size and decoupled weight decay.
        generator: draws the mini-batch indices (so training is reproducible).

    Returns:
        The mini-batch loss before each update (``steps`` floats).
    """
    _check_int(steps, "steps", 1)
    _check_int(batch_size, "batch_size", 1)
    X = _check_ids(X, "X", ndim=2)
    y = _check_ids(y, "y", ndim=1)
    if X.shape[0] != y.shape[0] or X.shape[0] == 0:
        raise ValueError(f"X {tuple(X.shape)} and y {tuple(y.shape)} need the same, non-zero N")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be positive, got {lr!r}")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, X.shape[0], (batch_size,), generator=generator)
        loss = lm_loss(model(X[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# --- masked (BERT) vs causal objectives ----------------------------------------------------------


def mask_tokens(
    tokens: torch.Tensor,
    vocab_size: int,
    mask_id: int,
    generator: torch.Generator,
    p_select: float = 0.15,
    p_mask: float = 0.8,
    p_random: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption: select positions with probability p_select; of those, replace
    p_mask by [MASK], p_random by a uniformly random token, and leave the rest unchanged.

    The loss is taken only at the selected positions, L = -sum_{i in Mask} log P(x_i | x_\\i)
    (averaged by :func:`masked_lm_loss`); the unchanged and random ones keep the model from
    learning that only [MASK] positions matter. A random token can coincide with the original
    (probability 1/V), so an input equals the original at a selected position with probability
    1 - p_mask - p_random + p_random / V.

    Args:
        tokens: (...) ids in [0, V).
        vocab_size: V, the ordinary tokens the random replacement draws from.
        mask_id: the [MASK] id (outside [0, V), e.g. V).
        generator: the source of all draws (three uniform tensors of tokens' shape).
        p_select, p_mask, p_random: the probabilities (BERT: 0.15, 0.8, 0.1).

    Returns:
        inputs: (...) the corrupted ids; labels: (...) the original id at selected positions,
        -100 (ignored by the loss) elsewhere.
    """
    v = _check_int(vocab_size, "vocab_size", 2)
    t = _check_ids(tokens, "tokens", v)
    if 0 <= mask_id < v:
        raise ValueError(f"mask_id={mask_id} must lie outside the ordinary ids [0, {v})")
    for name, p in (("p_select", p_select), ("p_mask", p_mask), ("p_random", p_random)):
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {p!r}")
    if p_mask + p_random > 1.0:
        raise ValueError(f"p_mask + p_random = {p_mask + p_random} exceeds 1")
    selected = torch.rand(t.shape, generator=generator) < p_select
    u = torch.rand(t.shape, generator=generator)  # which of the three replacements
    random_ids = torch.randint(0, v, t.shape, generator=generator)
    inputs = torch.where(selected & (u < p_mask), torch.full_like(t, mask_id), t)
    inputs = torch.where(selected & (u >= p_mask) & (u < p_mask + p_random), random_ids, inputs)
    labels = torch.where(selected, t, torch.full_like(t, IGNORE_INDEX))
    return inputs, labels


def masked_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean of -log q(x_i | corrupted input) over the selected positions only (BERT's objective).

    Args:
        logits: (..., V) one row per position; labels: (...) from :func:`mask_tokens`.

    Returns:
        0-d tensor, nats per selected token (NaN-free: raises if nothing was selected).
    """
    if not isinstance(labels, torch.Tensor) or labels.shape != logits.shape[:-1]:
        raise ValueError(
            f"labels must have logits' shape without the last axis, {tuple(logits.shape[:-1])}"
        )
    if not (labels != IGNORE_INDEX).any():
        raise ValueError("no position is selected: the masked-LM loss is undefined")
    return cross_entropy(logits, labels, dim=-1, ignore_index=IGNORE_INDEX)


def causal_lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean of -log q(x_t | x_<t) over every position (the causal objective, eq. 18.3).

    Args:
        logits: (..., T, V) row t computed from the tokens before t only; tokens: (..., T).

    Returns:
        0-d tensor, nats per token.
    """
    t = _check_ids(tokens, "tokens", logits.shape[-1])
    if t.shape != logits.shape[:-1]:
        raise ValueError(
            f"tokens {tuple(t.shape)} must be logits' shape without the last axis, "
            f"{tuple(logits.shape[:-1])}"
        )
    return cross_entropy(logits, t, dim=-1)


# --- sampling ------------------------------------------------------------------------------------


def sample(
    logits_fn: Callable[[torch.Tensor], torch.Tensor],
    prompt: torch.Tensor,
    n_new: int,
    context: int,
    generator: torch.Generator,
    temperature: float = 1.0,
    pad_id: int = 0,
) -> torch.Tensor:
    """Draw n_new tokens one at a time from q(x_t | x_<t) / temperature (ancestral sampling).

    Each step feeds the last C tokens (left-padded with ``pad_id``) to ``logits_fn`` and draws the
    next token from softmax(z / temperature) with the Gumbel-max trick (eq. 6.6). Temperature 0
    picks the argmax (greedy decoding).

    Args:
        logits_fn: maps (1, C) windows to (1, V) logits or log-probabilities.
        prompt: (P,) ids to continue (may be empty).
        n_new: number of tokens to draw.
        context: C.
        generator: the source of the Gumbel noise.
        temperature: >= 0; below 1 sharpens, above 1 flattens the distribution.

    Returns:
        (P + n_new,) the prompt followed by the drawn ids.
    """
    p = _check_ids(prompt, "prompt", ndim=1)
    _check_int(n_new, "n_new", 0)
    c = _check_int(context, "context", 0)
    temp = float(temperature)
    if not (math.isfinite(temp) and temp >= 0):
        raise ValueError(f"temperature must be finite and >= 0, got {temperature!r}")
    out = p.tolist()
    with torch.no_grad():
        for _ in range(n_new):
            window = ([pad_id] * c + out)[len(out) :] if c else []  # the last C tokens, padded
            z = logits_fn(torch.tensor([window], dtype=torch.int64).reshape(1, c))[0]  # (V,)
            if temp == 0:
                out.append(int(torch.argmax(z)))
            else:
                logq = log_softmax(z.double(), temperature=temp)  # (V,), -inf allowed
                out.append(int(gumbel_max_sample(logq.clamp(min=-1e4), 1, generator)[0]))
    return torch.tensor(out, dtype=torch.int64)
