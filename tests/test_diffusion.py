"""Tests of mlbook.beyond.diffusion against independent references (closed forms, torch and
SciPy built-ins, loops), seeded, with explicit tolerances."""

import math

import numpy as np
import pytest
import scipy.optimize
import scipy.stats
import torch
import torch.nn.functional as F

from mlbook.beyond import diffusion as df

F64 = torch.float64


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_alpha_bars_is_a_product_of_floats():
    betas = df.linear_betas(50, 1e-3, 0.3)
    want = [math.prod(1 - b for b in betas.tolist()[: t + 1]) for t in range(50)]
    torch.testing.assert_close(
        df.alpha_bars(betas), torch.tensor(want, dtype=F64), atol=1e-15, rtol=0
    )


def test_q_sample_matches_the_chain_in_distribution():
    betas = df.linear_betas(40, 1e-3, 0.2)
    ab = float(df.alpha_bars(betas)[19])
    x0 = torch.tensor([2.0, -1.0], dtype=F64).expand(40_000, 2)
    chain = df.q_sample_naive(x0, 19, betas, generator=gen(1))
    se = math.sqrt((1 - ab) / 40_000)
    assert abs(chain[:, 0].mean().item() - 2 * math.sqrt(ab)) < 4 * se
    assert abs(chain[:, 1].var().item() - (1 - ab)) < 4 * (1 - ab) * math.sqrt(2 / 40_000)


def test_ddpm_step_with_true_noise_is_the_posterior_mean():
    betas = df.linear_betas(30, 1e-3, 0.3)
    ab = df.alpha_bars(betas)
    x0 = torch.randn(8, 3, generator=gen(2), dtype=F64)
    for t in range(30):
        eps = torch.randn(8, 3, generator=gen(t), dtype=F64)
        xt = df.q_sample(x0, torch.full((8,), t), eps, ab)
        step = df.ddpm_step(xt, t, eps, betas, torch.zeros_like(xt))
        torch.testing.assert_close(step, df.posterior_mean(x0, xt, t, betas), atol=1e-12, rtol=0)


def test_vlb_weight_times_squared_error_is_the_gaussian_kl():
    betas = df.linear_betas(20, 1e-3, 0.3)
    ab = df.alpha_bars(betas)
    lam = df.vlb_weights(betas)
    x0 = torch.randn(6, 2, generator=gen(3), dtype=F64)
    eps = torch.randn(6, 2, generator=gen(4), dtype=F64)
    eps_hat = eps + 0.2 * torch.randn(6, 2, generator=gen(5), dtype=F64)
    for t in (1, 7, 19):
        xt = df.q_sample(x0, torch.full((6,), t), eps, ab)
        m1 = df.ddpm_step(xt, t, eps, betas, torch.zeros_like(xt))
        m2 = df.ddpm_step(xt, t, eps_hat, betas, torch.zeros_like(xt))
        s = betas[t].sqrt()
        N = torch.distributions.Normal
        kl = torch.distributions.kl_divergence(N(m1, s), N(m2, s)).sum(1)
        torch.testing.assert_close(lam[t] * ((eps - eps_hat) ** 2).sum(1), kl, atol=1e-12, rtol=0)


def test_eps_loss_is_mse():
    ab = df.alpha_bars(df.linear_betas(10))
    x0, eps = torch.randn(5, 2, dtype=F64), torch.randn(5, 2, dtype=F64)
    t = torch.tensor([0, 3, 9, 2, 5])
    model = lambda x, t: 0.5 * x  # noqa: E731
    want = F.mse_loss(0.5 * df.q_sample(x0, t, eps, ab), eps)
    torch.testing.assert_close(df.eps_loss(model, x0, t, eps, ab), want, atol=1e-14, rtol=0)


def test_sample_shapes_and_trajectory():
    model = df.Denoiser(d=2, T=5, width=8)
    x, path = df.sample(model, 7, df.linear_betas(5, 1e-3, 0.3), generator=gen(), trajectory=True)
    assert x.shape == (7, 2) and path.shape == (6, 7, 2)
    assert torch.equal(path[-1], x)


def test_sliced_wasserstein_fast_naive_and_scipy_agree():
    x = torch.randn(50, 2, generator=gen(6), dtype=F64)
    y = torch.randn(50, 2, generator=gen(7), dtype=F64) + 0.5
    fast = df.sliced_wasserstein(x, y, 8, generator=gen(8))
    naive = df.sliced_wasserstein_naive(x, y, 8, generator=gen(8))
    torch.testing.assert_close(fast, naive, atol=1e-12, rtol=0)
    u = torch.randn(8, 2, generator=gen(8), dtype=F64)
    u = u / u.norm(dim=1, keepdim=True)
    ref = np.mean([scipy.stats.wasserstein_distance((x @ v).numpy(), (y @ v).numpy()) for v in u])
    assert abs(fast.item() - ref) < 1e-12


