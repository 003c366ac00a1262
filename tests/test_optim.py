"""mlbook.nn.optim against torch.optim, torch.nn.utils.clip_grad_norm_, NumPy and closed forms."""

import math

import numpy as np
import pytest
import torch

from mlbook.nn import optim as opt

F64_ATOL = 1e-12  # float64: a few hundred steps of rounding at most
F32_RTOL = 1e-5  # float32: torch fuses some operations (lerp, addcdiv) differently


def spd(d, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(d, d, generator=g, dtype=dtype)
    return A @ A.T / d + 0.1 * torch.eye(d, dtype=dtype)


def run_on_quadratic(make_opt, H, theta0, steps, scheduler=None):
    """Iterates of an optimizer on theta^T H theta / 2 via opt.trajectory."""
    theta = theta0.clone().requires_grad_(True)
    o = make_opt([theta])
    sch = scheduler(o) if scheduler else None
    traj, _ = opt.trajectory([theta], lambda: 0.5 * theta @ H @ theta, o, steps, sch)
    return traj


# --- pure update functions ------------------------------------------------------------------


def test_sgd_step_matches_torch_and_does_not_mutate():
    H = spd(5, 0)
    th0 = torch.randn(5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    theta = th0.clone()
    grad = H @ theta
    new = opt.sgd_step(theta, grad, 0.1)
    torch.testing.assert_close(theta, th0, rtol=0, atol=0)  # input untouched
    torch.testing.assert_close(new, th0 - 0.1 * H @ th0, rtol=0, atol=1e-15)
    ours = opt.gd_on_quadratic(H, th0, 0.1, 40)
    ref = run_on_quadratic(lambda ps: torch.optim.SGD(ps, lr=0.1), H, th0, 40)
    torch.testing.assert_close(ours, ref, rtol=0, atol=F64_ATOL)


def test_gd_on_quadratic_closed_form_and_stability_limit():
    H = spd(4, 2)
    th0 = torch.ones(4, dtype=torch.float64)
    lr = 0.9 * opt.stability_limit(H)
    traj = opt.gd_on_quadratic(H, th0, lr, 25)
    M = np.eye(4) - lr * H.numpy()
    ref = np.stack([np.linalg.matrix_power(M, t) @ th0.numpy() for t in range(26)])
    np.testing.assert_allclose(traj.numpy(), ref, atol=1e-12)
    assert opt.stability_limit(H) == pytest.approx(
        2 / np.linalg.eigvalsh(H.numpy()).max(), rel=1e-12
    )
    # just below the limit GD converges, just above it diverges
    lim = opt.stability_limit(H)
    assert opt.gd_on_quadratic(H, th0, 0.99 * lim, 3000)[-1].norm() < 1e-3
    assert opt.gd_on_quadratic(H, th0, 1.01 * lim, 3000)[-1].norm() > 1e3


@pytest.mark.parametrize("dtype,atol", [(torch.float64, F64_ATOL), (torch.float32, 1e-5)])
def test_momentum_matches_torch_sgd(dtype, atol):
    H = spd(6, 3, dtype)
    th0 = torch.linspace(-1, 1, 6, dtype=dtype)
    ref = run_on_quadratic(lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9), H, th0, 60)
    th, v, out = th0, torch.zeros_like(th0), [th0]
    thb, b = th0, torch.zeros_like(th0)
    for _ in range(60):
        th, v = opt.momentum_step(th, v, H @ th, 0.05, 0.9)
        thb, b = opt.momentum_step_torch(thb, b, H @ thb, 0.05, 0.9)
        out.append(th)
        torch.testing.assert_close(v, -0.05 * b, rtol=0, atol=atol)  # v = -lr b
    torch.testing.assert_close(torch.stack(out), ref, rtol=0, atol=atol)


def test_momentum_conventions_differ_when_lr_changes():
    H, th0 = spd(3, 4), torch.ones(3, dtype=torch.float64)

    def schedule(t):
        return 0.1 if t < 10 else 0.01

    ref = run_on_quadratic(
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        H,
        th0,
        30,
        lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda t: schedule(t) / 0.1),
    )
    velocity = run_on_quadratic(
        lambda ps: opt.Optimizer(ps, opt.OptimizerConfig("momentum", beta=0.9), schedule),
        H,
        th0,
        30,
    )
    torch_conv = run_on_quadratic(
        lambda ps: opt.Optimizer(ps, opt.OptimizerConfig("momentum_torch", beta=0.9), schedule),
        H,
        th0,
        30,
    )
    torch.testing.assert_close(torch_conv, ref, rtol=0, atol=F64_ATOL)
    assert (velocity - ref).abs().max() > 1e-3


