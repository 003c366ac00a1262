"""A taxonomy of attention heads, computed from their attention maps (chapter 20).

Scores per head over the content rows: previous, next, self, sink (mass on special tokens) and
normalised entropy; the class is the largest mass score reaching ``Thresholds.mass``, else
``broad`` (entropy >= ``Thresholds.broad``), else ``mixed``.

Shape legend
    T  tokens;  (...)  e.g. (L, H);  attn  (..., T, T) rows are distributions
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..validation import (
    distribution,
    float_tensor,
    integer,
    number,
    one_of,
    positive_int,
    shape_is,
)

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
    """Decision thresholds of :func:`classify_heads`: ``mass`` and ``broad``, both in (0, 1]."""

    mass: float = 0.5
    broad: float = 0.75

    def __post_init__(self):
        for name in ("mass", "broad"):
            number(getattr(self, name), f"Thresholds.{name}", 0.0, 1.0, open_low=True)


def _maps(attn) -> torch.Tensor:
    """Checked (..., T, T) maps whose rows are distributions, as float64."""
    T = float_tensor(attn, "attn", min_ndim=2).shape[-1]
    shape_is(attn, "attn", (None,) * (attn.ndim - 2) + (T, T))
    return distribution(attn, "attn", atol=1e-3).double()


def _special_indices(special, T: int) -> list[int]:
    out = sorted({integer(s, "special index", -T, T - 1) % T for s in special})
    if len(out) != len(special):
        raise ValueError(f"special indices repeat: {special!r} for T={T}")
    return out


def taxonomy_scores(attn: torch.Tensor, special: Sequence[int] = (0, -1)) -> dict:
    """The five scores of every head, averaged over the content rows.

    attn: (..., T, T) maps;  special: indices of the special tokens (``()`` for none).
    Returns {"previous", "next", "self", "sink", "entropy"}: (...) float64 tensors in [0, 1].
    """
    attn = _maps(attn)
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
    """Average the :func:`taxonomy_scores` of several sentences (same shapes)."""
    if not score_list:  # the mean of no sentences is nan
        raise ValueError("score_list must not be empty")
    return {n: torch.stack([s[n] for s in score_list]).mean(0) for n in SCORE_NAMES}


def classify_heads(scores: Mapping, thresholds: Thresholds = Thresholds()) -> np.ndarray:
    """The class of every head from its (...) scores. Returns a (...) array of :data:`CLASSES`."""
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
    """A (T, T) attention map of a known ``kind`` (one of :data:`CLASSES`), for tests.

    T >= 5;  peak: the weight on the target, in (0, 1);  special: the special tokens.
    """
    one_of(kind, "kind", CLASSES)
    integer(T, "T", low=5)
    number(peak, "peak", 0.0, 1.0, open_low=True, open_high=True)
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
    """A text table, one line per head: its five scores and its class; (L, H) inputs."""
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
    """Mean attention weight at each offset k = j - i, -K ... K, over the content rows.

    attn: (..., T, T). Returns (..., 2K + 1) float64; nan where no row has that offset.
    """
    attn = _maps(attn)
    max_offset = positive_int(max_offset, "max_offset")
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
