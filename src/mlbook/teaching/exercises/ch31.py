"""Checks of the exercises of chapter 31 (vision transformers).

The references are independent of :mod:`mlbook.architectures.vit`: the token count from
``F.unfold`` and the parameters of an ``nn.Conv2d`` on the meta device (31.1); patches from
``F.unfold`` (31.2); parameter and FLOP counts written out term by term for a ViT of
``torch.nn`` layers (31.3); and rollout as ``torch.linalg.multi_dot`` of the head-averaged maps
(31.4).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import (
    Incorrect,
    as_int,
    as_tensor,
    attempt,
    exercise,
    expect,
    expect_answer,
    expect_tuple,
    wrong_values,
)

F64 = torch.float64


# --- 31.1 ----------------------------------------------------------------------------------------

#: CLIP's ViT-L/14 at 336 x 336: RGB images, 14 x 14 patches, width 1024.
L14 = {"H": 336, "W": 336, "C": 3, "P": 14, "d": 1024}


def _l14_measured() -> tuple[int, int]:
    """Tokens from unfolding a blank image; parameters of the equivalent strided convolution."""
    c = L14
    T = F.unfold(torch.zeros(1, c["C"], c["H"], c["W"]), c["P"], stride=c["P"]).shape[-1]
    with torch.device("meta"):  # shapes only, no memory
        conv = nn.Conv2d(c["C"], c["d"], c["P"], stride=c["P"])
    return T, sum(p.numel() for p in conv.parameters())


def guess_with_cls():
    T, n = _l14_measured()
    return T + 1, n


def guess_without_bias():
    T, n = _l14_measured()
    return T, n - L14["d"]


def guess_without_channels():
    c = L14
    return _l14_measured()[0], c["P"] ** 2 * c["d"] + c["d"]


def guess_grid_side():
    T, n = _l14_measured()
    return math.isqrt(T), n


def guess_pixels_per_patch():
    c = L14
    return _l14_measured()[0], c["P"] ** 2 * c["C"]


@exercise("31.1", "predict_patch_embedding")
def patch_embedding_prediction(answer) -> str:
    """Unfold a blank 336 x 336 image into 14 x 14 patches; count an nn.Conv2d's parameters."""
    got = expect_tuple(attempt(answer), "predict_patch_embedding()", ("tokens", "parameters"))
    tokens = as_int(got[0], "the number of tokens", "patches")
    params = as_int(got[1], "the number of parameters", "weights and biases")
    T, n = _l14_measured()
    seen = (
        f"unfolding a 336 x 336 image into 14 x 14 patches gives {T} tokens (a {math.isqrt(T)} x "
        f"{math.isqrt(T)} grid), and the strided nn.Conv2d(3, 1024, 14, stride=14) has {n:,} "
        f"parameters (14 * 14 * 3 * 1024 weights + 1024 biases)"
    )
    wrong = {
        (T + 1, n): "the [CLS] token is added after the embedding; it is not a patch",
        (T, n - L14["d"]): "the bias b_E adds d = 1024 parameters",
        (T, L14["P"] ** 2 * L14["d"] + L14["d"]): "a patch holds P^2 C numbers: all 3 channels",
        (math.isqrt(T), n): "that is the grid's side G = 336 / 14; T = G_H G_W",
        (T, L14["P"] ** 2 * L14["C"]): "that is the length D = P^2 C of one flattened patch; "
        "W_E maps it to d = 1024 numbers, a (D, d) matrix plus a bias",
    }
    if (tokens, params) != (T, n):
        hint = wrong.get((tokens, params))
        if hint is None and tokens != T:
            hint = "T = (H / P)(W / P)"
        elif hint is None:
            hint = "W_E is (P^2 C, d), b_E is (d,)"
        raise Incorrect(f"you predicted ({tokens}, {params:,}); {seen}. {hint}")
    return f"right: {seen}"


# --- 31.2 ----------------------------------------------------------------------------------------


def _patches_unfold(x: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, T, C P^2) with torch's unfold: channel-major patches, raster order."""
    return F.unfold(x, kernel_size=patch, stride=patch).transpose(1, 2)