def test_adam_moments_and_bias_correction_closed_forms():
    g = torch.tensor([0.5, -3.0], dtype=torch.float64)
    m = v = torch.zeros(2, dtype=torch.float64)
    for t in range(1, 30):
        m, v = opt.adam_moments(m, v, g, 0.9, 0.99)
        torch.testing.assert_close(m, (1 - 0.9**t) * g, rtol=0, atol=1e-14)
        torch.testing.assert_close(v, (1 - 0.99**t) * g**2, rtol=0, atol=1e-13)
        m_hat, v_hat = opt.bias_correct(m, v, t, 0.9, 0.99)
        torch.testing.assert_close(m_hat, g, rtol=0, atol=1e-13)
        torch.testing.assert_close(v_hat, g**2, rtol=0, atol=1e-12)


def test_bias_correction_unbiased_monte_carlo():
    gen = torch.Generator().manual_seed(5)
    n = 40_000
    m = v = torch.zeros(n, dtype=torch.float64)
    for _ in range(5):
        g = 2.0 + torch.randn(n, generator=gen, dtype=torch.float64)
        m, v = opt.adam_moments(m, v, g, 0.9, 0.999)
    m_hat, v_hat = opt.bias_correct(m, v, 5, 0.9, 0.999)
    se_m = m_hat.std() / math.sqrt(n)
    se_v = v_hat.std() / math.sqrt(n)
    assert abs(m_hat.mean() - 2.0) < 4 * se_m
    assert abs(v_hat.mean() - 5.0) < 4 * se_v
    assert abs(m.mean() - 2.0) > 20 * se_m  # uncorrected is biased


