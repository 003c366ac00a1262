"""Optimizers: gradient descent, momentum, Adam/AdamW and gradient clipping (formula sheet, ch. 15).

Every update rule is a *pure* function: it takes the parameter tensor, its optimizer state and
its gradient, and returns new tensors without modifying its inputs. :class:`Optimizer` is a thin
stateful wrapper that applies these functions to a list of ``requires_grad`` parameters, so the
same training loop drives it and a ``torch.optim`` optimizer; :func:`trajectory` runs such a loop
and records the parameters after every step.

Shape legend
    P      any parameter shape; a parameter, its gradient and its state tensors share it
    N      total number of scalars in a list of parameters (the flattened vector)
    S      number of optimisation steps
    D      dimension of a quadratic problem, ``H`` is (D, D)

Conventions (derived in chapter 15): the sheet's momentum keeps a *velocity* that already
contains the learning rate, ``v = beta v - lr g; theta += v``; torch keeps a *buffer* of summed
gradients, ``b = beta b + g; theta -= lr b``. For a constant learning rate ``v = -lr b`` at every
step and the two produce the same iterates. Steps are counted from 1 in Adam's bias correction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "sgd_step",
    "momentum_step",
    "momentum_step_torch",
    "adam_moments",
    "bias_correct",
    "adamw_step",
    "global_grad_norm",
    "global_grad_norm_naive",
    "clip_grad_norm",
    "gd_on_quadratic",
    "stability_limit",
    "OptimizerConfig",
    "Optimizer",
    "trajectory",
]

KINDS = ("sgd", "momentum", "momentum_torch", "adam", "adamw")


# --- validation ---------------------------------------------------------------------------


def _tensor(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype, got {x.dtype}")
    return x


def _same_shape(ref: torch.Tensor, ref_name: str, **others: torch.Tensor) -> None:
    for name, x in others.items():
        _tensor(x, name)
        if x.shape != ref.shape:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)} but {ref_name} has shape {tuple(ref.shape)}"
            )


def _nonneg(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return value


def _beta(value, name: str) -> float:
    value = _nonneg(value, name)
    if not value < 1:
        raise ValueError(f"{name} must lie in [0, 1), got {value}")
    return value


def _step_count(t) -> int:
    if isinstance(t, bool) or not isinstance(t, int):
        raise TypeError(f"step t must be an int, got {type(t).__name__}")
    if t < 1:
        raise ValueError(f"step t counts from 1, got {t}")
    return t


# --- eq. 15.1: gradient descent -----------------------------------------------------------


def sgd_step(theta: torch.Tensor, grad: torch.Tensor, lr: float) -> torch.Tensor:
    """One step of (stochastic) gradient descent, ``theta - lr * grad``.

    Implements eq. 15.1.

    Args:
        theta: (P) parameters.
        grad: (P) gradient of the loss at ``theta`` (a minibatch estimate for SGD).
        lr: learning rate, >= 0.

    Returns:
        (P) the new parameters.
    """
    _tensor(theta, "theta")
    _same_shape(theta, "theta", grad=grad)
    lr = _nonneg(lr, "lr")
    return theta - lr * grad


def gd_on_quadratic(H: torch.Tensor, theta0: torch.Tensor, lr: float, steps: int) -> torch.Tensor:
    """Run gradient descent on ``f(theta) = theta^T H theta / 2`` (gradient ``H theta``).

    Uses :func:`sgd_step` (eq. 15.1); the iterates are ``(I - lr H)^t theta0``.

    Args:
        H: (D, D) symmetric matrix (the Hessian).
        theta0: (D,) starting point.
        lr: learning rate.
        steps: number of steps S >= 0.

    Returns:
        (S + 1, D) the iterates ``theta_0, ..., theta_S``.
    """
    _tensor(H, "H")
    _tensor(theta0, "theta0")
    if H.ndim != 2 or H.shape[0] != H.shape[1]:
        raise ValueError(f"H must be a square (D, D) matrix, got shape {tuple(H.shape)}")
    if theta0.shape != (H.shape[0],):
        raise ValueError(f"theta0 must have shape ({H.shape[0]},), got {tuple(theta0.shape)}")
    if not torch.allclose(H, H.T):
        raise ValueError("H must be symmetric")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    out = [theta0]
    theta = theta0
    for _ in range(steps):
        theta = sgd_step(theta, H @ theta, lr)
        out.append(theta)
    return torch.stack(out)  # (S + 1, D)


def stability_limit(H: torch.Tensor) -> float:
    """The largest stable learning rate of gradient descent on a quadratic, ``2 / lambda_max(H)``.

    Gradient descent on ``theta^T H theta / 2`` multiplies the component along the eigenvector of
    eigenvalue ``lambda`` by ``1 - lr * lambda`` per step; every component shrinks iff
    ``0 < lr < 2 / lambda_max``.

    Args:
        H: (D, D) symmetric positive definite matrix.
    """
    _tensor(H, "H")
    if H.ndim != 2 or H.shape[0] != H.shape[1]:
        raise ValueError(f"H must be a square (D, D) matrix, got shape {tuple(H.shape)}")
    if not torch.allclose(H, H.T):
        raise ValueError("H must be symmetric")
    lam = torch.linalg.eigvalsh(H.double())
    if lam.min() <= 0:
        raise ValueError(
            f"H must be positive definite; its smallest eigenvalue is {float(lam.min()):.3g}"
        )
    return 2.0 / float(lam.max())


# --- eq. 15.2: momentum -------------------------------------------------------------------


def momentum_step(
    theta: torch.Tensor, velocity: torch.Tensor, grad: torch.Tensor, lr: float, beta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Heavy-ball momentum in the sheet's convention: ``v = beta v - lr g``, ``theta += v``.

    Implements eq. 15.2. Start with ``velocity = 0``.

    Args:
        theta: (P) parameters.
        velocity: (P) the previous velocity (it contains the learning rate).
        grad: (P) gradient at ``theta``.
        lr: learning rate >= 0; beta: momentum coefficient in [0, 1).

    Returns:
        ``(theta_new, velocity_new)``, both (P).
    """
    _tensor(theta, "theta")
    _same_shape(theta, "theta", velocity=velocity, grad=grad)
    lr, beta = _nonneg(lr, "lr"), _beta(beta, "beta")
    velocity = beta * velocity - lr * grad
    return theta + velocity, velocity


