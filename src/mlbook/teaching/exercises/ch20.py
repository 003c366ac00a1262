"""Checks of the exercises of chapter 20 (multi-head attention).

The references are independent of the reader's formulas: the multiply-adds that
``torch.utils.flop_counter.FlopCounterMode`` counts in a forward pass of
:class:`mlbook.attention.multihead.MultiHeadAttention`, its parameter tensors and the size of its
weight tensor (20.1, 20.2), a head-by-head implementation of the taxonomy rule evaluated at every
threshold where a class can change (20.3), and the module's own split of the projected queries and
keys with ranks counted from ``numpy.linalg.svd`` (20.4).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from ...attention import head_taxonomy as ht
from ...attention import multihead as mh
from . import attempt, exercise, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


def _module(d: int, H: int, seed: int, **kwargs) -> mh.MultiHeadAttention:
    """A seeded module, leaving the global random state as it was."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return mh.MultiHeadAttention(d, H, **kwargs)


def _counted(m: mh.MultiHeadAttention, *inputs: torch.Tensor) -> tuple[int, int]:
    """(multiply-adds counted by FlopCounterMode, number of attention weights) of m(*inputs)."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        _, weights = m(*inputs)
    return counter.get_total_flops() // 2, weights.numel()


@exercise("20.1", "mha_multiply_adds", "softmax_exponentials")
def heads_cost(mha_multiply_adds, softmax_exponentials) -> str:
    """Multiply-adds and softmax exponentials of self-attention against FlopCounterMode."""
    gen = torch.Generator().manual_seed(201)
    cases = [(2, 24, 32, H) for H in (1, 2, 4, 8)] + [(1, 80, 16, 4), (3, 5, 12, 3)]
    for B, T, d, H in cases:
        macs, exps = _counted(_module(d, H, 201), torch.randn(B, T, d, generator=gen))
        what = f"(B={B}, T={T}, d={d}, H={H})"
        proj, attn = 4 * B * T * d * d, 2 * B * T * T * d
        expect_answer(
            attempt(mha_multiply_adds, B, T, d, H),
            macs,
            f"mha_multiply_adds{what}",
            wrong={
                "that counts floating-point operations (2 per multiply-add); count multiply-adds": 2
                * macs,
                "the H heads of width d_h = d/H together cost 2BT²d, not 2BT²d_h": proj + attn // H,
                "each head has width d_h = d/H, so the heads cost 2BT²d in total, not H times "
                "that": proj + attn * H,
                "the output projection W_O is missing: four d x d projections, 4BTd²": 3
                * B
                * T
                * d
                * d
                + attn,
                "every head does two T x T products, the scores QK^T and the mixing AV: 2BT²d": proj
                + attn // 2,
            },
            atol=0.0,
            rtol=0.0,
        )
        expect_answer(
            attempt(softmax_exponentials, B, T, d, H),
            exps,
            f"softmax_exponentials{what}",
            wrong={
                "every head has its own softmax over a T x T score matrix: multiply by H": B
                * T
                * T,
                "the batch is missing: B sequences, each with H score matrices": H * T * T,
                "one exponential per score, T per row, not one per row": B * H * T,
                "the exponentials act on the scores (B, H, T, T), not on the values": B * T * T * d,
            },
            atol=0.0,
            rtol=0.0,
        )
    return (
        "both counts match FlopCounterMode and the weight tensor of mh.MultiHeadAttention "
        "for H = 1, 2, 4, 8 and two more shapes"
    )


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
        n_par = sum(p.numel() for p in m.parameters())
        expect_answer(
            attempt(cross_attention_parameters, d, d_kv),
            n_par,
            f"cross_attention_parameters(d={d}, d_kv={d_kv})",
            wrong={
                "that is the self-attention count; W_K and W_V read inputs of width d_kv, so "
                "they are d_kv x d": 4 * d * d + 4 * d,
                "W_K and W_V map width d_kv to width d: d_kv x d, not d_kv x d_kv": 2 * d * d
                + 2 * d_kv * d_kv
                + 4 * d,
                "the four biases b_Q, b_K, b_V, b_O (4d) are missing": 2 * d * d + 2 * d_kv * d,
                "every projection outputs width d, so each of the four biases has d entries": 2
                * d
                * d
                + 2 * d_kv * d
                + 2 * d
                + 2 * d_kv,
            },
            atol=0.0,
            rtol=0.0,
        )
        macs, _ = _counted(
            m, torch.randn(B, T_q, d, generator=gen), torch.randn(B, T_k, d_kv, generator=gen)
        )
        heads = 2 * B * T_q * T_k * d
        expect_answer(
            attempt(cross_attention_multiply_adds, B, T_q, T_k, d, d_kv),
            macs,
            f"cross_attention_multiply_adds(B={B}, T_q={T_q}, T_k={T_k}, d={d}, d_kv={d_kv})",
            wrong={
                "that counts floating-point operations (2 per multiply-add); count multiply-adds": 2
                * macs,
                "T_q and T_k are swapped in the projections: W_Q and W_O act on the T_q "
                "target tokens, W_K and W_V on the T_k source tokens": 2 * B * T_k * d * d
                + 2 * B * T_q * d_kv * d
                + heads,
                "the heads work at width d after the projections: 2 B T_q T_k d, not d_kv": 2
                * B
                * T_q
                * d
                * d
                + 2 * B * T_k * d_kv * d
                + 2 * B * T_q * T_k * d_kv,
                "that is eq. 20.4 with T = T_q; keys and values come from T_k tokens of width "
                "d_kv": 4 * B * T_q * d * d + 2 * B * T_q * T_q * d,
                "the key and value projections multiply d_kv-wide inputs by d_kv x d matrices: "
                "B T_k d_kv d each": 2 * B * T_q * d * d + 2 * B * T_k * d * d + heads,
            },
            atol=0.0,
            rtol=0.0,
        )
    return (
        "parameters match the tensors and multiply-adds match FlopCounterMode for 4 "
        "cross-attention shapes, self-attention included"
    )


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


@exercise("20.3", "class_counts", "threshold_sensitive")
def thresholds(class_counts, threshold_sensitive) -> str:
    """Heads per class at a threshold, and the heads whose class depends on it, against the rule."""
    scores = _taxonomy_scores()
    for tau in (0.4, 0.5, 0.6, 0.55):
        want = _counts(_classify(scores, tau))
        expect_answer(
            attempt(class_counts, _clone(scores), tau),
            want,
            f"class_counts(scores, tau_mass={tau}) for 20 heads",
            wrong={
                "the rule is m >= tau_mass: a head whose largest mass score equals the threshold "
                "keeps its class": _counts(_classify(scores, tau, strict=True)),
                "an undefined (nan) previous or next score must never win; leave it out (e.g. "
                "nan_to_num)": _counts(_classify(scores, tau, nan_wins=True)),
                "on a tie the first mass score in the order previous, next, self, sink "
                "wins": _counts(_classify(scores, tau, last_tie=True)),
                "a head whose entropy equals tau_broad = 0.75 is broad (>=)": _counts(
                    _classify(scores, tau, strict_broad=True)
                ),
                "use tau_mass, not the default threshold 0.5": _counts(_classify(scores, 0.5)),
                "count in the order of ht.CLASSES: previous, next, self, sink, broad, "
                "mixed": _counts(_classify(scores, tau), sorted(ht.CLASSES)),
            },
            atol=0.0,
            rtol=0.0,
        )
    for lo, hi in ((0.4, 0.6), (0.5, 0.55), (0.3, 0.9)):
        want = _sensitive(scores, lo, hi)
        mass = torch.stack([scores[n] for n in ht.MASS_SCORES]).nan_to_num(-1.0).amax(0)
        expect_answer(
            attempt(threshold_sensitive, _clone(scores), lo, hi),
            want,
            f"threshold_sensitive(scores, {lo}, {hi}) for 20 heads",
            wrong={
                "a head whose largest mass score equals tau_hi keeps its class at tau_hi too: "
                "the interval is half-open, [tau_lo, tau_hi)": ((lo <= mass) & (mass <= hi)).to(
                    F64
                ),
                "a head whose largest mass score equals tau_lo has its class at tau_lo and "
                "loses it above: include tau_lo": ((lo < mass) & (mass < hi)).to(F64),
                "True marks the heads that move, not the ones that keep their class": 1 - want,
                "a head whose largest mass score is below tau_lo is broad or mixed for every "
                "tau: it does not move": (mass < hi).to(F64),
                "an undefined (nan) previous or next score must never win; leave it "
                "out": _sensitive(scores, lo, hi, nan_wins=True),
            },
            atol=0.0,
            rtol=0.0,
        )
    return (
        "counts and threshold-sensitive heads match a head-by-head implementation of the "
        "rule for 20 heads, with scores on the thresholds, ties and undefined scores"
    )


def _rank(a: np.ndarray) -> int:
    s = np.linalg.svd(a, compute_uv=False)
    return int((s > s.max() * max(a.shape) * np.finfo(a.dtype).eps).sum())


@exercise("20.4", "head_forms", "form_ranks")
def head_ranks(head_forms, form_ranks) -> str:
    """Per-head bilinear forms from the module's split, and their ranks against numpy's SVD."""
    for d, H in ((16, 4), (12, 3), (8, 1), (8, 8)):
        m = _module(d, H, 204).double()
        W_Q, W_K = m.W_Q.detach(), m.W_K.detach()
        eye = torch.eye(d, dtype=F64)[None]  # d "tokens": the unit vectors
        q = mh.split_heads(eye @ W_Q, H)[0]  # (H, d, d_h)
        k = mh.split_heads(eye @ W_K, H)[0]  # (H, d, d_h)
        want = q @ k.transpose(-2, -1)  # (H, d, d)
        d_h = d // H
        interleaved = torch.stack([W_Q[:, h::H] @ W_K[:, h::H].T for h in range(H)])
        by_rows = torch.stack(
            [W_Q[h * d_h : (h + 1) * d_h].T @ W_K[h * d_h : (h + 1) * d_h] for h in range(H)]
        )
        expect_answer(
            attempt(head_forms, W_Q.clone(), W_K.clone(), H),
            want,
            f"head_forms(W_Q, W_K, num_heads={H}) for d = {d}",
            wrong={
                "head h owns the contiguous block of columns h d_h, ..., (h+1) d_h - 1 "
                "(split_heads reads the last axis d as (H, d_h)), not every H-th "
                "column": interleaved,
                "that is the transpose: the score of query x and key y is "
                "x W_Q^(h) (y W_K^(h))^T, so the form is W_Q^(h) W_K^(h)^T": want.transpose(-2, -1),
                "leave out the 1/sqrt(d_h) scale": want / math.sqrt(d_h),
                "the weights act from the right, so head h owns columns of W_Q and W_K, not "
                "rows": by_rows,
                "that is the sum over the heads, W_Q W_K^T; return one form per head, "
                "shape (H, d, d)": W_Q @ W_K.T,
            },
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
        d_h = wq.shape[0] // H
        forms = torch.stack(
            [wq[:, h * d_h : (h + 1) * d_h] @ wk[:, h * d_h : (h + 1) * d_h].T for h in range(H)]
        )
        ranks = [_rank(f.numpy()) for f in forms]
        total = _rank(forms.sum(0).numpy())
        want = torch.tensor(ranks + [total], dtype=F64)
        expect_answer(
            attempt(form_ranks, forms.clone()),
            want,
            f"form_ranks(forms) for {label}",
            wrong={
                "compute the ranks: d_h and d are only upper bounds (a degenerate head has "
                "fewer)": torch.tensor([d_h] * H + [min(wq.shape[0], H * d_h)], dtype=F64),
                "the rank of a sum is at most the sum of the ranks, with equality only when "
                "the heads' column spaces are independent": torch.tensor(
                    ranks + [sum(ranks)], dtype=F64
                ),
                "append the rank of the sum of the forms: shape (H + 1,)": torch.tensor(
                    ranks, dtype=F64
                ),
                "the H ranks come first, the rank of the sum last": torch.tensor(
                    [total] + ranks, dtype=F64
                ),
            },
            atol=0.0,
            rtol=0.0,
        )
    return (
        "the forms match the module's split of Q and K for 4 head layouts, and the ranks "
        "match numpy's SVD, with a degenerate head and a low-rank W_Q"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


def macs_flops(B, T, d, H):
    return 2 * (4 * B * T * d * d + 2 * B * T * T * d)


def macs_head_width(B, T, d, H):
    return 4 * B * T * d * d + 2 * B * T * T * (d // H)


def macs_without_output(B, T, d, H):
    return 3 * B * T * d * d + 2 * B * T * T * d


def macs_one_product(B, T, d, H):
    return 4 * B * T * d * d + B * T * T * d


def exps_one_softmax(B, T, d, H):
    return B * T * T


def exps_per_row(B, T, d, H):
    return B * H * T


def params_self(d, d_kv):
    return 4 * d * d + 4 * d


def params_square(d, d_kv):
    return 2 * d * d + 2 * d_kv * d_kv + 4 * d


def params_without_bias(d, d_kv):
    return 2 * d * d + 2 * d_kv * d


def cross_macs_swapped(B, T_q, T_k, d, d_kv):
    return 2 * B * T_k * d * d + 2 * B * T_q * d_kv * d + 2 * B * T_q * T_k * d


def cross_macs_heads_dkv(B, T_q, T_k, d, d_kv):
    return 2 * B * T_q * d * d + 2 * B * T_k * d_kv * d + 2 * B * T_q * T_k * d_kv


def cross_macs_self(B, T_q, T_k, d, d_kv):
    return 4 * B * T_q * d * d + 2 * B * T_q * T_q * d


def _classes(scores, tau, *, strict=False, nan_wins=False):
    mass = torch.stack([scores[n] for n in ht.MASS_SCORES])  # (4, L, H)
    if not nan_wins:
        mass = mass.nan_to_num(-1.0)
    best, which = torch.max(mass, 0)  # nan propagates
    names = [[ht.MASS_SCORES[int(i)] for i in row] for row in which]
    out = []
    for layer, row in enumerate(names):
        for h, name in enumerate(row):
            m = float(best[layer, h])
            hit = m > tau if strict else m >= tau  # False for nan
            broad = float(scores["entropy"][layer, h]) >= 0.75
            out.append(name if hit else "broad" if broad else "mixed")
    return out


def counts_strict(scores, tau_mass):
    cl = _classes(scores, tau_mass, strict=True)
    return torch.tensor([cl.count(c) for c in ht.CLASSES])


def counts_nan_wins(scores, tau_mass):
    cl = _classes(scores, tau_mass, nan_wins=True)
    return torch.tensor([cl.count(c) for c in ht.CLASSES])


def counts_default_tau(scores, tau_mass):
    return _ref("20.3", "class_counts")(scores, 0.5)


def counts_sorted(scores, tau_mass):
    cl = _classes(scores, tau_mass)
    return torch.tensor([cl.count(c) for c in sorted(ht.CLASSES)])


def _mass(scores):
    return torch.stack([scores[n] for n in ht.MASS_SCORES]).nan_to_num(-1.0).amax(0)


def sensitive_closed(scores, tau_lo, tau_hi):
    m = _mass(scores)
    return (tau_lo <= m) & (m <= tau_hi)


def sensitive_open(scores, tau_lo, tau_hi):
    m = _mass(scores)
    return (tau_lo < m) & (m < tau_hi)


def sensitive_inverted(scores, tau_lo, tau_hi):
    return ~_ref("20.3", "threshold_sensitive")(scores, tau_lo, tau_hi)


def sensitive_below(scores, tau_lo, tau_hi):
    return _mass(scores) < tau_hi


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
    d_h = W_Q.shape[1] // num_heads
    return _ref("20.4", "head_forms")(W_Q, W_K, num_heads) / math.sqrt(d_h)


def forms_sum(W_Q, W_K, num_heads):
    return W_Q @ W_K.T


def ranks_bounds(forms):
    H, d, _ = forms.shape
    return torch.tensor([d // H] * H + [d])


def ranks_sum_of_ranks(forms):
    ranks = torch.linalg.matrix_rank(forms)
    return torch.cat([ranks, ranks.sum()[None]])


def ranks_without_sum(forms):
    return torch.linalg.matrix_rank(forms)


def ranks_sum_first(forms):
    ranks = torch.linalg.matrix_rank(forms)
    return torch.cat([torch.linalg.matrix_rank(forms.sum(0))[None], ranks])


_MACS, _EXPS = _ref("20.1", "mha_multiply_adds"), _ref("20.1", "softmax_exponentials")
_PARAMS, _CROSS = (
    _ref("20.2", "cross_attention_parameters"),
    _ref("20.2", "cross_attention_multiply_adds"),
)
_COUNTS, _SENSITIVE = _ref("20.3", "class_counts"), _ref("20.3", "threshold_sensitive")
_FORMS, _RANKS = _ref("20.4", "head_forms"), _ref("20.4", "form_ranks")

MISTAKES = {
    "20.1": [
        ((macs_flops, _EXPS), "counts floating-point operations"),
        ((macs_head_width, _EXPS), "not 2BT²d_h"),
        ((macs_without_output, _EXPS), "output projection W_O is missing"),
        ((macs_one_product, _EXPS), "two T x T products"),
        ((_MACS, exps_one_softmax), "its own softmax"),
        ((_MACS, exps_per_row), "not one per row"),
    ],
    "20.2": [
        ((params_self, _CROSS), "that is the self-attention count"),
        ((params_square, _CROSS), "not d_kv x d_kv"),
        ((params_without_bias, _CROSS), "biases b_Q, b_K, b_V, b_O (4d) are missing"),
        ((_PARAMS, cross_macs_swapped), "T_q and T_k are swapped"),
        ((_PARAMS, cross_macs_heads_dkv), "the heads work at width d"),
        ((_PARAMS, cross_macs_self), "that is eq. 20.4 with T = T_q"),
    ],
    "20.3": [
        ((counts_strict, _SENSITIVE), "the rule is m >= tau_mass"),
        ((counts_nan_wins, _SENSITIVE), "undefined (nan)"),
        ((counts_default_tau, _SENSITIVE), "not the default threshold 0.5"),
        ((counts_sorted, _SENSITIVE), "in the order of ht.CLASSES"),
        ((_COUNTS, sensitive_closed), "the interval is half-open"),
        ((_COUNTS, sensitive_open), "include tau_lo"),
        ((_COUNTS, sensitive_inverted), "True marks the heads that move"),
        ((_COUNTS, sensitive_below), "below tau_lo is broad or mixed"),
    ],
    "20.4": [
        ((forms_interleaved, _RANKS), "not every H-th column"),
        ((forms_transposed, _RANKS), "that is the transpose"),
        ((forms_scaled, _RANKS), "leave out the 1/sqrt(d_h) scale"),
        ((forms_sum, _RANKS), "that is the sum over the heads"),
        ((_FORMS, ranks_bounds), "only upper bounds"),
        ((_FORMS, ranks_sum_of_ranks), "at most the sum of the ranks"),
        ((_FORMS, ranks_without_sum), "append the rank of the sum"),
        ((_FORMS, ranks_sum_first), "the rank of the sum last"),
    ],
}
