"""Activation functions, their closed-form derivatives, and the gated SwiGLU FFN (chapter 11).

Shape legend
    x      (...,) any shape: every activation and derivative acts elementwise
    N      number of inputs in a batch
    d      model width (input and output size of a feed-forward block)
    h      hidden width of the feed-forward block
    W, V   (d, h) gate and value projections of SwiGLU; W1 (d, h) of the plain FFN
    W2     (h, d) output projection
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from ..validation import float_tensor, positive_int, same_shape, shape_is

__all__ = [
    "sigmoid",
    "sigmoid_grad",
    "tanh",
    "tanh_grad",
    "relu",
    "relu_grad",
    "softplus",
    "softplus_naive",
    "softplus_grad",
    "normal_pdf",
    "normal_cdf",
    "gelu",
    "gelu_grad",
    "gelu_tanh",
    "silu",
    "silu_grad",
    "ACTIVATIONS",
    "dead_units",
    "dead_fraction",
    "swiglu_hidden_dim",
    "swiglu_ffn",
    "swiglu_ffn_fused",
    "gelu_ffn",
    "SwiGLUFFN",
    "GELUFFN",
    "n_parameters",
]

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_TANH_A = math.sqrt(2.0 / math.pi)  # sqrt(2/pi), the slope of the tanh argument
_GELU_TANH_B = 0.044715  # the cubic coefficient of the tanh approximation


# --- eq. 11.1: sigmoid and tanh -------------------------------------------------------------------


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    """sigma(x) = 1 / (1 + exp(-x)), elementwise, from e = exp(-|x|) <= 1 (no overflow)."""
    e = torch.exp(-x.abs())
    return torch.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def sigmoid_grad(x: torch.Tensor) -> torch.Tensor:
    """sigma'(x) = sigma(x) (1 - sigma(x)), elementwise. Implements eq. 11.1 (left)."""
    s = sigmoid(x)
    return s * (1.0 - s)


def tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) = (e^x - e^-x) / (e^x + e^-x) = 2 sigma(2x) - 1, elementwise (``torch.tanh``)."""
    return torch.tanh(x)


def tanh_grad(x: torch.Tensor) -> torch.Tensor:
    """tanh'(x) = 1 - tanh^2(x), elementwise. Implements eq. 11.1 (right)."""
    t = tanh(x)
    return 1.0 - t * t


# --- eq. 11.2: ReLU and softplus ------------------------------------------------------------------


def relu(x: torch.Tensor) -> torch.Tensor:
    """ReLU(x) = max(x, 0), elementwise."""
    return torch.where(x > 0, x, torch.zeros_like(x))


def relu_grad(x: torch.Tensor) -> torch.Tensor:
    """ReLU'(x) = 1{x > 0} (0 at the kink, as autograd). Implements eq. 11.2 (left)."""
    return (x > 0).to(x.dtype)


def softplus_naive(x: torch.Tensor) -> torch.Tensor:
    """softplus(x) = log(1 + exp(x)) as written (overflows): the reference for softplus."""
    return torch.log(1.0 + torch.exp(x))


def softplus(x: torch.Tensor) -> torch.Tensor:
    """softplus(x) = max(x, 0) + log1p(exp(-|x|)), elementwise, without overflow."""
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


def softplus_grad(x: torch.Tensor) -> torch.Tensor:
    """softplus'(x) = sigma(x), elementwise. Implements eq. 11.2 (right)."""
    return sigmoid(x)


# --- eq. 11.3: GELU -------------------------------------------------------------------------------


def normal_pdf(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = exp(-x^2 / 2) / sqrt(2 pi), the standard normal density, elementwise."""
    return torch.exp(-0.5 * x * x) * _INV_SQRT_2PI


def normal_cdf(x: torch.Tensor) -> torch.Tensor:
    """Phi(x) = erfc(-x / sqrt 2) / 2, elementwise, accurate in the left tail."""
    return 0.5 * torch.special.erfc(-x / _SQRT2)


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU(x) = x Phi(x), the exact Gaussian error linear unit, elementwise (eq. 11.3)."""
    return x * normal_cdf(x)


def gelu_grad(x: torch.Tensor) -> torch.Tensor:
    """GELU'(x) = Phi(x) + x phi(x), elementwise. Implements eq. 11.3 (right)."""
    return normal_cdf(x) + x * normal_pdf(x)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """The tanh approximation x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) of GELU."""
    return 0.5 * x * (1.0 + torch.tanh(_GELU_TANH_A * (x + _GELU_TANH_B * x * x * x)))


# --- eq. 11.4: SiLU (Swish) -----------------------------------------------------------------------


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU(x) = x sigma(x), also called Swish (with beta = 1), elementwise (eq. 11.4)."""
    return x * sigmoid(x)


def silu_grad(x: torch.Tensor) -> torch.Tensor:
    """SiLU'(x) = sigma(x) + x sigma(x) (1 - sigma(x)), elementwise. Implements eq. 11.4."""
    s = sigmoid(x)
    return s + x * s * (1.0 - s)


#: name -> (activation, its closed-form derivative), in the order of chapter 11 (eqs. 11.1-11.4).
ACTIVATIONS: dict[
    str, tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]
] = {
    "sigmoid": (sigmoid, sigmoid_grad),
    "tanh": (tanh, tanh_grad),
    "ReLU": (relu, relu_grad),
    "softplus": (softplus, softplus_grad),
    "GELU": (gelu, gelu_grad),
    "SiLU": (silu, silu_grad),
}


