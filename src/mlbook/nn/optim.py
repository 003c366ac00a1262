"""Optimizers: gradient descent, momentum, Adam/AdamW and gradient clipping (chapter 15).

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

Conventions (derived in chapter 15): the velocity form of momentum keeps a *velocity* that
already contains the learning rate, ``v = beta v - lr g; theta += v``; the buffer form (torch's)
keeps a sum of gradients, ``b = beta b + g; theta -= lr b``. For a constant learning rate
``v = -lr b`` at every step and the two produce the same iterates. Steps are counted from 1 in
Adam's bias correction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..validation import (
    float_tensor,
    integer,
    number,
    one_of,
    positive,
    positive_int,
    same_shape,
    shape_is,
)

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


# --- eq. 15.1: gradient descent -----------------------------------------------------------


def sgd_step(theta: torch.Tensor, grad: torch.Tensor, lr: float) -> torch.Tensor:
    """One step of (stochastic) gradient descent, ``theta - lr * grad`` (eq. 15.1).

    theta: (P) parameters. grad: (P) gradient of the loss at ``theta`` (a minibatch estimate for
    SGD). lr: learning rate, >= 0. Returns (P) the new parameters."""
    same_shape(grad, theta, ("grad", "theta"))
    lr = number(lr, "lr", 0.0)
    return theta - lr * grad


def gd_on_quadratic(H: torch.Tensor, theta0: torch.Tensor, lr: float, steps: int) -> torch.Tensor:
    """Run gradient descent on ``f(theta) = theta^T H theta / 2`` (gradient ``H theta``).

    H: (D, D) symmetric matrix (the Hessian). theta0: (D,) starting point. lr: learning rate.
    steps: number of steps S >= 0. Returns (S + 1, D) the iterates ``theta_0, ..., theta_S``.
    Implements eq. 15.1."""
    d = len(float_tensor(theta0, "theta0", ndim=1))
    if not torch.allclose(shape_is(H, "H", (d, d)), H.T):
        raise ValueError("H must be symmetric")
    steps = integer(steps, "steps", low=0)
    out = [theta0]
    theta = theta0
    for _ in range(steps):
        theta = sgd_step(theta, H @ theta, lr)
        out.append(theta)
    return torch.stack(out)  # (S + 1, D)


def stability_limit(H: torch.Tensor) -> float:
    """The largest stable learning rate of gradient descent on a quadratic, ``2 / lambda_max(H)``.

    H: (D, D) symmetric positive definite matrix."""
    if not torch.allclose(shape_is(H, "H", (len(H), len(H))), H.T):
        raise ValueError("H must be symmetric")
    lam = torch.linalg.eigvalsh(H.double())
    if lam.min() <= 0:
        raise ValueError(f"H must be positive definite, smallest eigenvalue {float(lam.min()):.3g}")
    return 2.0 / float(lam.max())


# --- eq. 15.2: momentum -------------------------------------------------------------------


def momentum_step(
    theta: torch.Tensor, velocity: torch.Tensor, grad: torch.Tensor, lr: float, beta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Heavy-ball momentum in the velocity form: ``v = beta v - lr g``, ``theta += v``.

    theta: (P) parameters. velocity: (P) the previous velocity (it contains the learning rate).
    grad: (P) gradient at ``theta``. lr: learning rate >= 0; beta: momentum coefficient in [0,
    1). Returns ``(theta_new, velocity_new)``, both (P). Implements eq. 15.2."""
    same_shape(velocity, theta, ("velocity", "theta")), same_shape(grad, theta, ("grad", "theta"))
    lr, beta = number(lr, "lr", 0.0), number(beta, "beta", 0.0, 1.0, open_high=True)
    velocity = beta * velocity - lr * grad
    return theta + velocity, velocity


