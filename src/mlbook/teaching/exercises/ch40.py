"""Checks of the exercises of chapter 40 (quantisation and serving).

The references are independent of :mod:`mlbook.systems.quantization`: the intensity of a decoding
step from Llama-2-7B's published shape written out (40.1); absmax group quantisation as a NumPy
loop over groups (40.2); the error and storage table from the same NumPy loop (40.3).

Each typical wrong answer is written once, as a function below; ``MISTAKES`` lists them (the tests
feed each to its check).
"""

from __future__ import annotations

import numpy as np
import torch

from . import Incorrect, attempt, exercise, expect, expect_answer, expect_tuple

F64 = torch.float64

# --- 40.1 ----------------------------------------------------------------------------------------

INTENSITY_OPTIONS = ("about 0.01", "about 1", "about 100", "about 10,000")


def _llama7b_intensity(T: int = 1024) -> tuple[float, float, float]:
    """(intensity, P, KV bytes) of one batch-1 decoding step, Llama-2-7B, 16-bit weights and KV."""
    V, d, L, h = 32000, 4096, 32, 11008
    P = 2 * V * d + L * (4 * d * d + 3 * d * h + 2 * d) + d  # embeddings, head, blocks, norms
    kv = 2 * L * d * T * 2  # keys and values, 32 heads of 128, 2 bytes
    return 2 * P / (2 * P + kv), P, kv


def guess_training():
    return "about 100"


def guess_peak():
    return "about 10,000"


@exercise("40.1", "predict_decode_intensity")
def intensity_prediction(answer) -> str:
    guess = attempt(answer)
    expect(
        isinstance(guess, str) and guess in INTENSITY_OPTIONS,
        f"predict_decode_intensity() should return one of {INTENSITY_OPTIONS}, got {guess!r}",
    )
    I, P, kv = _llama7b_intensity()
    seen = (
        f"{P / 1e9:.2f} billion weights (2 bytes each, one multiply-add each) and a "
        f"{kv / 1e9:.2f} GB cache give {I:.2f} FLOP per byte"
    )
    if guess != "about 1":
        why = {
            "about 100": "that is training or prefill, where one weight read serves many tokens",
            "about 10,000": "that is beyond even the chip's ridge point (about 200 on an H200)",
            "about 0.01": "each weight read does feed one multiply-add, 2 FLOPs for 2 bytes",
        }[guess]
        raise Incorrect(f"you predicted {guess!r}: {why}; {seen}")
    return f"right: {seen}, about 200 times below an H200's ridge point"


# --- 40.2 ----------------------------------------------------------------------------------------