def patches_plain_reshape(x, patch):
    B, C, H, W = x.shape
    return x.reshape(B, H * W // patch**2, C * patch * patch)


def patches_channels_last(x, patch):
    B, C, H, W = x.shape
    p = x.reshape(B, C, H // patch, patch, W // patch, patch).permute(0, 2, 4, 3, 5, 1)
    return p.reshape(B, -1, C * patch * patch)


def patches_column_major(x, patch):
    B, C, H, W = x.shape
    p = x.reshape(B, C, H // patch, patch, W // patch, patch).permute(0, 4, 2, 1, 3, 5)
    return p.reshape(B, -1, C * patch * patch)


def patches_unfold_layout(x, patch):
    return F.unfold(x, kernel_size=patch, stride=patch)


def patches_transposed_patch(x, patch):
    B, C, H, W = x.shape
    p = x.reshape(B, C, H // patch, patch, W // patch, patch).permute(0, 2, 4, 1, 5, 3)
    return p.reshape(B, -1, C * patch * patch)


WRONG_PATCHES = [
    (
        patches_plain_reshape,
        "a plain reshape cuts the image into runs of consecutive pixels, not squares: split H "
        "and W into (grid, patch) axes and move the two grid axes to the front",
    ),
    (
        patches_channels_last,
        "flatten each patch channel-major, (c, i, j), the layout of a conv2d kernel "
        "(d, C, P, P); (i, j, c) is a valid order for a linear layer of its own, not this one",
    ),
    (
        patches_column_major,
        "the patches must come in raster order, grid row by grid row; these go column by column",
    ),
    (
        patches_unfold_layout,
        "the patch axis comes before the values: (B, T, C P^2), not unfold's (B, C P^2, T)",
    ),
    (
        patches_transposed_patch,
        "each patch is flattened row by row, (c, i, j); this flattens its columns first",
    ),
]


@exercise("31.2", "to_patches")
def patches(to_patches) -> str:
    """Patches against F.unfold for square and non-square images, one and three channels."""
    cases = ((2, 1, 8, 8, 2), (3, 3, 6, 12, 3), (1, 2, 16, 8, 4), (2, 3, 5, 5, 5))
    for seed, (B, C, H, W, P) in enumerate(cases):
        x = torch.randn(B, C, H, W, generator=torch.Generator().manual_seed(310 + seed), dtype=F64)
        expect_answer(
            attempt(to_patches, x.clone(), P, name="to_patches"),
            _patches_unfold(x, P),
            f"to_patches(x, {P}) for x of shape {(B, C, H, W)}",
            wrong=wrong_values(WRONG_PATCHES, x, P),
            atol=0,
            rtol=0,
        )
    return (
        "matches F.unfold (transposed to (B, T, C P^2)) exactly for 4 shapes: square and not, "
        "1 to 3 channels, P = 2 to 5 (the last: one patch)"
    )


# --- 31.3 ----------------------------------------------------------------------------------------

#: The ViT whose patch size the exploration varies: 32 x 32 grey images, width 16, 2 layers.
EXPLORE = {"image": 32, "channels": 1, "d": 16, "layers": 2, "heads": 2, "d_ff": 32, "K": 10}
EXPLORE_PATCHES = (2, 4, 8, 16)


def _counts(P: int) -> dict[str, int]:
    """Tokens (with [CLS]), parameters and forward matmul FLOPs of one image, term by term."""
    c = EXPLORE
    d, f, L = c["d"], c["d_ff"], c["layers"]
    T = (c["image"] // P) ** 2
    S = T + 1
    D = c["channels"] * P * P
    layer = 2 * (2 * d) + 4 * (d * d + d) + (d * f + f) + (f * d + d)  # 2 LayerNorms, attn, MLP
    params = (D * d + d) + d + S * d + L * layer + 2 * d + (d * c["K"] + c["K"])
    attention = L * (2 * S * S * d + 2 * S * S * d)  # Q K^T and A V, all heads together
    other = 2 * T * D * d + L * (2 * S * 4 * d * d + 2 * 2 * S * d * f) + 2 * d * c["K"]
    return {"tokens": S, "params": params, "flops": attention + other, "attention": attention}


def _slope(x, y) -> float:
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])


def sweep_without_cls(config, patches):
    out = {k: [] for k in ("tokens", "params", "flops", "attention_share")}
    for P in patches:
        c = _counts(P)
        out["tokens"].append(c["tokens"] - 1)
        out["params"].append(c["params"])
        out["flops"].append(c["flops"])
        out["attention_share"].append(c["attention"] / c["flops"])
    return out


def sweep_multiply_adds(config, patches):
    out = sweep_without_cls(config, patches)
    out["tokens"] = [_counts(P)["tokens"] for P in patches]
    out["flops"] = [f / 2 for f in out["flops"]]
    return out


def sweep_batch_flops(config, patches):
    out = sweep_multiply_adds(config, patches)
    out["flops"] = [4 * f for f in out["flops"]]  # 2 for FLOPs, 2 for a batch of two images
    return out


def sweep_share_of_scores_only(config, patches):
    out = sweep_multiply_adds(config, patches)
    out["flops"] = [2 * f for f in out["flops"]]
    out["attention_share"] = [s / 2 for s in out["attention_share"]]
    return out


@exercise("31.3", "patch_size_costs")
def patch_costs(patch_size_costs) -> str:
    """Token, parameter and FLOP counts of a 32 x 32 ViT against a term-by-term count."""
    from ...architectures.vit import ViTConfig  # the argument the reader's function receives

    config = ViTConfig(
        image_size=EXPLORE["image"],
        patch_size=2,
        channels=EXPLORE["channels"],
        d_model=EXPLORE["d"],
        n_layers=EXPLORE["layers"],
        n_heads=EXPLORE["heads"],
        d_ff=EXPLORE["d_ff"],
        n_classes=EXPLORE["K"],
    )
    patches = list(EXPLORE_PATCHES)
    got = attempt(patch_size_costs, config, patches, name="patch_size_costs")
    keys = ("tokens", "params", "flops", "attention_share")
    expect(
        isinstance(got, dict) and set(got) >= set(keys),
        f"patch_size_costs(config, patches) should return a dict with the keys {keys}",
    )
    want = [_counts(P) for P in patches]
    wrong_sweeps = {
        "count the [CLS] token too: S = T + 1 tokens enter the encoder": sweep_without_cls,
        "a multiply-add is 2 FLOPs (the FlopCounterMode convention)": sweep_multiply_adds,
        "measure one image: FlopCounterMode counts the whole batch": sweep_batch_flops,
        "the attention share counts both S x S products, Q K^T and A V": (
            sweep_share_of_scores_only
        ),
    }
    wrongs = {fb: fn(config, patches) for fb, fn in wrong_sweeps.items()}
    for key, ref in (
        ("tokens", [w["tokens"] for w in want]),
        ("params", [w["params"] for w in want]),
        ("flops", [w["flops"] for w in want]),
        ("attention_share", [w["attention"] / w["flops"] for w in want]),
    ):
        expect_answer(
            as_tensor(got[key], f"patch_size_costs(...)['{key}']"),
            ref,
            f"patch_size_costs(...)['{key}'] for P = {patches}",
            wrong={fb: w[key] for fb, w in wrongs.items()},
            atol=1e-9,
            rtol=1e-9,
        )
    flops = [w["flops"] for w in want]
    attn = [w["attention"] for w in want]
    share = ", ".join(f"{100 * a / f:.0f} %" for a, f in zip(attn, flops, strict=True))
    return (
        f"counts match a term-by-term count for P = {patches}: tokens "
        f"{[w['tokens'] for w in want]}, parameters {[w['params'] for w in want]}, forward "
        f"MFLOPs {', '.join(f'{f / 1e6:.3g}' for f in flops)}, attention share {share}; "
        f"log-log slope against P: attention {_slope(patches, attn):.2f}, all FLOPs "
        f"{_slope(patches, flops):.2f}; attention outweighs the projections and the MLP of a "
        f"layer once S > 2d + d_ff = {2 * EXPLORE['d'] + EXPLORE['d_ff']} tokens"
    )


# --- 31.4 ----------------------------------------------------------------------------------------


def _rollout_multi_dot(weights: torch.Tensor) -> torch.Tensor:
    """Per image: the product, last layer on the left, of (mean over heads + I) / 2."""
    L, B, _, S, _ = weights.shape
    eye = torch.eye(S, dtype=weights.dtype)
    out = []
    for b in range(B):
        mats = [(weights[l, b].mean(0) + eye) / 2 for l in reversed(range(L))]
        out.append(torch.linalg.multi_dot(mats) if L > 1 else mats[0])
    return torch.stack(out)


def rollout_without_residual(weights):
    R = torch.eye(weights.shape[-1], dtype=weights.dtype)
    for A in weights:
        R = A.mean(1) @ R
    return R


def rollout_first_layer_left(weights):
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)
    R = eye
    for A in weights:
        R = R @ ((A.mean(1) + eye) / 2)
    return R


def rollout_without_half(weights):
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)
    R = eye
    for A in weights:
        R = (A.mean(1) + eye) @ R
    return R


def rollout_heads_separately(weights):
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)
    R = eye
    for A in weights:  # (B, n_h, S, S): a rollout per head, averaged at the end
        R = (A + eye) / 2 @ R
    return R.mean(1)


