"""Learning-rate schedules: linear warmup, cosine decay, warmup-stable-decay (chapter 15).

A schedule is a function from the step index ``t = 0, 1, 2, ...`` (the number of optimizer steps
already taken) to the learning rate of the next step. The functions here are pure and return
Python floats; :func:`lr_lambda` turns one into the multiplier that
``torch.optim.lr_scheduler.LambdaLR`` expects, and :class:`mlbook.nn.optim.Optimizer` accepts one
directly.

Shape legend
    scalars only: ``t`` is an int step, every function returns a float learning rate.

Notation: ``W`` warmup steps, ``T`` total steps of a cosine schedule, ``S`` stable steps and
``D`` decay steps of warmup-stable-decay, ``eta_max`` the peak and ``eta_min`` the final rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["linear_warmup", "warmup_cosine", "warmup_stable_decay", "lr_lambda", "DECAYS"]

#: Shapes of the decay phase of :func:`warmup_stable_decay`, as functions of progress in [0, 1].
DECAYS: dict[str, Callable[[float], float]] = {
    "linear": lambda u: 1.0 - u,
    "cosine": lambda u: 0.5 * (1.0 + math.cos(math.pi * u)),
    "1-sqrt": lambda u: 1.0 - math.sqrt(u),
}


def _step(t) -> int:
    if isinstance(t, bool) or not isinstance(t, int):
        raise TypeError(f"step t must be an int, got {type(t).__name__}")
    if t < 0:
        raise ValueError(f"step t must be >= 0, got {t}")
    return t


def _count(n, name: str, minimum: int = 0) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {n}")
    return n


def _rates(peak_lr, min_lr, warmup_start) -> tuple[float, float, float]:
    for name, x in (("peak_lr", peak_lr), ("min_lr", min_lr), ("warmup_start", warmup_start)):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise TypeError(f"{name} must be a finite number, got {x!r}")
    if peak_lr <= 0:
        raise ValueError(f"peak_lr must be > 0, got {peak_lr}")
    if not 0 <= min_lr <= peak_lr:
        raise ValueError(f"need 0 <= min_lr <= peak_lr, got min_lr={min_lr}, peak_lr={peak_lr}")
    if not 0 <= warmup_start <= 1:
        raise ValueError(f"warmup_start is a fraction of peak_lr in [0, 1], got {warmup_start}")
    return float(peak_lr), float(min_lr), float(warmup_start)


def linear_warmup(t: int, *, peak_lr: float, warmup_steps: int, warmup_start: float = 0.0) -> float:
    """Linear warmup ``eta_max (s + (1 - s) t / W)`` for ``t < W``, then ``eta_max``.

    ``s = warmup_start`` is the starting fraction (``torch``'s ``LinearLR`` needs ``s > 0``).

    Args:
        t: step index >= 0.
        peak_lr: eta_max > 0.
        warmup_steps: W >= 0 (0: no warmup).
        warmup_start: s in [0, 1].
    """
    t, w = _step(t), _count(warmup_steps, "warmup_steps")
    peak_lr, _, s = _rates(peak_lr, 0.0, warmup_start)
    if t >= w:
        return peak_lr
    return peak_lr * (s + (1.0 - s) * t / w)


def warmup_cosine(
    t: int,
    *,
    peak_lr: float,
    warmup_steps: int,
    total_steps: int,
    min_lr: float = 0.0,
    warmup_start: float = 0.0,
) -> float:
    """Linear warmup for ``W`` steps, then cosine decay from ``eta_max`` to ``eta_min`` at ``T``.

    ``eta_t = eta_min + (eta_max - eta_min) (1 + cos(pi (t - W) / (T - W))) / 2`` for
    ``W <= t <= T`` and ``eta_min`` after ``T``.

    Args:
        t: step index >= 0.
        peak_lr, min_lr: eta_max > 0 and 0 <= eta_min <= eta_max.
        warmup_steps: W >= 0; total_steps: T > W.
        warmup_start: starting fraction of the warmup, see :func:`linear_warmup`.
    """
    t, w = _step(t), _count(warmup_steps, "warmup_steps")
    total = _count(total_steps, "total_steps", minimum=w + 1)
    peak_lr, min_lr, s = _rates(peak_lr, min_lr, warmup_start)
    if t < w:
        return linear_warmup(t, peak_lr=peak_lr, warmup_steps=w, warmup_start=s)
    u = min(1.0, (t - w) / (total - w))  # progress of the decay, in [0, 1]
    return min_lr + (peak_lr - min_lr) * DECAYS["cosine"](u)


def warmup_stable_decay(
    t: int,
    *,
    peak_lr: float,
    warmup_steps: int,
    stable_steps: int,
    decay_steps: int,
    min_lr: float = 0.0,
    decay: str = "linear",
    warmup_start: float = 0.0,
) -> float:
    """Warmup-stable-decay (WSD): warm up for W steps, hold eta_max for S, decay over D steps.

    During the decay, with progress ``u = (t - W - S) / D`` in [0, 1],
    ``eta_t = eta_min + (eta_max - eta_min) shape(u)`` where ``shape`` is one of :data:`DECAYS`
    (``1 - u``, ``(1 + cos(pi u)) / 2`` or ``1 - sqrt(u)``); ``eta_min`` after ``W + S + D``.
    Unlike the cosine schedule, the stable phase does not depend on the training length: one run
    can be continued and decayed at any point.

    Args:
        t: step index >= 0.
        peak_lr, min_lr: eta_max > 0 and 0 <= eta_min <= eta_max.
        warmup_steps, stable_steps: W >= 0 and S >= 0; decay_steps: D >= 1.
        decay: the shape of the decay, a key of :data:`DECAYS`.
        warmup_start: starting fraction of the warmup, see :func:`linear_warmup`.
    """
    t, w = _step(t), _count(warmup_steps, "warmup_steps")
    s_steps = _count(stable_steps, "stable_steps")
    d = _count(decay_steps, "decay_steps", minimum=1)
    peak_lr, min_lr, s = _rates(peak_lr, min_lr, warmup_start)
    if decay not in DECAYS:
        raise ValueError(f"decay must be one of {sorted(DECAYS)}, got {decay!r}")
    if t < w:
        return linear_warmup(t, peak_lr=peak_lr, warmup_steps=w, warmup_start=s)
    if t < w + s_steps:
        return peak_lr
    u = min(1.0, (t - w - s_steps) / d)
    return min_lr + (peak_lr - min_lr) * DECAYS[decay](u)


def lr_lambda(schedule: Callable[[int], float], base_lr: float) -> Callable[[int], float]:
    """The multiplier ``t -> schedule(t) / base_lr`` for ``torch.optim.lr_scheduler.LambdaLR``.

    ``LambdaLR`` sets the learning rate of step ``t`` to ``base_lr * lambda(t)``, where
    ``base_lr`` is the ``lr`` the torch optimizer was created with.

    Args:
        schedule: step index -> learning rate.
        base_lr: the optimizer's initial ``lr`` (> 0).
    """
    if not callable(schedule):
        raise TypeError("schedule must be callable (step -> learning rate)")
    if isinstance(base_lr, bool) or not isinstance(base_lr, (int, float)) or not base_lr > 0:
        raise ValueError(f"base_lr must be a number > 0, got {base_lr!r}")
    return lambda t: schedule(t) / base_lr
