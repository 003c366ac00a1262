"""Vision transformers (chapter 31): an image as a sequence of patches, the patch embedding, the
[CLS] token and mean pooling, position embeddings resampled to a new resolution, a small ViT
encoder built from the book's decoder blocks (without their causal mask), and attention rollout.

Shape legend
    B images;  C channels;  H, W image height and width;  P patch side (kernel = stride = P)
    G_H = H / P, G_W = W / P the patch grid;  T = G_H G_W patches;  D = C P^2 values per patch
    x         (B, C, H, W) images
    patches   (B, T, D) the patches in raster order (grid row by grid row), each flattened
              channel-major, (c, i, j): the layout of a conv2d kernel (d, C, P, P)
    W_E (D, d), b_E (d,) the patch embedding;  d model width;  K classes
    pos       (T, d) patch position embeddings; a model with a [CLS] token has (1 + T, d),
              the [CLS] row first
    S         tokens in the encoder: 1 + T with a [CLS] token, T without
    h         (B, S, d) token states;  L layers;  n_h heads
    weights   (L, B, n_h, S, S) attention weights of every layer;  rollout (B, S, S)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from ..models.config import DecoderConfig
from ..models.decoder import DecoderBlock, Norm
from ..validation import (
    distribution,
    divides,
    float_tensor,
    integer,
    number,
    one_of,
    positive_int,
    shape_is,
)

__all__ = [
    "grid_size",
    "patchify",
    "patchify_naive",
    "unpatchify",
    "patch_embed",
    "interpolate_positions",
    "interpolate_positions_naive",
    "attention_rollout",
    "attention_rollout_naive",
    "ViTConfig",
    "VIT_B16",
    "parameter_count",
    "forward_flops",
    "ViT",
    "small_mlp",
    "small_cnn",
]


# --- eqs. 31.1-31.3: patches, the patch embedding -------------------------------------------------


def grid_size(height: int, width: int, patch: int) -> tuple[int, int, int]:
    """The patch grid of an H x W image cut into P x P patches: (G_H, G_W, T). Implements eq. 31.1.

    P must divide H and W (a convolution with stride P would silently drop the border).
    """
    height, width = positive_int(height, "height"), positive_int(width, "width")
    patch = positive_int(patch, "patch")
    divides(patch, "patch", height, "height")
    divides(patch, "patch", width, "width")
    g_h, g_w = height // patch, width // patch
    return g_h, g_w, g_h * g_w


def patchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """Cut images into non-overlapping P x P patches and flatten each. Implements eq. 31.2.

    x: (B, C, H, W) -> (B, T, C P^2), T = HW / P^2; patches in raster order of the grid, each
    flattened as (c, i, j), the layout of a conv2d kernel.
    """
    x = float_tensor(x, "x", ndim=4)
    B, C, H, W = x.shape
    g_h, g_w, T = grid_size(H, W, patch)
    x = x.reshape(B, C, g_h, patch, g_w, patch)  # (B, C, H, W) -> (B, C, G_H, P, G_W, P)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, G_H, G_W, C, P, P): grid axes first
    return x.reshape(B, T, C * patch * patch)  # (B, T, D)


def patchify_naive(x: torch.Tensor, patch: int) -> torch.Tensor:
    """Reference for :func:`patchify`: slice out every patch in a loop over the grid."""
    x = float_tensor(x, "x", ndim=4)
    B, _, H, W = x.shape
    g_h, g_w, _ = grid_size(H, W, patch)
    rows = []
    for r in range(g_h):
        for c in range(g_w):
            rs, cs = slice(r * patch, (r + 1) * patch), slice(c * patch, (c + 1) * patch)
            rows.append(x[:, :, rs, cs].reshape(B, -1))  # (B, C, P, P) -> (B, D)
    return torch.stack(rows, dim=1)  # (B, T, D)


def unpatchify(patches: torch.Tensor, patch: int, height: int, width: int) -> torch.Tensor:
    """The inverse of :func:`patchify`: (B, T, C P^2) -> (B, C, H, W)."""
    patches = float_tensor(patches, "patches", ndim=3)
    g_h, g_w, T = grid_size(height, width, patch)
    B, _, D = shape_is(patches, "patches", (None, T, None)).shape
    divides(patch * patch, "P^2", D, "the length of a patch")  # D = C P^2
    C = D // (patch * patch)
    x = patches.reshape(B, g_h, g_w, C, patch, patch)  # (B, T, D) -> (B, G_H, G_W, C, P, P)
    x = x.permute(0, 3, 1, 4, 2, 5)  # (B, C, G_H, P, G_W, P)
    return x.reshape(B, C, height, width)


def patch_embed(x: torch.Tensor, W_E: torch.Tensor, b_E: torch.Tensor, patch: int) -> torch.Tensor:
    """The patch embedding X_patch W_E + b_E: (B, C, H, W) -> (B, T, d).

    Implements eq. 31.3 without the position term. W_E: (C P^2, d); b_E: (d,). The same map is a
    conv2d with kernel = stride = P and the kernel W_E^T reshaped to (d, C, P, P).
    """
    patches = patchify(x, patch)  # (B, T, D)
    shape_is(W_E, "W_E", (patches.shape[-1], None))
    shape_is(b_E, "b_E", (W_E.shape[1],))
    return patches @ W_E + b_E


# --- position embeddings at a new resolution ------------------------------------------------------


def interpolate_positions(
    pos: torch.Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int], mode: str = "bicubic"
) -> torch.Tensor:
    """Resample patch position embeddings from a G_H x G_W grid to a new grid.

    The (T, d) table is viewed as a d-channel image of the grid and resized with
    ``F.interpolate`` (align_corners=False, as ViT implementations do). pos: (G_H G_W, d);
    old_grid, new_grid: (rows, columns); mode: "bicubic" or "bilinear". Returns (G'_H G'_W, d).
    """
    pos = float_tensor(pos, "pos", ndim=2)
    g_h, g_w = (positive_int(g, "old_grid") for g in old_grid)
    n_h, n_w = (positive_int(g, "new_grid") for g in new_grid)
    d = shape_is(pos, "pos", (g_h * g_w, None)).shape[1]
    one_of(mode, "mode", ("bicubic", "bilinear"))
    image = pos.T.reshape(1, d, g_h, g_w)  # (T, d) -> (1, d, G_H, G_W): one channel per feature
    out = F.interpolate(image, size=(n_h, n_w), mode=mode, align_corners=False)  # (1, d, n_h, n_w)
    return out.reshape(d, n_h * n_w).T  # (T', d)


def _kernel(t: torch.Tensor, mode: str) -> torch.Tensor:
    """Interpolation weight of a sample at distance t: the triangle, or Keys' cubic (a = -0.75)."""
    t = t.abs()
    if mode == "bilinear":
        return (1 - t).clamp(min=0)
    a = -0.75
    near = ((a + 2) * t - (a + 3)) * t * t + 1  # |t| <= 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a  # 1 < |t| < 2
    return torch.where(t <= 1, near, torch.where(t < 2, far, torch.zeros_like(t)))