# --- dead ReLUs -----------------------------------------------------------------------------------


def dead_units(pre: torch.Tensor) -> torch.Tensor:
    """Which ReLU units never fire on a batch (all z <= 0): their gradient is 0 (eq. 11.2).

    pre: (N, h) pre-activations. Returns (h,) bool, True for a dead unit."""
    float_tensor(pre, "pre", ndim=2, not_empty=True)
    return (pre <= 0).all(dim=0)


def dead_fraction(pre: torch.Tensor) -> float:
    """The fraction of the h units that are dead on the batch (see :func:`dead_units`)."""
    return float(dead_units(pre).double().mean())


# --- eq. 11.5: the SwiGLU feed-forward block -----------------------------------------------------


def swiglu_hidden_dim(d: int, multiple_of: int = 1) -> int:
    """SwiGLU hidden width: floor(8d/3) rounded up to a multiple of ``multiple_of`` (eq. 11.5).

    The three d x h matrices then hold 3dh ~ 8d^2 weights, as many as a two-matrix MLP of width
    4d (exactly when 3 divides d and no rounding happens). Llama-2-7B: d = 4096, multiple 256
    gives 11008."""
    d = positive_int(d, "d")
    multiple_of = positive_int(multiple_of, "multiple_of")
    h = (8 * d) // 3
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


def swiglu_ffn(x: torch.Tensor, W: torch.Tensor, V: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """(SiLU(x W) * (x V)) W2, the SwiGLU feed-forward block. Implements eq. 11.5.

    x: (..., d); W, V: (d, h); W2: (h, d_out). Returns (..., d_out)."""
    same_shape(W, V, ("W", "V"))
    return (silu(x @ W) * (x @ V)) @ W2


def swiglu_ffn_fused(x: torch.Tensor, WV: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """SwiGLU with gate and value fused into one matmul; :func:`swiglu_ffn` is the reference.

    x: (..., d); WV: (d, 2h) = [W | V]; W2: (h, d_out). Returns (..., d_out)."""
    shape_is(WV, "WV", (None, 2 * W2.shape[0]))  # gate and value halves, each as wide as W2
    u, v = (x @ WV).chunk(2, dim=-1)  # (..., 2h) -> gate (..., h) and value (..., h)
    return (silu(u) * v) @ W2


def gelu_ffn(x: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """The ungated block GELU(x W1) W2, the baseline of eq. 11.5.

    x: (..., d); W1: (d, h); W2: (h, d_out). Returns (..., d_out)."""
    return gelu(x @ W1) @ W2


def _init_matrix(
    rows: int, cols: int, generator: torch.Generator | None, dtype: torch.dtype
) -> nn.Parameter:
    """A (rows, cols) weight with N(0, 1/rows) entries: unit-variance outputs for unit inputs."""
    w = torch.randn(rows, cols, generator=generator, dtype=dtype) / math.sqrt(rows)
    return nn.Parameter(w)


class SwiGLUFFN(nn.Module):
    """The SwiGLU block (eq. 11.5) without biases: W, V (d, h), W2 (h, d), N(0, 1/fan_in) init.

    h defaults to :func:`swiglu_hidden_dim` (d), matching the 8 d^2 weights of :class:`GELUFFN`."""

    def __init__(
        self,
        d: int,
        h: int | None = None,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        h = swiglu_hidden_dim(d) if h is None else h
        positive_int(d, "d")
        positive_int(h, "h")
        self.d, self.h = d, h
        self.W = _init_matrix(d, h, generator, dtype)
        self.V = _init_matrix(d, h, generator, dtype)
        self.W2 = _init_matrix(h, d, generator, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        return swiglu_ffn(x, self.W, self.V, self.W2)


class GELUFFN(nn.Module):
    """The GELU block GELU(x W1) W2 without biases: W1 (d, h), W2 (h, d), h = 4d by default."""

    def __init__(
        self,
        d: int,
        h: int | None = None,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        h = 4 * d if h is None else h
        positive_int(d, "d")
        positive_int(h, "h")
        self.d, self.h = d, h
        self.W1 = _init_matrix(d, h, generator, dtype)
        self.W2 = _init_matrix(h, d, generator, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        return gelu_ffn(x, self.W1, self.W2)


def n_parameters(module: nn.Module) -> int:
    """The number of scalar parameters of a module: the sum of ``numel`` over its tensors."""
    return sum(p.numel() for p in module.parameters())