def test_dit_block_identity_at_init_and_torch_reference():
    x, c = torch.randn(2, 5, 16, generator=gen(9)), torch.randn(2, 16, generator=gen(10))
    with torch.no_grad():
        assert torch.equal(df.DiTBlock(16, 4, generator=gen(11))(x, c), x)
        blk = df.DiTBlock(16, 4, zero=False, generator=gen(12)).double()
        xd, cd = x.double(), c.double()
        b1, s1, g1, b2, s2, g2 = blk.ada(F.silu(cd)).chunk(6, dim=1)
        h = F.layer_norm(xd, (16,), eps=1e-6) * (1 + s1[:, None]) + b1[:, None]
        q, k, v = blk.qkv(h).reshape(2, 5, 3, 4, 4).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, 5, 16)
        h = xd + g1[:, None] * blk.proj(att)
        h2 = F.layer_norm(h, (16,), eps=1e-6) * (1 + s2[:, None]) + b2[:, None]
        want = h + g2[:, None] * blk.fc2(F.gelu(blk.fc1(h2)))
        torch.testing.assert_close(blk(xd, cd), want, atol=1e-12, rtol=0)


def test_tiny_dit_predicts_zero_at_init():
    model = df.TinyDiT(image_size=8, patch=2, D=16, n_heads=2, n_layers=1, T=10, generator=gen())
    x = torch.randn(3, 1, 8, 8, generator=gen(1))
    out = model(x, torch.tensor([0, 4, 9]), torch.tensor([1, 2, 3]))
    assert out.shape == x.shape and bool((out == 0).all())


def _cloud(n=20, seed=0):
    g = gen(seed)
    x, y = torch.randn(n, 2, generator=g, dtype=F64), torch.randn(n, 2, generator=g, dtype=F64) + 1
    return x, y, 0.5 * torch.cdist(x, y) ** 2, torch.full((n,), 1 / n, dtype=F64)


def test_sinkhorn_log_matches_scaling_form_and_marginals():
    x, y, C, a = _cloud()
    P, f, g, _ = df.sinkhorn_log(a, a, C, 0.2)
    Pn, _ = df.sinkhorn_naive(a, a, C, 0.2)
    torch.testing.assert_close(P, Pn, atol=1e-14, rtol=0)
    torch.testing.assert_close(P.sum(1), a, atol=1e-12, rtol=0)
    torch.testing.assert_close(P.sum(0), a, atol=1e-12, rtol=0)
    dual = ((f - 0.2 * a.log()) * a).sum() + ((g - 0.2 * a.log()) * a).sum()
    torch.testing.assert_close(df.entropic_objective(P, a, a, C, 0.2), dual, atol=1e-10, rtol=0)


def test_entropic_cost_within_eps_log_n_of_exact_ot():
    x, y, C, a = _cloud(16, 3)
    rows, cols = scipy.optimize.linear_sum_assignment(C.numpy())
    ot = C[rows, cols].mean().item()
    for eps in (0.5, 0.1, 0.03):
        P = df.sinkhorn_log(a, a, C, eps)[0]
        gap = (P * C).sum().item() - ot
        assert -1e-12 <= gap <= eps * math.log(16)


def test_bridge_sample_endpoints():
    x0, x1, z = torch.randn(4, 2), torch.randn(4, 2), torch.randn(4, 2)
    assert torch.equal(df.bridge_sample(x0, x1, 0.0, 1.0, z), x0)
    torch.testing.assert_close(df.bridge_sample(x0, x1, 1.0, 1.0, z), x1)


def test_argument_checks():
    ab = df.alpha_bars(df.linear_betas(10))
    x = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="x0 and eps must have the same shape"):
        df.q_sample(x, torch.zeros(3, dtype=torch.long), torch.zeros(3, 1), ab)
    with pytest.raises(ValueError, match=r"t must hold indices in \[0, 10\)"):
        df.q_sample(x, torch.tensor([0, 1, 10]), x, ab)
    a = torch.full((3,), 1 / 3, dtype=F64)
    with pytest.raises(ValueError, match="b must sum to one"):
        df.sinkhorn_log(a, torch.ones(3, dtype=F64), torch.zeros(3, 3, dtype=F64), 0.1)
    with pytest.raises(ValueError, match=r"C must have shape \(3, 3\)"):
        df.sinkhorn_log(a, a, torch.zeros(3, 2, dtype=F64), 0.1)
    with pytest.raises(ValueError, match="eps must be a finite number"):
        df.sinkhorn_log(a, a, torch.zeros(3, 3, dtype=F64), 0.0)
    with pytest.raises(ValueError, match="n_heads=3 must divide D=10"):
        df.DiTBlock(10, 3)
    with pytest.raises(ValueError, match="t must be a finite number"):
        df.bridge_sample(x, x, 1.5, 1.0, x)
