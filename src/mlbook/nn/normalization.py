"""Normalisation layers and residual stacks (chapter 16): LayerNorm, RMSNorm and BatchNorm with
hand-derived backward passes beside full-Jacobian references; stacks of MLP blocks.

Shape legend
    B      batch size (the rows that BatchNorm normalises together)
    D      features: the axis LayerNorm and RMSNorm normalise; BatchNorm's channels
    H      hidden width of a block's MLP
    L      depth: the number of blocks in a stack
    (..., D)  any leading axes: LayerNorm and RMSNorm act on every row independently

16-bit inputs (float16, bfloat16) are normalised in float32 and the result cast back, as real
kernels do: float16's squares overflow its maximum 65504 from |x| = 256 on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..validation import (
    float_tensor,
    integer,
    number,
    one_of,
    positive_int,
    probability,
    same_shape,
    shape_is,
)

__all__ = [
    "standardize",
    "standardize_backward",
    "layer_norm",
    "layer_norm_backward",
    "layer_norm_jacobian",
    "layer_norm_backward_naive",
    "rms_norm",
    "rms_norm_backward",
    "rms_norm_jacobian",
    "rms_norm_backward_naive",
    "update_running_stats",
    "batch_norm_train",
    "batch_norm_eval",
    "batch_norm_backward",
    "ARCHS",
    "init_blocks",
    "mlp_block",
    "mlp_block_vjp",
    "stack_forward",
    "residual_backward",
    "stack_grad_norms",
]

ARCHS = ("plain", "residual", "pre_ln", "post_ln")


def _accumulation_dtype(x: torch.Tensor) -> torch.dtype:
    """float32 for a 16-bit float tensor (its statistics are accumulated in float32), else its
    own dtype."""
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


def _affine(v, name: str, size: int, like: torch.Tensor, default: float) -> torch.Tensor:
    """``v`` of shape (size,) (it must not broadcast), or a (size,) tensor of ``default``."""
    if v is None:
        return torch.full((size,), default, dtype=like.dtype, device=like.device)
    return shape_is(v, name, (size,))


# --- eq. 16.1: standardisation, LayerNorm --------------------------------------------------------


def standardize(
    x: torch.Tensor, dim: int = -1, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor]:
    """x_hat = (x - mu) / sqrt(sigma^2 + eps) along ``dim``, with the biased variance (eq. 16.1).

    x: any shape with at least one axis. dim: the axis whose mean and variance are taken. eps:
    added to the variance; keeps a constant input finite. Returns ``(x_hat, inv_std)``: x_hat has
    the shape of x; inv_std = 1/sqrt(sigma^2 + eps) has size 1 along ``dim`` (kept for the
    backward pass)."""
    float_tensor(x, "x", min_ndim=1, not_empty=True)
    eps = number(eps, "eps", 0.0)
    xa = x.to(_accumulation_dtype(x))  # 16-bit input: float32, its squares would overflow
    mu = xa.mean(dim, keepdim=True)
    var = ((xa - mu) ** 2).mean(dim, keepdim=True)  # biased: divides by the size of dim
    if eps == 0 and bool((var == 0).any()):
        raise ValueError("x has a constant slice and eps = 0: its variance is zero")
    inv_std = torch.rsqrt(var + eps)
    return ((xa - mu) * inv_std).to(x.dtype), inv_std.to(x.dtype)


def standardize_backward(
    g: torch.Tensor, x_hat: torch.Tensor, inv_std: torch.Tensor, dim: int = -1
) -> torch.Tensor:
    """Vector-Jacobian product of :func:`standardize`: the gradient at x from the one at x_hat.

    g: upstream gradient, shape of x_hat. x_hat, inv_std: the outputs of :func:`standardize`."""
    same_shape(g, x_hat, ("g", "x_hat"))
    return inv_std * (g - g.mean(dim, keepdim=True) - x_hat * (g * x_hat).mean(dim, keepdim=True))


def layer_norm(
    x: torch.Tensor,
    gamma: torch.Tensor | None = None,
    beta: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """LayerNorm: y = gamma * x_hat + beta, x_hat standardised over the last axis (eq. 16.1).

    x: (..., D). gamma, beta: (D,) gain and bias, or None for 1 and 0. A 16-bit x is normalised
    in float32 and the result rounded once to its dtype."""
    D = x.shape[-1]
    gamma = _affine(gamma, "gamma", D, x, 1.0)
    beta = _affine(beta, "beta", D, x, 0.0)
    acc = _accumulation_dtype(x)  # float32 for float16/bfloat16 input
    x_hat, _ = standardize(x.to(acc), -1, eps)
    y = gamma.to(acc) * x_hat + beta.to(acc)  # float32 for 16-bit input; rounded once below
    return y.to(torch.promote_types(x.dtype, torch.promote_types(gamma.dtype, beta.dtype)))


def _sum_leading(t: torch.Tensor) -> torch.Tensor:
    """(..., D) -> (D,): sum over every axis but the last (a parameter's gradient)."""
    return t.reshape(-1, t.shape[-1]).sum(0)  # (N, D) -> (D,)


def layer_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor | None = None, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hand-derived gradients of :func:`layer_norm` (recomputes the statistics from x).

    dy: (..., D) upstream gradient. x: (..., D) the forward input. gamma: (D,) or None. Returns
    ``(dx, dgamma, dbeta)`` with shapes (..., D), (D,), (D,)."""
    same_shape(dy, x, ("dy", "x"))
    gamma = _affine(gamma, "gamma", x.shape[-1], x, 1.0)
    x_hat, inv_std = standardize(x, -1, eps)
    dx = standardize_backward(dy * gamma, x_hat, inv_std, -1)
    return dx, _sum_leading(dy * x_hat), _sum_leading(dy)


def layer_norm_jacobian(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """The full Jacobian of x_hat with respect to x for every row: s (I - 11^T/D - x_hat x_hat^T/D).

    x: (..., D). Returns (..., D, D); entry [..., i, j] = d x_hat_i / d x_j."""
    D = x.shape[-1]
    x_hat, inv_std = standardize(x, -1, eps)
    eye = torch.eye(D, dtype=x.dtype, device=x.device)
    outer = x_hat.unsqueeze(-1) * x_hat.unsqueeze(-2)  # (..., D, 1) * (..., 1, D) -> (..., D, D)
    return inv_std.unsqueeze(-1) * (eye - 1.0 / D - outer / D)


def layer_norm_backward_naive(
    dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """Reference for :func:`layer_norm_backward`'s dx: multiply by the full (D, D) Jacobian."""
    same_shape(dy, x, ("dy", "x"))
    gamma = _affine(gamma, "gamma", x.shape[-1], x, 1.0)
    J = layer_norm_jacobian(x, eps)  # (..., D, D)
    return torch.einsum("...i,...ij->...j", dy * gamma, J)  # (..., D)


# --- eq. 16.2: RMSNorm ------------------------------------------------------------------------


def _rms_stats(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    xa = x.to(_accumulation_dtype(x))  # 16-bit input: float32, its squares would overflow
    ms = (xa * xa).mean(-1, keepdim=True)
    if eps == 0 and bool((ms == 0).any()):
        raise ValueError("x has an all-zero row and eps = 0: its RMS is zero")
    inv_rms = torch.rsqrt(ms + eps)  # (..., 1)
    return (xa * inv_rms).to(x.dtype), inv_rms.to(x.dtype)


def rms_norm(x: torch.Tensor, gamma: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm(x) = gamma * x / sqrt(mean_j x_j^2 + eps) over the last axis (eq. 16.2).

    x: (..., D). gamma: (D,) gain, or None for 1. A 16-bit x is normalised in float32 and the
    result rounded once to its dtype."""
    gamma = _affine(gamma, "gamma", x.shape[-1], x, 1.0)
    acc = _accumulation_dtype(x)  # float32 for float16/bfloat16 input
    x_hat, _ = _rms_stats(x.to(acc), number(eps, "eps", 0.0))
    return (gamma.to(acc) * x_hat).to(torch.promote_types(x.dtype, gamma.dtype))  # rounded once


def rms_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor | None = None, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hand-derived gradients of :func:`rms_norm`.

    Returns ``(dx, dgamma)`` with shapes (..., D) and (D,)."""
    same_shape(dy, x, ("dy", "x"))
    gamma = _affine(gamma, "gamma", x.shape[-1], x, 1.0)
    x_hat, inv_rms = _rms_stats(x, number(eps, "eps", 0.0))
    g = dy * gamma
    dx = inv_rms * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
    return dx, _sum_leading(dy * x_hat)


def rms_norm_jacobian(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Full Jacobian of x / rms(x) for every row: (I - x_hat x_hat^T / D) / r, shape (..., D, D)."""
    x_hat, inv_rms = _rms_stats(x, number(eps, "eps", 0.0))
    eye = torch.eye(x.shape[-1], dtype=x.dtype, device=x.device)
    outer = x_hat.unsqueeze(-1) * x_hat.unsqueeze(-2)  # (..., D, D)
    return inv_rms.unsqueeze(-1) * (eye - outer / x.shape[-1])


def rms_norm_backward_naive(
    dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor | None = None, eps: float = 1e-6
) -> torch.Tensor:
    """Reference for :func:`rms_norm_backward`'s dx through the full Jacobian (O(D^2) per row)."""
    same_shape(dy, x, ("dy", "x"))
    gamma = _affine(gamma, "gamma", x.shape[-1], x, 1.0)
    return torch.einsum("...i,...ij->...j", dy * gamma, rms_norm_jacobian(x, eps))


# --- BatchNorm: eq. 16.1 along the batch --------------------------------------------------------


def update_running_stats(
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    batch_mean: torch.Tensor,
    batch_var: torch.Tensor,
    batch_size: int,
    momentum: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's running-average update: new = (1 - momentum) * old + momentum * batch statistic.

    running_mean, running_var: (D,) the current averages. batch_mean, batch_var: (D,) this
    batch's mean and biased variance. batch_size: B >= 2."""
    rm, rv, bm, bv = running_mean, running_var, batch_mean, batch_var
    for t, n in ((rv, "running_var"), (bm, "batch_mean"), (bv, "batch_var")):
        same_shape(t, rm, (n, "running_mean"))
    batch_size = integer(batch_size, "batch_size", low=2)
    m = probability(momentum, "momentum")
    unbiased = bv * batch_size / (batch_size - 1)
    return (1 - m) * rm + m * bm, (1 - m) * rv + m * unbiased


def batch_norm_train(
    x: torch.Tensor,
    gamma: torch.Tensor | None,
    beta: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Training-mode BatchNorm: standardise each feature over the batch (eq. 16.1 along B).

    x: (B, D), B >= 2. gamma, beta: (D,) or None. running_mean, running_var: (D,) averages before
    this batch (not modified). Returns ``(y, new_running_mean, new_running_var)``: y is (B, D);
    the statistics are (D,), updated by :func:`update_running_stats`."""
    B, D = float_tensor(x, "x", ndim=2).shape
    if B < 2:
        raise ValueError(f"x must have B >= 2 rows in training-mode BatchNorm, got {B}")
    gamma = _affine(gamma, "gamma", D, x, 1.0)
    beta = _affine(beta, "beta", D, x, 0.0)
    x_hat, _ = standardize(x, 0, eps)
    with torch.no_grad():
        xa = x.to(_accumulation_dtype(x))  # 16-bit input: statistics in float32
        mean = xa.mean(0).to(running_mean.dtype)
        var = xa.var(0, unbiased=False).to(running_mean.dtype)
        new_mean, new_var = update_running_stats(
            running_mean, running_var, mean, var, x.shape[0], momentum
        )
    return gamma * x_hat + beta, new_mean, new_var


def batch_norm_eval(
    x: torch.Tensor,
    gamma: torch.Tensor | None,
    beta: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Evaluation-mode BatchNorm: a fixed affine map with the running statistics.

    x: (B, D); running_mean, running_var: (D,)."""
    D = float_tensor(x, "x", ndim=2).shape[1]
    gamma = _affine(gamma, "gamma", D, x, 1.0)
    beta = _affine(beta, "beta", D, x, 0.0)
    rm = _affine(running_mean, "running_mean", D, x, 0.0)
    rv = _affine(running_var, "running_var", D, x, 1.0)
    if bool((rv < 0).any()):
        raise ValueError("running_var must be non-negative")
    return gamma * (x - rm) * torch.rsqrt(rv + number(eps, "eps", 0.0)) + beta


def batch_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor | None = None, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hand-derived gradients of training-mode BatchNorm: LayerNorm's formula along the batch.

    dy, x: (B, D); gamma: (D,) or None. Returns ``(dx, dgamma, dbeta)`` with shapes (B, D), (D,),
    (D,)."""
    same_shape(dy, float_tensor(x, "x", ndim=2), ("dy", "x"))
    gamma = _affine(gamma, "gamma", x.shape[1], x, 1.0)
    x_hat, inv_std = standardize(x, 0, eps)
    dx = standardize_backward(dy * gamma, x_hat, inv_std, 0)
    return dx, (dy * x_hat).sum(0), dy.sum(0)


# --- eq. 16.3: residual stacks ----------------------------------------------------------------


def init_blocks(
    depth: int, width: int, hidden: int, gen: torch.Generator, dtype: torch.dtype = torch.float64
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Weights of ``depth`` MLP blocks, W1: (D, H) and W2: (H, D), each N(0, 1/fan_in)."""
    for value, name in ((depth, "depth"), (width, "width"), (hidden, "hidden")):
        positive_int(value, name)
    blocks = []
    for _ in range(depth):
        W1 = torch.randn(width, hidden, generator=gen, dtype=dtype) / math.sqrt(width)
        W2 = torch.randn(hidden, width, generator=gen, dtype=dtype) / math.sqrt(hidden)
        blocks.append((W1, W2))
    return blocks


def mlp_block(x: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """F(x) = relu(x W1) W2: x (..., D), W1 (D, H), W2 (H, D) -> (..., D)."""
    shape_is(W2, "W2", tuple(float_tensor(W1, "W1", ndim=2).shape)[::-1])  # (H, D)
    return torch.relu(x @ W1) @ W2


def mlp_block_vjp(
    g: torch.Tensor, x: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor
) -> torch.Tensor:
    """J_F^T g for F = :func:`mlp_block`: (g W2^T * 1[x W1 > 0]) W1^T, shape of x."""
    same_shape(g, x, ("g", "x"))
    shape_is(W2, "W2", tuple(float_tensor(W1, "W1", ndim=2).shape)[::-1])  # (H, D)
    z = x @ W1  # (..., H)
    return ((g @ W2.T) * (z > 0).to(g.dtype)) @ W1.T  # (..., D)


def stack_forward(
    x: torch.Tensor,
    blocks: Sequence[tuple[torch.Tensor, torch.Tensor]],
    arch: str = "residual",
    branch_scale: float = 1.0,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Run a stack of MLP blocks F_l, a = branch_scale (eq. 16.3 for "residual").

    arch: "plain" x_{l+1} = F(x_l); "residual" x_l + a F(x_l); "pre_ln" x_l + a F(LN(x_l)), output
    LN(x_L); "post_ln" LN(x_l + a F(x_l)). x: (..., D); blocks: L pairs (W1 (D, H), W2 (H, D)).
    Returns (out (..., D), the L + 1 states x_0, ..., x_L)."""
    one_of(arch, "arch", ARCHS)
    branch_scale = number(branch_scale, "branch_scale")
    states = [x]
    for W1, W2 in blocks:
        if arch == "plain":
            x = mlp_block(x, W1, W2)
        elif arch == "residual":
            x = x + branch_scale * mlp_block(x, W1, W2)
        elif arch == "pre_ln":
            x = x + branch_scale * mlp_block(layer_norm(x, eps=eps), W1, W2)
        else:
            x = layer_norm(x + branch_scale * mlp_block(x, W1, W2), eps=eps)
        states.append(x)
    out = layer_norm(x, eps=eps) if arch == "pre_ln" else x
    return out, states


def residual_backward(
    g_out: torch.Tensor,
    states: Sequence[torch.Tensor],
    blocks: Sequence[tuple[torch.Tensor, torch.Tensor]],
    branch_scale: float = 1.0,
) -> list[torch.Tensor]:
    """Hand-written backward pass of the ``residual`` stack (eq. 16.3).

    g_out: (..., D) gradient at x_L. states: x_0, ..., x_L from :func:`stack_forward` with
    ``arch="residual"``. blocks: the L weight pairs. Returns the L + 1 gradients at x_0, ...,
    x_L."""
    g = g_out
    same_shape(g, states[-1], ("g_out", "states[-1]"))
    grads = [g]
    for (W1, W2), x in zip(reversed(blocks), reversed(states[:-1]), strict=True):
        g = g + branch_scale * mlp_block_vjp(g, x, W1, W2)
        grads.append(g)
    return grads[::-1]


def stack_grad_norms(
    x: torch.Tensor,
    blocks: Sequence[tuple[torch.Tensor, torch.Tensor]],
    probe: torch.Tensor,
    arch: str = "residual",
    branch_scale: float = 1.0,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient norms at initialisation, layer by layer, for the loss sum(out * probe) / B.

    x: (B, D) inputs; probe: (B, D). Returns ``(state_norms, weight_norms)``: (L + 1,) the norms
    ||dLoss/dx_l|| and (L,) the Frobenius norms ||dLoss/dW1_l||, both float64."""
    same_shape(probe, float_tensor(x, "x", ndim=2), ("probe", "x"))
    x0 = x.detach().clone().requires_grad_(True)
    w1s = [W1.detach().clone().requires_grad_(True) for W1, _ in blocks]
    pairs = [(w, W2) for w, (_, W2) in zip(w1s, blocks, strict=True)]
    out, states = stack_forward(x0, pairs, arch, branch_scale, eps)
    loss = (out * probe).sum() / x.shape[0]
    grads = torch.autograd.grad(loss, states + w1s)
    norms = torch.stack([g.norm() for g in grads]).double()
    return norms[: len(states)], norms[len(states) :]