def momentum_step_torch(
    theta: torch.Tensor, buf: torch.Tensor, grad: torch.Tensor, lr: float, beta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Heavy-ball momentum in the buffer form (torch's): ``b = beta b + g``, ``theta -= lr b``.

    theta: (P) parameters. buf: (P) the previous buffer (start with zeros). grad: (P) gradient at
    ``theta``. lr: learning rate >= 0; beta: momentum coefficient in [0, 1). Returns
    ``(theta_new, buf_new)``, both (P). Implements eq. 15.2."""
    same_shape(buf, theta, ("buf", "theta")), same_shape(grad, theta, ("grad", "theta"))
    lr, beta = number(lr, "lr", 0.0), number(beta, "beta", 0.0, 1.0, open_high=True)
    buf = beta * buf + grad
    return theta - lr * buf, buf


# --- eqs. 15.3 and 15.4: Adam and AdamW ----------------------------------------------------


def adam_moments(
    m: torch.Tensor, v: torch.Tensor, grad: torch.Tensor, beta1: float, beta2: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Update Adam's moving averages of the gradient and of its elementwise square.

    m, v: (P) the previous first and second moment estimates. grad: (P) the gradient. beta1,
    beta2: decay rates in [0, 1). Returns ``(m_new, v_new)``, both (P)."""
    same_shape(v, m, ("v", "m")), same_shape(grad, m, ("grad", "m"))
    beta1 = number(beta1, "beta1", 0.0, 1.0, open_high=True)
    beta2 = number(beta2, "beta2", 0.0, 1.0, open_high=True)
    return beta1 * m + (1 - beta1) * grad, beta2 * v + (1 - beta2) * grad * grad


def bias_correct(
    m: torch.Tensor, v: torch.Tensor, t: int, beta1: float, beta2: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Adam's bias correction ``m_hat = m / (1 - beta1^t)``, ``v_hat = v / (1 - beta2^t)``.

    m, v: (P) the moment estimates after step ``t``. t: the number of gradients averaged so far,
    >= 1. beta1, beta2: decay rates in [0, 1). Returns ``(m_hat, v_hat)``, both (P).
    Implements eq. 15.3."""
    same_shape(v, m, ("v", "m"))
    t = integer(t, "t", low=1)
    beta1 = number(beta1, "beta1", 0.0, 1.0, open_high=True)
    beta2 = number(beta2, "beta2", 0.0, 1.0, open_high=True)
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

    theta: (P) parameters. m, v: (P) moment estimates after step ``t - 1`` (zeros before the
    first step). grad: (P) gradient of the loss (without any penalty) at ``theta``. t: the number
    of this step, counted from 1. lr, beta1, beta2, eps, weight_decay: the hyperparameters
    (``weight_decay`` is lambda). Returns ``(theta_new, m_new, v_new)``, all (P).
    Implements eqs. 15.3, 15.4."""
    same_shape(m, theta, ("m", "theta")), same_shape(grad, theta, ("grad", "theta"))
    t = integer(t, "t", low=1)
    lr, eps = number(lr, "lr", 0.0), number(eps, "eps", 0.0)
    wd = number(weight_decay, "weight_decay", 0.0)
    if decoupled:
        theta = (1 - lr * wd) * theta  # decoupled decay, before the Adam step
    else:
        grad = grad + wd * theta  # L2 penalty wd/2 |theta|^2 enters the gradient
    m, v = adam_moments(m, v, grad, beta1, beta2)
    m_hat, v_hat = bias_correct(m, v, t, beta1, beta2) if bias_correction else (m, v)
    return theta - lr * m_hat / (v_hat.sqrt() + eps), m, v


# --- eq. 15.5: clipping by the global norm --------------------------------------------------


def global_grad_norm_naive(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """The global L2 norm of a list of gradients: flatten, concatenate, take the norm.

    grads: tensors of any shapes (one per parameter). Returns 0-d tensor ``||g||_2`` over all N
    scalars."""
    grads = [grads] if isinstance(grads, torch.Tensor) else list(grads)
    flat = torch.cat([g.reshape(-1) for g in grads])  # (N,)
    return torch.sqrt((flat * flat).sum())


def global_grad_norm(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """The global L2 norm of a list of gradients as the norm of the per-tensor norms.

    grads: tensors of any shapes (one per parameter). Returns 0-d tensor ``||g||_2``."""
    grads = [grads] if isinstance(grads, torch.Tensor) else list(grads)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


def clip_grad_norm(
    grads: Sequence[torch.Tensor], max_norm: float, eps: float = 1e-6
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Rescale all gradients together so that their global norm is at most ``max_norm``.

    grads: tensors of any shapes. max_norm: the threshold c > 0. eps: guards the division when
    the norm is zero. Returns ``(clipped, total_norm)``: the rescaled gradients (same shapes) and
    the norm *before* clipping, a 0-d tensor. Implements eq. 15.5."""
    grads = [grads] if isinstance(grads, torch.Tensor) else list(grads)
    c, eps = positive(max_norm, "max_norm"), number(eps, "eps", 0.0)
    total = global_grad_norm(grads)
    factor = torch.clamp(c / (total + eps), max=1.0)
    return [g * factor for g in grads], total


# --- a thin stateful wrapper ----------------------------------------------------------------


@dataclass(frozen=True)
class OptimizerConfig:
    """Hyperparameters of :class:`Optimizer`; ``beta`` is the momentum coefficient.

    kind: "sgd" (eq. 15.1), "momentum" (eq. 15.2), "momentum_torch" (torch's buffer), "adam" (L2
    through the gradient) or "adamw" (decoupled decay, eq. 15.4)."""

    kind: str = "sgd"
    lr: float = 1e-3
    beta: float = 0.9
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0

    def __post_init__(self):
        one_of(self.kind, "kind", KINDS)
        for name in ("lr", "eps", "weight_decay"):
            number(getattr(self, name), name, 0.0)
        for name in ("beta", "beta1", "beta2"):
            number(getattr(self, name), name, 0.0, 1.0, open_high=True)
        if self.weight_decay and self.kind not in ("adam", "adamw"):
            raise ValueError(f"weight_decay is only implemented for adam/adamw, not {self.kind}")


class Optimizer:
    """Apply one of the pure update rules to parameters in place, reading their ``.grad``.

    params: the parameters, tensors with ``requires_grad=True``. config: the hyperparameters.
    schedule: optional function from the step index to the learning rate."""

    def __init__(
        self, params, config: OptimizerConfig, schedule: Callable[[int], float] | None = None
    ):
        self.params = list(params)
        if not self.params:
            raise ValueError("params must not be empty")
        self.config, self.schedule, self.steps_taken = config, schedule, 0
        self.state = [{"a": torch.zeros_like(p), "b": torch.zeros_like(p)} for p in self.params]

    @property
    def lr(self) -> float:
        """The learning rate the next step will use."""
        if self.schedule is None:
            return self.config.lr
        return number(self.schedule(self.steps_taken), "scheduled lr", 0.0)

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

    params: the parameters the optimizer updates (to be recorded). loss_fn: computes the loss
    from the current parameters (a closure). optimizer: has ``zero_grad()`` and ``step()``.
    steps: number of steps S >= 1. Returns ``(thetas, losses)``: (S + 1, N) flattened parameters
    before each step and after the last; (S + 1,) the loss at each of them."""
    params = list(params)
    steps = positive_int(steps, "steps")

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