@pytest.mark.parametrize("kind,wd", [("adam", 0.0), ("adam", 0.3), ("adamw", 0.3)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_adam_variants_match_torch(kind, wd, dtype):
    H = spd(5, 6, dtype)
    th0 = torch.linspace(-2, 1, 5, dtype=dtype)
    cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
    ref = run_on_quadratic(lambda ps: cls(ps, lr=0.05, weight_decay=wd), H, th0, 80)
    th, m, v, out = th0, torch.zeros_like(th0), torch.zeros_like(th0), [th0]
    for t in range(1, 81):
        th, m, v = opt.adamw_step(
            th, m, v, H @ th, t, lr=0.05, weight_decay=wd, decoupled=kind == "adamw"
        )
        out.append(th)
    if dtype == torch.float64:
        torch.testing.assert_close(torch.stack(out), ref, rtol=0, atol=F64_ATOL)
    else:
        torch.testing.assert_close(torch.stack(out), ref, rtol=F32_RTOL, atol=1e-5)


def test_adam_without_bias_correction_closed_form():
    one = torch.ones(1, dtype=torch.float64)
    th, m, v = (
        torch.zeros(1, dtype=torch.float64),
        torch.zeros(1, dtype=torch.float64),
        torch.zeros(1, dtype=torch.float64),
    )
    for t in range(1, 50):
        new, m, v = opt.adamw_step(th, m, v, one, t, lr=1.0, eps=0.0, bias_correction=False)
        assert (th - new).item() == pytest.approx((1 - 0.9**t) / math.sqrt(1 - 0.999**t), rel=1e-12)
        th = new


def test_l2_differs_from_decoupled_decay():
    H, th0 = spd(3, 7), torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    th_l2 = th_w = th0
    m1 = v1 = m2 = v2 = torch.zeros(3, dtype=torch.float64)
    for t in range(1, 50):
        th_l2, m1, v1 = opt.adamw_step(
            th_l2, m1, v1, H @ th_l2, t, lr=0.05, weight_decay=0.5, decoupled=False
        )
        th_w, m2, v2 = opt.adamw_step(th_w, m2, v2, H @ th_w, t, lr=0.05, weight_decay=0.5)
    assert (th_l2 - th_w).abs().max() > 1e-2


# --- clipping --------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [100.0, 0.01])
def test_clip_grad_norm_matches_torch(scale):
    gen = torch.Generator().manual_seed(8)
    grads = [
        scale * torch.randn(s, generator=gen, dtype=torch.float64)
        for s in [(3, 4), (5,), (2, 2, 2)]
    ]
    holders = [torch.zeros_like(g, requires_grad=True) for g in grads]
    for h, g in zip(holders, grads, strict=True):
        h.grad = g.clone()
    total_ref = torch.nn.utils.clip_grad_norm_(holders, max_norm=1.0)
    clipped, total = opt.clip_grad_norm(grads, 1.0)
    torch.testing.assert_close(total, total_ref, rtol=0, atol=1e-12)
    for c, h in zip(clipped, holders, strict=True):
        torch.testing.assert_close(c, h.grad, rtol=0, atol=1e-14)
    torch.testing.assert_close(
        opt.global_grad_norm(grads), opt.global_grad_norm_naive(grads), rtol=1e-14, atol=0
    )
    expected_norm = min(1.0, float(total))
    assert float(opt.global_grad_norm(clipped)) == pytest.approx(expected_norm, rel=1e-5)


def test_clip_zero_gradient_and_single_tensor():
    clipped, total = opt.clip_grad_norm([torch.zeros(3)], 1.0)
    assert float(total) == 0.0 and torch.equal(clipped[0], torch.zeros(3))
    g = torch.tensor([3.0, 4.0], dtype=torch.float64)
    (c,), total = opt.clip_grad_norm(g, 1.0, eps=0.0)
    torch.testing.assert_close(c, g / 5, rtol=0, atol=1e-15)


# --- the wrapper ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config,make_torch",
    [
        (opt.OptimizerConfig("sgd", lr=0.1), lambda ps: torch.optim.SGD(ps, lr=0.1)),
        (
            opt.OptimizerConfig("momentum", lr=0.05, beta=0.8),
            lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8),
        ),
        (
            opt.OptimizerConfig("adamw", lr=0.02, weight_decay=0.1, beta2=0.99),
            lambda ps: torch.optim.AdamW(ps, lr=0.02, weight_decay=0.1, betas=(0.9, 0.99)),
        ),
    ],
)
def test_optimizer_wrapper_matches_torch_on_two_tensors(config, make_torch):
    gen = torch.Generator().manual_seed(9)
    X = torch.randn(20, 3, generator=gen, dtype=torch.float64)
    y = torch.randn(20, generator=gen, dtype=torch.float64)
    init = [
        0.3 * torch.randn(3, 4, generator=gen, dtype=torch.float64),
        0.3 * torch.randn(4, generator=gen, dtype=torch.float64),
    ]

    def go(make):
        ps = [p.clone().requires_grad_(True) for p in init]
        return opt.trajectory(
            ps, lambda: ((torch.tanh(X @ ps[0]) @ ps[1] - y) ** 2).mean(), make(ps), 50
        )

    (t1, l1), (t2, l2) = go(lambda ps: opt.Optimizer(ps, config)), go(make_torch)
    assert t1.shape == (51, 16) and l1.shape == (51,)
    torch.testing.assert_close(t1, t2, rtol=0, atol=F64_ATOL)
    torch.testing.assert_close(l1, l2, rtol=0, atol=F64_ATOL)


