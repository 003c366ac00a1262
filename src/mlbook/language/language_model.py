"""Language models on characters: n-gram counts, a neural MLP model, causal and masked objectives.

Chapter 18: the chain rule (eq. 18.1), add-alpha n-grams (eq. 18.2), cross-entropy (eq. 18.3),
the MLP language model (eq. 18.5), BERT's masked-LM objective and sampling.

Shape legend
    V  vocabulary;  N  predicted positions;  B, T  batch, length;  C  context length
    D, H  embedding and hidden widths;  X  (N, C) int64 windows;  y  (N,) int64 targets
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
from ..validation import (
    finite,
    float_tensor,
    index_tensor,
    integer,
    nonempty,
    number,
    one_of,
    positive,
    positive_int,
    probability,
    shape_is,
)

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
    """English sentences from a small random grammar with subject-verb agreement, one per line.

    n_sentences: number of sentences;  seed: of ``random.Random`` (same text everywhere).
    Returns The text: lowercase letters, spaces, commas, full stops and a newline per sentence.
    """
    positive_int(n_sentences, "n_sentences")
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
    if not text:
        raise ValueError("text is empty: no vocabulary")
    return sorted(set(text))


def encode(text: str, vocab: Sequence[str]) -> torch.Tensor:
    """Characters to ids: (len(text),) int64 with ids[i] = vocab.index(text[i])."""
    index = {ch: i for i, ch in enumerate(vocab)}
    unknown = sorted(set(text) - index.keys())
    if unknown:
        raise ValueError(f"characters not in the vocabulary: {unknown[:10]}")
    return torch.tensor([index[ch] for ch in text], dtype=torch.int64)


def decode(ids, vocab: Sequence[str]) -> str:
    """Ids to characters; ids outside the vocabulary (a [MASK] id) print as '_'."""
    return "".join(vocab[i] if 0 <= i < len(vocab) else "_" for i in torch.as_tensor(ids).tolist())


# --- eq. 18.1: the chain rule, context windows ---------------------------------------------------


def context_windows(tokens: torch.Tensor, context: int, pad_id: int) -> torch.Tensor:
    """The C tokens before every position, padded with ``pad_id`` (eq. 18.1).

    tokens: (T,) or (B, T). Returns (..., T, C) int64.
    """
    t = index_tensor(tokens, "tokens").long()
    c = integer(context, "context", low=0)
    pad = torch.full((*t.shape[:-1], c), int(pad_id), dtype=torch.int64)
    padded = torch.cat([pad, t], dim=-1)  # (..., C + T)
    return padded.unfold(-1, c, 1)[..., : t.shape[-1], :]  # (..., T + 1, C) -> (..., T, C)


def centered_windows(tokens: torch.Tensor, k: int, pad_id: int) -> torch.Tensor:
    """The k tokens on each side of every position and the position itself (a masked LM's view).

    tokens: (T,) or (B, T) token ids;  k: the half-width, >= 1;  pad_id: beyond both ends.
    Returns (..., T, 2k + 1) int64 windows.
    """
    t = index_tensor(tokens, "tokens").long()
    positive_int(k, "k")
    left = context_windows(t, k, pad_id)  # (..., T, k): x_{t-k} .. x_{t-1}
    right = context_windows(t.flip(-1), k, pad_id).flip(-2).flip(-1)  # (..., T, k): x_{t+1}..
    return torch.cat([left, t.unsqueeze(-1), right], dim=-1)  # (..., T, 2k + 1)


def sequence_log_prob(log_probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(x_1..x_T) = sum_t log q(x_t | x_<t). Implements eq. 18.1.

    log_probs: (..., T, V);  tokens: (..., T). Returns (...).
    """
    V = float_tensor(log_probs, "log_probs", min_ndim=1).shape[-1]
    t = index_tensor(tokens, "tokens", V).long()
    shape_is(t, "tokens", log_probs.shape[:-1])  # gather would silently take a subset
    return log_probs.gather(-1, t.unsqueeze(-1)).squeeze(-1).sum(dim=-1)  # (..., T) -> (...)


# --- eq. 18.2: n-gram counts with add-alpha smoothing --------------------------------------------


def ngram_counts(X: torch.Tensor, y: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Counts c[x_{t-C}, ..., x_{t-1}, x_t] of every (context, next token) pair, by one bincount.

    X: (N, C) context windows;  y: (N,) the tokens that follow;  vocab_size: V.
    Returns (V,) * (C + 1) float64 counts; for C = 1 the (V, V) matrix c_ij of eq. 18.2.
    """
    v = positive_int(vocab_size, "vocab_size")
    X = index_tensor(X, "X", v, ndim=2).long()
    y = shape_is(index_tensor(y, "y", v).long(), "y", (X.shape[0],))  # no broadcast of one row
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
    v = positive_int(vocab_size, "vocab_size")
    X = index_tensor(X, "X", v, ndim=2).long()
    y = shape_is(index_tensor(y, "y", v).long(), "y", (X.shape[0],))
    tally = Counter(tuple(row) + (tok,) for row, tok in zip(X.tolist(), y.tolist(), strict=True))
    counts = torch.zeros((v,) * (X.shape[1] + 1), dtype=torch.float64)
    for key, n in tally.items():
        counts[key] = n
    return counts


def add_alpha_probs(counts: torch.Tensor, alpha: float) -> torch.Tensor:
    """q(j | i) = (c_ij + alpha) / (sum_k c_ik + alpha V). Implements eq. 18.2.

    counts: (..., V) >= 0;  alpha >= 0. Returns (..., V) float64; unseen rows uniform.
    """
    a = number(alpha, "alpha", 0.0)
    c = finite(counts.double(), "counts")
    if (c < 0).any():  # a negative count gives probabilities outside [0, 1]
        raise ValueError("counts must be non-negative")
    v = c.shape[-1]
    num = c + a  # (..., V)
    den = c.sum(dim=-1, keepdim=True) + a * v  # (..., 1)
    uniform = torch.full_like(num, 1.0 / v)
    return torch.where(den > 0, num / den.clamp(min=torch.finfo(c.dtype).tiny), uniform)


def ngram_log_probs(probs: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Look up log q(. | context) for every context window: row i is log probs[X[i]].

    probs: (V,) * (C + 1) table from :func:`add_alpha_probs`;  X: (N, C) windows.
    Returns (N, V) float64 log-probabilities (-inf where alpha = 0 left a zero).
    """
    v = float_tensor(probs, "probs", min_ndim=1).shape[-1]
    X = index_tensor(X, "X", v, ndim=2).long()
    shape_is(probs, "probs", (v,) * (X.shape[1] + 1))  # a wrong order would index silently
    rows = probs[tuple(X.T)] if X.shape[1] else probs.expand(X.shape[0], v)  # (N, V)
    return torch.log(rows)


# --- eq. 18.3: the cross-entropy loss and its gradient -------------------------------------------


def lm_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """L = -(1/N) sum_n log q_{n, y_n}, q_n = softmax(z_n). Implements eq. 18.3 (left).

    logits: (N, V);  y: (N,) the targets.
    Returns 0-d tensor, nats per token.
    """
    index_tensor(y, "y", float_tensor(logits, "logits", ndim=2).shape[1], ndim=1)
    return cross_entropy(logits, y, dim=-1, reduction="mean")


def lm_loss_grad(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dL/dz_n = (q_n - e_{y_n}) / N for :func:`lm_loss`. Implements eq. 18.3 (right).

    logits: (N, V);  y: (N,).
    Returns (N, V) the gradient; each row sums to 0.
    """
    index_tensor(y, "y", float_tensor(logits, "logits", ndim=2).shape[1], ndim=1)
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
            positive_int(getattr(self, name), name)


def _mlp_inputs(X, E, W1, b1, W2, b2) -> None:
    """Ids in range and biases of exactly the layer widths (a (1,) bias would broadcast)."""
    index_tensor(X, "X", E.shape[0], ndim=2)
    shape_is(b1, "b1", (W1.shape[1],))
    shape_is(b2, "b2", (W2.shape[1],))


def mlp_lm_logits(
    X: torch.Tensor,
    E: torch.Tensor,
    W1: torch.Tensor,
    b1: torch.Tensor,
    W2: torch.Tensor,
    b2: torch.Tensor,
) -> torch.Tensor:
    """z = tanh([E_{x_{t-C}}; ...; E_{x_{t-1}}] W1 + b1) W2 + b2. Implements eq. 18.5.

    X: (N, C) context windows;  E: (V, D);  W1: (C*D, H);  b1: (H,);  W2: (H, V_out); b2: (V_out,).
    Returns (N, V_out) logits.
    """
    _mlp_inputs(X, E, W1, b1, W2, b2)
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
    """Reference for :func:`mlp_lm_logits`: one window at a time, lookups as one-hot products."""
    _mlp_inputs(X, E, W1, b1, W2, b2)
    v = E.shape[0]
    rows = []
    for window in X:
        parts = [torch.nn.functional.one_hot(tok, v).to(E.dtype) @ E for tok in window]  # (D,)
        h = torch.tanh(torch.cat(parts) @ W1 + b1)  # (H,)
        rows.append(h @ W2 + b2)  # (V_out,)
    return torch.stack(rows)


class MLPLanguageModel(nn.Module):
    """Bengio et al.'s neural language model (eq. 18.5): W1 (C*D, H), W2 (H, V), x W + b.

    The output layer starts small (std 0.01 / sqrt(H)): the initial loss is close to log V.
    """

    def __init__(
        self,
        config: MLPLMConfig,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        one_of(dtype, "dtype", (torch.float32, torch.float64))
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
    """Minimise :func:`lm_loss` with AdamW on random mini-batches; return the losses.

    X: (N, C) windows;  y: (N,) targets;  generator: draws the batches.
    """
    positive_int(steps, "steps"), positive_int(batch_size, "batch_size"), positive(lr, "lr")
    X = nonempty(index_tensor(X, "X", ndim=2).long(), "X")
    y = shape_is(index_tensor(y, "y").long(), "y", (X.shape[0],))
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
    """BERT's corruption of tokens (...): p_mask [MASK], p_random random, rest unchanged.

    Returns inputs (...) and labels (...), the original id where selected, -100 elsewhere.
    """
    v = integer(vocab_size, "vocab_size", low=2)
    t = index_tensor(tokens, "tokens", v).long()
    if 0 <= mask_id < v:  # [MASK] would be confused with an ordinary token
        raise ValueError(f"mask_id={mask_id} must lie outside the ordinary ids [0, {v})")
    for name, p in (("p_select", p_select), ("p_mask", p_mask), ("p_random", p_random)):
        probability(p, name)
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

    logits: (..., V);  labels: (...) from :func:`mask_tokens`.
    Returns 0-d tensor, nats per selected token.
    """
    shape_is(labels, "labels", logits.shape[:-1])
    if not (labels != IGNORE_INDEX).any():  # a mean over nothing: nan
        raise ValueError("no position is selected: the masked-LM loss is undefined")
    return cross_entropy(logits, labels, dim=-1, ignore_index=IGNORE_INDEX)


def causal_lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean of -log q(x_t | x_<t) over every position: the causal objective of eq. 18.3.

    logits: (..., T, V), row t computed from the tokens before t;  tokens: (..., T).
    Returns 0-d tensor, nats per token.
    """
    t = shape_is(
        index_tensor(tokens, "tokens", logits.shape[-1]).long(), "tokens", logits.shape[:-1]
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
    """Draw n_new tokens from q(x_t | x_<t) at ``temperature`` (0: greedy), Gumbel-max (eq. 6.6).

    logits_fn: (1, C) -> (1, V);  prompt: (P,). Returns (P + n_new,) ids.
    """
    p = index_tensor(prompt, "prompt", ndim=1).long()
    integer(n_new, "n_new", low=0)
    c = integer(context, "context", low=0)
    temp = number(temperature, "temperature", 0.0)
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