def rollout_last_layer_only(weights):
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)
    return (weights[-1].mean(1) + eye) / 2


WRONG_ROLLOUT = [
    (
        rollout_without_residual,
        "the residual path is missing: mix each layer's map with the identity, (A + I) / 2",
    ),
    (
        rollout_first_layer_left,
        "the order is reversed: the last layer's map goes on the left, R = Â_L ... Â_1",
    ),
    (
        rollout_without_half,
        "halve A + I: each row of (A + I) / 2 sums to one, so every row of R does",
    ),
    (
        rollout_heads_separately,
        "average the heads first, then multiply the layers: a product of averages is not an "
        "average of products",
    ),
    (rollout_last_layer_only, "multiply the maps of all L layers, not only the last one"),
]


@exercise("31.4", "rollout")
def rollout_check(rollout) -> str:
    """Rollout against torch.linalg.multi_dot of the head-averaged, residual-mixed maps."""
    shapes = ((3, 2, 2, 5), (2, 1, 4, 7), (1, 2, 3, 4), (4, 1, 1, 3))
    for seed, (L, B, H, S) in enumerate(shapes):
        g = torch.Generator().manual_seed(314 + seed)
        w = torch.softmax(2 * torch.randn(L, B, H, S, S, generator=g, dtype=F64), dim=-1)
        expect_answer(
            attempt(rollout, w.clone(), name="rollout"),
            _rollout_multi_dot(w),
            f"rollout(weights) for L = {L} layers, {H} heads, S = {S} tokens",
            wrong=wrong_values(WRONG_ROLLOUT, w),
            atol=1e-12,
            rtol=1e-10,
        )
    return (
        "matches the product of (mean over heads + I) / 2, last layer on the left "
        "(torch.linalg.multi_dot), for 1 to 4 layers and 1 to 4 heads"
    )


MISTAKES = {
    "31.1": [
        (guess_with_cls, "[CLS] token is added after the embedding"),
        (guess_without_bias, "bias b_E adds"),
        (guess_without_channels, "all 3 channels"),
        (guess_grid_side, "grid's side"),
        (guess_pixels_per_patch, "length D = P^2 C of one flattened patch"),
    ],
    "31.2": WRONG_PATCHES,
    "31.3": [
        (sweep_without_cls, "count the [CLS] token too"),
        (sweep_multiply_adds, "a multiply-add is 2 FLOPs"),
        (sweep_batch_flops, "measure one image"),
        (sweep_share_of_scores_only, "both S x S products"),
    ],
    "31.4": WRONG_ROLLOUT,
}
