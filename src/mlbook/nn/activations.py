"""Activation functions, their closed-form derivatives, and the gated SwiGLU FFN (chapter 11).

Shape legend
    x      (...,) any shape: every activation and derivative acts elementwise
    N      number of inputs in a batch
    d      model width (input and output size of a feed-forward block)
    h      hidden width of the feed-forward block
    W, V   (d, h) gate and value projections of SwiGLU; W1 (d, h) of the plain FFN
    W2     (h, d) output projection

The activations and their derivatives are pure functions of torch tensors. Each derivative is
written in closed form, the way the formula sheet states it, so that autograd can serve as an
independent check. ``nn.Module`` appears only where parameters live: the two feed-forward
blocks. Bad input raises ``TypeError`` (not a floating-point tensor) or ``ValueError`` (shapes,
sizes), naming what was wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

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
    "count_parameters",
]

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_TANH_A = math.sqrt(2.0 / math.pi)  # sqrt(2/pi), the slope of the tanh argument
_GELU_TANH_B = 0.044715  # the cubic coefficient of the tanh approximation


def _float_tensor(x, name: str = "x") -> torch.Tensor:
    """Return ``x`` if it is a floating-point tensor, else raise ``TypeError``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must have a floating-point dtype, got {x.dtype}")
    return x


# --- eq. 11.1: sigmoid and tanh -------------------------------------------------------------------


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    """The logistic function sigma(x) = 1 / (1 + exp(-x)), elementwise, without overflow.

    Evaluated as 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0 with e = exp(-|x|) <= 1,
    so ``exp`` never overflows and both tails keep full relative precision.
    """
    _float_tensor(x)
    e = torch.exp(-x.abs())
    return torch.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def sigmoid_grad(x: torch.Tensor) -> torch.Tensor:
    """sigma'(x) = sigma(x) (1 - sigma(x)), elementwise. Implements eq. 11.1 (left)."""
    s = sigmoid(x)
    return s * (1.0 - s)


def tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) = (e^x - e^-x) / (e^x + e^-x) = 2 sigma(2x) - 1, elementwise (``torch.tanh``)."""
    return torch.tanh(_float_tensor(x))


def tanh_grad(x: torch.Tensor) -> torch.Tensor:
    """tanh'(x) = 1 - tanh^2(x), elementwise. Implements eq. 11.1 (right)."""
    t = tanh(x)
    return 1.0 - t * t


# --- eq. 11.2: ReLU and softplus ------------------------------------------------------------------


def relu(x: torch.Tensor) -> torch.Tensor:
    """ReLU(x) = max(x, 0), elementwise."""
    _float_tensor(x)
    return torch.where(x > 0, x, torch.zeros_like(x))


def relu_grad(x: torch.Tensor) -> torch.Tensor:
    """ReLU'(x) = 1{x > 0}, elementwise. Implements eq. 11.2 (left).

    At the kink x = 0 the derivative does not exist; the indicator picks the value 0 there, the
    same convention as PyTorch's autograd (any value in [0, 1] is a valid subgradient).
    """
    _float_tensor(x)
    return (x > 0).to(x.dtype)


def softplus_naive(x: torch.Tensor) -> torch.Tensor:
    """softplus(x) = log(1 + exp(x)) exactly as written: the reference for :func:`softplus`.

    Overflows to ``inf`` once exp(x) does (x > 88 in float32, x > 709 in float64), and loses
    all precision for x < -36.7 in float64, where 1 + exp(x) rounds to 1.
    """
    _float_tensor(x)
    return torch.log(1.0 + torch.exp(x))


def softplus(x: torch.Tensor) -> torch.Tensor:
    """softplus(x) = log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), elementwise, stable.

    The rewritten form needs exp only of non-positive numbers, so it never overflows, and
    ``log1p`` keeps the tiny values of the left tail accurate.
    """
    _float_tensor(x)
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


def softplus_grad(x: torch.Tensor) -> torch.Tensor:
    """softplus'(x) = sigma(x), elementwise. Implements eq. 11.2 (right).

    From d/dx log(1 + e^x) = e^x / (1 + e^x) = 1 / (1 + e^-x).
    """
    return sigmoid(x)


# --- eq. 11.3: GELU -------------------------------------------------------------------------------


