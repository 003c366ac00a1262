"""Checks of the exercises of chapter 21 (positional encoding and RoPE).

The references avoid :mod:`mlbook.attention.rope` and :mod:`mlbook.attention.positional`: the
partial-RoPE kernel is the trace of an explicit block rotation matrix, the look-back matrix a NumPy
least-squares fit to sinusoidal tables, the ALiBi biases Python loops, and the RoPE of the
checkpoint conversion is written out with complex numbers.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...attention import positional as pos_enc
from ...attention import rope
from . import Incorrect, attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


def _ladder(d: int, base: float) -> np.ndarray:
    """theta_i = base^(-2i/d), i = 0..d/2-1, in NumPy."""
    return base ** (-np.arange(0, d, 2, dtype=np.float64) / d)


def _plane_rotation(angle: float) -> torch.Tensor:
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([[c, -s], [s, c]], dtype=F64)


def _trace_kernel(distances: list[float], d_c: int, d_r: int, base: float) -> torch.Tensor:
    """tr(diag(I_dc, R_Δ)) / (d_c + d_r) from the explicit matrix, for each distance."""
    theta = _ladder(d_r, base)
    out = []
    for delta in distances:
        blocks = [torch.eye(d_c, dtype=F64)] + [_plane_rotation(delta * th) for th in theta]
        out.append(torch.block_diag(*blocks).trace() / (d_c + d_r))
    return torch.stack(out)


def _cos_kernel(distances: torch.Tensor, theta: np.ndarray) -> torch.Tensor:
    return torch.cos(distances[:, None] * torch.from_numpy(theta)[None, :]).mean(dim=1)


@exercise("21.1", "partial_rope_kernel")
def partial_rope_kernel(answer) -> str:
    """(d_c + d_r K_r(Δ)) / (d_c + d_r) against the trace of the explicit partial rotation."""
    dist = [0.0, 1.0, 3.0, 10.0, 100.0, 1000.0, 5000.0]
    distances = torch.tensor(dist, dtype=F64)
    for d_c, d_r, base in ((128, 64, 1e4), (48, 16, 5e5), (0, 32, 1e4)):
        d = d_c + d_r
        want = _trace_kernel(dist, d_c, d_r, base)
        k_r = _cos_kernel(distances, _ladder(d_r, base))
        k_full = _cos_kernel(distances, _ladder(d, base))
        k_prefix = _cos_kernel(distances, _ladder(d, base)[: d_r // 2])
        expect_answer(
            attempt(answer, distances.clone(), d_c, d_r, base),
            want,
            f"partial_rope_kernel(Δ, d_c={d_c}, d_r={d_r}, base={base:g})",
            wrong={
                "the position-free part is missing: q_c^T k_c adds d_c at every distance, which "
                "is the floor d_c / (d_c + d_r)": k_r,
                "normalise by E|q|² = d_c + d_r, the whole head (the kernel is 1 at Δ = 0)": (
                    d_c + d_r * k_r
                )
                / d_r,
                "the weights are swapped: the d_c position-free coordinates contribute d_c, "
                "the d_r rotated ones d_r K_r(Δ)": (d_r + d_c * k_r) / d,
                "this rotates the whole head; only the last d_r coordinates turn": k_full,
                "the rotated part has its own ladder θ_i = b^(-2i/d_r), over its width d_r, "
                "not the first d_r/2 frequencies of width d_c + d_r": (d_c + d_r * k_prefix) / d,
            },
            atol=1e-12,
            rtol=1e-10,
        )
    return (
        "matches tr(diag(I, R_Δ))/d of the explicit partial rotation at 7 distances for "
        "(d_c, d_r) = (128, 64), (48, 16), (0, 32)"
    )


def _sin_table(positions: np.ndarray, d: int, base: float) -> np.ndarray:
    """Eq. 21.2 in NumPy: column 2i holds sin(t θ_i), column 2i+1 cos(t θ_i)."""
    angles = positions[:, None] * _ladder(d, base)[None, :]
    table = np.empty((len(positions), d))
    table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
    return table


def _rope_matrix_half_split(position: float, d: int, base: float) -> torch.Tensor:
    """RoPE's rotation in the half-split layout (planes (i, i + d/2)), a typical mix-up."""
    h = d // 2
    r = torch.zeros(d, d, dtype=F64)
    for i, th in enumerate(_ladder(d, base)):
        c, s = math.cos(position * th), math.sin(position * th)
        r[i, i], r[i, i + h], r[i + h, i], r[i + h, i + h] = c, -s, s, c
    return r


