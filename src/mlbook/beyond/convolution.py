"""Convolution (chapter 45): a local, weight-shared linear map, as a sum, a matrix and a product.

The layer of a convolutional network is the cross-correlation of eq. 45.1 (deep learning calls it
convolution; nothing is flipped). This module computes it three ways, each checked against the
others and against ``torch.nn.functional.conv2d``: one output pixel at a time (the reference
:func:`conv2d_naive`), as the sparse, weight-shared matrix of eq. 45.3 (:func:`conv_matrix`), and
as one matrix product with the im2col matrix of eq. 45.4 (:func:`conv2d`). Around it: the output
size (eq. 45.2), the receptive field of a stack (eq. 45.5), translations (eq. 45.6), parameter
counts, and the two small classifiers that chapter 45 trains on the digits.

Shape legend
    B        batch size
    C, O     input and output channels (C_in, C_out)
    H, W     input height and width;  Ho, Wo output height and width (eq. 45.2);  L = Ho Wo
    k        kernel size (square k x k kernels);  s stride;  p padding;  d dilation
    x        (B, C, H, W) input images
    w        (O, C, k, k) kernel;  b (O,) bias
    y        (B, O, Ho, Wo) output
    cols     (B, C k k, L) the im2col matrix: one column per output position, rows ordered by
             channel, then kernel row, then kernel column (the layout of ``F.unfold``)
    T        (O Ho Wo, C H W) the convolution as a matrix acting on vec(x) (eq. 45.3); vec
             flattens in row-major order (channel, row, column)
    taps     (L, H W) for one channel pair: the index u k + v of the kernel entry w[u, v] that
             sits at each entry of T, or -1 where T is zero
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..validation import float_tensor, integer, one_of, positive_int, shape_is

__all__ = [
    "PADDING_MODES",
    "ConvLayer",
    "output_size",
    "stack_output_size",
    "receptive_field",
    "pad2d",
    "im2col",
    "conv2d",
    "conv2d_naive",
    "tap_map",
    "conv_matrix",
    "conv_params",
    "dense_params",
    "shift2d",
    "stack_forward",
    "gradient_support",
    "small_cnn",
    "mlp_classifier",
]

#: How the input is extended beyond its border: zeros, or wrapped around (a torus).
PADDING_MODES = ("zeros", "circular")


# --- eq. 45.2: output size; eq. 45.5: receptive field ---------------------------------------------


@dataclass(frozen=True)
class ConvLayer:
    """One convolution or pooling layer of a stack: its kernel size, stride, padding, dilation."""

    kernel: int
    stride: int = 1
    padding: int = 0
    dilation: int = 1

    def __post_init__(self) -> None:
        positive_int(self.kernel, "kernel")
        positive_int(self.stride, "stride")
        integer(self.padding, "padding", low=0)
        positive_int(self.dilation, "dilation")


def output_size(n: int, k: int, stride: int = 1, padding: int = 0, dilation: int = 1) -> int:
    """floor((n + 2p - d(k - 1) - 1) / s) + 1: outputs along an axis of n inputs. Eq. 45.2.

    n: input size; k: kernel size; stride s >= 1; padding p >= 0; dilation d >= 1.
    """
    n, k = positive_int(n, "n"), positive_int(k, "k")
    stride, dilation = positive_int(stride, "stride"), positive_int(dilation, "dilation")
    padding = integer(padding, "padding", 0)
    span = dilation * (k - 1) + 1  # the extent of the dilated kernel
    if span > n + 2 * padding:
        raise ValueError(
            f"k={k} with dilation={dilation} spans {span} inputs, more than the n + 2p = "
            f"{n + 2 * padding} of the padded input: no output position fits"
        )
    return (n + 2 * padding - span) // stride + 1


def stack_output_size(n: int, layers: Sequence[ConvLayer]) -> int:
    """The output size after applying ``layers`` in order to an axis of n inputs (eq. 45.2)."""
    for layer in layers:
        n = output_size(n, layer.kernel, layer.stride, layer.padding, layer.dilation)
    return n


def receptive_field(layers: Sequence[ConvLayer]) -> list[tuple[int, int]]:
    """r_l = r_{l-1} + d_l (k_l - 1) j_{l-1}, j_l = j_{l-1} s_l from r_0 = j_0 = 1. Eq. 45.5.

    Returns [(r_0, j_0), ..., (r_L, j_L)]: the receptive field r_l of one unit of layer l and
    the distance j_l, in input pixels, between neighbouring units of layer l (its jump).
    """
    r, j = 1, 1
    out = [(r, j)]
    for layer in layers:
        r, j = r + layer.dilation * (layer.kernel - 1) * j, j * layer.stride
        out.append((r, j))
    return out


# --- eq. 45.1 and eq. 45.4: the convolution, by im2col and one output pixel at a time -------------


def pad2d(x: torch.Tensor, padding: int, mode: str = "zeros") -> torch.Tensor:
    """x (..., H, W) extended by ``padding`` pixels on every side: zeros, or wrapped around."""
    one_of(mode, "padding_mode", PADDING_MODES)
    p = integer(padding, "padding", 0)
    if mode == "zeros":
        return F.pad(x, (p, p, p, p))
    h, w = x.shape[-2:]
    rows = torch.arange(-p, h + p) % h  # (H + 2p,) wrapped row indices
    cols = torch.arange(-p, w + p) % w
    return x[..., rows[:, None], cols[None, :]]  # (..., H + 2p, W + 2p)


def im2col(
    x: torch.Tensor,
    k: int,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    padding_mode: str = "zeros",
) -> torch.Tensor:
    """The im2col matrix of x: column l holds the C k k inputs under the kernel at position l.

    x: (B, C, H, W) -> cols (B, C k k, Ho Wo), rows ordered (channel, kernel row, kernel
    column) as in ``F.unfold``. Built from k k strided slices of the padded input. Eq. 45.4.
    """
    float_tensor(x, "x", ndim=4)
    ho = output_size(x.shape[2], k, stride, padding, dilation)
    wo = output_size(x.shape[3], k, stride, padding, dilation)
    s, d = stride, dilation
    xp = pad2d(x, padding, padding_mode)  # (B, C, H + 2p, W + 2p)
    taps = [
        xp[:, :, d * u : d * u + s * (ho - 1) + 1 : s, d * v : d * v + s * (wo - 1) + 1 : s]
        for u in range(k)
        for v in range(k)
    ]  # k k slices, each (B, C, Ho, Wo): the input under kernel entry (u, v)
    return torch.stack(taps, dim=2).reshape(x.shape[0], -1, ho * wo)  # (B, C k k, L)


def conv2d(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None = None,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    padding_mode: str = "zeros",
) -> torch.Tensor:
    """2-D cross-correlation as one matrix product, Y = W_(O, C k k) cols. Eqs. 45.1 and 45.4.

    x: (B, C, H, W); w: (O, C, k, k); b: (O,) or None. Returns y: (B, O, Ho, Wo).
    """
    float_tensor(x, "x", ndim=4)
    float_tensor(w, "w", ndim=4)
    shape_is(w, "w", (w.shape[0], x.shape[1], w.shape[-1], w.shape[-1]))  # square, C of x
    if b is not None:
        shape_is(b, "b", (w.shape[0],))  # no broadcast of a (1,) bias
    o, k = w.shape[0], w.shape[-1]
    ho = output_size(x.shape[2], k, stride, padding, dilation)  # eq. 45.2
    wo = output_size(x.shape[3], k, stride, padding, dilation)
    cols = im2col(x, k, stride, padding, dilation, padding_mode)  # (B, C k k, Ho Wo)
    y = w.reshape(o, -1) @ cols  # (O, C k k) @ (B, C k k, Ho Wo) -> (B, O, Ho Wo)
    if b is not None:
        y = y + b[:, None]
    return y.reshape(x.shape[0], o, ho, wo)


def conv2d_naive(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None = None,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    padding_mode: str = "zeros",
) -> torch.Tensor:
    """The reference of :func:`conv2d`: eq. 45.1 one output pixel at a time, by a loop.

    y[:, o, i, j] = b_o + sum_{c, u, v} w[o, c, u, v] x_pad[:, c, s i + d u, s j + d v].
    Same arguments and result as :func:`conv2d`.
    """
    float_tensor(x, "x", ndim=4)
    float_tensor(w, "w", ndim=4)
    shape_is(w, "w", (w.shape[0], x.shape[1], w.shape[-1], w.shape[-1]))  # square, C of x
    if b is not None:
        shape_is(b, "b", (w.shape[0],))  # no broadcast of a (1,) bias
    k, s, d = w.shape[-1], stride, dilation
    ho = output_size(x.shape[2], k, s, padding, d)  # eq. 45.2
    wo = output_size(x.shape[3], k, s, padding, d)
    span = d * (k - 1) + 1  # the extent of the dilated kernel
    xp = pad2d(x, padding, padding_mode)  # (B, C, H + 2p, W + 2p)
    y = x.new_zeros(x.shape[0], w.shape[0], ho, wo)
    for i in range(ho):
        for j in range(wo):
            window = xp[:, :, s * i : s * i + span : d, s * j : s * j + span : d]  # (B, C, k, k)
            y[:, :, i, j] = torch.einsum("bcuv,ocuv->bo", window, w)
    return y if b is None else y + b[:, None, None]


# --- eq. 45.3: the convolution as a sparse, weight-shared matrix ----------------------------------


def tap_map(
    k: int,
    size: tuple[int, int],
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    padding_mode: str = "zeros",
) -> torch.Tensor:
    """Which kernel entry sits where in the matrix of eq. 45.3, for one input-output channel pair.

    size: the input's (H, W). Returns taps (Ho Wo, H W) int64: u k + v at row i Wo + j and
    column m W + n when m = s i + d u - p and n = s j + d v - p (wrapped if circular), else -1.
    """
    h, w_ = size
    positive_int(h, "size[0]")
    positive_int(w_, "size[1]")
    one_of(padding_mode, "padding_mode", PADDING_MODES)
    ho = output_size(h, k, stride, padding, dilation)
    wo = output_size(w_, k, stride, padding, dilation)
    if padding_mode == "circular" and dilation * (k - 1) >= min(h, w_):
        raise ValueError(
            f"the dilated kernel spans {dilation * (k - 1) + 1} pixels, more than the input "
            f"{h} x {w_}: with circular padding two kernel entries would share a matrix entry"
        )
    taps = torch.full((ho * wo, h * w_), -1, dtype=torch.long)
    for i in range(ho):
        for j in range(wo):
            for u in range(k):
                for v in range(k):
                    m = stride * i + dilation * u - padding
                    n = stride * j + dilation * v - padding
                    if padding_mode == "circular":
                        m, n = m % h, n % w_
                    elif not (0 <= m < h and 0 <= n < w_):
                        continue  # this entry of the kernel lies on the zero padding
                    taps[i * wo + j, m * w_ + n] = u * k + v
    return taps


def conv_matrix(
    w: torch.Tensor,
    size: tuple[int, int],
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    padding_mode: str = "zeros",
) -> torch.Tensor:
    """The matrix T with vec(y) = T vec(x) for the convolution by w (no bias). Eq. 45.3.

    w: (O, C, k, k); size: the input's (H, W). Returns T (O Ho Wo, C H W): block (o, c) is
    w[o, c] spread over the pattern of :func:`tap_map`.
    """
    float_tensor(w, "w", ndim=4)
    o, c, k = w.shape[0], w.shape[1], w.shape[-1]
    shape_is(w, "w", (o, c, k, k))
    taps = tap_map(k, size, stride, padding, dilation, padding_mode)  # (L, H W)
    flat = torch.cat([w.reshape(o, c, k * k), w.new_zeros(o, c, 1)], dim=-1)  # index -1: zero
    blocks = flat[:, :, taps]  # (O, C, L, H W): block (o, c) of T
    return blocks.permute(0, 2, 1, 3).reshape(o * taps.shape[0], c * taps.shape[1])


def conv_params(c_in: int, c_out: int, k: int, bias: bool = True) -> int:
    """Parameters of a k x k convolution, C_out (C_in k^2 + 1): independent of the image size."""
    c_in, c_out, k = positive_int(c_in, "c_in"), positive_int(c_out, "c_out"), positive_int(k, "k")
    return c_out * (c_in * k * k + int(bias))


def dense_params(n_in: int, n_out: int, bias: bool = True) -> int:
    """Parameters of a dense layer from n_in to n_out features, n_out (n_in + 1)."""
    return positive_int(n_out, "n_out") * (positive_int(n_in, "n_in") + int(bias))


# --- eq. 45.6: translations; measuring a receptive field ------------------------------------------


def shift2d(x: torch.Tensor, dy: int, dx: int, mode: str = "circular") -> torch.Tensor:
    """The translation (tau x)[m, n] = x[m - dy, n - dx] of the last two axes of x.

    mode "circular": wrapped around (a torus); "zeros": the pixels shifted in are zero.
    """
    one_of(mode, "mode", PADDING_MODES)
    dy, dx = integer(dy, "dy"), integer(dx, "dx")
    y = torch.roll(x, shifts=(dy, dx), dims=(-2, -1))
    if mode == "zeros":
        h, w = x.shape[-2:]
        rows, cols = torch.arange(h), torch.arange(w)
        inside = (((rows - dy) >= 0) & ((rows - dy) < h))[:, None] & (
            ((cols - dx) >= 0) & ((cols - dx) < w)
        )[None, :]  # (H, W): the pixels that came from inside the image
        y = y * inside
    return y


def stack_forward(
    x: torch.Tensor,
    layers: Sequence[ConvLayer],
    kernels: Sequence[torch.Tensor] | None = None,
) -> torch.Tensor:
    """Apply a stack of one-channel convolutions with ``F.conv2d``, no nonlinearity, no bias.

    x: (B, 1, H, W); kernels: one (k, k) tensor per layer, all ones by default (then no
    entry of the gradient cancels, and its support is the receptive field). Returns the output.
    """
    float_tensor(x, "x", ndim=4)
    if kernels is not None and len(kernels) != len(layers):
        raise ValueError(
            f"kernels must hold one kernel per layer ({len(layers)}), got {len(kernels)}"
        )
    for idx, layer in enumerate(layers):
        k = layer.kernel
        kern = x.new_ones(k, k) if kernels is None else shape_is(kernels[idx], "kernel", (k, k))
        x = F.conv2d(x, kern[None, None], None, layer.stride, layer.padding, layer.dilation)
    return x


def gradient_support(
    f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, index: tuple[int, ...]
) -> tuple[torch.Tensor, int, int]:
    """The gradient of one output entry f(x)[index] with respect to x, and its support.

    x: (B, C, H, W). Returns (g, height, width): g (H, W) the gradient summed over batch and
    channels in absolute value, and the height and width of the box of its non-zero entries.
    """
    x = float_tensor(x, "x", ndim=4).detach().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x)[index], x)
    g = g.abs().sum(dim=(0, 1))  # (H, W)
    rows = torch.nonzero(g.sum(1)).flatten()
    cols = torch.nonzero(g.sum(0)).flatten()
    if rows.numel() == 0:
        return g, 0, 0
    return g, int(rows[-1] - rows[0]) + 1, int(cols[-1] - cols[0]) + 1


# --- the two classifiers of section 45.7 ----------------------------------------------------------


def small_cnn(c1: int, c2: int, k: int = 3, size: int = 8, n_classes: int = 10) -> nn.Sequential:
    """Two "same" k x k convolutions with ReLU and 2 x 2 max pooling, then a linear read-out.

    Input (B, 1, size, size) -> (B, c1, size/2, size/2) -> (B, c2, size/4, size/4) -> logits
    (B, n_classes). k must be odd (the padding (k - 1)/2 keeps the size); size divisible by 4.
    """
    c1, c2 = positive_int(c1, "c1"), positive_int(c2, "c2")
    k, size = positive_int(k, "k"), positive_int(size, "size")
    n_classes = positive_int(n_classes, "n_classes")
    if k % 2 == 0 or size % 4:
        raise ValueError(f"k must be odd and size divisible by 4, got k={k}, size={size}")
    return nn.Sequential(
        nn.Conv2d(1, c1, k, padding=k // 2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, k, padding=k // 2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),  # (B, c2 (size/4)^2)
        nn.Linear(c2 * (size // 4) ** 2, n_classes),
    )


def mlp_classifier(n_in: int, hidden: int, n_classes: int = 10) -> nn.Sequential:
    """Flatten, one hidden ReLU layer, a linear read-out: (B, ...) -> logits (B, n_classes)."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(positive_int(n_in, "n_in"), positive_int(hidden, "hidden")),
        nn.ReLU(),
        nn.Linear(hidden, positive_int(n_classes, "n_classes")),
    )
