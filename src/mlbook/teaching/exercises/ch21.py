"""Checks of the exercises of chapter 21 (positional encoding and RoPE).

The references avoid :mod:`mlbook.attention.rope` and :mod:`mlbook.attention.positional`: the
partial-RoPE kernel is the trace of an explicit block rotation matrix, the look-back matrix a NumPy
least-squares fit to sinusoidal tables, the ALiBi biases Python loops, RoPE (for the checkpoint
conversion and the interleaved convention) is written out with complex numbers, and the score
kernel is a NumPy sum of cosines.

Each typical wrong answer is written once, as a function of the reader's arguments; a check
evaluates the functions of its exercise on every case (:func:`_wrong`), and ``MISTAKES`` lists
the same functions with their feedback.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from . import (
    Incorrect,
    as_tensor,
    attempt,
    exercise,
    expect,
    expect_answer,
    paired_mistakes,
    wrong_values,
)
from . import reference_answer as _ref

F64 = torch.float64


def _ladder(d: int, base: float) -> np.ndarray:
    """theta_i = base^(-2i/d), i = 0..d/2-1, in NumPy."""
    return base ** (-np.arange(0, d, 2, dtype=np.float64) / d)


def _plane_rotation(angle: float) -> torch.Tensor:
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([[c, -s], [s, c]], dtype=F64)


def _cos_kernel(distances: torch.Tensor, theta: np.ndarray) -> torch.Tensor:
    """mean_i cos(Δ theta_i) for each distance: (N,)."""
    return torch.cos(distances[:, None] * torch.from_numpy(theta)[None, :]).mean(dim=1)


# --- 21.1: the kernel of a partial rotation ------------------------------------------------------


def _trace_kernel(distances: list[float], d_c: int, d_r: int, base: float) -> torch.Tensor:
    """tr(diag(I_dc, R_Δ)) / (d_c + d_r) from the explicit matrix, for each distance."""
    theta = _ladder(d_r, base)
    out = []
    for delta in distances:
        blocks = [torch.eye(d_c, dtype=F64)] + [_plane_rotation(delta * th) for th in theta]
        out.append(torch.block_diag(*blocks).trace() / (d_c + d_r))
    return torch.stack(out)


def kernel_rotated_part_only(distances, d_c, d_r, base=10000.0):
    return _cos_kernel(distances, _ladder(d_r, base))


def kernel_over_d_r(distances, d_c, d_r, base=10000.0):
    return (d_c + d_r * _cos_kernel(distances, _ladder(d_r, base))) / d_r


def kernel_swapped_weights(distances, d_c, d_r, base=10000.0):
    return (d_r + d_c * _cos_kernel(distances, _ladder(d_r, base))) / (d_c + d_r)


def kernel_whole_head(distances, d_c, d_r, base=10000.0):
    return _cos_kernel(distances, _ladder(d_c + d_r, base))


def kernel_full_width_ladder(distances, d_c, d_r, base=10000.0):
    k_prefix = _cos_kernel(distances, _ladder(d_c + d_r, base)[: d_r // 2])
    return (d_c + d_r * k_prefix) / (d_c + d_r)


_KERNEL_WRONG = [
    (
        kernel_rotated_part_only,
        "the position-free part is missing: q_c^T k_c adds d_c at every distance, which is the "
        "floor d_c / (d_c + d_r)",
    ),
    (
        kernel_over_d_r,
        "normalise by E|q|² = d_c + d_r, the whole head (the kernel is 1 at Δ = 0)",
    ),
    (
        kernel_swapped_weights,
        "the weights are swapped: the d_c position-free coordinates contribute d_c, the d_r "
        "rotated ones d_r K_r(Δ)",
    ),
    (kernel_whole_head, "this rotates the whole head; only the last d_r coordinates turn"),
    (
        kernel_full_width_ladder,
        "the rotated part has its own ladder θ_i = b^(-2i/d_r), over its width d_r, not the "
        "first d_r/2 frequencies of width d_c + d_r",
    ),
]


@exercise("21.1", "partial_rope_kernel")
def partial_rope_kernel(answer) -> str:
    """(d_c + d_r K_r(Δ)) / (d_c + d_r) against the trace of the explicit partial rotation."""
    dist = [0.0, 1.0, 3.0, 10.0, 100.0, 1000.0, 5000.0]
    distances = torch.tensor(dist, dtype=F64)
    for d_c, d_r, base in ((128, 64, 1e4), (48, 16, 5e5), (0, 32, 1e4)):
        expect_answer(
            attempt(answer, distances.clone(), d_c, d_r, base),
            _trace_kernel(dist, d_c, d_r, base),
            f"partial_rope_kernel(Δ, d_c={d_c}, d_r={d_r}, base={base:g})",
            wrong=wrong_values(_KERNEL_WRONG, distances, d_c, d_r, base),
            atol=1e-12,
            rtol=1e-10,
        )
    return (
        "matches tr(diag(I, R_Δ))/d of the explicit partial rotation at 7 distances for "
        "(d_c, d_r) = (128, 64), (48, 16), (0, 32)"
    )


# --- 21.2: looking back k tokens -----------------------------------------------------------------


def _sin_table(positions: np.ndarray, d: int, base: float) -> np.ndarray:
    """Eq. 21.2 in NumPy: column 2i holds sin(t θ_i), column 2i+1 cos(t θ_i)."""
    angles = positions[:, None] * _ladder(d, base)[None, :]
    table = np.empty((len(positions), d))
    table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
    return table


def _fit_lookback(k, d: int, base: float, rng: np.random.Generator) -> torch.Tensor:
    """The W with P W = P_back, by least squares on 400 random positions (exact: W is unique)."""
    ts = rng.uniform(0, 2e5, 400)
    P, P_back = _sin_table(ts, d, base), _sin_table(ts - k, d, base)  # (400, d) each
    return torch.from_numpy(np.linalg.lstsq(P, P_back, rcond=None)[0])


def _rope_matrix_half_split(position: float, d: int, base: float) -> torch.Tensor:
    """RoPE's rotation in the half-split layout (planes (i, i + d/2)), a typical mix-up."""
    h = d // 2
    r = torch.zeros(d, d, dtype=F64)
    for i, th in enumerate(_ladder(d, base)):
        c, s = math.cos(position * th), math.sin(position * th)
        r[i, i], r[i, i + h], r[i + h, i], r[i + h, i + h] = c, -s, s, c
    return r