def normal_pdf(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = exp(-x^2 / 2) / sqrt(2 pi), the standard normal density, elementwise."""
    _float_tensor(x)
    return torch.exp(-0.5 * x * x) * _INV_SQRT_2PI


def normal_cdf(x: torch.Tensor) -> torch.Tensor:
    """Phi(x) = P(Z <= x) for Z ~ N(0, 1), elementwise, as erfc(-x / sqrt 2) / 2.

    The complementary error function keeps full relative precision in the left tail, where the
    textbook form (1 + erf(x / sqrt 2)) / 2 cancels to 0 (for x < -8.37 in float64).
    """
    _float_tensor(x)
    return 0.5 * torch.special.erfc(-x / _SQRT2)


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU(x) = x Phi(x), the exact Gaussian error linear unit, elementwise (eq. 11.3)."""
    return x * normal_cdf(x)


def gelu_grad(x: torch.Tensor) -> torch.Tensor:
    """GELU'(x) = Phi(x) + x phi(x), elementwise. Implements eq. 11.3 (right).

    Product rule on x Phi(x), with Phi' = phi.
    """
    return normal_cdf(x) + x * normal_pdf(x)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """The tanh approximation of GELU: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

    Replaces Phi(x) by (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) / 2; the same formula as
    ``F.gelu(x, approximate="tanh")`` and GPT-2's ``gelu_new``.
    """
    _float_tensor(x)
    return 0.5 * x * (1.0 + torch.tanh(_GELU_TANH_A * (x + _GELU_TANH_B * x * x * x)))


# --- eq. 11.4: SiLU (Swish) -----------------------------------------------------------------------


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU(x) = x sigma(x), also called Swish (with beta = 1), elementwise (eq. 11.4)."""
    return x * sigmoid(x)


def silu_grad(x: torch.Tensor) -> torch.Tensor:
    """SiLU'(x) = sigma(x) + x sigma(x) (1 - sigma(x)), elementwise. Implements eq. 11.4 (right).

    Product rule on x sigma(x), with sigma' from eq. 11.1.
    """
    s = sigmoid(x)
    return s + x * s * (1.0 - s)


#: name -> (activation, its closed-form derivative), in the order of the formula sheet.
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
    """Which ReLU units never fire on a batch: all pre-activations z <= 0.

    Such a unit outputs 0 for every input and, by eq. 11.2, receives gradient
    ReLU'(z) = 0 for every input, so gradient descent on this batch never changes its weights.

    Args:
        pre: (N, h) pre-activations z = x W1 + b1 of h ReLU units on N inputs.

    Returns:
        (h,) bool mask, True for a dead unit.
    """
    _float_tensor(pre, "pre")
    if pre.ndim != 2 or pre.shape[0] == 0 or pre.shape[1] == 0:
        raise ValueError(f"pre must be a non-empty (N, h) matrix, got shape {tuple(pre.shape)}")
    return (pre <= 0).all(dim=0)


def dead_fraction(pre: torch.Tensor) -> float:
    """The fraction of the h units that are dead on the batch (see :func:`dead_units`)."""
    return float(dead_units(pre).double().mean())


# --- eq. 11.5: the SwiGLU feed-forward block -----------------------------------------------------


def swiglu_hidden_dim(d: int, multiple_of: int = 1) -> int:
    """The SwiGLU hidden width h = 8d/3, rounded up to a multiple of ``multiple_of`` (eq. 11.5).

    A plain FFN with hidden width 4d has 2 * d * 4d = 8 d^2 weights; SwiGLU has three (d, h)
    matrices, 3 d h weights, and 3 d h = 8 d^2 gives h = 8d/3. As in LLaMA, int(8d/3) is
    rounded *up* to a hardware-friendly multiple (LLaMA-7B: d = 4096, multiple_of = 256,
    h = 11008).
    """
    for name, v in (("d", d), ("multiple_of", multiple_of)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    h = (8 * d) // 3
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


def _ffn_shapes(x: torch.Tensor, mats: dict[str, torch.Tensor]) -> None:
    _float_tensor(x)
    for name, m in mats.items():
        _float_tensor(m, name)
        if m.ndim != 2:
            raise ValueError(f"{name} must be a matrix, got shape {tuple(m.shape)}")
    if x.ndim < 1:
        raise ValueError("x must have a feature axis, got a 0-d tensor")


def swiglu_ffn(x: torch.Tensor, W: torch.Tensor, V: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """FFN(x) = (SiLU(x W) * (x V)) W2: the SwiGLU feed-forward block. Implements eq. 11.5.

    Args:
        x: (..., d) inputs (row vectors, as on the sheet).
        W: (d, h) gate projection, passed through a = SiLU.
        V: (d, h) value projection (linear).
        W2: (h, d_out) output projection; d_out = d in a transformer block.

    Returns:
        (..., d_out).
    """
    _ffn_shapes(x, {"W": W, "V": V, "W2": W2})
    d = x.shape[-1]
    if W.shape[0] != d or V.shape != W.shape or W2.shape[0] != W.shape[1]:
        raise ValueError(
            f"need x (..., d), W and V (d, h), W2 (h, d_out); got x "
            f"{tuple(x.shape)}, W {tuple(W.shape)}, V {tuple(V.shape)}, "
            f"W2 {tuple(W2.shape)}"
        )
    return (silu(x @ W) * (x @ V)) @ W2


def swiglu_ffn_fused(x: torch.Tensor, WV: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """SwiGLU with the gate and value projections fused into one matmul (eq. 11.5).

    The optimised layout of many implementations: one (d, 2h) weight ``WV = [W | V]`` reads x
    once; the result is split into the gate and value halves. :func:`swiglu_ffn` is its naive
    reference.

    Args:
        x: (..., d) inputs.
        WV: (d, 2h) the concatenation ``torch.cat([W, V], dim=1)``.
        W2: (h, d_out) output projection.
    """
    _ffn_shapes(x, {"WV": WV, "W2": W2})
    if WV.shape[0] != x.shape[-1] or WV.shape[1] != 2 * W2.shape[0]:
        raise ValueError(
            f"need x (..., d), WV (d, 2h), W2 (h, d_out); got x {tuple(x.shape)}, "
            f"WV {tuple(WV.shape)}, W2 {tuple(W2.shape)}"
        )
    u, v = (x @ WV).chunk(2, dim=-1)  # (..., 2h) -> gate (..., h) and value (..., h)
    return (silu(u) * v) @ W2


def gelu_ffn(x: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """The standard (ungated) feed-forward block GELU(x W1) W2, the baseline of eq. 11.5.

    Args:
        x: (..., d) inputs.
        W1: (d, h) input projection (h = 4d in GPT-2 and BERT).
        W2: (h, d_out) output projection.
    """
    _ffn_shapes(x, {"W1": W1, "W2": W2})
    if W1.shape[0] != x.shape[-1] or W2.shape[0] != W1.shape[1]:
        raise ValueError(
            f"need x (..., d), W1 (d, h), W2 (h, d_out); got x {tuple(x.shape)}, "
            f"W1 {tuple(W1.shape)}, W2 {tuple(W2.shape)}"
        )
    return gelu(x @ W1) @ W2


def _init_matrix(
    rows: int, cols: int, generator: torch.Generator | None, dtype: torch.dtype
) -> nn.Parameter:
    """A (rows, cols) weight with N(0, 1/rows) entries: unit-variance outputs for unit inputs."""
    w = torch.randn(rows, cols, generator=generator, dtype=dtype) / math.sqrt(rows)
    return nn.Parameter(w)


def _check_widths(d: int, h: int) -> None:
    for name, v in (("d", d), ("h", h)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")


class SwiGLUFFN(nn.Module):
    """The SwiGLU feed-forward block of LLaMA-style transformers, without biases (eq. 11.5).

    Parameters: ``W`` (d, h), ``V`` (d, h), ``W2`` (h, d): 3 d h weights in all. The default
    h = :func:`swiglu_hidden_dim` (d) matches the 8 d^2 weights of :class:`GELUFFN` (d, 4d).

    Args:
        d: model width.
        h: hidden width (default 8d/3, rounded down to an int).
        generator: seeds the N(0, 1/fan_in) initialisation.
        dtype: parameter dtype.
    """

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
        _check_widths(d, h)
        self.d, self.h = d, h
        self.W = _init_matrix(d, h, generator, dtype)
        self.V = _init_matrix(d, h, generator, dtype)
        self.W2 = _init_matrix(h, d, generator, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        return swiglu_ffn(x, self.W, self.V, self.W2)


class GELUFFN(nn.Module):
    """The standard GELU feed-forward block GELU(x W1) W2 of GPT-2/BERT, without biases.

    Parameters: ``W1`` (d, h), ``W2`` (h, d): 2 d h weights, 8 d^2 for the default h = 4d.

    Args:
        d: model width.
        h: hidden width (default 4d).
        generator: seeds the N(0, 1/fan_in) initialisation.
        dtype: parameter dtype.
    """

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
        _check_widths(d, h)
        self.d, self.h = d, h
        self.W1 = _init_matrix(d, h, generator, dtype)
        self.W2 = _init_matrix(h, d, generator, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        return gelu_ffn(x, self.W1, self.W2)


def count_parameters(module: nn.Module) -> int:
    """The number of scalar parameters of a module: the sum of ``numel`` over its tensors."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    return sum(p.numel() for p in module.parameters())
