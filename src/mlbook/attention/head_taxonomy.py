"""A taxonomy of attention heads, computed from their attention maps (chapter 20).

Each head gets five numbers, all averages over the *content* query rows (the rows of the
special tokens such as [CLS] and [SEP] are left out, since what a separator attends to says
little about the head). Previous and next count only content neighbours, so that the four
mass scores of a row use disjoint sets of keys:

    previous   mean weight on the word just before the query,    a[i, i-1], i-1 a content token
    next       mean weight on the word just after the query,     a[i, i+1], i+1 a content token
    self       mean weight on the query itself (the diagonal),   a[i, i]
    sink       mean weight on the special tokens,                sum_{j special} a[i, j]
    entropy    mean row entropy divided by its maximum log T,    H(a_i) / log T  (in [0, 1])

A head belongs to the class of its largest *mass* score (previous, next, self or sink) when
that score reaches ``Thresholds.mass``; otherwise it is ``broad`` when its normalised entropy
reaches ``Thresholds.broad``; otherwise ``mixed`` (content-dependent heads that look at a few
tokens chosen by meaning, not by position).

Shape legend
    T      tokens of a sentence, special tokens included
    (...)  leading axes of a stack of maps, e.g. (L, H) layers x heads
    attn   (..., T, T) attention weights, each row a distribution over the T keys
    scores dict of five (...) tensors, one per score name
    K      largest relative offset of :func:`offset_profile`; profiles have 2K + 1 entries
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "CLASSES",
    "MASS_SCORES",
    "SCORE_NAMES",
    "Thresholds",
    "taxonomy_scores",
    "mean_scores",
    "classify_heads",
    "synthetic_map",
    "score_table",
    "offset_profile",
]

#: The mass scores, compared with ``Thresholds.mass``; the order breaks ties.
MASS_SCORES = ("previous", "next", "self", "sink")
#: All score names returned by :func:`taxonomy_scores`.
SCORE_NAMES = MASS_SCORES + ("entropy",)
#: Every class a head can get, in the order used for colours and tables.
CLASSES = ("previous", "next", "self", "sink", "broad", "mixed")


@dataclass(frozen=True)
class Thresholds:
    """Decision thresholds of :func:`classify_heads`.

    Attributes:
        mass: a head whose largest mass score (previous, next, self, sink) is at least this is
            put in that class; 0.5 means "more than half of every content row on average".
        broad: otherwise, a head whose mean normalised row entropy is at least this is broad.
    """

    mass: float = 0.5
    broad: float = 0.75

    def __post_init__(self):
        for name in ("mass", "broad"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Thresholds.{name} must be a number, got {type(value).__name__}")
            if not 0.0 < value <= 1.0:
                raise ValueError(f"Thresholds.{name} must lie in (0, 1], got {value!r}")


def _check_attn(attn) -> torch.Tensor:
    if not isinstance(attn, torch.Tensor):
        raise TypeError(f"attn must be a torch.Tensor, got {type(attn).__name__}")
    if not attn.is_floating_point():
        raise TypeError(f"attn must be a floating-point tensor, got dtype {attn.dtype}")
    if attn.ndim < 2 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"attn must have shape (..., T, T), got {tuple(attn.shape)}")
    if attn.numel() == 0:
        raise ValueError(f"attn is empty: shape {tuple(attn.shape)}")
    if not torch.isfinite(attn).all() or (attn < 0).any():
        raise ValueError("attn must be finite and non-negative")
    rows = attn.sum(-1)
    if not torch.allclose(rows, torch.ones_like(rows), atol=1e-3, rtol=0):
        worst = float((rows - 1).abs().max())
        raise ValueError(f"every row of attn must sum to 1 (off by up to {worst:.3g})")
    return attn


def _special_indices(special, T: int) -> list[int]:
    if isinstance(special, (int, str)) or not isinstance(special, Sequence):
        raise TypeError(f"special must be a sequence of token indices, got {special!r}")
    out = []
    for s in special:
        if isinstance(s, bool) or not isinstance(s, int) or not -T <= s < T:
            raise ValueError(f"special indices must be ints in [-{T}, {T}), got {special!r}")
        out.append(s % T)
    if len(set(out)) != len(out):
        raise ValueError(f"special indices repeat: {special!r} for T={T}")
    return sorted(out)


def taxonomy_scores(attn: torch.Tensor, special: Sequence[int] = (0, -1)) -> dict:
    """The five scores of every head (module docstring), averaged over the content rows.

    Args:
        attn: (..., T, T) attention maps, rows summing to 1 (e.g. (L, H, T, T) of a model).
        special: indices of the special tokens (default: first and last, [CLS] and [SEP]);
            ``()`` for a sequence without them.

    Returns:
        {"previous", "next", "self", "sink", "entropy"}: (...) float64 tensors in [0, 1]. The
        previous (next) score averages over the content rows whose previous (next) token is a
        content token too; "sink" is 0 when there are no special tokens.
    """
    attn = _check_attn(attn).double()
    T = attn.shape[-1]
    spec = _special_indices(special, T)
    content = [i for i in range(T) if i not in spec]
    if len(content) < 2:
        raise ValueError(f"need at least 2 content tokens, got T={T} with special {spec}")
    rows = torch.tensor(content)  # (C,) content query rows
    is_content = torch.zeros(T + 1, dtype=torch.bool)  # index T stands for "past the end"
    is_content[rows] = True
    prev_rows = rows[is_content[rows - 1]]  # rows - 1 >= 0 since is_content[-1] = False
    next_rows = rows[is_content[rows + 1]]
    diag = attn.diagonal(dim1=-2, dim2=-1)  # (..., T) a[i, i]
    below = attn.diagonal(offset=-1, dim1=-2, dim2=-1)  # (..., T-1): entry i is a[i+1, i]
    above = attn.diagonal(offset=1, dim1=-2, dim2=-1)  # (..., T-1): entry i is a[i, i+1]
    A = attn[..., rows, :]  # (..., C, T) the content rows
    entropy = torch.special.entr(A).sum(-1) / math.log(T)  # (..., C) H(a_i) / log T
    nan = attn.new_full(attn.shape[:-2], float("nan"))
    return {
        "previous": below[..., prev_rows - 1].mean(-1) if len(prev_rows) else nan,
        "next": above[..., next_rows].mean(-1) if len(next_rows) else nan,
        "self": diag[..., rows].mean(-1),
        "sink": A[..., spec].sum(-1).mean(-1) if spec else torch.zeros_like(nan),
        "entropy": entropy.mean(-1),
    }


def mean_scores(score_list: Sequence[Mapping]) -> dict:
    """Average the scores of several sentences (each a :func:`taxonomy_scores` result).

    Returns:
        {name: (...) mean over the sentences}; all inputs must have the same shapes.
    """
    if isinstance(score_list, Mapping) or not isinstance(score_list, Sequence) or not score_list:
        raise ValueError("score_list must be a non-empty sequence of score dicts")
    for s in score_list:
        if not isinstance(s, Mapping) or set(s) != set(SCORE_NAMES):
            raise ValueError(f"each item must be a dict with keys {SCORE_NAMES}")
    shapes = {tuple(s["self"].shape) for s in score_list}
    if len(shapes) != 1:
        raise ValueError(f"score shapes differ between sentences: {sorted(shapes)}")
    return {n: torch.stack([s[n] for s in score_list]).mean(0) for n in SCORE_NAMES}


def classify_heads(scores: Mapping, thresholds: Thresholds = Thresholds()) -> np.ndarray:
    """The class of every head from its scores (the rule of the module docstring).

    Args:
        scores: from :func:`taxonomy_scores` or :func:`mean_scores`, (...) tensors.
        thresholds: the decision thresholds.

    Returns:
        (...) NumPy array of class names from :data:`CLASSES`.
    """
    if not isinstance(scores, Mapping) or not set(SCORE_NAMES) <= set(scores):
        raise ValueError(f"scores must be a dict with keys {SCORE_NAMES}")
    if not isinstance(thresholds, Thresholds):
        raise TypeError(f"thresholds must be a Thresholds, got {type(thresholds).__name__}")
    mass = torch.stack([torch.as_tensor(scores[n]).double() for n in MASS_SCORES])  # (4, ...)
    mass = torch.nan_to_num(mass, nan=-1.0)  # an undefined score never wins
    best_val, best = mass.max(0)  # (...) the first maximum wins ties (MASS_SCORES order)
    entropy = torch.as_tensor(scores["entropy"]).double()
    names = np.array(MASS_SCORES, dtype=object)[best.numpy()]
    out = np.where(
        best_val.numpy() >= thresholds.mass,
        names,
        np.where(entropy.numpy() >= thresholds.broad, "broad", "mixed"),
    )
    return np.asarray(out, dtype=object)


def synthetic_map(
    kind: str, T: int, *, peak: float = 0.8, generator=None, special: Sequence[int] = (0, -1)
) -> torch.Tensor:
    """A (T, T) attention map of a known kind, for testing :func:`classify_heads`.

    Every content row i puts ``peak`` on its target and spreads the rest at random (a softmax
    of standard normal noise): previous -> i-1, next -> i+1, self -> i, sink -> the special
    tokens (split evenly), mixed -> one random non-neighbouring content token per row. A broad
    map is a softmax of weak noise (scale 0.3) over all keys. Special rows are random.

    Args:
        kind: one of :data:`CLASSES`.
        T: number of tokens (>= 5).
        peak: the weight on the target, in (0, 1).
        generator: a ``torch.Generator`` for reproducible noise.
        special: indices of the special tokens.

    Returns:
        (T, T) float64 map whose rows sum to 1.
    """
    if kind not in CLASSES:
        raise ValueError(f"kind must be one of {CLASSES}, got {kind!r}")
    if isinstance(T, bool) or not isinstance(T, int) or T < 5:
        raise ValueError(f"T must be an int >= 5, got {T!r}")
    if isinstance(peak, bool) or not isinstance(peak, (int, float)) or not 0 < peak < 1:
        raise ValueError(f"peak must lie in (0, 1), got {peak!r}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    spec = _special_indices(special, T)
    content = [i for i in range(T) if i not in spec]
    noise = torch.randn(T, T, generator=generator, dtype=torch.float64)
    if kind == "broad":
        return torch.softmax(0.3 * noise, dim=-1)
    rest = torch.softmax(noise, dim=-1)  # (T, T) random background, rows sum to 1
    target = torch.zeros(T, T, dtype=torch.float64)
    for i in content:
        if kind == "previous":
            cols = [i - 1]
        elif kind == "next":
            cols = [i + 1] if i + 1 < T else [i - 1]
        elif kind == "self":
            cols = [i]
        elif kind == "sink":
            cols = spec if spec else [0]
        else:  # mixed: one content token that is not a neighbour, chosen at random
            far = [j for j in content if abs(j - i) > 1] or [j for j in content if j != i]
            cols = [far[int(torch.randint(len(far), (1,), generator=generator))]]
        target[i, cols] = 1.0 / len(cols)
    out = rest.clone()
    out[content] = peak * target[content] + (1 - peak) * rest[content]
    return out


def score_table(
    scores: Mapping, classes: np.ndarray, *, layer_label: str = "layer", digits: int = 2
) -> str:
    """A text table with one line per head: its five scores and its class.

    Args:
        scores: (L, H) tensors from :func:`taxonomy_scores` / :func:`mean_scores`.
        classes: (L, H) class names from :func:`classify_heads`.

    Returns:
        The table as one string (no trailing newline).
    """
    if not isinstance(scores, Mapping) or not set(SCORE_NAMES) <= set(scores):
        raise ValueError(f"scores must be a dict with keys {SCORE_NAMES}")
    shape = tuple(scores["self"].shape)
    if len(shape) != 2 or np.shape(classes) != shape:
        raise ValueError(f"need (L, H) scores and classes, got {shape} and {np.shape(classes)}")
    head = f"{layer_label:>5} head " + " ".join(f"{n:>8}" for n in SCORE_NAMES) + "  class"
    lines = [head, "-" * len(head)]
    for layer in range(shape[0]):
        for h in range(shape[1]):
            vals = " ".join(f"{float(scores[n][layer, h]):8.{digits}f}" for n in SCORE_NAMES)
            lines.append(f"{layer:>5} {h:>4} {vals}  {classes[layer, h]}")
    return "\n".join(lines)


def offset_profile(
    attn: torch.Tensor, max_offset: int = 5, special: Sequence[int] = (0, -1)
) -> torch.Tensor:
    """Mean attention weight at each relative offset k = j - i, over the content rows.

    Entry k of the profile is the mean of a[i, i + k] over the content rows i for which
    i + k is a content token too (the special tokens are scored by "sink" instead), so entries
    -1, 0 and +1 are the previous, self and next scores of :func:`taxonomy_scores`. A broad
    head has a flat profile, a previous-token head a spike at -1.

    Args:
        attn: (..., T, T) attention maps.
        max_offset: K >= 1; offsets -K ... K.
        special: indices of the special tokens (their rows are left out).

    Returns:
        (..., 2K + 1) float64 profile; nan where no content row has a key at that offset.
    """
    attn = _check_attn(attn).double()
    if isinstance(max_offset, bool) or not isinstance(max_offset, int) or max_offset < 1:
        raise ValueError(f"max_offset must be an int >= 1, got {max_offset!r}")
    T = attn.shape[-1]
    spec = _special_indices(special, T)
    rows = torch.tensor([i for i in range(T) if i not in spec])  # (C,) content query rows
    is_content = torch.zeros(T, dtype=torch.bool)
    is_content[rows] = True
    out = []
    for k in range(-max_offset, max_offset + 1):
        inside = rows[(rows + k >= 0) & (rows + k < T)]
        valid = inside[is_content[inside + k]]  # rows with a content key at offset k
        if len(valid) == 0:
            out.append(attn.new_full(attn.shape[:-2], float("nan")))
            continue
        diag = attn.diagonal(offset=k, dim1=-2, dim2=-1)  # (..., T - |k|): a[i, i + k]
        start = max(0, -k)  # diag entry n belongs to row n + start
        out.append(diag[..., valid - start].mean(-1))
    return torch.stack(out, dim=-1)  # (..., 2K + 1)