def lookback_transposed(k, d, base=10000.0):
    return _fit_lookback(k, d, base, np.random.default_rng(0)).T


def lookback_identity(k, d, base=10000.0):
    return torch.eye(d, dtype=F64)


def lookback_half_split(k, d, base=10000.0):
    return _rope_matrix_half_split(-k, d, base)


_LOOKBACK_WRONG = [
    (
        lookback_transposed,
        "this looks k tokens ahead (largest at s = t + k): it is the transpose of W",
    ),
    (lookback_identity, "the identity gives the plain similarity p_t^T p_s, largest at s = t"),
    (
        lookback_half_split,
        "this rotates RoPE's half-split planes (x_i, x_(i+d/2)); the sinusoidal table of eq. "
        "21.2 puts plane i at (2i, 2i+1) as (sin, cos)",
    ),
]


@exercise("21.2", "lookback_matrix")
def lookback_matrix(answer) -> str:
    """W with p_t^T W p_s = p_(t-k)^T p_s against a least-squares fit to sinusoidal tables."""
    rng = np.random.default_rng(212)
    for k, d, base in ((3, 64, 1e4), (1, 16, 1e4), (10, 32, 100.0), (2.5, 8, 1e4)):
        W = expect_answer(
            attempt(answer, k, d, base),
            _fit_lookback(k, d, base, rng),
            f"lookback_matrix(k={k}, d={d}, base={base:g})",
            wrong=wrong_values(_LOOKBACK_WRONG, k, d, base),
            atol=1e-8,
            rtol=1e-8,
        )
        if (k, d) == (3, 64):
            table = torch.from_numpy(_sin_table(np.arange(128.0), d, base))  # (128, d)
            best = (table @ W @ table.T)[3:].argmax(dim=1)  # (125,) over s
            expect(
                bool((best == torch.arange(3, 128) - 3).all()),
                "p_t^T W p_s should be largest at s = t - 3 for every query t >= 3",
            )
    return (
        "matches a least-squares fit of p_(t-k) to p_t for k = 3, 1, 10, 2.5, and on a "
        "128-position table with d = 64 the score peaks at s = t - 3 for every t"
    )