# --- bad input --------------------------------------------------------------------------------


def test_bad_input_raises():
    t3, t4 = torch.zeros(3), torch.zeros(4)
    with pytest.raises(ValueError, match="shape"):
        opt.sgd_step(t3, t4, 0.1)
    with pytest.raises(ValueError, match="lr"):
        opt.sgd_step(t3, t3, -0.1)
    with pytest.raises(ValueError, match="beta"):
        opt.momentum_step(t3, t3, t3, 0.1, 1.0)
    with pytest.raises(ValueError, match="shape"):
        opt.momentum_step_torch(t3, t4, t3, 0.1, 0.9)
    with pytest.raises(ValueError, match="beta2"):
        opt.adam_moments(t3, t3, t3, 0.9, 1.5)
    with pytest.raises(ValueError, match=r"t must be in \[1, inf\]"):
        opt.bias_correct(t3, t3, 0, 0.9, 0.999)
    with pytest.raises(TypeError, match="int"):
        opt.adamw_step(t3, t3, t3, t3, 1.5, lr=0.1)
    with pytest.raises(ValueError, match="weight_decay"):
        opt.adamw_step(t3, t3, t3, t3, 1, lr=0.1, weight_decay=-1.0)
    with pytest.raises(ValueError, match="max_norm"):
        opt.clip_grad_norm([t3], 0.0)
    with pytest.raises(ValueError, match="H must have shape"):
        opt.gd_on_quadratic(torch.zeros(2, 3), torch.zeros(2), 0.1, 3)
    with pytest.raises(ValueError, match="H must have shape"):
        opt.gd_on_quadratic(torch.eye(2), torch.zeros(3), 0.1, 3)
    with pytest.raises(ValueError, match="symmetric"):
        opt.gd_on_quadratic(torch.tensor([[1.0, 2.0], [0.0, 1.0]]), torch.zeros(2), 0.1, 3)
    with pytest.raises(ValueError, match="steps"):
        opt.gd_on_quadratic(torch.eye(2), torch.zeros(2), 0.1, -1)
    with pytest.raises(ValueError, match="positive definite"):
        opt.stability_limit(torch.diag(torch.tensor([1.0, -1.0])))
    with pytest.raises(ValueError, match="kind"):
        opt.OptimizerConfig("rmsprop")
    with pytest.raises(ValueError, match="weight_decay"):
        opt.OptimizerConfig("sgd", weight_decay=0.1)
    with pytest.raises(ValueError, match="params must not be empty"):
        opt.Optimizer([], opt.OptimizerConfig())
    p = torch.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="no gradient"):
        opt.Optimizer([p], opt.OptimizerConfig()).step()
    with pytest.raises(ValueError, match="steps"):
        opt.trajectory([p], lambda: p.sum(), opt.Optimizer([p], opt.OptimizerConfig()), 0)


def test_update_functions_do_not_modify_their_inputs():
    gen = torch.Generator().manual_seed(10)
    theta, m, v, g = (torch.randn(4, generator=gen, dtype=torch.float64) for _ in range(4))
    v = v.abs()
    before = [x.clone() for x in (theta, m, v, g)]
    opt.momentum_step(theta, m, g, 0.1, 0.9)
    opt.momentum_step_torch(theta, m, g, 0.1, 0.9)
    opt.adam_moments(m, v, g, 0.9, 0.999)
    opt.bias_correct(m, v, 3, 0.9, 0.999)
    opt.adamw_step(theta, m, v, g, 3, lr=0.1, weight_decay=0.1)
    opt.adamw_step(theta, m, v, g, 3, lr=0.1, weight_decay=0.1, decoupled=False)
    opt.clip_grad_norm([theta, g], 0.1)
    for x, x0 in zip((theta, m, v, g), before, strict=True):
        assert torch.equal(x, x0)
