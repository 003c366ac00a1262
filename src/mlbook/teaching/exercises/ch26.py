"""Checks of the exercises of chapter 26 (online softmax and FlashAttention).

The references are independent of the reader's answer and of :mod:`mlbook.attention.online_softmax`:
partial states written out from their definitions (``amax``, ``exp``, a matrix product), torch's
``F.scaled_dot_product_attention``, ``torch.softmax`` and ``torch.logsumexp`` over all keys in
float64, the number of matrix products that :func:`mlbook.attention.tiled.tiled_attention` actually
performs (intercepted with a ``TorchFunctionMode``), and ``torch.finfo`` with ``torch.exp``
evaluated in each dtype, a float16 running sum in NumPy (26.5), and, for the block-size sweep
(26.6), the tile count and the largest tensor written out in closed form. Everything runs on the
CPU; the Triton kernel of the chapter is not used.

Each typical wrong answer is written once, as a function at the end of the module: the checks
evaluate those functions to recognise a mistake, and ``MISTAKES`` lists them for the tests.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ...attention import tiled as ta
from ...attention.counting import CountMatmuls
from . import (
    Incorrect,
    as_int,
    as_tensor,
    attempt,
    exercise,
    expect,
    expect_answer,
    expect_tuple,
)

F64 = torch.float64


# --- 26.1 ------------------------------------------------------------------------------------


def _split_case(seed: int, n: int, d: int, d_v: int, size: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(d, generator=gen, dtype=F64) * size
    K = torch.randn(n, d, generator=gen, dtype=F64)
    V = torch.randn(n, d_v, generator=gen, dtype=F64)
    return q, K, V


def _states(q, K, V, sizes):
    """(m, l, acc) of each slice straight from the definitions (eqs. 26.1 and 26.3)."""
    out, lo = [], 0
    for n in sizes:
        s = K[lo : lo + n] @ q / math.sqrt(q.shape[0])  # (n,)
        m = s.amax()
        p = torch.exp(s - m)
        out.append((m, p.sum(), p @ V[lo : lo + n]))
        lo += n
    return out


_SPLITS = [
    ((100, 250, 400, 250), 1.0, "sizes 100, 250, 400, 250"),
    ((1000,), 1.0, "a single worker"),
    ((1, 998, 1), 1.0, "three workers of sizes 1, 998, 1"),
    ((300, 50, 200, 150, 300), 1.0, "five workers"),
    ((100, 250, 400, 250), 200.0, "scores up to 1000, where exp overflows float64"),
]


@exercise("26.1", "worker_states", "merge_tree")
def split_k(states_answer, tree_answer) -> str:
    """Per-slice states against their definitions; tree merge against torch SDPA in float64."""
    for seed, (sizes, size, where) in enumerate(_SPLITS[:4]):
        q, K, V = _split_case(261 + seed, sum(sizes), 16, 8, size)
        want = _states(q, K, V, sizes)
        got = attempt(states_answer, q.clone(), K.clone(), V.clone(), list(sizes))
        expect(
            isinstance(got, (list, tuple)) and len(got) == len(sizes),
            f"worker_states for {where} should return a list of {len(sizes)} states, got "
            f"{len(got) if isinstance(got, (list, tuple)) else type(got).__name__}",
        )
        for i, (state, (m, l, acc)) in enumerate(zip(got, want, strict=True)):
            what = f"worker_states for {where}, state {i}"
            expect(
                isinstance(state, (tuple, list)) and len(state) == 3,
                f"{what} should be a triple (m, l, acc)",
            )
            n = sum(as_tensor(x, what).numel() for x in state)
            expect(
                n == acc.numel() + 2,
                f"{what} holds {n} numbers; a state is (m, l, acc): d_v + 2 = {acc.numel() + 2}",
            )
            args = (q, K, V, sizes)
            expect_answer(
                state[0],
                m,
                f"m of {what}",
                wrong={"the scores are not divided by sqrt(d)": states_unscaled(*args)[i][0]},
                atol=1e-12,
                rtol=1e-10,
            )
            expect_answer(
                state[1],
                l,
                f"l of {what}",
                wrong={
                    "l is the plain sum of e^s; it is measured against the slice's "
                    "maximum m: sum e^(s - m)": states_unshifted(*args)[i][1]
                },
                atol=1e-12,
                rtol=1e-10,
            )
            expect_answer(
                state[2],
                acc,
                f"acc of {what}",
                wrong={
                    "acc is normalised; a worker sends the unnormalised numerator "
                    "sum_j e^(s_j - m) v_j, and only the root divides by l": states_normalised(
                        *args
                    )[i][2]
                },
                atol=1e-10,
                rtol=1e-10,
            )

    for seed, (sizes, size, where) in enumerate(_SPLITS):
        q, K, V = _split_case(261 + seed, sum(sizes), 16, 8, size)
        states = _states(q, K, V, sizes)
        want = F.scaled_dot_product_attention(q[None], K, V)[0]  # (d_v,)
        wrong = {
            "that is the unnormalised numerator; divide by l once, at the root (eq. 26.4)": (
                tree_unnormalised(states)
            ),
            "the workers' outputs are averaged with equal weights; each slice must be weighted "
            "by its softmax mass e^m l": tree_average(states),
        }
        if len(sizes) > 1:
            wrong[
                "the states are added without rescaling to a common maximum (eq. 26.2): each "
                "acc and l must be multiplied by e^(m_i - m)"
            ] = tree_no_rescale(states)
        got = attempt(tree_answer, [tuple(x.clone() for x in st) for st in states])
        expect_answer(got, want, f"merge_tree for {where}", wrong=wrong, atol=1e-12, rtol=1e-10)
    return (
        "each state holds d_v + 2 numbers and matches its definition; the tree merge matches "
        "torch SDPA in float64 for 1, 3, 4 and 5 workers and for scores up to 1000"
    )


# --- 26.2 ------------------------------------------------------------------------------------


def _part(S: torch.Tensor, V: torch.Tensor):
    """Normalised output and log-sum-exp of scores S (..., T_q, n) over values V (..., n, d_v)."""
    if S.shape[-1] == 0:
        return (
            torch.zeros(*S.shape[:-1], V.shape[-1], dtype=S.dtype),
            torch.full(S.shape[:-1], -math.inf, dtype=S.dtype),
        )
    return torch.softmax(S, -1) @ V, torch.logsumexp(S, -1)


@exercise("26.2", "merge_lse")
def merge_lse(answer) -> str:
    """(o, L) of the union of two key sets against softmax and logsumexp over all keys."""
    gen = torch.Generator().manual_seed(262)
    q, k, v = (torch.randn(2, T, 16, generator=gen, dtype=F64) for T in (20, 50, 50))
    cases = []
    o_a, L_a = ta.tiled_attention(q, k[:, :23], v[:, :23], block_k=8, return_lse=True)
    o_b, L_b = ta.tiled_attention(q, k[:, 23:], v[:, 23:], block_k=8, return_lse=True)
    S = q @ k.transpose(-2, -1) / 4.0
    cases.append(
        ((o_a, L_a, o_b, L_b), _part(S, v), "two halves from tiled_attention (23 + 27 keys)")
    )
    S = torch.randn(3, 6, 40, generator=gen, dtype=F64) * 3 + 1000.0  # L > 1000
    V = torch.randn(3, 40, 5, generator=gen, dtype=F64)
    cases.append(
        (
            _part(S[..., :10], V[:, :10]) + _part(S[..., 10:], V[:, 10:]),
            _part(S, V),
            "scores near 1000 (10 + 30 keys)",
        )
    )
    S = torch.randn(4, 12, generator=gen, dtype=F64) * 2
    V = torch.randn(12, 3, generator=gen, dtype=F64)
    cases.append(
        (_part(S, V) + _part(S[:, :0], V[:0]), _part(S, V), "an empty second key set (L_b = -inf)")
    )
    for (oa, La, ob, Lb), (o_want, L_want), where in cases:
        got = attempt(answer, oa.clone(), La.clone(), ob.clone(), Lb.clone())
        expect(
            isinstance(got, (tuple, list)) and len(got) == 2,
            f"merge_lse for {where} should return a pair (o, L)",
        )
        o_got, L_got = got
        finite_b = torch.isfinite(Lb).all()
        parts = (oa, La, ob, Lb)
        wrong_L = {
            "L = max(L_a, L_b) drops the smaller set's mass; the sums add: "
            "L = log(e^L_a + e^L_b)": lse_max(*parts)[1]
        }
        if finite_b:
            wrong_L["L_a + L_b multiplies the two sums; they add: L = log(e^L_a + e^L_b)"] = (
                lse_add(*parts)[1]
            )
        expect_answer(
            L_got, L_want, f"L of merge_lse for {where}", wrong=wrong_L, atol=1e-10, rtol=1e-12
        )
        wrong_o = {
            "the outputs are averaged with equal weights; weight each by its softmax "
            "mass e^(L_a - L), e^(L_b - L)": lse_average(*parts)[0],
            "the weights are swapped: o_a gets e^(L_a - L)": lse_swapped(*parts)[0],
        }
        if La.abs().max() < 100 and finite_b:
            wrong_o["the weights e^L_a, e^L_b are not divided by e^L"] = lse_undivided(*parts)[0]
        expect_answer(
            o_got, o_want, f"o of merge_lse for {where}", wrong=wrong_o, atol=1e-10, rtol=1e-10
        )
    return (
        "(o, L) match softmax and logsumexp over all keys for halves from tiled_attention, "
        "for L above 1000 and for an empty key set"
    )


# --- 26.3 ------------------------------------------------------------------------------------


def _counted_tiles(T: int, b_q: int, b_k: int) -> int:
    x = torch.zeros(T, 2)
    with CountMatmuls() as counter:
        ta.tiled_attention(x, x, x, causal=True, block_q=b_q, block_k=b_k)
    return counter.n // 2  # QK^T and PV per tile


@exercise("26.3", "causal_tiles")
def causal_tiles(answer) -> str:
    """Tile counts against the matrix products tiled_attention performs."""
    cases = [
        (45, 16, 16),
        (16, 16, 16),
        (1, 4, 4),
        (200, 8, 8),
        (100, 16, 8),
        (100, 8, 16),
        (50, 7, 5),
        (64, 32, 8),
    ]
    for T, b_q, b_k in cases:
        want = _counted_tiles(T, b_q, b_k)
        args = (T, b_q, b_k)
        wrong = {}
        if b_q == b_k:
            wrong[
                "query block r needs key blocks 0 .. r, r + 1 of them (the diagonal tile "
                "too), and the last, shorter block counts: R = ceil(T / b)"
            ] = tiles_without_diagonal(*args)
        else:
            wrong[
                "that is the square-block count R(R + 1)/2; with b_q != b_k query block r "
                "needs ceil(min(b_q (r + 1), T) / b_k) key blocks"
            ] = tiles_square_query_blocks(*args)
            wrong[
                "that is the square-block count R(R + 1)/2 in key blocks; with b_q != b_k "
                "query block r needs ceil(min(b_q (r + 1), T) / b_k) key blocks"
            ] = tiles_square_formula(*args)
            wrong["the last query block is not cut at T: it needs at most R_k key blocks"] = (
                tiles_not_cut(*args)
            )
            wrong[
                "the last, shorter query block is missing: there are ceil(T / b_q) query blocks"
            ] = tiles_floor(*args)
        wrong[
            "that is every tile, R_q R_k; the causal algorithm skips the tiles above the diagonal"
        ] = tiles_all(*args)
        what = f"causal_tiles(T={T}, b_q={b_q}, b_k={b_k})"
        got = as_int(attempt(answer, T, b_q, b_k), what, "tiles")
        if got != want:
            for feedback, value in wrong.items():
                if got == value:
                    raise Incorrect(f"{what} gives {got}: {feedback}")
            raise Incorrect(f"{what} gives {got}; tiled_attention computes {want} tiles")
    return (
        "the counts match the matrix products of tiled_attention for 8 (T, b_q, b_k), "
        "square blocks, b_q = 2 b_k, b_k = 2 b_q and blocks that divide nothing"
    )


# --- 26.4 ------------------------------------------------------------------------------------


_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@exercise("26.4", "overflow_threshold", "stable_softmax")
def fp16_softmax(threshold_answer, softmax_answer) -> str:
    """ln of the largest finite value per dtype, checked with torch.exp; a float16 softmax."""
    for dtype in _DTYPES:
        big = torch.finfo(dtype).max
        want = math.log(big)
        below = torch.tensor(want * 0.99, dtype=F64).to(dtype)
        above = torch.tensor(want * 1.01, dtype=F64).to(dtype)
        expect(
            bool(torch.isfinite(torch.exp(below))) and bool(torch.isinf(torch.exp(above))),
            "internal: exp should overflow just above ln(max)",
        )
        name = str(dtype).replace("torch.", "")
        expect_answer(
            attempt(threshold_answer, dtype),
            want,
            f"overflow_threshold({name})",
            wrong={
                "that is log2 of the largest value; e^s needs the natural log": threshold_log2(
                    dtype
                ),
                "that is log10 of the largest value; e^s needs the natural log": threshold_log10(
                    dtype
                ),
                "that is the largest finite value itself; e^s overflows once s exceeds its "
                "natural log": threshold_max(dtype),
                "that is float32's threshold; use the largest value of this dtype "
                "(torch.finfo(dtype).max)": threshold_fp32(dtype),
            },
            atol=2e-3,
            rtol=0,
        )

    inf = math.inf
    rows = torch.tensor(
        [
            [1.0, 12.0, 3.0, 11.5, -4.0],
            [0.0, 0.0, 0.0, 0.0, 30.0],
            [2.0, 2.0, 2.0, 2.0, 2.0],
            [-inf, 5.0, 40.0, 39.0, -inf],
        ],
        dtype=torch.float16,
    )
    cases = [
        (rows, "4 rows with scores 12, 30, ties and masked entries"),
        (rows[0], "the row (1, 12, 3, 11.5, -4)"),
        (rows.reshape(2, 2, 5), "a (2, 2, 5) tensor"),
    ]
    for s, where in cases:
        want = torch.softmax(s.double(), dim=-1)
        what = f"stable_softmax(s) for {where}"
        got = attempt(softmax_answer, s.clone())
        got_t = as_tensor(got, what, tuple(s.shape))
        if not torch.isfinite(got_t).all():
            raise Incorrect(
                f"{what} contains nan or inf: e^s overflows float16 once s > 11.09; "
                "subtract the row maximum before exponentiating"
            )
        expect(
            isinstance(got, torch.Tensor) and got.dtype == torch.float16,
            f"{what} should be a float16 tensor, got "
            f"{got.dtype if isinstance(got, torch.Tensor) else type(got).__name__}",
        )
        wrong = {
            "the rows are not normalised: divide e^(s - m) by l = sum e^(s - m)": (
                softmax_unnormalised(s.double())
            )
        }
        if s.dim() > 1:
            wrong[
                "the softmax runs along the first axis; it belongs to the last (one row of "
                "scores per query)"
            ] = softmax_first_axis(s.double())
        expect_answer(got_t, want, what, wrong=wrong, atol=2e-3, rtol=0)
    return (
        "thresholds match ln(finfo.max) and torch.exp's overflow in float16, bfloat16, "
        "float32 and float64; the float16 softmax matches float64 for scores up to 40, ties "
        "and masked entries"
    )


# --- 26.5 ------------------------------------------------------------------------------------

N_ONES = 4096  # keys of equal score: a float16 running sum l <- l + 1 should count them


def _float16_running_sum(n: int) -> float:
    """l <- l + 1, n times, each sum rounded to float16 (NumPy), as a float16 state holds it."""
    one, total = np.float16(1.0), np.float16(0.0)
    for _ in range(n):
        total = np.float16(total + one)
    return float(total)


@exercise("26.5", "predict_fp16_running_sum")
def fp16_running_sum(answer) -> str:
    """The guess against a float16 running sum of 4,096 ones, run here."""
    what = "predict_fp16_running_sum()"
    got = as_tensor(attempt(answer), what)
    expect(got.numel() == 1, f"{what} should return one number, got shape {tuple(got.shape)}")
    guess, truth = float(got.reshape(())), _float16_running_sum(N_ONES)
    if math.isfinite(guess) and abs(guess - truth) <= 0.01 * truth:
        return (
            "right: a float16 running sum of 4,096 ones stalls at 2,048 = 2^11, where float16 "
            "numbers are 2 apart and 2,048 + 1 rounds back to 2,048; a float32 state counts "
            "exactly up to 2^24"
        )
    why = {
        predict_exact(): "4,096 assumes exact arithmetic",
        predict_overflow(): "float16 overflows only beyond 65,504, and the sum never gets there",
        predict_largest(): "65,504 is the largest float16, but the sum stops growing long before",
    }.get(guess, "")
    raise Incorrect(
        f"{what} guessed {guess:g}; the float16 running sum, run here, ends at {truth:g}"
        + (f" ({why})" if why else "")
        + ": float16 has 11 significant bits, so above 2,048 its numbers are 2 apart and "
        "2,048 + 1 rounds back to 2,048 (a tie goes to the even neighbour); from then on adding "
        "a key changes nothing"
    )


# --- 26.6 ------------------------------------------------------------------------------------


def _products(T: int, b: int, causal: bool = True) -> int:
    """Matrix products of tiled attention with square blocks b: two a computed tile."""
    R = -(-T // b)
    return 2 * sum(-(-min(b * (r + 1), T) // b) if causal else R for r in range(R))


def _largest(T: int, d: int, b: int, itemsize: int = 4, scores_only: bool = False) -> int:
    """The largest tensor: a (b, b) tile of scores or the (T, d) output, whichever is larger."""
    tile = itemsize * min(b, T) ** 2
    return tile if scores_only else max(tile, itemsize * T * d)


@exercise("26.6", "block_size_sweep")
def block_size_sweep(answer) -> str:
    """Products and largest tensors of causal tiled attention against closed forms."""
    T, d, sizes = 256, 16, (8, 16, 60, 128, 256)
    what = f"block_size_sweep({T}, {d}, {list(sizes)})"
    got = attempt(answer, T, d, list(sizes))
    expect(
        isinstance(got, (list, tuple)) and len(got) == len(sizes),
        f"{what} should return a list of {len(sizes)} pairs (products, largest_bytes), one per "
        "block size",
    )
    for b, pair in zip(sizes, got, strict=True):
        where = f"{what} at b = {b}"
        products, nbytes = expect_tuple(pair, where, ("products", "largest_bytes"))
        expect_answer(
            as_int(products, f"the products of {where}", "matrix products"),
            _products(T, b),
            f"the products of {where}",
            wrong={
                "that counts every tile: run tiled_attention with causal=True, which skips "
                "the tiles above the diagonal": _products(T, b, causal=False),
                "that is the number of tiles; each computed tile takes two matrix products, "
                "Q_i K_j^T and P V_j (counter.n)": _products(T, b) // 2,
            },
            atol=0,
            rtol=0,
        )
        expect_answer(
            as_int(nbytes, f"the largest bytes of {where}", "bytes"),
            _largest(T, d, b),
            f"the largest bytes of {where}",
            wrong={
                "those are float64 bytes; the sweep runs on float32 inputs, 4 bytes an entry": (
                    _largest(T, d, b, itemsize=8)
                ),
                "that is the tile of scores alone; for small b the output (T, d) is the largest "
                "tensor: measure with ta.largest_intermediate_bytes": _largest(
                    T, d, b, scores_only=True
                ),
            },
            atol=0,
            rtol=0,
        )
    return (
        f"the products and the largest tensors match closed forms for T = {T}, d = {d} and "
        f"b = {', '.join(map(str, sizes))}: the products fall from {_products(T, sizes[0])} to "
        f"{_products(T, sizes[-1])}, and the largest tensor stays at the output, "
        f"{T * d * 4 // 1024} KiB, until b^2 > T d, then grows as 4 b^2 bytes "
        f"({_largest(T, d, sizes[-1]) // 1024} KiB at b = {sizes[-1]})"
    )


# Typical wrong answers, written once: the checks above evaluate them to name a mistake, and the
# tests build each one and check that it is rejected with its feedback ---------------------------


# --- 26.1 ---


def states_unscaled(q, K, V, sizes):
    return _states(q * math.sqrt(q.shape[0]), K, V, sizes)


def states_normalised(q, K, V, sizes):
    return [(m, l, acc / l) for m, l, acc in _states(q, K, V, sizes)]


def states_unshifted(q, K, V, sizes):
    return [(m, l * torch.exp(m), acc) for m, l, acc in _states(q, K, V, sizes)]


def states_with_probabilities(q, K, V, sizes):
    out, lo = [], 0
    for (m, l, acc), n in zip(_states(q, K, V, sizes), sizes, strict=True):
        s = K[lo : lo + n] @ q / math.sqrt(q.shape[0])  # sends the whole softmax row as well
        out.append((m, l, acc, torch.softmax(s, 0)))
        lo += n
    return out


def tree_no_rescale(states):
    return sum(a for _, _, a in states) / sum(l for _, l, _ in states)


def tree_average(states):
    return torch.stack([a / l for _, l, a in states]).mean(0)


def tree_unnormalised(states):
    m = torch.stack([m for m, _, _ in states]).max()
    return sum(torch.exp(mi - m) * a for mi, _, a in states)


def _worker_states(q, K, V, sizes):
    return _states(q, K, V, sizes)


def _merge_tree(states):
    m = torch.stack([m for m, _, _ in states]).max()
    num = sum(torch.exp(mi - m) * a for mi, _, a in states)
    return num / sum(torch.exp(mi - m) * li for mi, li, _ in states)


# --- 26.2 ---


def _merged_o(o_a, L_a, o_b, L_b):
    """The right output of two key sets (the wrong L's below keep it, to isolate their mistake)."""
    L = torch.logaddexp(L_a, L_b)
    return torch.exp(L_a - L)[..., None] * o_a + torch.exp(L_b - L)[..., None] * o_b


def lse_add(o_a, L_a, o_b, L_b):
    return _merged_o(o_a, L_a, o_b, L_b), L_a + L_b


def lse_max(o_a, L_a, o_b, L_b):
    return _merged_o(o_a, L_a, o_b, L_b), torch.maximum(L_a, L_b)


def lse_naive(o_a, L_a, o_b, L_b):
    L = torch.log(torch.exp(L_a) + torch.exp(L_b))  # overflows for L > 709
    w_a, w_b = torch.exp(L_a - L)[..., None], torch.exp(L_b - L)[..., None]
    return w_a * o_a + w_b * o_b, L


def lse_average(o_a, L_a, o_b, L_b):
    return (o_a + o_b) / 2, torch.logaddexp(L_a, L_b)


def lse_swapped(o_a, L_a, o_b, L_b):
    L = torch.logaddexp(L_a, L_b)
    return torch.exp(L_b - L)[..., None] * o_a + torch.exp(L_a - L)[..., None] * o_b, L


def lse_undivided(o_a, L_a, o_b, L_b):
    L = torch.logaddexp(L_a, L_b)
    return torch.exp(L_a)[..., None] * o_a + torch.exp(L_b)[..., None] * o_b, L


def lse_output_only(o_a, L_a, o_b, L_b):
    return _merged_o(o_a, L_a, o_b, L_b)


# --- 26.3 ---


def tiles_all(T, b_q, b_k):
    return -(-T // b_q) * -(-T // b_k)


def tiles_floor(T, b_q, b_k):
    return sum(-(-min(b_q * (r + 1), T) // b_k) for r in range(T // b_q))


def tiles_without_diagonal(T, b_q, b_k):
    R = -(-T // b_q)
    return R * (R - 1) // 2


def tiles_square_query_blocks(T, b_q, b_k):
    R = -(-T // b_q)
    return R * (R + 1) // 2


def tiles_square_formula(T, b_q, b_k):
    R = -(-T // b_k)
    return R * (R + 1) // 2


def tiles_not_cut(T, b_q, b_k):
    return sum(-(-b_q * (r + 1) // b_k) for r in range(-(-T // b_q)))


# --- 26.4 ---


def threshold_log2(dtype):
    return math.log2(torch.finfo(dtype).max)


def threshold_log10(dtype):
    return math.log10(torch.finfo(dtype).max)


def threshold_fp32(dtype):
    return math.log(torch.finfo(torch.float32).max)


def threshold_max(dtype):
    return torch.finfo(dtype).max


def _threshold(dtype):
    return math.log(torch.finfo(dtype).max)


def softmax_raw(s):
    return torch.exp(s) / torch.exp(s).sum(-1, keepdim=True)


def softmax_mean_shift(s):
    e = torch.exp(s - s.float().mean(-1, keepdim=True).to(s.dtype))
    return e / e.sum(-1, keepdim=True)


def softmax_unnormalised(s):
    return torch.exp(s - s.amax(-1, keepdim=True))


def softmax_first_axis(s):
    return torch.softmax(s.double(), dim=0).to(s.dtype)


def softmax_float64(s):
    return torch.softmax(s.double(), dim=-1)


def _softmax(s):
    return torch.softmax(s.float(), dim=-1).to(s.dtype)


# --- 26.5 ---


def predict_exact():
    return N_ONES


def predict_overflow():
    return math.inf


def predict_largest():
    return float(np.finfo(np.float16).max)


# --- 26.6 ---


def sweep_not_causal(T, d, sizes):
    return [(_products(T, b, causal=False), _largest(T, d, b)) for b in sizes]


def sweep_tiles(T, d, sizes):
    return [(_products(T, b) // 2, _largest(T, d, b)) for b in sizes]


def sweep_float64(T, d, sizes):
    return [(_products(T, b), _largest(T, d, b, itemsize=8)) for b in sizes]


def sweep_scores_only(T, d, sizes):
    return [(_products(T, b), _largest(T, d, b, scores_only=True)) for b in sizes]


def sweep_one_pair(T, d, sizes):
    return (_products(T, sizes[0]), _largest(T, d, sizes[0]))


MISTAKES = {
    "26.1": [
        ((states_unscaled, _merge_tree), "not divided by sqrt(d)"),
        ((states_normalised, _merge_tree), "acc is normalised"),
        ((states_unshifted, _merge_tree), "plain sum of e^s"),
        ((states_with_probabilities, _merge_tree), "should be a triple"),
        ((_worker_states, tree_no_rescale), "without rescaling"),
        ((_worker_states, tree_average), "equal weights"),
        ((_worker_states, tree_unnormalised), "unnormalised numerator"),
    ],
    "26.2": [
        (lse_add, "multiplies the two sums"),
        (lse_max, "drops the smaller set's mass"),
        (lse_naive, "nan or inf"),
        (lse_average, "equal weights"),
        (lse_swapped, "weights are swapped"),
        (lse_undivided, "not divided by e^L"),
        (lse_output_only, "should return a pair"),
    ],
    "26.3": [
        (tiles_all, "that is every tile"),
        (tiles_floor, "the last, shorter"),
        (tiles_without_diagonal, "the diagonal tile too"),
        (tiles_square_query_blocks, "square-block count R(R + 1)/2;"),
        (tiles_square_formula, "square-block count"),
        (tiles_not_cut, "not cut at T"),
    ],
    "26.4": [
        ((threshold_log2, _softmax), "log2"),
        ((threshold_log10, _softmax), "log10"),
        ((threshold_fp32, _softmax), "float32's threshold"),
        ((threshold_max, _softmax), "largest finite value itself"),
        ((_threshold, softmax_raw), "subtract the row maximum"),
        ((_threshold, softmax_mean_shift), "subtract the row maximum"),
        ((_threshold, softmax_unnormalised), "not normalised"),
        ((_threshold, softmax_first_axis), "first axis"),
        ((_threshold, softmax_float64), "should be a float16 tensor"),
    ],
    "26.5": [
        (predict_exact, "assumes exact arithmetic"),
        (predict_overflow, "overflows only beyond 65,504"),
        (predict_largest, "the largest float16"),
    ],
    "26.6": [
        (sweep_not_causal, "causal=True"),
        (sweep_tiles, "two matrix products"),
        (sweep_float64, "float64 bytes"),
        (sweep_scores_only, "tile of scores alone"),
        (sweep_one_pair, "a list of 5 pairs"),
    ],
}