@exercise("21.2", "lookback_matrix")
def lookback_matrix(answer) -> str:
    """W with p_t^T W p_s = p_(t-k)^T p_s against a least-squares fit to sinusoidal tables."""
    rng = np.random.default_rng(212)
    for k, d, base in ((3, 64, 1e4), (1, 16, 1e4), (10, 32, 100.0), (2.5, 8, 1e4)):
        ts = rng.uniform(0, 2e5, 400)
        P, P_back = _sin_table(ts, d, base), _sin_table(ts - k, d, base)  # (400, d) each
        want = torch.from_numpy(np.linalg.lstsq(P, P_back, rcond=None)[0])  # P W = P_back
        W = expect_answer(
            attempt(answer, k, d, base),
            want,
            f"lookback_matrix(k={k}, d={d}, base={base:g})",
            wrong={
                "this looks k tokens ahead (largest at s = t + k): it is the transpose of "
                "W": want.T,
                "the identity gives the plain similarity p_t^T p_s, largest at s = t": torch.eye(
                    d, dtype=F64
                ),
                "this rotates RoPE's half-split planes (x_i, x_(i+d/2)); the sinusoidal table "
                "of eq. 21.2 puts plane i at (2i, 2i+1) as (sin, cos)": _rope_matrix_half_split(
                    -k, d, base
                ),
            },
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


@exercise("21.3", "symmetric_alibi_bias", "alibi_form_gap")
def alibi_forms(symmetric, gap) -> str:
    """Both biases against Python loops; the two forms agree under the causal mask only."""
    cases = [([2.0 ** (-8 * h / 8) for h in range(1, 9)], 16), ([0.5, 0.1, 0.03], 5), ([0.25], 1)]
    for slopes_list, T in cases:
        slopes = torch.tensor(slopes_list, dtype=F64)
        sym_ref, key_ref = _loop_biases(slopes_list, T)
        t = torch.arange(T, dtype=F64)[:, None]
        s = torch.arange(T, dtype=F64)[None, :]
        future = (s > t).expand(T, T)
        causal = torch.zeros(T, T, dtype=F64).masked_fill(future, float("-inf"))
        H = len(slopes_list)
        sym = expect_answer(
            attempt(symmetric, slopes.clone(), T),
            sym_ref,
            f"symmetric_alibi_bias(slopes, T={T}) with H = {H}",
            wrong={
                "an encoder attends in both directions: no -inf mask on the keys s > t": sym_ref
                + causal,
                "that is the key form α_h s; the symmetric bias depends on the distance |t - "
                "s|": key_ref,
                "the sign is flipped: ALiBi penalises distance, the bias is -α_h|t - s| <= "
                "0": -sym_ref,
                "use the distance |t - s|: -α_h(t - s) rewards the keys after the query": -slopes[
                    :, None, None
                ]
                * (t - s),
            },
            atol=1e-12,
            rtol=1e-12,
        )
        gap_ref = key_ref - sym_ref
        g = expect_answer(
            attempt(gap, slopes.clone(), T),
            gap_ref,
            f"alibi_form_gap(slopes, T={T}) with H = {H}",
            wrong={
                "for the keys after the query (s > t) the gap is not the row constant α_h t: "
                "these are the entries that break the argument": slopes[:, None, None]
                * t.expand(T, T),
                "the sign is flipped: that is the symmetric form minus the key form": -gap_ref,
                "rows are queries t and columns keys s: this is the transpose": gap_ref.transpose(
                    1, 2
                ),
            },
            atol=1e-12,
            rtol=1e-12,
        )
        if T > 1:
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


def _rope_scores(
    q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, theta: torch.Tensor, pairing: str
) -> torch.Tensor:
    """(T, T) scores <R_m q_m, R_n k_n>, each plane a complex number turned by e^(i m θ)."""
    h = q.shape[1] // 2
    if pairing == "interleaved":
        zq, zk = torch.complex(q[:, 0::2], q[:, 1::2]), torch.complex(k[:, 0::2], k[:, 1::2])
    else:
        zq, zk = torch.complex(q[:, :h], q[:, h:]), torch.complex(k[:, :h], k[:, h:])
    turn = torch.polar(torch.ones(len(pos), h, dtype=F64), pos[:, None] * theta[None, :])
    zq, zk = zq * turn, zk * turn  # (T, d/2) each
    return (zq.conj() @ zk.T).real  # Re(sum_i conj(zq_i) zk_i)


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
        Wq2, Wk2 = Wq2.detach().to(F64), Wk2.detach().to(F64)

        def half(a, b, x=x, pos=pos, theta=theta):
            return _rope_scores(x @ a, x @ b, pos, theta, "half")

        perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
        inverse = torch.argsort(perm)
        expect_answer(
            half(Wq2, Wk2),
            want,
            f"the half-split scores with to_half_split(W_q, W_k), d = {d}",
            wrong={
                "without permuting the columns the half-split model pairs the wrong coordinates "
                "(i, i + d/2) into planes": half(Wq, Wk),
                "that is the inverse permutation: column j of the new weights must be column "
                "perm[j] of the old (perm = 0, 2, 4, ..., 1, 3, 5, ...)": half(
                    Wq[:, inverse], Wk[:, inverse]
                ),
                "permute the columns of both W_q and W_k": half(Wq[:, perm], Wk),
                "permute the columns of both W_k and W_q": half(Wq, Wk[:, perm]),
            },
            atol=1e-9,
            rtol=1e-9,
        )
    return (
        "the half-split model with the new weights gives the interleaved model's scores "
        "for d = 16, 4, 64, with RoPE written out in complex numbers"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


def kernel_rotated_part_only(distances, d_c, d_r, base=10000.0):
    return rope.rope_score_kernel(distances, rope.rope_frequencies(d_r, base))


def kernel_over_d_r(distances, d_c, d_r, base=10000.0):
    k_r = rope.rope_score_kernel(distances, rope.rope_frequencies(d_r, base))
    return (d_c + d_r * k_r) / d_r


def kernel_whole_head(distances, d_c, d_r, base=10000.0):
    return rope.rope_score_kernel(distances, rope.rope_frequencies(d_c + d_r, base))


def kernel_full_width_ladder(distances, d_c, d_r, base=10000.0):
    freqs = rope.rope_frequencies(d_c + d_r, base)[: d_r // 2]
    return (d_c + d_r * rope.rope_score_kernel(distances, freqs)) / (d_c + d_r)


def lookback_transposed(k, d, base=10000.0):
    return _ref("21.2", "lookback_matrix")(k, d, base).T


def lookback_identity(k, d, base=10000.0):
    return torch.eye(d, dtype=torch.float64)


def lookback_half_split(k, d, base=10000.0):
    return rope.rope_rotation_matrix(-k, rope.rope_frequencies(d, base))


_gap = _ref("21.3", "alibi_form_gap")


def symmetric_masked(slopes, T):
    return pos_enc.alibi_bias(slopes, T)


def symmetric_signed(slopes, T):
    pos = torch.arange(T, dtype=torch.float64)
    return -slopes[:, None, None] * (pos[:, None] - pos[None, :])


def symmetric_key_form(slopes, T):
    return pos_enc.alibi_bias(slopes, T, form="key", causal=False)


symmetric_ok = _ref("21.3", "symmetric_alibi_bias")


def gap_row_constant(slopes, T):
    t = torch.arange(T, dtype=torch.float64)[:, None].expand(T, T)
    return slopes[:, None, None] * t


def gap_reversed(slopes, T):
    return -_gap(slopes, T)


def gap_transposed(slopes, T):
    return _gap(slopes, T).transpose(1, 2)


def half_split_unchanged(W_q, W_k):
    return W_q, W_k


def half_split_inverse(W_q, W_k):
    inverse = torch.argsort(rope.interleave_permutation(W_q.shape[1]))
    return W_q[:, inverse], W_k[:, inverse]


def half_split_only_query(W_q, W_k):
    return W_q[:, rope.interleave_permutation(W_q.shape[1])], W_k


def half_split_single(W_q, W_k):
    return W_q[:, rope.interleave_permutation(W_q.shape[1])]


MISTAKES = {
    "21.1": [
        (kernel_rotated_part_only, "position-free part is missing"),
        (kernel_over_d_r, "normalise by E|q|² = d_c + d_r"),
        (kernel_whole_head, "rotates the whole head"),
        (kernel_full_width_ladder, "its own ladder"),
    ],
    "21.2": [
        (lookback_transposed, "looks k tokens ahead"),
        (lookback_identity, "plain similarity"),
        (lookback_half_split, "half-split planes"),
    ],
    "21.3": [
        ((symmetric_masked, _gap), "no -inf mask"),
        ((symmetric_signed, _gap), "use the distance |t - s|"),
        ((symmetric_key_form, _gap), "that is the key form"),
        ((symmetric_ok, gap_row_constant), "break the argument"),
        ((symmetric_ok, gap_reversed), "symmetric form minus the key form"),
        ((symmetric_ok, gap_transposed), "this is the transpose"),
    ],
    "21.4": [
        (half_split_unchanged, "without permuting the columns"),
        (half_split_inverse, "inverse permutation"),
        (half_split_only_query, "both W_q and W_k"),
        (half_split_single, "should return a pair"),
    ],
}