def interpolate_positions_naive(
    pos: torch.Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int], mode: str = "bicubic"
) -> torch.Tensor:
    """Reference for :func:`interpolate_positions`: every new grid point as a weighted sum of the
    old ones, separably along rows and columns, in explicit loops.

    New point r sits at old coordinate (r + 1/2) G / G' - 1/2 (align_corners=False); the
    samples four (bicubic) or two (bilinear) steps around it are weighted by :func:`_kernel`,
    with indices beyond the border clamped to it (the border is repeated).
    """
    pos = float_tensor(pos, "pos", ndim=2)
    (g_h, g_w), (n_h, n_w) = old_grid, new_grid
    d = shape_is(pos, "pos", (g_h * g_w, None)).shape[1]
    one_of(mode, "mode", ("bicubic", "bilinear"))

    def weights(n_old: int, n_new: int) -> torch.Tensor:  # (n_new, n_old) resampling matrix
        M = torch.zeros(n_new, n_old, dtype=pos.dtype)
        for r in range(n_new):
            s = (r + 0.5) * n_old / n_new - 0.5  # the new point's coordinate on the old grid
            for j in range(math.floor(s) - 1, math.floor(s) + 3):
                w = _kernel(torch.tensor(s - j, dtype=pos.dtype), mode)
                M[r, min(max(j, 0), n_old - 1)] += w  # beyond the border: the border sample
        return M

    grid = pos.reshape(g_h, g_w, d)  # (T, d) -> (G_H, G_W, d)
    rows, cols = weights(g_h, n_h), weights(g_w, n_w)
    out = torch.zeros(n_h, n_w, d, dtype=pos.dtype)
    for r in range(n_h):
        for c in range(n_w):
            for i in range(g_h):
                for j in range(g_w):
                    out[r, c] += rows[r, i] * cols[c, j] * grid[i, j]
    return out.reshape(n_h * n_w, d)  # (T', d)