# --- 21.3: ALiBi's shortcut needs the causal mask -------------------------------------------------


def _loop_biases(slopes: list[float], T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The symmetric bias -a|t - s| and the key form a s, with Python loops, (H, T, T) each."""
    sym = torch.empty(len(slopes), T, T, dtype=F64)
    key = torch.empty(len(slopes), T, T, dtype=F64)
    for h, a in enumerate(slopes):
        for t in range(T):
            for s in range(T):
                sym[h, t, s] = -a * abs(t - s)
                key[h, t, s] = a * s
    return sym, key


def _causal(T: int) -> torch.Tensor:
    """(T, T): 0 where key s <= query t, -inf where s > t."""
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    return torch.zeros(T, T, dtype=F64).masked_fill(future, float("-inf"))


def symmetric_masked(slopes, T):
    return _loop_biases(slopes.tolist(), T)[0] + _causal(T)


def symmetric_key_form(slopes, T):
    return _loop_biases(slopes.tolist(), T)[1]


def symmetric_flipped(slopes, T):
    return -_loop_biases(slopes.tolist(), T)[0]


def symmetric_signed(slopes, T):
    pos = torch.arange(T, dtype=F64)
    return -slopes[:, None, None] * (pos[:, None] - pos[None, :])


def _gap(slopes, T) -> torch.Tensor:
    sym, key = _loop_biases(slopes.tolist(), T)
    return key - sym


def gap_row_constant(slopes, T):
    t = torch.arange(T, dtype=F64)[:, None].expand(T, T)
    return slopes[:, None, None] * t


def gap_reversed(slopes, T):
    return -_gap(slopes, T)


def gap_transposed(slopes, T):
    return _gap(slopes, T).transpose(1, 2)


_SYMMETRIC_WRONG = [
    (symmetric_masked, "an encoder attends in both directions: no -inf mask on the keys s > t"),
    (
        symmetric_key_form,
        "that is the key form α_h s; the symmetric bias depends on the distance |t - s|",
    ),
    (
        symmetric_flipped,
        "the sign is flipped: ALiBi penalises distance, the bias is -α_h|t - s| <= 0",
    ),
    (
        symmetric_signed,
        "use the distance |t - s|: -α_h(t - s) rewards the keys after the query",
    ),
]
_GAP_WRONG = [
    (
        gap_row_constant,
        "for the keys after the query (s > t) the gap is not the row constant α_h t: these are "
        "the entries that break the argument",
    ),
    (gap_reversed, "the sign is flipped: that is the symmetric form minus the key form"),
    (gap_transposed, "rows are queries t and columns keys s: this is the transpose"),
]


@exercise("21.3", "symmetric_alibi_bias", "alibi_form_gap")
def alibi_forms(symmetric, gap) -> str:
    """Both biases against Python loops; the two forms agree under the causal mask only."""
    cases = [([2.0 ** (-8 * h / 8) for h in range(1, 9)], 16), ([0.5, 0.1, 0.03], 5), ([0.25], 1)]
    for slopes_list, T in cases:
        slopes = torch.tensor(slopes_list, dtype=F64)
        sym_ref, key_ref = _loop_biases(slopes_list, T)
        H = len(slopes_list)
        sym = expect_answer(
            attempt(symmetric, slopes.clone(), T),
            sym_ref,
            f"symmetric_alibi_bias(slopes, T={T}) with H = {H}",
            wrong=wrong_values(_SYMMETRIC_WRONG, slopes, T),
            atol=1e-12,
            rtol=1e-12,
        )
        g = expect_answer(
            attempt(gap, slopes.clone(), T),
            key_ref - sym_ref,
            f"alibi_form_gap(slopes, T={T}) with H = {H}",
            wrong=wrong_values(_GAP_WRONG, slopes, T),
            atol=1e-12,
            rtol=1e-12,
        )
        if T > 1:
            causal = _causal(T)
            z = torch.randn(H, T, T, generator=torch.Generator().manual_seed(213), dtype=F64)
            same = torch.softmax(z + sym + causal, -1) - torch.softmax(z + sym + g + causal, -1)
            expect(
                bool(same.abs().max() < 1e-12),
                "with the causal mask the key form should give the same weights",
            )
            apart = torch.softmax(z + sym, -1) - torch.softmax(z + sym + g, -1)
            expect(
                bool(apart.abs().max() > 1e-3),
                "without the mask the key form should change the weights",
            )
    return (
        "both biases match Python loops for H = 8, 3, 1; with the causal mask the two forms "
        "give the same weights, without it they do not"
    )


# --- 21.4: converting a checkpoint between conventions ------------------------------------------


def _rope_complex(x, pos, theta, pairing: str = "interleaved", sign: float = 1.0):
    """RoPE written out with complex numbers: each plane times e^(i sign m θ_i). x (..., T, d)."""
    h = x.shape[-1] // 2
    if pairing == "interleaved":
        z = torch.complex(x[..., 0::2], x[..., 1::2])  # (..., T, d/2)
    else:
        z = torch.complex(x[..., :h], x[..., h:])
    angle = sign * pos.to(F64)[:, None] * theta[None, :]  # (T, d/2)
    z = z * torch.polar(torch.ones_like(angle), angle)
    if pairing == "interleaved":
        return torch.stack([z.real, z.imag], dim=-1).flatten(-2)  # (..., T, d)
    return torch.cat([z.real, z.imag], dim=-1)


def _rope_scores(q, k, pos, theta, pairing: str) -> torch.Tensor:
    """(T, T) scores <R_m q_m, R_n k_n>."""
    return _rope_complex(q, pos, theta, pairing) @ _rope_complex(k, pos, theta, pairing).T


def _perm(d: int) -> torch.Tensor:
    """Interleaved -> half-split: the even coordinates, then the odd ones."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def half_split_unchanged(W_q, W_k):
    return W_q, W_k


def half_split_inverse(W_q, W_k):
    inverse = torch.argsort(_perm(W_q.shape[1]))
    return W_q[:, inverse], W_k[:, inverse]


def half_split_only_query(W_q, W_k):
    return W_q[:, _perm(W_q.shape[1])], W_k


def half_split_only_key(W_q, W_k):
    return W_q, W_k[:, _perm(W_k.shape[1])]


def half_split_single(W_q, W_k):
    return W_q[:, _perm(W_q.shape[1])]


_CONVERT_WRONG = [
    (
        half_split_unchanged,
        "without permuting the columns the half-split model pairs the wrong coordinates "
        "(i, i + d/2) into planes",
    ),
    (
        half_split_inverse,
        "that is the inverse permutation: column j of the new weights must be column perm[j] of "
        "the old (perm = 0, 2, 4, ..., 1, 3, 5, ...)",
    ),
    (half_split_only_query, "permute the columns of both W_q and W_k"),
    (half_split_only_key, "permute the columns of both W_k and W_q"),
]


@exercise("21.4", "to_half_split")
def to_half_split(answer) -> str:
    """Scores of the half-split model with the new weights against the interleaved model's."""
    gen = torch.Generator().manual_seed(214)
    for d_model, d, T in ((24, 16, 10), (8, 4, 6), (40, 64, 12)):
        Wq, Wk = torch.randn(2, d_model, d, generator=gen, dtype=F64)
        x = torch.randn(T, d_model, generator=gen, dtype=F64)
        pos = torch.arange(T, dtype=F64) * 37.0
        theta = torch.from_numpy(_ladder(d, 1e4))
        want = _rope_scores(x @ Wq, x @ Wk, pos, theta, "interleaved")
        out = attempt(answer, Wq.clone(), Wk.clone())
        expect(
            isinstance(out, (tuple, list)) and len(out) == 2,
            f"to_half_split should return a pair (W_q', W_k'), got {type(out).__name__}",
        )
        Wq2, Wk2 = out
        for name, W in (("W_q'", Wq2), ("W_k'", Wk2)):
            if not isinstance(W, torch.Tensor) or tuple(W.shape) != (d_model, d):
                shape = tuple(W.shape) if isinstance(W, torch.Tensor) else type(W).__name__
                raise Incorrect(f"{name} should be a tensor of shape {(d_model, d)}, got {shape}")

        def half(pair, x=x, pos=pos, theta=theta):
            a, b = (W.detach().to(F64) for W in pair)
            return _rope_scores(x @ a, x @ b, pos, theta, "half")

        expect_answer(
            half((Wq2, Wk2)),
            want,
            f"the half-split scores with to_half_split(W_q, W_k), d = {d}",
            wrong={fb: half(wrong(Wq, Wk)) for wrong, fb in _CONVERT_WRONG},
            atol=1e-9,
            rtol=1e-9,
        )
    return (
        "the half-split model with the new weights gives the interleaved model's scores "
        "for d = 16, 4, 64, with RoPE written out in complex numbers"
    )


# --- 21.5: RoPE in the interleaved convention ---------------------------------------------------


def rope_as_half_split(x, positions, base=10000.0):
    d = x.shape[-1]
    return _rope_complex(x, positions, torch.from_numpy(_ladder(d, base)), "half")


def rope_clockwise(x, positions, base=10000.0):
    d = x.shape[-1]
    return _rope_complex(x, positions, torch.from_numpy(_ladder(d, base)), sign=-1.0)


def rope_ladder_without_two(x, positions, base=10000.0):
    d = x.shape[-1]
    theta = base ** (-torch.arange(d // 2, dtype=F64) / d)  # b^(-i/d)
    return _rope_complex(x, positions, theta)


def rope_without_position(x, positions, base=10000.0):
    d = x.shape[-1]
    return _rope_complex(x, torch.ones_like(positions), torch.from_numpy(_ladder(d, base)))


_ROPE_WRONG = [
    (
        rope_as_half_split,
        "that pairs (x_i, x_(i+d/2)), the half-split convention; the interleaved one pairs the "
        "neighbours (x_2i, x_2i+1)",
    ),
    (
        rope_clockwise,
        "the turn is clockwise: (u, v) -> (u cos φ - v sin φ, u sin φ + v cos φ) turns "
        "counterclockwise",
    ),
    (
        rope_ladder_without_two,
        "the ladder is θ_i = b^(-2i/d) (eq. 21.3), not b^(-i/d): the exponent runs over the "
        "even indices 0, 2, ..., d - 2",
    ),
    (rope_without_position, "turn plane i by m θ_i: multiply the frequency by the position m"),
]


@exercise("21.5", "rope_interleaved")
def rope_interleaved(answer) -> str:
    """Interleaved RoPE against complex multiplication, (u + iv) e^(i m θ_i)."""
    gen = torch.Generator().manual_seed(215)
    for shape, base, step in (((2, 3, 7, 16), 1e4, 1), ((9, 8), 1e4, 113), ((4, 5, 64), 5e5, 37)):
        x = torch.randn(*shape, generator=gen, dtype=F64)
        positions = torch.arange(shape[-2]) * step
        want = _rope_complex(x, positions, torch.from_numpy(_ladder(shape[-1], base)))
        expect_answer(
            attempt(answer, x.clone(), positions.clone(), base),
            want,
            f"rope_interleaved(x, positions, base={base:g}) for x of shape {shape}",
            wrong=wrong_values(_ROPE_WRONG, x, positions, base),
            atol=1e-10,
            rtol=1e-10,
        )
    return (
        "matches (u + iv) e^(i m θ_i) for every plane (x_2i, x_2i+1), for d = 16, 8, 64, "
        "positions up to 791 and bases 10^4 and 5·10^5"
    )


# --- 21.6 and 21.7: how far the score kernel reaches --------------------------------------------


@functools.cache
def _half_distance(d: int, base: float, max_distance: int = 10_000) -> int:
    """The first integer Δ >= 0 with mean_i cos(Δ θ_i) < 1/2, by NumPy."""
    delta = np.arange(max_distance, dtype=np.float64)
    kernel = np.cos(delta[:, None] * _ladder(d, base)[None, :]).mean(axis=1)
    below = np.nonzero(kernel < 0.5)[0]
    if not len(below):
        raise ValueError(f"the kernel stays above 1/2 up to {max_distance} (d={d}, b={base})")
    return int(below[0])


@exercise("21.6", "predict_half_distance")
def half_distance_guess(predict_half_distance) -> str:
    """The reader's guess against the first distance at which the kernel is below 1/2."""
    guess = as_tensor(attempt(predict_half_distance), "predict_half_distance()")
    if guess.numel() != 1 or not bool(torch.isfinite(guess).all()) or float(guess.sum()) <= 0:
        raise Incorrect("predict_half_distance() should return one positive number of positions")
    guess = float(guess.reshape(()))
    true = _half_distance(128, 1e4)
    longest = 2 * math.pi / _ladder(128, 1e4)[-1]
    where = (
        f"the kernel of d = 128, b = 10^4 first falls below 1/2 at Δ = {true}: it averages 64 "
        "cosines, the fast half of the planes has scattered around 0 within a few dozen "
        "positions, while the slow half still contributes nearly 1"
    )
    if abs(math.log(guess / true)) <= math.log(2):
        return f"your guess {guess:.4g} is within a factor of 2; {where}"
    if guess > 0.2 * longest:
        raise Incorrect(
            f"your guess {guess:.4g} is of the order of the longest wavelength "
            f"({longest:,.0f} positions), the scale of the slowest plane alone; {where}"
        )
    raise Incorrect(f"your guess {guess:.4g} is off by more than a factor of 2; {where}")


_EXPLORE_WIDTHS = (32, 64, 128, 256)
_EXPLORE_BASES = (1e2, 1e4, 5e5, 1e6)


def halves_ladder_without_two(widths, bases):
    delta = np.arange(10_000, dtype=np.float64)
    out = torch.full((len(widths), len(bases)), -1.0, dtype=F64)
    for i, d in enumerate(widths):
        for j, b in enumerate(bases):
            theta = b ** (-np.arange(d // 2, dtype=np.float64) / d)  # b^(-i/d)
            below = np.nonzero(np.cos(delta[:, None] * theta).mean(axis=1) < 0.5)[0]
            out[i, j] = float(below[0]) if len(below) else -1.0
    return out


def halves_last_above(widths, bases):
    return torch.tensor([[_half_distance(d, b) - 1 for b in bases] for d in widths], dtype=F64)


def halves_transposed(widths, bases):
    return torch.tensor([[_half_distance(d, b) for d in widths] for b in bases], dtype=F64)


_HALVES_WRONG = [
    (
        halves_ladder_without_two,
        "the ladder is θ_i = b^(-2i/d) (eq. 21.3), not b^(-i/d)",
    ),
    (
        halves_last_above,
        "return the first distance at which the kernel is below 1/2, not the last one at which "
        "it is still above",
    ),
    (halves_transposed, "rows are the widths, columns the bases: shape (len(widths), len(bases))"),
]


@exercise("21.7", "half_distances")
def half_distances(answer) -> str:
    """The half distances on a grid of widths and bases against a NumPy sum of cosines."""
    want = torch.tensor(
        [[_half_distance(d, b) for b in _EXPLORE_BASES] for d in _EXPLORE_WIDTHS], dtype=F64
    )
    got = attempt(answer, list(_EXPLORE_WIDTHS), list(_EXPLORE_BASES))
    expect_answer(
        got,
        want,
        "half_distances(widths=[32, 64, 128, 256], bases=[1e2, 1e4, 5e5, 1e6])",
        wrong=wrong_values(_HALVES_WRONG, _EXPLORE_WIDTHS, _EXPLORE_BASES),
        atol=0.0,
        rtol=0.0,
    )
    slope = float(np.polyfit(np.log(_EXPLORE_BASES), np.log(want[2].numpy()), 1)[0])
    rows = "; ".join(
        f"d = {d}: {[int(v) for v in row]}" for d, row in zip(_EXPLORE_WIDTHS, want, strict=True)
    )
    return (
        f"matches a NumPy sum of cosines; for b = 1e2, 1e4, 5e5, 1e6: {rows}; log-log slope "
        f"against b at d = 128: {slope:.2f}"
    )


# Typical wrong answers (the tests build each and check that it is rejected with its feedback)


def predict_longest_wavelength():
    return 54_000


def predict_shortest_wavelength():
    return 6


MISTAKES = {
    "21.1": list(_KERNEL_WRONG),
    "21.2": list(_LOOKBACK_WRONG),
    "21.3": paired_mistakes(
        _ref("21.3", "symmetric_alibi_bias"),
        _ref("21.3", "alibi_form_gap"),
        _SYMMETRIC_WRONG,
        _GAP_WRONG,
    ),
    "21.4": list(_CONVERT_WRONG) + [(half_split_single, "should return a pair")],
    "21.5": list(_ROPE_WRONG),
    "21.6": [
        (predict_longest_wavelength, "the longest wavelength"),
        (predict_shortest_wavelength, "off by more than a factor of 2"),
    ],
    "21.7": list(_HALVES_WRONG),
}