def _group_np(W: np.ndarray, bits: int, g: int, qmax=None, rounding=np.round):
    Q = 2 ** (bits - 1) - 1 if qmax is None else qmax
    d_in, d_out = W.shape
    q = np.zeros_like(W)
    s = np.zeros((d_in // g, d_out))
    for k in range(d_in // g):
        for c in range(d_out):
            block = W[k * g : (k + 1) * g, c]
            m = np.abs(block).max()
            s[k, c] = (m if m > 0 else 1.0) / Q
            q[k * g : (k + 1) * g, c] = np.clip(rounding(block / s[k, c]), -Q, Q)
    return q, s


def _weights() -> torch.Tensor:
    W = torch.randn(48, 5, generator=torch.Generator().manual_seed(402), dtype=F64)
    W[16:32, 2] = 0.0  # an all-zero group
    return W


def quantize_unsigned_range(W, bits, g):
    q, s = _group_np(W.numpy(), bits, g, qmax=2**bits - 1)
    return torch.from_numpy(q), torch.from_numpy(s)


def quantize_floor(W, bits, g):
    q, s = _group_np(W.numpy(), bits, g, rounding=np.floor)
    return torch.from_numpy(q), torch.from_numpy(s)


def quantize_groups_along_columns(W, bits, g):
    q, s = _group_np(W.T.contiguous().numpy(), bits, g) if W.shape[1] % g == 0 else (None, None)
    if q is None:  # groups run along the output axis: one scale per row chunk instead
        Q = 2 ** (bits - 1) - 1
        m = W.abs().amax(1, keepdim=True)
        s_row = torch.where(m > 0, m, torch.ones_like(m)) / Q
        return torch.clamp(torch.round(W / s_row), -Q, Q), s_row.expand(W.shape[0], W.shape[1])[
            : W.shape[0] // g
        ]
    return torch.from_numpy(q).T, torch.from_numpy(s).T


def quantize_per_channel(W, bits, g):
    q, s = _group_np(W.numpy(), bits, W.shape[0])
    return torch.from_numpy(q), torch.from_numpy(s).expand(W.shape[0] // g, W.shape[1])


WRONG_GROUP = {
    "the largest level of b signed bits is 2^(b-1) - 1, not 2^b - 1": quantize_unsigned_range,
    "round to the nearest level (torch.round), not down (floor)": quantize_floor,
    "one scale per column is per-channel quantisation; the groups are g consecutive input rows "
    "of each column": quantize_per_channel,
    "a scale per row uses the output axis; the groups run along the input axis (rows of a "
    "column)": quantize_groups_along_columns,
}


@exercise("40.2", "group_quantize")
def group_quantize_check(answer) -> str:
    for bits, g in ((8, 16), (4, 16), (3, 8)):
        W = _weights()
        out = expect_tuple(attempt(answer, W.clone(), bits, g), "group_quantize(...)", ("q", "s"))
        q_ref, s_ref = (torch.from_numpy(v) for v in _group_np(W.numpy(), bits, g))
        wrong = {fb: f(W, bits, g) for fb, f in WRONG_GROUP.items()}
        expect_answer(
            out[1],
            s_ref,
            f"the scales s (bits={bits}, g={g})",
            wrong={fb: v[1] for fb, v in wrong.items()},
            atol=1e-12,
        )
        expect_answer(
            out[0],
            q_ref,
            f"the levels q (bits={bits}, g={g})",
            wrong={fb: v[0] for fb, v in wrong.items()},
            atol=1e-9,
        )
    return (
        "levels and scales match a loop over groups for (8 bits, g 16), (4, 16), (3, 8), "
        "including an all-zero group"
    )


# --- 40.3 ----------------------------------------------------------------------------------------

BITS = [2, 3, 4, 5, 6, 8]
GROUPS = [8, 16, 32, 64, 128]


def _table_np(W: np.ndarray, bits_list, groups, scale_bits=16.0):
    out = np.zeros((len(bits_list), len(groups), 2))
    for i, b in enumerate(bits_list):
        for k, g in enumerate(groups):
            q, s = _group_np(W, b, g)
            W_hat = q * np.repeat(s, g, axis=0)
            out[i, k] = ((W_hat - W) ** 2).mean(), b + scale_bits / g
    return out


def table_without_scale_cost(W, bits_list, group_sizes):
    t = torch.from_numpy(_table_np(W.numpy(), bits_list, group_sizes))
    t[..., 1] = torch.tensor(bits_list, dtype=F64)[:, None]
    return t


def table_sum_not_mean(W, bits_list, group_sizes):
    t = torch.from_numpy(_table_np(W.numpy(), bits_list, group_sizes))
    t[..., 0] *= W.numel()
    return t


NO_SCALE_COST = "each group also stores a 16-bit scale: bits per weight = b + 16/g"


@exercise("40.3", "group_size_table")
def group_table_check(answer) -> str:
    W = torch.randn(128, 64, generator=torch.Generator().manual_seed(403), dtype=F64)
    ref = torch.from_numpy(_table_np(W.numpy(), BITS, GROUPS))
    got = attempt(answer, W.clone(), BITS, GROUPS)
    expect_answer(
        got,
        ref,
        "group_size_table(W, ...)",
        wrong={
            NO_SCALE_COST: table_without_scale_cost(W, BITS, GROUPS),
            "the error is the mean over the weights, not the sum": table_sum_not_mean(
                W, BITS, GROUPS
            ),
        },
        atol=1e-12,
        rtol=1e-9,
    )
    i4, k32, k128 = BITS.index(4), GROUPS.index(32), GROUPS.index(128)
    return (
        f"matches a NumPy loop on a 128 x 64 Gaussian weight; 4 bits with groups of 32 "
        f"(4.5 bits/weight) has error {float(ref[i4, k32, 0]):.2e}, with groups of 128 "
        f"{float(ref[i4, k128, 0]):.2e}"
    )


MISTAKES = {
    "40.1": [(guess_training, "training or prefill"), (guess_peak, "ridge point")],
    "40.2": [
        (quantize_unsigned_range, "2^(b-1) - 1"),
        (quantize_floor, "not down (floor)"),
        (quantize_per_channel, "per-channel quantisation"),
    ],
    "40.3": [
        (table_without_scale_cost, "16-bit scale"),
        (table_sum_not_mean, "not the sum"),
    ],
}
