"""Checks of the exercises of chapter 20 (multi-head attention).

The references are independent of the reader's formulas: the multiply-adds that
``torch.utils.flop_counter.FlopCounterMode`` counts in a forward pass of
:class:`mlbook.attention.multihead.MultiHeadAttention`, its parameter tensors and the size of its
weight tensor (20.1, 20.2, 20.6), a head-by-head implementation of the taxonomy rule evaluated at
every threshold where a class can change (20.3), the module's own split of the projected queries
and keys with ranks counted from ``numpy.linalg.svd`` (20.4), and ``torch.nn.MultiheadAttention``
with the weights copied in (20.5).

Each typical wrong answer is written once, as a function of the reader's arguments; a check
evaluates the functions of its exercise on every case (:func:`_wrong`), and ``MISTAKES`` lists
the same functions with their feedback.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ...attention import head_taxonomy as ht
from ...attention import multihead as mh
from . import Incorrect, as_tensor, attempt, exercise, expect_answer, paired_mistakes, wrong_values
from . import reference_answer as _ref

F64 = torch.float64


def _module(d: int, H: int, seed: int, **kwargs) -> mh.MultiHeadAttention:
    """A seeded module, leaving the global random state as it was."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return mh.MultiHeadAttention(d, H, **kwargs)


def _counted(m: nn.Module, *inputs: torch.Tensor, **kwargs) -> tuple[int, int]:
    """(multiply-adds counted by FlopCounterMode, number of attention weights) of m(*inputs)."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        _, weights = m(*inputs, **kwargs)
    return counter.get_total_flops() // 2, weights.numel()


# --- 20.1: the multiply-adds and exponentials of self-attention --------------------------------


def macs_flops(B, T, d, H):
    return 2 * (4 * B * T * d * d + 2 * B * T * T * d)


def macs_head_width(B, T, d, H):
    return 4 * B * T * d * d + 2 * B * T * T * (d // H)


def macs_heads_times_h(B, T, d, H):
    return 4 * B * T * d * d + 2 * B * T * T * d * H


def macs_without_output(B, T, d, H):
    return 3 * B * T * d * d + 2 * B * T * T * d


def macs_one_product(B, T, d, H):
    return 4 * B * T * d * d + B * T * T * d


def exps_one_softmax(B, T, d, H):
    return B * T * T


def exps_no_batch(B, T, d, H):
    return H * T * T


def exps_per_row(B, T, d, H):
    return B * H * T


def exps_per_value(B, T, d, H):
    return B * T * T * d


_MACS_WRONG = [
    (macs_flops, "that counts floating-point operations (2 per multiply-add); count multiply-adds"),
    (macs_head_width, "the H heads of width d_h = d/H together cost 2BT²d, not 2BT²d_h"),
    (
        macs_heads_times_h,
        "each head has width d_h = d/H, so the heads cost 2BT²d in total, not H times that",
    ),
    (macs_without_output, "the output projection W_O is missing: four d x d projections, 4BTd²"),
    (macs_one_product, "every head does two T x T products, the scores QK^T and the mixing AV"),
]
_EXPS_WRONG = [
    (exps_one_softmax, "every head has its own softmax over a T x T score matrix: multiply by H"),
    (exps_no_batch, "the batch is missing: B sequences, each with H score matrices"),
    (exps_per_row, "one exponential per score, T per row, not one per row"),
    (exps_per_value, "the exponentials act on the scores (B, H, T, T), not on the values"),
]


@exercise("20.1", "mha_multiply_adds", "softmax_exponentials")
def heads_cost(mha_multiply_adds, softmax_exponentials) -> str:
    """Multiply-adds and softmax exponentials of self-attention against FlopCounterMode."""
    gen = torch.Generator().manual_seed(201)
    cases = [(2, 24, 32, H) for H in (1, 2, 4, 8)] + [(1, 80, 16, 4), (3, 5, 12, 3)]
    for B, T, d, H in cases:
        macs, exps = _counted(_module(d, H, 201), torch.randn(B, T, d, generator=gen))
        what = f"(B={B}, T={T}, d={d}, H={H})"
        expect_answer(
            attempt(mha_multiply_adds, B, T, d, H),
            macs,
            f"mha_multiply_adds{what}",
            wrong=wrong_values(_MACS_WRONG, B, T, d, H),
            atol=0.0,
            rtol=0.0,
        )
        expect_answer(
            attempt(softmax_exponentials, B, T, d, H),
            exps,
            f"softmax_exponentials{what}",
            wrong=wrong_values(_EXPS_WRONG, B, T, d, H),
            atol=0.0,
            rtol=0.0,
        )
    return (
        "both counts match FlopCounterMode and the weight tensor of mh.MultiHeadAttention "
        "for H = 1, 2, 4, 8 and two more shapes"
    )


# --- 20.2: cross-attention ----------------------------------------------------------------------


def params_self(d, d_kv):
    return 4 * d * d + 4 * d


def params_square(d, d_kv):
    return 2 * d * d + 2 * d_kv * d_kv + 4 * d


def params_without_bias(d, d_kv):
    return 2 * d * d + 2 * d_kv * d


def params_bias_widths(d, d_kv):
    return 2 * d * d + 2 * d_kv * d + 2 * d + 2 * d_kv


def cross_macs_flops(B, T_q, T_k, d, d_kv):
    return 2 * (2 * B * T_q * d * d + 2 * B * T_k * d_kv * d + 2 * B * T_q * T_k * d)


def cross_macs_swapped(B, T_q, T_k, d, d_kv):
    return 2 * B * T_k * d * d + 2 * B * T_q * d_kv * d + 2 * B * T_q * T_k * d


def cross_macs_heads_dkv(B, T_q, T_k, d, d_kv):
    return 2 * B * T_q * d * d + 2 * B * T_k * d_kv * d + 2 * B * T_q * T_k * d_kv


def cross_macs_self(B, T_q, T_k, d, d_kv):
    return 4 * B * T_q * d * d + 2 * B * T_q * T_q * d


def cross_macs_square(B, T_q, T_k, d, d_kv):
    return 2 * B * T_q * d * d + 2 * B * T_k * d * d + 2 * B * T_q * T_k * d


_PARAMS_WRONG = [
    (
        params_self,
        "that is the self-attention count; W_K and W_V read inputs of width d_kv, so they are "
        "d_kv x d",
    ),
    (params_square, "W_K and W_V map width d_kv to width d: d_kv x d, not d_kv x d_kv"),
    (params_without_bias, "the four biases b_Q, b_K, b_V, b_O (4d) are missing"),
    (params_bias_widths, "every projection outputs width d, so each of the four biases has d"),
]
_CROSS_WRONG = [
    (
        cross_macs_flops,
        "that counts floating-point operations (2 per multiply-add); count multiply-adds",
    ),
    (
        cross_macs_swapped,
        "T_q and T_k are swapped in the projections: W_Q and W_O act on the T_q target tokens, "
        "W_K and W_V on the T_k source tokens",
    ),
    (cross_macs_heads_dkv, "the heads work at width d after the projections: 2 B T_q T_k d"),
    (
        cross_macs_self,
        "that is eq. 20.4 with T = T_q; keys and values come from T_k tokens of width d_kv",
    ),
    (
        cross_macs_square,
        "the key and value projections multiply d_kv-wide inputs by d_kv x d matrices: "
        "B T_k d_kv d each",
    ),
]


@exercise("20.2", "cross_attention_parameters", "cross_attention_multiply_adds")
def cross_cost(cross_attention_parameters, cross_attention_multiply_adds) -> str:
    """Cross-attention parameters (from the tensors) and multiply-adds (FlopCounterMode)."""
    gen = torch.Generator().manual_seed(202)
    for B, T_q, T_k, d, d_kv in (
        (3, 5, 40, 16, 24),
        (2, 7, 3, 8, 12),
        (1, 4, 4, 8, 8),
        (2, 6, 9, 12, 20),
    ):
        m = _module(d, 4, 202, d_kv=d_kv)
        expect_answer(
            attempt(cross_attention_parameters, d, d_kv),
            sum(p.numel() for p in m.parameters()),
            f"cross_attention_parameters(d={d}, d_kv={d_kv})",
            wrong=wrong_values(_PARAMS_WRONG, d, d_kv),
            atol=0.0,
            rtol=0.0,
        )
        macs, _ = _counted(
            m, torch.randn(B, T_q, d, generator=gen), torch.randn(B, T_k, d_kv, generator=gen)
        )
        expect_answer(
            attempt(cross_attention_multiply_adds, B, T_q, T_k, d, d_kv),
            macs,
            f"cross_attention_multiply_adds(B={B}, T_q={T_q}, T_k={T_k}, d={d}, d_kv={d_kv})",
            wrong=wrong_values(_CROSS_WRONG, B, T_q, T_k, d, d_kv),
            atol=0.0,
            rtol=0.0,
        )
    return (
        "parameters match the tensors and multiply-adds match FlopCounterMode for 4 "
        "cross-attention shapes, self-attention included"
    )


# --- 20.3: how much of the taxonomy the thresholds decide ---------------------------------------

_DESIGNED = [  # previous, next, self, sink, entropy: on thresholds, ties, undefined scores
    (0.9, 0.02, 0.03, 0.05, 0.2),
    (0.1, 0.7, 0.1, 0.1, 0.3),
    (0.05, 0.05, 0.05, 0.5, 0.8),
    (0.1, 0.1, 0.1, 0.4, 0.6),
    (0.1, 0.1, 0.1, 0.6, 0.9),
    (math.nan, 0.1, 0.55, 0.3, 0.75),
    (0.45, math.nan, 0.45, 0.05, 0.74),
    (math.nan, math.nan, 0.3, 0.2, 0.5),
    (0.2, 0.2, 0.2, 0.3, 0.95),
    (0.3, 0.1, 0.1, 0.35, 0.1),
    (0.55, 0.2, 0.1, 0.15, 0.4),
    (0.1, 0.52, 0.1, 0.52, 0.8),
]


def _taxonomy_scores() -> dict:
    """Scores of 4 x 5 heads: the designed ones above, then 8 random heads."""
    gen = torch.Generator().manual_seed(203)
    rows = [list(r) for r in _DESIGNED]
    for _ in range(20 - len(rows)):
        mass = torch.softmax(2 * torch.randn(5, generator=gen, dtype=F64), 0)[:4]  # shares
        rows.append([float(x) for x in mass] + [float(torch.rand(1, generator=gen))])
    table = torch.tensor(rows, dtype=F64).T.reshape(5, 4, 5)  # (5 scores, L, H)
    return {name: table[n] for n, name in enumerate(ht.SCORE_NAMES)}


def _classify(
    scores: dict,
    tau: float,
    broad: float = 0.75,
    *,
    strict: bool = False,
    nan_wins: bool = False,
    last_tie: bool = False,
    strict_broad: bool = False,
):
    """The rule of chapter 20, head by head; the keywords give typical mistakes."""
    L, H = scores["self"].shape
    out = np.empty((L, H), dtype=object)
    for layer in range(L):
        for h in range(H):
            mass = [float(scores[n][layer, h]) for n in ht.MASS_SCORES]
            if nan_wins and any(math.isnan(x) for x in mass):
                best, name = math.nan, "previous"
            else:
                defined = [
                    (x, n) for x, n in zip(mass, ht.MASS_SCORES, strict=True) if not math.isnan(x)
                ]
                best = max(x for x, _ in defined)
                tied = [n for x, n in defined if x == best]
                name = tied[-1] if last_tie else tied[0]
            entropy = float(scores["entropy"][layer, h])
            if (best > tau) if strict else (best >= tau):
                out[layer, h] = name
            elif (entropy > broad) if strict_broad else (entropy >= broad):
                out[layer, h] = "broad"
            else:
                out[layer, h] = "mixed"
    return out


def _counts(classes, order=ht.CLASSES) -> torch.Tensor:
    return torch.tensor([int((classes == c).sum()) for c in order], dtype=F64)


def _sensitive(scores: dict, lo: float, hi: float, **mistake) -> torch.Tensor:
    """Brute force: classify at lo, hi and every mass score in between; True where it varies."""
    values = torch.stack([scores[n] for n in ht.MASS_SCORES]).reshape(-1).tolist()
    taus = sorted({lo, hi} | {v for v in values if lo <= v <= hi})
    classes = [_classify(scores, t, **mistake) for t in taus]
    varies = np.zeros(classes[0].shape, dtype=bool)
    for c in classes[1:]:
        varies |= c != classes[0]
    return torch.from_numpy(varies).to(F64)


def _clone(scores: dict) -> dict:
    return {n: t.clone() for n, t in scores.items()}


def counts_strict(scores, tau_mass):
    return _counts(_classify(scores, tau_mass, strict=True))


def counts_nan_wins(scores, tau_mass):
    return _counts(_classify(scores, tau_mass, nan_wins=True))


def counts_last_tie(scores, tau_mass):
    return _counts(_classify(scores, tau_mass, last_tie=True))


def counts_strict_broad(scores, tau_mass):
    return _counts(_classify(scores, tau_mass, strict_broad=True))


def counts_default_tau(scores, tau_mass):
    return _counts(_classify(scores, 0.5))


def counts_sorted(scores, tau_mass):
    return _counts(_classify(scores, tau_mass), sorted(ht.CLASSES))


def _mass(scores):
    return torch.stack([scores[n] for n in ht.MASS_SCORES]).nan_to_num(-1.0).amax(0)


def sensitive_closed(scores, tau_lo, tau_hi):
    m = _mass(scores)
    return ((tau_lo <= m) & (m <= tau_hi)).to(F64)


def sensitive_open(scores, tau_lo, tau_hi):
    m = _mass(scores)
    return ((tau_lo < m) & (m < tau_hi)).to(F64)


def sensitive_inverted(scores, tau_lo, tau_hi):
    return 1 - _sensitive(scores, tau_lo, tau_hi)


def sensitive_below(scores, tau_lo, tau_hi):
    return (_mass(scores) < tau_hi).to(F64)


def sensitive_nan_wins(scores, tau_lo, tau_hi):
    return _sensitive(scores, tau_lo, tau_hi, nan_wins=True)


_COUNTS_WRONG = [
    (
        counts_strict,
        "the rule is m >= tau_mass: a head whose largest mass score equals the threshold keeps "
        "its class",
    ),
    (
        counts_nan_wins,
        "an undefined (nan) previous or next score must never win; leave it out (e.g. nan_to_num)",
    ),
    (counts_last_tie, "on a tie the first mass score in the order previous, next, self, sink wins"),
    (counts_strict_broad, "a head whose entropy equals tau_broad = 0.75 is broad (>=)"),
    (counts_default_tau, "use tau_mass, not the default threshold 0.5"),
    (counts_sorted, "count in the order of ht.CLASSES: previous, next, self, sink, broad, mixed"),
]
_SENSITIVE_WRONG = [
    (
        sensitive_closed,
        "a head whose largest mass score equals tau_hi keeps its class at tau_hi too: the "
        "interval is half-open, [tau_lo, tau_hi)",
    ),
    (
        sensitive_open,
        "a head whose largest mass score equals tau_lo has its class at tau_lo and loses it "
        "above: include tau_lo",
    ),
    (sensitive_inverted, "True marks the heads that move, not the ones that keep their class"),
    (
        sensitive_below,
        "a head whose largest mass score is below tau_lo is broad or mixed for every tau: it "
        "does not move",
    ),
    (
        sensitive_nan_wins,
        "an undefined (nan) previous or next score must never win; leave it out",
    ),
]


@exercise("20.3", "class_counts", "threshold_sensitive")
def thresholds(class_counts, threshold_sensitive) -> str:
    """Heads per class at a threshold, and the heads whose class depends on it, against the rule."""
    scores = _taxonomy_scores()
    for tau in (0.4, 0.5, 0.6, 0.55):
        expect_answer(
            attempt(class_counts, _clone(scores), tau),
            _counts(_classify(scores, tau)),
            f"class_counts(scores, tau_mass={tau}) for 20 heads",
            wrong=wrong_values(_COUNTS_WRONG, scores, tau),
            atol=0.0,
            rtol=0.0,
        )
    for lo, hi in ((0.4, 0.6), (0.5, 0.55), (0.3, 0.9)):
        expect_answer(
            attempt(threshold_sensitive, _clone(scores), lo, hi),
            _sensitive(scores, lo, hi),
            f"threshold_sensitive(scores, {lo}, {hi}) for 20 heads",
            wrong=wrong_values(_SENSITIVE_WRONG, scores, lo, hi),
            atol=0.0,
            rtol=0.0,
        )
    return (
        "counts and threshold-sensitive heads match a head-by-head implementation of the "
        "rule for 20 heads, with scores on the thresholds, ties and undefined scores"
    )


# --- 20.4: the rank of the heads' bilinear forms ------------------------------------------------


def _rank(a: np.ndarray) -> int:
    s = np.linalg.svd(a, compute_uv=False)
    return int((s > s.max() * max(a.shape) * np.finfo(a.dtype).eps).sum())


def _blocks(W, H):
    d_h = W.shape[1] // H
    return [W[:, h * d_h : (h + 1) * d_h] for h in range(H)]


def forms_interleaved(W_Q, W_K, num_heads):
    H = num_heads
    return torch.stack([W_Q[:, h::H] @ W_K[:, h::H].T for h in range(H)])


def forms_transposed(W_Q, W_K, num_heads):
    return torch.stack(
        [k @ q.T for q, k in zip(_blocks(W_Q, num_heads), _blocks(W_K, num_heads), strict=True)]
    )


def forms_scaled(W_Q, W_K, num_heads):
    blocks = zip(_blocks(W_Q, num_heads), _blocks(W_K, num_heads), strict=True)
    d_h = W_Q.shape[1] // num_heads
    return torch.stack([q @ k.T for q, k in blocks]) / math.sqrt(d_h)


def forms_by_rows(W_Q, W_K, num_heads):
    d_h = W_Q.shape[0] // num_heads
    return torch.stack(
        [W_Q[h * d_h : (h + 1) * d_h].T @ W_K[h * d_h : (h + 1) * d_h] for h in range(num_heads)]
    )


def forms_sum(W_Q, W_K, num_heads):
    return W_Q @ W_K.T


def _form_ranks(forms) -> tuple[list[int], int]:
    return [_rank(f.numpy()) for f in forms], _rank(forms.sum(0).numpy())


def ranks_bounds(forms):
    H, d, _ = forms.shape
    return torch.tensor([d // H] * H + [d], dtype=F64)


def ranks_sum_of_ranks(forms):
    ranks, _ = _form_ranks(forms)
    return torch.tensor(ranks + [sum(ranks)], dtype=F64)


def ranks_without_sum(forms):
    return torch.tensor(_form_ranks(forms)[0], dtype=F64)


def ranks_sum_first(forms):
    ranks, total = _form_ranks(forms)
    return torch.tensor([total] + ranks, dtype=F64)


_FORMS_WRONG = [
    (
        forms_interleaved,
        "head h owns the contiguous block of columns h d_h, ..., (h+1) d_h - 1 (split_heads "
        "reads the last axis d as (H, d_h)), not every H-th column",
    ),
    (
        forms_transposed,
        "that is the transpose: the score of query x and key y is x W_Q^(h) (y W_K^(h))^T, so "
        "the form is W_Q^(h) W_K^(h)^T",
    ),
    (forms_scaled, "leave out the 1/sqrt(d_h) scale"),
    (
        forms_by_rows,
        "the weights act from the right, so head h owns columns of W_Q and W_K, not rows",
    ),
    (
        forms_sum,
        "that is the sum over the heads, W_Q W_K^T; return one form per head, shape (H, d, d)",
    ),
]
_RANKS_WRONG = [
    (
        ranks_bounds,
        "compute the ranks: d_h and d are only upper bounds (a degenerate head has fewer)",
    ),
    (
        ranks_sum_of_ranks,
        "the rank of a sum is at most the sum of the ranks, with equality only when the heads' "
        "column spaces are independent",
    ),
    (ranks_without_sum, "append the rank of the sum of the forms: shape (H + 1,)"),
    (ranks_sum_first, "the H ranks come first, the rank of the sum last"),
]


@exercise("20.4", "head_forms", "form_ranks")
def head_ranks(head_forms, form_ranks) -> str:
    """Per-head bilinear forms from the module's split, and their ranks against numpy's SVD."""
    for d, H in ((16, 4), (12, 3), (8, 1), (8, 8)):
        m = _module(d, H, 204).double()
        W_Q, W_K = m.W_Q.detach(), m.W_K.detach()
        eye = torch.eye(d, dtype=F64)[None]  # d "tokens": the unit vectors
        q = mh.split_heads(eye @ W_Q, H)[0]  # (H, d, d_h)
        k = mh.split_heads(eye @ W_K, H)[0]  # (H, d, d_h)
        expect_answer(
            attempt(head_forms, W_Q.clone(), W_K.clone(), H),
            q @ k.transpose(-2, -1),  # (H, d, d)
            f"head_forms(W_Q, W_K, num_heads={H}) for d = {d}",
            wrong=wrong_values(_FORMS_WRONG, W_Q, W_K, H),
            atol=1e-12,
            rtol=1e-10,
        )

    gen = torch.Generator().manual_seed(2040)
    d, H = 16, 4
    W_Q, W_K = (torch.randn(d, d, generator=gen, dtype=F64) for _ in range(2))
    degenerate = W_Q.clone()
    degenerate[:, 4:8] = degenerate[:, 4:6] @ torch.randn(2, 4, generator=gen, dtype=F64)
    shared = torch.randn(d, 6, generator=gen, dtype=F64) @ torch.randn(
        6, d, generator=gen, dtype=F64
    )
    cases = [
        ("random weights, d = 16, H = 4", W_Q, W_K, 4),
        ("a head of rank 2", degenerate, W_K, 4),
        ("W_Q of rank 6, H = 2", shared, W_K, 2),
        ("d = 8, H = 8", W_Q[:8, :8], W_K[:8, :8], 8),
    ]
    for label, wq, wk, H in cases:
        forms = torch.stack([q @ k.T for q, k in zip(_blocks(wq, H), _blocks(wk, H), strict=True)])
        ranks, total = _form_ranks(forms)
        expect_answer(
            attempt(form_ranks, forms.clone()),
            torch.tensor(ranks + [total], dtype=F64),
            f"form_ranks(forms) for {label}",
            wrong=wrong_values(_RANKS_WRONG, forms),
            atol=0.0,
            rtol=0.0,
        )
    return (
        "the forms match the module's split of Q and K for 4 head layouts, and the ranks "
        "match numpy's SVD, with a degenerate head and a low-rank W_Q"
    )


# --- 20.5: multi-head attention from a blank function -------------------------------------------


def _mha(
    x,
    W_Q,
    W_K,
    W_V,
    W_O,
    H,
    causal,
    *,
    scale_width=None,
    split="view-transpose",
    merge="transpose",
    softmax_dim=-1,
    output=True,
    mask="past",
):
    """Multi-head attention written out, with switches for the typical mistakes."""
    B, T, d = x.shape
    d_h = d // H
    Q, K, V = x @ W_Q, x @ W_K, x @ W_V  # (B, T, d)
    if split == "view-transpose":
        q, k, v = (t.view(B, T, H, d_h).transpose(1, 2) for t in (Q, K, V))  # (B, H, T, d_h)
    else:  # reads (T, d) as (H, T, d_h): mixes tokens and features
        q, k, v = (t.reshape(B, H, T, d_h) for t in (Q, K, V))
    s = q @ k.transpose(-2, -1) / math.sqrt(scale_width or d_h)  # (B, H, T, T)
    if causal and mask != "none":
        keep = torch.ones(T, T, dtype=torch.bool)
        keep = keep.tril() if mask == "past" else keep.triu()
        s = s.masked_fill(~keep, float("-inf"))
    o = torch.softmax(s, dim=softmax_dim) @ v  # (B, H, T, d_h)
    if merge == "transpose":
        o = o.transpose(1, 2).reshape(B, T, d)
    else:
        o = o.reshape(B, T, d)
    return o @ W_O if output else o


def mha_scaled_by_d(x, W_Q, W_K, W_V, W_O, num_heads, causal=False):
    return _mha(x, W_Q, W_K, W_V, W_O, num_heads, causal, scale_width=x.shape[-1])


def mha_split_without_transpose(x, W_Q, W_K, W_V, W_O, num_heads, causal=False):
    return _mha(x, W_Q, W_K, W_V, W_O, num_heads, causal, split="reshape")


def mha_merge_without_transpose(x, W_Q, W_K, W_V, W_O, num_heads, causal=False):
    return _mha(x, W_Q, W_K, W_V, W_O, num_heads, causal, merge="reshape")


def mha_softmax_over_queries(x, W_Q, W_K, W_V, W_O, num_heads, causal=False):
    return _mha(x, W_Q, W_K, W_V, W_O, num_heads, causal, softmax_dim=-2)


def mha_without_output(x, W_Q, W_K, W_V, W_O, num_heads, causal=False):
    return _mha(x, W_Q, W_K, W_V, W_O, num_heads, causal, output=False)


def mha_mask_ignored(x, W_Q, W_K, W_V, W_O, num_heads, causal=False):
    return _mha(x, W_Q, W_K, W_V, W_O, num_heads, causal, mask="none")


def mha_mask_future(x, W_Q, W_K, W_V, W_O, num_heads, causal=False):
    return _mha(x, W_Q, W_K, W_V, W_O, num_heads, causal, mask="future")


_MHA_WRONG = [
    (
        mha_scaled_by_d,
        "scale the scores by 1/sqrt(d_h), the width of one head (the length of its dot "
        "products), not 1/sqrt(d)",
    ),
    (
        mha_split_without_transpose,
        "split the heads as view(B, T, H, d_h) and then transpose(1, 2); reading (T, d) as "
        "(H, T, d_h) mixes tokens and features",
    ),
    (
        mha_merge_without_transpose,
        "merge the heads by transposing (B, H, T, d_h) back to (B, T, H, d_h) before the "
        "reshape to (B, T, d)",
    ),
    (
        mha_softmax_over_queries,
        "the softmax runs over the keys (the last axis): each query's weights sum to one",
    ),
    (mha_without_output, "the output projection W_O is missing (eq. 20.3)"),
    (
        mha_mask_ignored,
        "with causal=True a query may not attend to later keys: mask the scores above the "
        "diagonal with -inf",
    ),
    (
        mha_mask_future,
        "the causal mask keeps the keys at or before the query (on and below the diagonal), "
        "not the later ones",
    ),
]


def _torch_mha(x, W_Q, W_K, W_V, W_O, H, causal) -> torch.Tensor:
    """torch.nn.MultiheadAttention with the weights copied in (torch stores W^T)."""
    d = x.shape[-1]
    ref = nn.MultiheadAttention(d, H, bias=False, batch_first=True, dtype=F64)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([W_Q.T, W_K.T, W_V.T]))
        ref.out_proj.weight.copy_(W_O.T)
        T = x.shape[1]
        future = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None  # True: masked
        return ref(x, x, x, attn_mask=future, need_weights=False)[0]


@exercise("20.5", "mha_forward")
def mha_from_scratch(mha_forward) -> str:
    """Multi-head attention from raw weights against torch.nn.MultiheadAttention."""
    gen = torch.Generator().manual_seed(205)
    cases = [(2, 5, 12, 3, False), (1, 7, 16, 4, True), (3, 4, 8, 1, False), (2, 6, 16, 8, True)]
    for B, T, d, H, causal in cases:
        x = torch.randn(B, T, d, generator=gen, dtype=F64)
        Ws = [torch.randn(d, d, generator=gen, dtype=F64) / math.sqrt(d) for _ in range(4)]
        args = (x, *Ws, H, causal)
        expect_answer(
            attempt(mha_forward, x.clone(), *(W.clone() for W in Ws), H, causal),
            _torch_mha(*args),
            f"mha_forward(x, W_Q, W_K, W_V, W_O, num_heads={H}, causal={causal}) for x of shape "
            f"{(B, T, d)}",
            wrong=wrong_values(_MHA_WRONG, *args),
            atol=1e-10,
            rtol=1e-10,
        )
    return (
        "matches torch.nn.MultiheadAttention with the same weights (float64) for H = 1, 3, 4, 8, "
        "with and without the causal mask"
    )


# --- 20.6: predict what a causal mask saves -----------------------------------------------------

_PREDICT_SHAPE = (2, 256, 64, 4)  # B, T, d, H


def _causal_ratio() -> float:
    """FLOPs of mh.MultiHeadAttention with a causal mask over FLOPs without, counted."""
    B, T, d, H = _PREDICT_SHAPE
    m = _module(d, H, 206)
    x = torch.randn(B, T, d, generator=torch.Generator().manual_seed(206))
    full, _ = _counted(m, x)
    causal, _ = _counted(m, x, is_causal=True)
    return causal / full


def _skipped_ratio() -> float:
    """The ratio a kernel would reach that skips the masked scores (T(T+1)/2 of T² per head)."""
    B, T, d, H = _PREDICT_SHAPE
    return (4 * T * d * d + T * (T + 1) * d) / (4 * T * d * d + 2 * T * T * d)


_PREDICT_TOL = 0.02


@exercise("20.6", "predict_causal_flop_ratio")
def causal_flops(predict_causal_flop_ratio) -> str:
    """The reader's guess against the ratio FlopCounterMode measures."""
    guess = as_tensor(attempt(predict_causal_flop_ratio), "predict_causal_flop_ratio()")
    if guess.numel() != 1:
        raise Incorrect("predict_causal_flop_ratio() should return one number, the ratio")
    guess = float(guess.reshape(()))
    ratio = _causal_ratio()
    B, T, d, H = _PREDICT_SHAPE
    where = (
        f"the measured ratio is {ratio:.3g} (B = {B}, T = {T}, d = {d}, H = {H}): the book's "
        "attention, like PyTorch's math kernel, computes all T² scores of each head and only then "
        "sets the masked ones to -inf, so the mask changes which scores count, not how many are "
        "computed"
    )
    if abs(guess - ratio) <= _PREDICT_TOL:
        return f"your guess {guess:.3g} is right; {where}"
    if abs(guess - _skipped_ratio()) <= _PREDICT_TOL:
        raise Incorrect(
            f"your guess {guess:.3g} is what a kernel that skips the masked half would cost "
            f"(FlashAttention's causal kernels, chapter 26); {where}"
        )
    if abs(guess - 0.5) <= _PREDICT_TOL:
        raise Incorrect(
            f"your guess {guess:.3g} halves the whole layer, but even a kernel that skips the "
            f"masked scores leaves the four projections unchanged; {where}"
        )
    raise Incorrect(f"your guess {guess:.3g} is off; {where}")


# Typical wrong answers (the tests build each and check that it is rejected with its feedback)


def predict_skipped_half():
    return _skipped_ratio()


def predict_half():
    return 0.5


MISTAKES = {
    "20.1": paired_mistakes(
        _ref("20.1", "mha_multiply_adds"),
        _ref("20.1", "softmax_exponentials"),
        _MACS_WRONG,
        _EXPS_WRONG,
    ),
    "20.2": paired_mistakes(
        _ref("20.2", "cross_attention_parameters"),
        _ref("20.2", "cross_attention_multiply_adds"),
        _PARAMS_WRONG,
        _CROSS_WRONG,
    ),
    "20.3": paired_mistakes(
        _ref("20.3", "class_counts"),
        _ref("20.3", "threshold_sensitive"),
        _COUNTS_WRONG,
        _SENSITIVE_WRONG,
    ),
    "20.4": paired_mistakes(
        _ref("20.4", "head_forms"), _ref("20.4", "form_ranks"), _FORMS_WRONG, _RANKS_WRONG
    ),
    "20.5": list(_MHA_WRONG),
    "20.6": [
        (predict_skipped_half, "skips the masked half"),
        (predict_half, "halves the whole layer"),
    ],
}