# --- attention rollout ----------------------------------------------------------------------------


def attention_rollout(weights: torch.Tensor) -> torch.Tensor:
    """Attention rollout (Abnar and Zuidema 2020): R = Â_L ... Â_1, Â_l = (mean_heads A_l + I) / 2.

    weights: (L, B, n_h, S, S) attention weights, first layer first, rows summing to one.
    Returns (B, S, S): row i spreads token i's last-layer state over the input tokens; the
    identity stands for the residual path, and every row of R sums to one.
    """
    weights = distribution(float_tensor(weights, "weights", ndim=5), "weights")
    S = weights.shape[-1]
    eye = torch.eye(S, dtype=weights.dtype, device=weights.device)
    R = eye.expand(weights.shape[1], S, S)  # (B, S, S): before the first layer
    for A in weights:  # (B, n_h, S, S), layer by layer
        R = (A.mean(dim=1) + eye) / 2 @ R  # (B, S, S)
    return R


def attention_rollout_naive(weights: torch.Tensor) -> torch.Tensor:
    """Reference for :func:`attention_rollout`: sum over every path of tokens through the layers
    of the product of the Â entries along it (S^(L+1) paths: tiny inputs only)."""
    weights = distribution(float_tensor(weights, "weights", ndim=5), "weights")
    L, B, _, S, _ = weights.shape
    eye = torch.eye(S, dtype=weights.dtype)
    A_hat = [(A.mean(dim=1) + eye) / 2 for A in weights]  # L x (B, S, S)
    R = torch.zeros(B, S, S, dtype=weights.dtype)
    for path in itertools.product(range(S), repeat=L + 1):  # (s_L, ..., s_0): output to input
        w = torch.ones(B, dtype=weights.dtype)
        for step in range(L):  # layer L - step, from token path[step + 1] to token path[step]
            w = w * A_hat[L - 1 - step][:, path[step], path[step + 1]]
        R[:, path[0], path[-1]] += w
    return R


# --- the encoder ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ViTConfig:
    """A vision transformer: patch embedding, L pre-norm encoder blocks, pooling, a linear head.

    image_size: H or (H, W); patch_size: P (divides H and W); channels: C. The blocks are the
    book's decoder blocks in their GPT-2 form (LayerNorm, GELU MLP of width d_ff, biases),
    run without the causal mask. d_ff: None gives 4d. pool: "cls" (a learned [CLS] token,
    prepended) or "mean" (the mean of the patch tokens, no [CLS] token). n_classes: K > 0 adds a
    linear head; 0 makes the model an encoder whose forward returns the image embedding.
    """

    image_size: int | tuple[int, int] = 8
    patch_size: int = 2
    channels: int = 1
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int | None = None
    n_classes: int = 10
    pool: str = "cls"
    norm_eps: float = 1e-6
    name: str = ""

    def __post_init__(self) -> None:
        size = self.image_size
        size = (size, size) if isinstance(size, int) and not isinstance(size, bool) else size
        if not (isinstance(size, tuple) and len(size) == 2):
            raise TypeError(f"image_size must be an int or a pair (H, W), got {self.image_size!r}")
        object.__setattr__(self, "image_size", size)
        grid_size(size[0], size[1], self.patch_size)
        for field in ("channels", "d_model", "n_layers", "n_heads"):
            positive_int(getattr(self, field), field)
        divides(self.n_heads, "n_heads", self.d_model, "d_model")
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        positive_int(self.d_ff, "d_ff")
        integer(self.n_classes, "n_classes", low=0)
        one_of(self.pool, "pool", ("cls", "mean"))
        number(self.norm_eps, "norm_eps", 0.0)

    @property
    def grid(self) -> tuple[int, int]:
        """(G_H, G_W), eq. 31.1."""
        return grid_size(*self.image_size, self.patch_size)[:2]

    @property
    def n_patches(self) -> int:
        """T = G_H G_W."""
        return grid_size(*self.image_size, self.patch_size)[2]

    @property
    def patch_dim(self) -> int:
        """D = C P^2, the length of a flattened patch."""
        return self.channels * self.patch_size**2

    @property
    def n_tokens(self) -> int:
        """S: T patches, plus one with a [CLS] token."""
        return self.n_patches + (self.pool == "cls")

    def block_config(self) -> DecoderConfig:
        """The configuration of the encoder blocks: the decoder's GPT-2 form at this width (its
        vocabulary is never used by a block, hence vocab_size=1)."""
        return DecoderConfig(
            vocab_size=1,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            max_seq_len=self.n_tokens,
            norm="layer",
            norm_eps=self.norm_eps,
            positions="learned",
            mlp="gelu",
            bias=True,
        )


