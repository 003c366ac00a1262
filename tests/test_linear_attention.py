"""mlbook.architectures.linear_attention against references: SDPA, autograd, explicit sums."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from mlbook.architectures import linear_attention as la

TOL = {torch.float64: 1e-12, torch.float32: 1e-5}
f64 = torch.float64


def qkv(shape=(2, 3, 37, 8), dv=5, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape, generator=gen, dtype=dtype)
    k = torch.randn(*shape, generator=gen, dtype=dtype)
    v = torch.randn(*shape[:-1], dv, generator=gen, dtype=dtype)
    return q, k, v


def test_elu_plus_one_is_positive_and_matches_closed_form():
    x = torch.linspace(-30, 5, 101, dtype=torch.float64)
    phi = la.elu_plus_one(x)
    assert (phi > 0).all()
    torch.testing.assert_close(phi, torch.where(x > 0, x + 1, torch.exp(x)), atol=1e-15, rtol=0)


def test_feature_kernel_matches_explicit_dot_products():
    q, k, _ = qkv((6, 4))
    K = la.feature_kernel(q, k)
    for i in range(6):
        for j in range(6):
            ref = torch.dot(F.elu(q[i]) + 1, F.elu(k[j]) + 1)
            assert abs(K[i, j] - ref) < 1e-13
    torch.testing.assert_close(la.feature_kernel(q, k, None), q @ k.T, atol=1e-14, rtol=0)


@pytest.mark.parametrize("causal", [True, False])
def test_exp_kernel_attention_is_softmax_attention(causal):
    q, k, v = qkv()
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(
        la.kernel_attention(q, k, v, la.exp_kernel, causal=causal), ref, atol=1e-12, rtol=0
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("normalize", [True, False])
def test_recurrent_and_chunked_equal_quadratic(dtype, normalize):
    q, k, v = qkv(dtype=dtype)
    ref = la.linear_attention_quadratic(q, k, v, normalize=normalize)
    tol = TOL[dtype] * (1 if normalize else 100)  # unnormalised outputs grow like T
    y, (S, c) = la.linear_attention_recurrent(q, k, v, normalize=normalize, return_state=True)
    torch.testing.assert_close(y, ref, atol=tol, rtol=tol)
    for chunk in (1, 5, 16, 37, 100):
        torch.testing.assert_close(
            la.linear_attention_chunked(q, k, v, chunk=chunk, normalize=normalize),
            ref,
            atol=tol,
            rtol=tol,
        )
    phik = la.elu_plus_one(k)
    torch.testing.assert_close(S, phik.transpose(-1, -2) @ v, atol=100 * tol, rtol=tol)
    torch.testing.assert_close(c, phik.sum(-2), atol=100 * tol, rtol=tol)


def test_causality_future_tokens_do_not_change_the_past():
    q, k, v = qkv((20, 4))
    y = la.linear_attention_recurrent(q, k, v)
    v2 = v.clone()
    v2[10:] += 1.0
    y2 = la.linear_attention_recurrent(q, k, v2)
    torch.testing.assert_close(y[:10], y2[:10], atol=0, rtol=0)
    assert (y[10:] - y2[10:]).abs().max() > 0.1


def test_delta_rule_is_sgd_on_the_recall_loss():
    """Each write is one SGD step of size beta_t on 0.5 ||S^T k_t - v_t||^2 (autograd)."""
    q, k, v = qkv((12, 4), dv=3)
    k = F.normalize(k, dim=-1)
    beta = torch.rand(12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y, S_final = la.delta_rule_recurrent(q, k, v, beta, return_state=True)
    S = torch.zeros(4, 3, dtype=torch.float64)
    for t in range(12):
        S = S.detach().requires_grad_(True)
        loss = 0.5 * ((S.T @ k[t] - v[t]) ** 2).sum()
        (g,) = torch.autograd.grad(loss, S)
        S = S.detach() - beta[t] * g
        torch.testing.assert_close(y[t], S.T @ q[t], atol=1e-13, rtol=0)
    torch.testing.assert_close(S_final, S, atol=1e-13, rtol=0)


def test_delta_rule_overwrites_orthonormal_keys_exactly():
    gen = torch.Generator().manual_seed(2)
    keys = torch.linalg.qr(torch.randn(8, 8, generator=gen, dtype=torch.float64))[0]
    idx = torch.tensor([0, 1, 2, 0, 1, 0, 3])  # key 0 written three times
    k = keys[idx]
    v = torch.randn(7, 5, generator=gen, dtype=torch.float64)
    _, S = la.delta_rule_recurrent(k, k, v, torch.ones(7, dtype=torch.float64), return_state=True)
    torch.testing.assert_close(S.T @ keys[0], v[5], atol=1e-13, rtol=0)  # last write wins
    _, (S_lin, _) = la.linear_attention_recurrent(k, k, v, None, normalize=False, return_state=True)
    torch.testing.assert_close(S_lin.T @ keys[0], v[0] + v[3] + v[5], atol=1e-13, rtol=0)


def test_flop_counts():
    q, k, v = qkv((1, 64, 8), dv=4)
    with FlopCounterMode(display=False) as fc:
        la.linear_attention_quadratic(q, k, v)
    assert fc.get_total_flops() == la.flops_quadratic(64, 8, 4, matmul_only=True)
    assert la.flops_quadratic(10, 2, 3) == 2 * 100 * 2 + 2 * 100 * 3 + 100 + 30
    assert la.flops_recurrent(10, 2, 3) == 10 * (4 * 6 + 6 + 3)
    assert la.flops_quadratic(2000, 8, 8) / la.flops_recurrent(2000, 8, 8) > 50


def test_bad_arguments_raise():
    q, k, v = qkv((5, 4), dv=3)
    with pytest.raises(ValueError, match="chunk must be a positive int"):
        la.linear_attention_chunked(q, k, v, chunk=0)
    with pytest.raises(ValueError, match="q must have at least 2 axes"):
        la.linear_attention_recurrent(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="T must be a positive int"):
        la.flops_quadratic(0, 2, 2)
    with pytest.raises(TypeError, match="Dv must be a positive int"):
        la.flops_recurrent(3, 2, 1.5)


def test_shapes_that_would_broadcast_or_drop_keys_raise():
    q, k, v = qkv((5, 4), dv=3)
    beta = torch.ones(5, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"kernel\(q, k\) must have shape \(5, 5\)"):
        la.kernel_attention(q, k, v, lambda a, b: a @ a.T[:, :1])  # (5, 1) would broadcast
    with pytest.raises(ValueError, match="k and q must have the same shape"):
        la.linear_attention_quadratic(q, k[:4], v)
    with pytest.raises(ValueError, match="k and q must have the same shape"):
        la.linear_attention_recurrent(q[:4], k, v[:4])  # the fifth key would be ignored
    with pytest.raises(ValueError, match=r"v must have shape \(5, \*\)"):
        la.linear_attention_recurrent(q, k, v[:4])
    with pytest.raises(ValueError, match=r"v must have shape \(2, 5, \*\)"):
        qb, kb, vb = qkv((2, 5, 4), dv=3)
        la.linear_attention_chunked(qb, kb, vb[:1])  # batch 1 would broadcast
    with pytest.raises(ValueError, match=r"beta must have shape \(5\)"):
        la.delta_rule_recurrent(q, k, v, beta[:1])


def test_empty_sequence_raises():
    q, k, v = qkv((5, 4), dv=3)
    with pytest.raises(ValueError, match="q must not be empty"):
        la.linear_attention_recurrent(q[:0], k[:0], v[:0])


def test_normaliser_near_zero_reads_zeros_not_nan():
    # Before: elu + 1 of a score of -200 underflows to 0 in float32, and y = 0 / 0 = NaN.
    g = torch.Generator().manual_seed(5)
    k, v = torch.randn(1, 2, 8, 4, generator=g), torch.randn(1, 2, 8, 3, generator=g)
    q = torch.randn(1, 2, 8, 4, generator=g)
    q[..., 3, :] = -200.0  # query 3 matches nothing
    forms = {
        "quadratic": la.linear_attention_quadratic,
        "recurrent": la.linear_attention_recurrent,
        "chunked": lambda *a, **kw: la.linear_attention_chunked(*a, chunk=3, **kw),
    }
    for name, form in forms.items():
        y = form(q, k, v)
        assert torch.isfinite(y).all(), name
        assert torch.equal(y[..., 3, :], torch.zeros(1, 2, 3)), name
        assert torch.isnan(form(q, k, v, eps=0.0)[..., 3, :]).all(), name  # the failure fixed
        keep = [0, 1, 2, 4, 5, 6, 7]  # other queries: eps never binds, the result is exact
        torch.testing.assert_close(y[..., keep, :], form(q, k, v, eps=0.0)[..., keep, :])


def test_normaliser_is_clamped_at_eps_exactly():
    # A tiny normaliser phi(q)^T c below eps divides by eps: the output shrinks, stays bounded.
    q = torch.full((1, 2), -30.0, dtype=f64)  # phi(q) = e^-30 per feature
    k, v = torch.zeros(1, 2, dtype=f64), torch.full((1, 1), 3.0, dtype=f64)
    den = 2 * math.exp(-30.0)  # phi(q)^T phi(k), phi(k) = 1
    y = la.linear_attention_recurrent(q, k, v)
    torch.testing.assert_close(y, torch.full((1, 1), 3.0 * den / 1e-6, dtype=f64))
    torch.testing.assert_close(la.linear_attention_recurrent(q, k, v, eps=1e-20), v)
    with pytest.raises(ValueError, match="eps must be a finite number"):
        la.linear_attention_recurrent(q, k, v, eps=-1.0)
