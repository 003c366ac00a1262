"""Normalisation layers and residual stacks (formula sheet, chapter 16).

LayerNorm, RMSNorm and BatchNorm, each as a forward function and a hand-derived backward pass
(a vector-Jacobian product in O(D) per row) beside a naive reference that builds the full
Jacobian; then deep stacks of MLP blocks in four arrangements (plain, residual, pre-LN, post-LN)
and the hand-written backward pass of a residual stack.

Shape legend
    B      batch size (the rows that BatchNorm normalises together)
    D      features: the axis LayerNorm and RMSNorm normalise; BatchNorm's channels
    H      hidden width of a block's MLP
    L      depth: the number of blocks in a stack
    (..., D)  any leading axes: LayerNorm and RMSNorm act on every row independently

All functions take and return torch tensors and are differentiable by autograd, so every
hand-written backward pass can be checked against autograd in float64. Bad input raises
``ValueError``/``TypeError`` naming the offending shape or value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

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


# --- validation -------------------------------------------------------------------------------


def _float_tensor(x, name: str, min_ndim: int = 1) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.ndim < min_ndim:
        raise ValueError(f"{name} needs at least {min_ndim} axes, got shape {tuple(x.shape)}")
    if x.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)})")
    return x


def _check_eps(eps) -> float:
    if (
        isinstance(eps, bool)
        or not isinstance(eps, (int, float))
        or not eps >= 0
        or not math.isfinite(eps)
    ):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    return float(eps)


def _vector(v, name: str, size: int, like: torch.Tensor, default: float) -> torch.Tensor:
    """A (size,) parameter; None means the constant ``default`` (gamma = 1, beta = 0)."""
    if v is None:
        return torch.full((size,), default, dtype=like.dtype, device=like.device)
    v = _float_tensor(v, name)
    if tuple(v.shape) != (size,):
        raise ValueError(f"{name} must have shape ({size},), got {tuple(v.shape)}")
    return v


def _same_shape(a: torch.Tensor, a_name: str, b: torch.Tensor, b_name: str) -> None:
    if a.shape != b.shape:
        raise ValueError(
            f"{a_name} has shape {tuple(a.shape)} but {b_name} has shape "
            f"{tuple(b.shape)}; they must match"
        )


# --- eq. 16.1: standardisation, LayerNorm --------------------------------------------------------


def standardize(
    x: torch.Tensor, dim: int = -1, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor]:
    """x_hat = (x - mu) / sqrt(sigma^2 + eps) along ``dim``, with the biased variance.

    Implements eq. 16.1. LayerNorm applies it along the features (``dim=-1``), BatchNorm along
    the batch (``dim=0``).

    Args:
        x: any shape with at least one axis.
        dim: the axis whose mean and variance are taken.
        eps: added to the variance; keeps a constant input finite.

    Returns:
        ``(x_hat, inv_std)``: x_hat has the shape of x; inv_std = 1/sqrt(sigma^2 + eps) has size
        1 along ``dim`` (kept for the backward pass).
    """
    x = _float_tensor(x, "x")
    eps = _check_eps(eps)
    if not -x.ndim <= dim < x.ndim:
        raise ValueError(f"dim={dim} is out of range for x of shape {tuple(x.shape)}")
    mu = x.mean(dim, keepdim=True)
    var = ((x - mu) ** 2).mean(dim, keepdim=True)  # biased: divides by the size of dim
    if eps == 0 and bool((var == 0).any()):
        raise ValueError("an input slice is constant and eps = 0: its variance is zero")
    inv_std = torch.rsqrt(var + eps)
    return (x - mu) * inv_std, inv_std


def standardize_backward(
    g: torch.Tensor, x_hat: torch.Tensor, inv_std: torch.Tensor, dim: int = -1
) -> torch.Tensor:
    """Vector-Jacobian product of :func:`standardize`: the gradient at x from the one at x_hat.

    With s = inv_std and N the size of ``dim``, d x_hat_i / d x_j = s (delta_ij - 1/N -
    x_hat_i x_hat_j / N), so

        x_bar = s * (g - mean(g) - x_hat * mean(g * x_hat))      (means along dim)

    Args:
        g: upstream gradient, shape of x_hat.
        x_hat, inv_std: the outputs of :func:`standardize`.
    """
    g, x_hat, inv_std = (
        _float_tensor(t, n) for t, n in ((g, "g"), (x_hat, "x_hat"), (inv_std, "inv_std"))
    )
    _same_shape(g, "g", x_hat, "x_hat")
    return inv_std * (g - g.mean(dim, keepdim=True) - x_hat * (g * x_hat).mean(dim, keepdim=True))


def layer_norm(
    x: torch.Tensor,
    gamma: torch.Tensor | None = None,
    beta: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """LayerNorm: y = gamma * x_hat + beta, x_hat standardised over the last axis (eq. 16.1).

    Args:
        x: (..., D).
        gamma, beta: (D,) gain and bias, or None for 1 and 0.
    """
    x = _float_tensor(x, "x")
    D = x.shape[-1]
    gamma = _vector(gamma, "gamma", D, x, 1.0)
    beta = _vector(beta, "beta", D, x, 0.0)
    x_hat, _ = standardize(x, -1, eps)
    return gamma * x_hat + beta


def _sum_leading(t: torch.Tensor) -> torch.Tensor:
    """(..., D) -> (D,): sum over every axis but the last (a parameter's gradient)."""
    return t.reshape(-1, t.shape[-1]).sum(0)  # (N, D) -> (D,)


def layer_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor | None = None, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hand-derived gradients of :func:`layer_norm` (recomputes the statistics from x).

    Args:
        dy: (..., D) upstream gradient.
        x: (..., D) the forward input.
        gamma: (D,) or None.

    Returns:
        ``(dx, dgamma, dbeta)`` with shapes (..., D), (D,), (D,).
    """
    dy, x = _float_tensor(dy, "dy"), _float_tensor(x, "x")
    _same_shape(dy, "dy", x, "x")
    gamma = _vector(gamma, "gamma", x.shape[-1], x, 1.0)
    x_hat, inv_std = standardize(x, -1, eps)
    dx = standardize_backward(dy * gamma, x_hat, inv_std, -1)
    return dx, _sum_leading(dy * x_hat), _sum_leading(dy)


def layer_norm_jacobian(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """The full Jacobian of x_hat with respect to x for every row: s (I - 11^T/D - x_hat x_hat^T/D).

    Args:
        x: (..., D).

    Returns:
        (..., D, D); entry [..., i, j] = d x_hat_i / d x_j.
    """
    x = _float_tensor(x, "x")
    D = x.shape[-1]
    x_hat, inv_std = standardize(x, -1, eps)
    eye = torch.eye(D, dtype=x.dtype, device=x.device)
    outer = x_hat.unsqueeze(-1) * x_hat.unsqueeze(-2)  # (..., D, 1) * (..., 1, D) -> (..., D, D)
    return inv_std.unsqueeze(-1) * (eye - 1.0 / D - outer / D)


def layer_norm_backward_naive(
    dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """Reference for :func:`layer_norm_backward`'s dx: multiply by the full (D, D) Jacobian.

    O(D^2) per row instead of O(D).
    """
    dy, x = _float_tensor(dy, "dy"), _float_tensor(x, "x")
    _same_shape(dy, "dy", x, "x")
    gamma = _vector(gamma, "gamma", x.shape[-1], x, 1.0)
    J = layer_norm_jacobian(x, eps)  # (..., D, D)
    return torch.einsum("...i,...ij->...j", dy * gamma, J)  # (..., D)


# --- eq. 16.2: RMSNorm ------------------------------------------------------------------------


def _rms_stats(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    ms = (x * x).mean(-1, keepdim=True)
    if eps == 0 and bool((ms == 0).any()):
        raise ValueError("an input row is all zeros and eps = 0: its RMS is zero")
    inv_rms = torch.rsqrt(ms + eps)  # (..., 1)
    return x * inv_rms, inv_rms


def rms_norm(x: torch.Tensor, gamma: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm(x) = gamma * x / sqrt(mean_j x_j^2 + eps) over the last axis.

    Implements eq. 16.2: no mean is subtracted and there is no bias.

    Args:
        x: (..., D).
        gamma: (D,) gain, or None for 1.
    """
    x = _float_tensor(x, "x")
    gamma = _vector(gamma, "gamma", x.shape[-1], x, 1.0)
    x_hat, _ = _rms_stats(x, _check_eps(eps))
    return gamma * x_hat


def rms_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor | None = None, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hand-derived gradients of :func:`rms_norm`.

    With r = sqrt(mean(x^2) + eps), x_hat = x / r and g = dy * gamma,
    d x_hat_i / d x_j = (delta_ij - x_hat_i x_hat_j / D) / r, so
    dx = (g - x_hat * mean(g * x_hat)) / r.

    Returns:
        ``(dx, dgamma)`` with shapes (..., D) and (D,).
    """
    dy, x = _float_tensor(dy, "dy"), _float_tensor(x, "x")
    _same_shape(dy, "dy", x, "x")
    gamma = _vector(gamma, "gamma", x.shape[-1], x, 1.0)
    x_hat, inv_rms = _rms_stats(x, _check_eps(eps))
    g = dy * gamma
    dx = inv_rms * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
    return dx, _sum_leading(dy * x_hat)


def rms_norm_jacobian(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Full Jacobian of x / rms(x) for every row: (I - x_hat x_hat^T / D) / r, shape (..., D, D)."""
    x = _float_tensor(x, "x")
    x_hat, inv_rms = _rms_stats(x, _check_eps(eps))
    eye = torch.eye(x.shape[-1], dtype=x.dtype, device=x.device)
    outer = x_hat.unsqueeze(-1) * x_hat.unsqueeze(-2)  # (..., D, D)
    return inv_rms.unsqueeze(-1) * (eye - outer / x.shape[-1])


def rms_norm_backward_naive(
    dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor | None = None, eps: float = 1e-6
) -> torch.Tensor:
    """Reference for :func:`rms_norm_backward`'s dx through the full Jacobian (O(D^2) per row)."""
    dy, x = _float_tensor(dy, "dy"), _float_tensor(x, "x")
    _same_shape(dy, "dy", x, "x")
    gamma = _vector(gamma, "gamma", x.shape[-1], x, 1.0)
    return torch.einsum("...i,...ij->...j", dy * gamma, rms_norm_jacobian(x, eps))


# --- BatchNorm: eq. 16.1 along the batch --------------------------------------------------------


def _check_batch(x) -> torch.Tensor:
    x = _float_tensor(x, "x")
    if x.ndim != 2:
        raise ValueError(f"x must be (B, D), got shape {tuple(x.shape)}")
    if x.shape[0] < 2:
        raise ValueError(f"training-mode BatchNorm needs B >= 2 rows, got B={x.shape[0]}")
    return x


def _check_momentum(momentum) -> float:
    if (
        isinstance(momentum, bool)
        or not isinstance(momentum, (int, float))
        or not 0 <= momentum <= 1
    ):
        raise ValueError(f"momentum must be in [0, 1], got {momentum!r}")
    return float(momentum)


def update_running_stats(
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    batch_mean: torch.Tensor,
    batch_var: torch.Tensor,
    batch_size: int,
    momentum: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's running-average update: new = (1 - momentum) * old + momentum * batch statistic.

    ``momentum`` is the weight of the *new* batch (torch's convention, default 0.1; Keras and
    TensorFlow call 1 - momentum the momentum). The running variance averages the *unbiased*
    batch variance, batch_var * B / (B - 1), while normalisation uses the biased one.

    Args:
        running_mean, running_var: (D,) the current averages.
        batch_mean, batch_var: (D,) this batch's mean and biased variance.
        batch_size: B >= 2.
    """
    tensors = [
        _float_tensor(t, n)
        for t, n in (
            (running_mean, "running_mean"),
            (running_var, "running_var"),
            (batch_mean, "batch_mean"),
            (batch_var, "batch_var"),
        )
    ]
    for t, n in zip(tensors[1:], ("running_var", "batch_mean", "batch_var"), strict=True):
        _same_shape(t, n, tensors[0], "running_mean")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 2:
        raise ValueError(f"batch_size must be an int >= 2, got {batch_size!r}")
    m = _check_momentum(momentum)
    rm, rv, bm, bv = tensors
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

    Args:
        x: (B, D), B >= 2.
        gamma, beta: (D,) or None.
        running_mean, running_var: (D,) averages before this batch (not modified).

    Returns:
        ``(y, new_running_mean, new_running_var)``: y is (B, D); the statistics are (D,), updated
        by :func:`update_running_stats`.
    """
    x = _check_batch(x)
    D = x.shape[1]
    gamma = _vector(gamma, "gamma", D, x, 1.0)
    beta = _vector(beta, "beta", D, x, 0.0)
    x_hat, _ = standardize(x, 0, eps)
    with torch.no_grad():
        mean = x.mean(0)
        var = x.var(0, unbiased=False)
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

    y = gamma * (x - running_mean) / sqrt(running_var + eps) + beta; every row is treated
    independently of the others, so B = 1 is fine.

    Args:
        x: (B, D); running_mean, running_var: (D,).
    """
    x = _float_tensor(x, "x")
    if x.ndim != 2:
        raise ValueError(f"x must be (B, D), got shape {tuple(x.shape)}")
    D = x.shape[1]
    gamma = _vector(gamma, "gamma", D, x, 1.0)
    beta = _vector(beta, "beta", D, x, 0.0)
    rm = _vector(running_mean, "running_mean", D, x, 0.0)
    rv = _vector(running_var, "running_var", D, x, 1.0)
    if bool((rv < 0).any()):
        raise ValueError("running_var must be non-negative")
    return gamma * (x - rm) * torch.rsqrt(rv + _check_eps(eps)) + beta


def batch_norm_backward(
    dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor | None = None, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hand-derived gradients of training-mode BatchNorm: LayerNorm's formula along the batch.

    Every row's output depends on every other row through the batch mean and variance, so
    dx_b involves the whole batch: dx = s * (g - mean_B(g) - x_hat * mean_B(g * x_hat)).

    Args:
        dy, x: (B, D); gamma: (D,) or None.

    Returns:
        ``(dx, dgamma, dbeta)`` with shapes (B, D), (D,), (D,).
    """
    dy, x = _float_tensor(dy, "dy"), _check_batch(x)
    _same_shape(dy, "dy", x, "x")
    gamma = _vector(gamma, "gamma", x.shape[1], x, 1.0)
    x_hat, inv_std = standardize(x, 0, eps)
    dx = standardize_backward(dy * gamma, x_hat, inv_std, 0)
    return dx, (dy * x_hat).sum(0), dy.sum(0)


# --- eq. 16.3: residual stacks ----------------------------------------------------------------


def init_blocks(
    depth: int, width: int, hidden: int, gen: torch.Generator, dtype: torch.dtype = torch.float64
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Weights of ``depth`` MLP blocks, W1: (D, H) and W2: (H, D), each N(0, 1/fan_in).

    The 1/fan_in variance keeps a linear layer's output at the scale of its input; the ReLU
    between the two layers halves the second moment, so each block has a gain below one.
    """
    for value, name in ((depth, "depth"), (width, "width"), (hidden, "hidden")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not isinstance(gen, torch.Generator):
        raise TypeError(f"gen must be a torch.Generator, got {type(gen).__name__}")
    blocks = []
    for _ in range(depth):
        W1 = torch.randn(width, hidden, generator=gen, dtype=dtype) / math.sqrt(width)
        W2 = torch.randn(hidden, width, generator=gen, dtype=dtype) / math.sqrt(hidden)
        blocks.append((W1, W2))
    return blocks


def mlp_block(x: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor) -> torch.Tensor:
    """F(x) = relu(x W1) W2: x (..., D), W1 (D, H), W2 (H, D) -> (..., D)."""
    x, W1, W2 = _float_tensor(x, "x"), _float_tensor(W1, "W1", 2), _float_tensor(W2, "W2", 2)
    if (
        W1.ndim != 2
        or W2.ndim != 2
        or x.shape[-1] != W1.shape[0]
        or W1.shape[1] != W2.shape[0]
        or W2.shape[1] != W1.shape[0]
    ):
        raise ValueError(
            f"shapes do not chain: x {tuple(x.shape)}, W1 {tuple(W1.shape)}, "
            f"W2 {tuple(W2.shape)}; need (..., D), (D, H), (H, D)"
        )
    return torch.relu(x @ W1) @ W2


def mlp_block_vjp(
    g: torch.Tensor, x: torch.Tensor, W1: torch.Tensor, W2: torch.Tensor
) -> torch.Tensor:
    """J_F^T g for F = :func:`mlp_block`: (g W2^T * 1[x W1 > 0]) W1^T, shape of x."""
    g = _float_tensor(g, "g")
    _same_shape(g, "g", x, "x")
    mlp_block(x, W1, W2)  # validates the shapes
    z = x @ W1  # (..., H)
    return ((g @ W2.T) * (z > 0).to(g.dtype)) @ W1.T  # (..., D)


def stack_forward(
    x: torch.Tensor,
    blocks: Sequence[tuple[torch.Tensor, torch.Tensor]],
    arch: str = "residual",
    branch_scale: float = 1.0,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Run a stack of MLP blocks F_l in one of four arrangements.

    - ``plain``:    x_{l+1} = F_l(x_l)
    - ``residual``: x_{l+1} = x_l + a F_l(x_l)                     (eq. 16.3, a = branch_scale)
    - ``pre_ln``:   x_{l+1} = x_l + a F_l(LN(x_l)), output LN(x_L)  (GPT-2, Llama with RMSNorm)
    - ``post_ln``:  x_{l+1} = LN(x_l + a F_l(x_l))                  (the original Transformer)

    Args:
        x: (..., D) the input x_0.
        blocks: L pairs (W1 (D, H), W2 (H, D)).

    Returns:
        ``(out, states)``: out (..., D) is the network output; states the L + 1 tensors
        x_0, ..., x_L of the stream between blocks.
    """
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    if len(blocks) == 0:
        raise ValueError("blocks is empty: a stack needs at least one block")
    if not isinstance(branch_scale, (int, float)) or not math.isfinite(branch_scale):
        raise ValueError(f"branch_scale must be a finite number, got {branch_scale!r}")
    x = _float_tensor(x, "x")
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

    x_bar_l = x_bar_{l+1} + a J_l^T x_bar_{l+1}, with J_l the Jacobian of F_l at x_l.

    The identity term passes the upstream gradient to every layer unchanged, whatever the
    branches do: d x_L / d x_l = prod_k (I + a J_k) contains I.

    Args:
        g_out: (..., D) gradient at x_L.
        states: x_0, ..., x_L from :func:`stack_forward` with ``arch="residual"``.
        blocks: the L weight pairs.

    Returns:
        The L + 1 gradients at x_0, ..., x_L.
    """
    if len(states) != len(blocks) + 1:
        raise ValueError(
            f"need L + 1 = {len(blocks) + 1} states for {len(blocks)} blocks, got {len(states)}"
        )
    g = _float_tensor(g_out, "g_out")
    _same_shape(g, "g_out", states[-1], "states[-1]")
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

    A fixed random ``probe`` stands in for the gradient that a loss would send back.

    Args:
        x: (B, D) inputs; probe: (B, D).

    Returns:
        ``(state_norms, weight_norms)``: (L + 1,) the norms ||dLoss/dx_l|| and (L,) the
        Frobenius norms ||dLoss/dW1_l||, both float64.
    """
    x, probe = _float_tensor(x, "x", 2), _float_tensor(probe, "probe", 2)
    _same_shape(x, "x", probe, "probe")
    x0 = x.detach().clone().requires_grad_(True)
    w1s = [W1.detach().clone().requires_grad_(True) for W1, _ in blocks]
    pairs = [(w, W2) for w, (_, W2) in zip(w1s, blocks, strict=True)]
    out, states = stack_forward(x0, pairs, arch, branch_scale, eps)
    loss = (out * probe).sum() / x.shape[0]
    grads = torch.autograd.grad(loss, states + w1s)
    norms = torch.stack([g.norm() for g in grads]).double()
    return norms[: len(states)], norms[len(states) :]