#: ViT-B/16 at 224 x 224 on ImageNet-1k (Dosovitskiy et al. 2021): 196 patches of 16 x 16 x 3.
VIT_B16 = ViTConfig(224, 16, 3, 768, 12, 12, 3072, 1000, "cls", 1e-12, "ViT-B/16")


def parameter_count(config: ViTConfig) -> dict[str, int]:
    """Parameters of a :class:`ViT`, by part: patch embedding, [CLS] token, positions, blocks,
    final norm, head, and their total."""
    d, f, K = config.d_model, config.d_ff, config.n_classes
    block = 2 * 2 * d + 4 * (d * d + d) + (d * f + f) + (f * d + d)  # 2 LayerNorms, attention, MLP
    parts = {
        "patch_embedding": config.patch_dim * d + d,
        "cls": d if config.pool == "cls" else 0,
        "positions": config.n_tokens * d,
        "blocks": config.n_layers * block,
        "final_norm": 2 * d,
        "head": d * K + K if K else 0,
    }
    parts["total"] = sum(parts.values())
    return parts


def forward_flops(config: ViTConfig) -> dict[str, int]:
    """Matmul FLOPs of one image's forward pass (a multiply-add is 2 FLOPs), by part.

    "patch_embedding": 2 T D d; "projections": 2 S 4 d^2 per layer; "attention": the scores
    Q K^T and the weighted values, 2 * 2 S^2 d per layer; "mlp": 2 * 2 S d d_ff per layer;
    "head": 2 d K. Norms, softmax and GELU are elementwise and not counted.
    """
    d, f, S, L = config.d_model, config.d_ff, config.n_tokens, config.n_layers
    parts = {
        "patch_embedding": 2 * config.n_patches * config.patch_dim * d,
        "projections": L * 2 * S * 4 * d * d,
        "attention": L * 2 * 2 * S * S * d,
        "mlp": L * 2 * 2 * S * d * f,
        "head": 2 * d * config.n_classes,
    }
    parts["total"] = sum(parts.values())
    return parts


