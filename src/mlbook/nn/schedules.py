"""Learning-rate schedules: linear warmup, cosine decay, warmup-stable-decay (chapter 15).

A schedule maps the step index ``t = 0, 1, 2, ...`` (optimizer steps taken) to the learning rate
of the next step; :func:`lr_lambda` turns one into a ``LambdaLR`` multiplier.

Shape legend
    scalars only: ``t`` is an int step, every function returns a float learning rate.

Notation: ``W`` warmup steps, ``T`` total steps of a cosine schedule, ``S`` stable steps and
``D`` decay steps of warmup-stable-decay, ``eta_max`` the peak and ``eta_min`` the final rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..validation import integer, number, one_of, positive, probability

__all__ = ["linear_warmup", "warmup_cosine", "warmup_stable_decay", "lr_lambda", "DECAYS"]

#: Shapes of the decay phase of :func:`warmup_stable_decay`, as functions of progress in [0, 1].
DECAYS: dict[str, Callable[[float], float]] = {
    "linear": lambda u: 1.0 - u,
    "cosine": lambda u: 0.5 * (1.0 + math.cos(math.pi * u)),
    "1-sqrt": lambda u: 1.0 - math.sqrt(u),
}


def linear_warmup(t: int, *, peak_lr: float, warmup_steps: int, warmup_start: float = 0.0) -> float:
    """Linear warmup eta_max (s + (1 - s) t / W) for t < W, then eta_max.

    t >= 0; peak_lr: eta_max > 0; warmup_steps: W >= 0; warmup_start: s in [0, 1]."""
    t, w = integer(t, "t", low=0), integer(warmup_steps, "warmup_steps", low=0)
    peak_lr, s = positive(peak_lr, "peak_lr"), probability(warmup_start, "warmup_start")
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
    """Linear warmup for W steps, then cosine decay from eta_max to eta_min at step T.

    peak_lr >= min_lr >= 0; warmup_steps: W >= 0; total_steps: T > W; warmup_start as in
    :func:`linear_warmup`."""
    t, w = integer(t, "t", low=0), integer(warmup_steps, "warmup_steps", low=0)
    total = integer(total_steps, "total_steps", low=w + 1)
    peak_lr, s = positive(peak_lr, "peak_lr"), probability(warmup_start, "warmup_start")
    min_lr = number(min_lr, "min_lr", 0.0, peak_lr)
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
    """Warmup-stable-decay: warm up for W steps, hold eta_max for S, decay over D.

    The decay ``shape(u)``, u = (t - W - S) / D, is a key of :data:`DECAYS`. peak_lr >= min_lr >= 0;
    W, S >= 0; D >= 1."""
    t, w = integer(t, "t", low=0), integer(warmup_steps, "warmup_steps", low=0)
    s_steps = integer(stable_steps, "stable_steps", low=0)
    d = integer(decay_steps, "decay_steps", low=1)
    peak_lr, s = positive(peak_lr, "peak_lr"), probability(warmup_start, "warmup_start")
    min_lr = number(min_lr, "min_lr", 0.0, peak_lr)
    one_of(decay, "decay", DECAYS)
    if t < w:
        return linear_warmup(t, peak_lr=peak_lr, warmup_steps=w, warmup_start=s)
    if t < w + s_steps:
        return peak_lr
    u = min(1.0, (t - w - s_steps) / d)
    return min_lr + (peak_lr - min_lr) * DECAYS[decay](u)


def lr_lambda(schedule: Callable[[int], float], base_lr: float) -> Callable[[int], float]:
    """The ``LambdaLR`` multiplier t -> schedule(t) / base_lr; base_lr: the optimizer's lr > 0."""
    base_lr = positive(base_lr, "base_lr")
    return lambda t: schedule(t) / base_lr