def momentum_step_torch(
    theta: torch.Tensor, buf: torch.Tensor, grad: torch.Tensor, lr: float, beta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Heavy-ball momentum in torch's convention: ``b = beta b + g``, ``theta -= lr b``.

    The buffer holds a discounted sum of gradients, without the learning rate; for a constant
    ``lr`` it is ``-velocity / lr`` of :func:`momentum_step` (eq. 15.2) and the iterates agree.
    Matches ``torch.optim.SGD(momentum=beta)`` with ``dampening=0``, ``nesterov=False``.

    Args:
        theta: (P) parameters.
        buf: (P) the previous buffer (start with zeros).
        grad: (P) gradient at ``theta``.
        lr: learning rate >= 0; beta: momentum coefficient in [0, 1).

    Returns:
        ``(theta_new, buf_new)``, both (P).
    """
    _tensor(theta, "theta")
    _same_shape(theta, "theta", buf=buf, grad=grad)
    lr, beta = _nonneg(lr, "lr"), _beta(beta, "beta")
    buf = beta * buf + grad
    return theta - lr * buf, buf


# --- eqs. 15.3 and 15.4: Adam and AdamW ----------------------------------------------------


def adam_moments(
    m: torch.Tensor, v: torch.Tensor, grad: torch.Tensor, beta1: float, beta2: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Update Adam's moving averages of the gradient and of its elementwise square.

    ``m = beta1 m + (1 - beta1) g`` and ``v = beta2 v + (1 - beta2) g^2``, started at zero.

    Args:
        m, v: (P) the previous first and second moment estimates.
        grad: (P) the gradient.
        beta1, beta2: decay rates in [0, 1).

    Returns:
        ``(m_new, v_new)``, both (P).
    """
    _tensor(m, "m")
    _same_shape(m, "m", v=v, grad=grad)
    beta1, beta2 = _beta(beta1, "beta1"), _beta(beta2, "beta2")
    return beta1 * m + (1 - beta1) * grad, beta2 * v + (1 - beta2) * grad * grad


def bias_correct(
    m: torch.Tensor, v: torch.Tensor, t: int, beta1: float, beta2: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Adam's bias correction ``m_hat = m / (1 - beta1^t)``, ``v_hat = v / (1 - beta2^t)``.

    Implements eq. 15.3. Averages started at zero are too small by the factor ``1 - beta^t``
    (the total weight of the ``t`` gradients seen so far); dividing by it removes that bias.

    Args:
        m, v: (P) the moment estimates after step ``t``.
        t: the number of gradients averaged so far, >= 1.
        beta1, beta2: decay rates in [0, 1).

    Returns:
        ``(m_hat, v_hat)``, both (P).
    """
    _tensor(m, "m")
    _same_shape(m, "m", v=v)
    t = _step_count(t)
    beta1, beta2 = _beta(beta1, "beta1"), _beta(beta2, "beta2")
    return m / (1 - beta1**t), v / (1 - beta2**t)


def adamw_step(
    theta: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    grad: torch.Tensor,
    t: int,
    *,
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    decoupled: bool = True,
    bias_correction: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One Adam/AdamW step: ``theta = (1 - lr wd) theta - lr m_hat / (sqrt(v_hat) + eps)``.

    Implements eq. 15.4 (with eq. 15.3 for ``m_hat``, ``v_hat``). With ``decoupled=True`` this is
    AdamW (``torch.optim.AdamW``): the decay multiplies ``theta`` directly. With
    ``decoupled=False`` it is Adam with an L2 penalty (``torch.optim.Adam(weight_decay=...)``):
    ``wd * theta`` is added to the gradient and then goes through the moment estimates, so it is
    divided by ``sqrt(v_hat)`` like the rest of the gradient. ``bias_correction=False`` uses
    ``m`` and ``v`` directly (for the comparison of chapter 15 only).

    Args:
        theta: (P) parameters.
        m, v: (P) moment estimates after step ``t - 1`` (zeros before the first step).
        grad: (P) gradient of the loss (without any penalty) at ``theta``.
        t: the number of this step, counted from 1.
        lr, beta1, beta2, eps, weight_decay: the hyperparameters (``weight_decay`` is lambda).

    Returns:
        ``(theta_new, m_new, v_new)``, all (P).
    """
    _tensor(theta, "theta")
    _same_shape(theta, "theta", m=m, v=v, grad=grad)
    t = _step_count(t)
    lr, eps, wd = _nonneg(lr, "lr"), _nonneg(eps, "eps"), _nonneg(weight_decay, "weight_decay")
    if decoupled:
        theta = (1 - lr * wd) * theta  # decoupled decay, before the Adam step
    else:
        grad = grad + wd * theta  # L2 penalty wd/2 |theta|^2 enters the gradient
    m, v = adam_moments(m, v, grad, beta1, beta2)
    m_hat, v_hat = bias_correct(m, v, t, beta1, beta2) if bias_correction else (m, v)
    return theta - lr * m_hat / (v_hat.sqrt() + eps), m, v


# --- eq. 15.5: clipping by the global norm --------------------------------------------------


def _grad_list(grads, name: str = "grads") -> list[torch.Tensor]:
    if isinstance(grads, torch.Tensor):
        grads = [grads]
    if not isinstance(grads, Sequence) or len(grads) == 0:
        raise ValueError(f"{name} must be a non-empty list of tensors")
    for i, g in enumerate(grads):
        _tensor(g, f"{name}[{i}]")
    return list(grads)


def global_grad_norm_naive(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """The global L2 norm of a list of gradients: flatten, concatenate, take the norm.

    Reference for :func:`global_grad_norm`; it materialises one (N,) vector.

    Args:
        grads: tensors of any shapes (one per parameter).

    Returns:
        0-d tensor ``||g||_2`` over all N scalars.
    """
    grads = _grad_list(grads)
    flat = torch.cat([g.reshape(-1) for g in grads])  # (N,)
    return torch.sqrt((flat * flat).sum())


def global_grad_norm(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """The global L2 norm of a list of gradients as the norm of the per-tensor norms.

    ``||g||_2^2 = sum_k ||g_k||_2^2``, so no concatenation is needed (what torch does).

    Args:
        grads: tensors of any shapes (one per parameter).

    Returns:
        0-d tensor ``||g||_2``.
    """
    grads = _grad_list(grads)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


def clip_grad_norm(
    grads: Sequence[torch.Tensor], max_norm: float, eps: float = 1e-6
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Rescale all gradients together so that their global norm is at most ``max_norm``.

    Implements eq. 15.5, ``g <- g min(1, c / (||g||_2 + eps))``: one factor for all tensors, so the
    direction of the full gradient is kept. Matches ``torch.nn.utils.clip_grad_norm_`` (which
    uses ``eps = 1e-6``) but returns new tensors instead of modifying ``.grad`` in place.

    Args:
        grads: tensors of any shapes.
        max_norm: the threshold c > 0.
        eps: guards the division when the norm is zero.

    Returns:
        ``(clipped, total_norm)``: the rescaled gradients (same shapes) and the norm *before*
        clipping, a 0-d tensor.
    """
    grads = _grad_list(grads)
    c, eps = _nonneg(max_norm, "max_norm"), _nonneg(eps, "eps")
    if c == 0:
        raise ValueError("max_norm must be > 0")
    total = global_grad_norm(grads)
    factor = torch.clamp(c / (total + eps), max=1.0)
    return [g * factor for g in grads], total


# --- a thin stateful wrapper ----------------------------------------------------------------


@dataclass(frozen=True)
class OptimizerConfig:
    """Hyperparameters of :class:`Optimizer`.

    ``kind`` is one of ``"sgd"`` (eq. 15.1), ``"momentum"`` (eq. 15.2, sheet convention),
    ``"momentum_torch"`` (torch's buffer convention), ``"adam"`` (L2 penalty through the
    gradient) and ``"adamw"`` (decoupled decay, eq. 15.4). ``beta`` is the momentum coefficient.
    """

    kind: str = "sgd"
    lr: float = 1e-3
    beta: float = 0.9
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        _nonneg(self.lr, "lr")
        _beta(self.beta, "beta")
        _beta(self.beta1, "beta1")
        _beta(self.beta2, "beta2")
        _nonneg(self.eps, "eps")
        _nonneg(self.weight_decay, "weight_decay")
        if self.weight_decay and self.kind not in ("adam", "adamw"):
            raise ValueError(f"weight_decay is only implemented for adam/adamw, not {self.kind}")


class Optimizer:
    """Apply one of the pure update rules to parameters in place, reading their ``.grad``.

    Usage is that of ``torch.optim``: ``zero_grad()``, ``loss.backward()``, ``step()``. The
    learning rate of step ``k`` (counted from 0) is ``schedule(k)`` if a schedule is given,
    otherwise ``config.lr``; this is what ``torch.optim.lr_scheduler.LambdaLR`` does with the
    multiplier ``schedule(k) / lr``.

    Args:
        params: the parameters, tensors with ``requires_grad=True``.
        config: the hyperparameters.
        schedule: optional function from the step index to the learning rate.
    """

    def __init__(
        self, params, config: OptimizerConfig, schedule: Callable[[int], float] | None = None
    ):
        self.params = list(params)
        if not self.params:
            raise ValueError("Optimizer needs at least one parameter")
        for i, p in enumerate(self.params):
            _tensor(p, f"params[{i}]")
            if not p.requires_grad:
                raise ValueError(f"params[{i}] does not require grad")
        if not isinstance(config, OptimizerConfig):
            raise TypeError(f"config must be an OptimizerConfig, got {type(config).__name__}")
        if schedule is not None and not callable(schedule):
            raise TypeError("schedule must be callable (step -> learning rate)")
        self.config, self.schedule, self.steps_taken = config, schedule, 0
        self.state = [{"a": torch.zeros_like(p), "b": torch.zeros_like(p)} for p in self.params]

    @property
    def lr(self) -> float:
        """The learning rate the next step will use."""
        if self.schedule is None:
            return self.config.lr
        return _nonneg(self.schedule(self.steps_taken), "scheduled lr")

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        c, lr, t = self.config, self.lr, self.steps_taken + 1
        for i, (p, st) in enumerate(zip(self.params, self.state, strict=True)):
            if p.grad is None:
                raise ValueError(f"params[{i}] has no gradient; call backward() first")
            g = p.grad
            if c.kind == "sgd":
                new = sgd_step(p, g, lr)
            elif c.kind == "momentum":
                new, st["a"] = momentum_step(p, st["a"], g, lr, c.beta)
            elif c.kind == "momentum_torch":
                new, st["a"] = momentum_step_torch(p, st["a"], g, lr, c.beta)
            else:
                new, st["a"], st["b"] = adamw_step(
                    p,
                    st["a"],
                    st["b"],
                    g,
                    t,
                    lr=lr,
                    beta1=c.beta1,
                    beta2=c.beta2,
                    eps=c.eps,
                    weight_decay=c.weight_decay,
                    decoupled=c.kind == "adamw",
                )
            p.copy_(new)
        self.steps_taken = t


def trajectory(
    params: Sequence[torch.Tensor],
    loss_fn: Callable[[], torch.Tensor],
    optimizer,
    steps: int,
    scheduler=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``steps`` full-batch steps and record every iterate and loss.

    Works with :class:`Optimizer` and with any ``torch.optim`` optimizer (plus an optional
    ``torch.optim.lr_scheduler`` stepped after each optimizer step).

    Args:
        params: the parameters the optimizer updates (to be recorded).
        loss_fn: computes the loss from the current parameters (a closure).
        optimizer: has ``zero_grad()`` and ``step()``.
        steps: number of steps S >= 1.

    Returns:
        ``(thetas, losses)``: (S + 1, N) flattened parameters before each step and after the
        last; (S + 1,) the loss at each of them.
    """
    params = list(params)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")

    def flat() -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in params])  # (N,)

    thetas, losses = [flat()], []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_fn()
        loss.backward()
        losses.append(loss.detach())
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        thetas.append(flat())
    with torch.no_grad():
        losses.append(loss_fn().detach())
    return torch.stack(thetas), torch.stack(losses)