class ViT(nn.Module):
    """A vision transformer (Dosovitskiy et al. 2021) built from the book's decoder blocks.

    Parameters: ``W_E`` (D, d), ``b_E`` (d,) the patch embedding; ``cls`` (d,) the [CLS] token
    (pool="cls" only); ``pos`` (S, d) learned positions; ``blocks``, L
    :class:`~mlbook.models.decoder.DecoderBlock` run with ``causal=False``; ``final_norm``;
    ``W_head`` (d, K), ``b_head`` (K,) with n_classes = K > 0.

    Args:
        config: a :class:`ViTConfig`.
        generator: seeds the initialisation.
        dtype: parameter dtype.
    """

    def __init__(
        self,
        config: ViTConfig,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        if not isinstance(config, ViTConfig):
            raise TypeError(f"config must be a ViTConfig, got {type(config).__name__}")
        self.config = c = config
        bc = c.block_config()

        def draw(*shape, std):
            return nn.Parameter(torch.randn(*shape, generator=generator, dtype=dtype) * std)

        self.W_E = draw(c.patch_dim, c.d_model, std=1 / math.sqrt(c.patch_dim))
        self.b_E = nn.Parameter(torch.zeros(c.d_model, dtype=dtype))
        self.cls = draw(c.d_model, std=0.02) if c.pool == "cls" else None
        self.pos = draw(c.n_tokens, c.d_model, std=0.02)
        self.blocks = nn.ModuleList(
            DecoderBlock(bc, "attention", generator=generator, dtype=dtype)
            for _ in range(c.n_layers)
        )
        self.final_norm = Norm(bc, dtype=dtype)
        if c.n_classes:
            self.W_head = draw(c.d_model, c.n_classes, std=1 / math.sqrt(c.d_model))
            self.b_head = nn.Parameter(torch.zeros(c.n_classes, dtype=dtype))
        else:
            self.W_head = self.b_head = None

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """The encoder's input z_t = x_patch,t W_E + b_E + p_t, [CLS] first (eq. 31.3).

        x: (B, C, H, W) at the configured size -> (B, S, d).
        """
        shape_is(x, "x", (None, self.config.channels, *self.config.image_size))
        z = patch_embed(x, self.W_E, self.b_E, self.config.patch_size)  # (B, T, d)
        if self.cls is not None:
            z = torch.cat([self.cls.expand(z.shape[0], 1, -1), z], dim=1)  # (B, 1 + T, d)
        return z + self.pos

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """The final normalised token states h: (B, C, H, W) -> (B, S, d).

        Every block attends without a mask (eq. 31.4): each token sees every other.
        """
        h = self.embed(x)
        for block in self.blocks:
            h = block(h, causal=False)
        return self.final_norm(h)

    def pool(self, h: torch.Tensor) -> torch.Tensor:
        """The image embedding from the token states (eq. 31.5): h_cls, or the mean over the T
        patch tokens. h: (B, S, d) -> (B, d)."""
        return h[:, 0] if self.cls is not None else h.mean(dim=1)

    def encode(self, x: torch.Tensor, return_tokens: bool = False):
        """The image embedding (B, d); with ``return_tokens`` also the token states (B, S, d)."""
        h = self.tokens(x)
        return (self.pool(h), h) if return_tokens else self.pool(h)

    def forward(self, x: torch.Tensor, return_tokens: bool = False):
        """x: (B, C, H, W) -> logits (B, K), or the embedding (B, d) when n_classes = 0; with
        ``return_tokens`` also the token states (B, S, d)."""
        emb, h = self.encode(x, return_tokens=True)
        out = emb if self.W_head is None else emb @ self.W_head + self.b_head
        return (out, h) if return_tokens else out

    @torch.no_grad()
    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """The attention weights of every layer and head: (B, C, H, W) -> (L, B, n_h, S, S)."""
        h, maps = self.embed(x), []
        for block in self.blocks:
            _, w = block.attn(block.attn_norm(h), causal=False, return_weights=True)
            maps.append(w)  # (B, n_h, S, S)
            h = block(h, causal=False)
        return torch.stack(maps)

    def resized(self, image_size, mode: str = "bicubic") -> ViT:
        """A copy of the model for images of another size: the same weights, the patch position
        embeddings resampled to the new grid with :func:`interpolate_positions` (the [CLS]
        position is kept)."""
        c = self.config
        new = replace(c, image_size=image_size)
        model = ViT(new, dtype=self.W_E.dtype)
        state = {k: v for k, v in self.state_dict().items() if k != "pos"}
        model.load_state_dict(state, strict=False)
        start = 1 if self.cls is not None else 0
        with torch.no_grad():
            patches = interpolate_positions(self.pos[start:], c.grid, new.grid, mode)  # (T', d)
            model.pos.copy_(torch.cat([self.pos[:start], patches]))
        return model


# --- baselines of the same size -------------------------------------------------------------------


def small_mlp(
    image_size: tuple[int, int] = (8, 8), channels: int = 1, hidden=(48, 32), n_classes: int = 10
) -> nn.Sequential:
    """A multilayer perceptron on the flattened pixels, GELU between its linear layers: no prior
    on the image's geometry at all. (B, C, H, W) -> (B, K)."""
    widths = [channels * image_size[0] * image_size[1], *hidden]
    layers: list[nn.Module] = [nn.Flatten()]
    for a, b in zip(widths[:-1], widths[1:], strict=True):
        layers += [nn.Linear(a, b), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(widths[-1], n_classes))


def small_cnn(
    image_size: tuple[int, int] = (8, 8),
    channels: int = 1,
    filters=(10, 20),
    hidden: int = 34,
    n_classes: int = 10,
) -> nn.Sequential:
    """A small convolutional network: per stage a 3 x 3 convolution (padding 1), GELU and 2 x 2
    max pooling, then a GELU MLP head. Locality and translation equivariance are built in.
    (B, C, H, W) -> (B, K); H and W must be divisible by 2^stages."""
    stages = len(filters)
    for side, name in zip(image_size, ("height", "width"), strict=True):
        divides(2**stages, "2^stages", side, name)
    layers: list[nn.Module] = []
    for a, b in zip((channels, *filters[:-1]), filters, strict=True):
        layers += [nn.Conv2d(a, b, 3, padding=1), nn.GELU(), nn.MaxPool2d(2)]
    flat = filters[-1] * (image_size[0] >> stages) * (image_size[1] >> stages)
    head = [nn.Flatten(), nn.Linear(flat, hidden), nn.GELU(), nn.Linear(hidden, n_classes)]
    return nn.Sequential(*layers, *head)
