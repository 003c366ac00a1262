"""mlbook.nn.schedules against closed forms and torch's built-in learning-rate schedulers."""

import math

import numpy as np
import pytest
import torch

from mlbook.nn import schedules as sch

LR = torch.optim.lr_scheduler


def torch_rates(build, steps, base_lr):
    """Learning rates of steps 0..steps-1 of a torch scheduler built by ``build(optimizer)``."""
    p = torch.zeros(1, requires_grad=True)
    o = torch.optim.SGD([p], lr=base_lr)
    s = build(o)
    out = []
    for _ in range(steps):
        out.append(o.param_groups[0]["lr"])
        o.step()
        s.step()
    return np.array(out)


def test_linear_warmup_closed_form():
    assert sch.linear_warmup(0, peak_lr=2.0, warmup_steps=4) == 0.0
    assert sch.linear_warmup(1, peak_lr=2.0, warmup_steps=4) == pytest.approx(0.5, abs=1e-15)
    assert sch.linear_warmup(4, peak_lr=2.0, warmup_steps=4) == 2.0
    assert sch.linear_warmup(0, peak_lr=2.0, warmup_steps=0) == 2.0
    assert sch.linear_warmup(0, peak_lr=2.0, warmup_steps=4, warmup_start=0.25) == 0.5


def test_warmup_cosine_closed_forms():
    kw = dict(peak_lr=1.0, warmup_steps=20, total_steps=120, min_lr=0.1)
    assert sch.warmup_cosine(10, **kw) == pytest.approx(0.5, abs=1e-15)
    assert sch.warmup_cosine(20, **kw) == pytest.approx(1.0, abs=1e-15)
    assert sch.warmup_cosine(70, **kw) == pytest.approx(0.55, abs=1e-15)
    assert sch.warmup_cosine(45, **kw) == pytest.approx(
        0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2, abs=1e-15
    )
    assert sch.warmup_cosine(120, **kw) == pytest.approx(0.1, abs=1e-15)
    assert sch.warmup_cosine(500, **kw) == pytest.approx(0.1, abs=1e-15)
    rates = [sch.warmup_cosine(t, **kw) for t in range(20, 121)]
    assert all(a >= b for a, b in zip(rates[:-1], rates[1:], strict=True))  # non-increasing


@pytest.mark.parametrize("W,T,start,floor", [(10, 50, 0.1, 0.0), (5, 80, 0.5, 0.2)])
def test_warmup_cosine_matches_torch_chain(W, T, start, floor):
    ours = [
        sch.warmup_cosine(
            t, peak_lr=0.3, warmup_steps=W, total_steps=T, min_lr=0.3 * floor, warmup_start=start
        )
        for t in range(T + 1)
    ]
    ref = torch_rates(
        lambda o: LR.SequentialLR(
            o,
            [
                LR.LinearLR(o, start_factor=start, end_factor=1.0, total_iters=W),
                LR.CosineAnnealingLR(o, T_max=T - W, eta_min=0.3 * floor),
            ],
            milestones=[W],
        ),
        T + 1,
        0.3,
    )
    np.testing.assert_allclose(ours, ref, atol=1e-12, rtol=0)


def test_wsd_linear_matches_torch_chain_and_shapes():
    W, S, D, peak, floor = 8, 30, 12, 0.2, 0.02
    ours = [
        sch.warmup_stable_decay(
            t,
            peak_lr=peak,
            warmup_steps=W,
            stable_steps=S,
            decay_steps=D,
            min_lr=floor,
            warmup_start=0.1,
        )
        for t in range(W + S + D + 5)
    ]
    ref = torch_rates(
        lambda o: LR.SequentialLR(
            o,
            [
                LR.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=W),
                LR.ConstantLR(o, factor=1.0, total_iters=0),
                LR.LinearLR(o, start_factor=1.0, end_factor=floor / peak, total_iters=D),
            ],
            milestones=[W, W + S],
        ),
        W + S + D + 5,
        peak,
    )
    np.testing.assert_allclose(ours, ref, atol=1e-12, rtol=0)
    for decay, mid in [("linear", 0.5), ("cosine", 0.5), ("1-sqrt", 1 - math.sqrt(0.5))]:
        kw = dict(peak_lr=1.0, warmup_steps=0, stable_steps=10, decay_steps=20, decay=decay)
        assert sch.warmup_stable_decay(5, **kw) == 1.0
        assert sch.warmup_stable_decay(20, **kw) == pytest.approx(mid, abs=1e-15)
        assert sch.warmup_stable_decay(30, **kw) == pytest.approx(0.0, abs=1e-15)
    for shape in sch.DECAYS.values():
        assert shape(0.0) == pytest.approx(1.0) and shape(1.0) == pytest.approx(0.0, abs=1e-15)


def test_lr_lambda_drives_lambdalr():
    def schedule(t):
        return sch.warmup_cosine(t, peak_lr=0.05, warmup_steps=3, total_steps=20)

    ref = torch_rates(lambda o: LR.LambdaLR(o, sch.lr_lambda(schedule, 0.05)), 25, 0.05)
    np.testing.assert_allclose(ref, [schedule(t) for t in range(25)], atol=1e-15, rtol=0)


def test_bad_input_raises():
    with pytest.raises(ValueError, match=r"t must be in \[0, inf\]"):
        sch.linear_warmup(-1, peak_lr=1.0, warmup_steps=3)
    with pytest.raises(TypeError, match="int"):
        sch.linear_warmup(1.5, peak_lr=1.0, warmup_steps=3)
    with pytest.raises(ValueError, match="warmup_start"):
        sch.linear_warmup(0, peak_lr=1.0, warmup_steps=3, warmup_start=2.0)
    with pytest.raises(ValueError, match="total_steps"):
        sch.warmup_cosine(0, peak_lr=1.0, warmup_steps=10, total_steps=10)
    with pytest.raises(ValueError, match="min_lr"):
        sch.warmup_cosine(0, peak_lr=1.0, warmup_steps=1, total_steps=10, min_lr=2.0)
    with pytest.raises(ValueError, match="peak_lr"):
        sch.warmup_cosine(0, peak_lr=0.0, warmup_steps=1, total_steps=10)
    with pytest.raises(ValueError, match="peak_lr must be a finite number"):
        sch.warmup_cosine(0, peak_lr=float("nan"), warmup_steps=1, total_steps=10)
    with pytest.raises(ValueError, match="decay"):
        sch.warmup_stable_decay(
            0, peak_lr=1.0, warmup_steps=1, stable_steps=1, decay_steps=1, decay="exp"
        )
    with pytest.raises(ValueError, match="decay_steps"):
        sch.warmup_stable_decay(0, peak_lr=1.0, warmup_steps=1, stable_steps=1, decay_steps=0)
    with pytest.raises(TypeError, match="stable_steps"):
        sch.warmup_stable_decay(0, peak_lr=1.0, warmup_steps=1, stable_steps=1.0, decay_steps=1)
    with pytest.raises(ValueError, match="base_lr"):
        sch.lr_lambda(lambda t: 0.1, 0.0)
