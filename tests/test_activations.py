"""Unit tests of mlbook.nn.activations against independent references (torch built-ins, autograd,
SciPy, finite differences, transformers' LlamaMLP), with explicit tolerances per dtype."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from scipy import special

from mlbook.nn import activations as act

F64 = torch.float64
# Per-dtype tolerances for elementwise values of size <= ~30: a few ulps of the result.
ATOL = {torch.float64: 1e-12, torch.float32: 1e-5}

# Torch built-ins that serve as independent references for every activation.
REFERENCE = {
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "ReLU": F.relu,
    "softplus": lambda t: torch.logaddexp(t, torch.zeros_like(t)),
    "GELU": F.gelu,
    "SiLU": F.silu,
}


def grid(dtype=F64) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    rand = torch.randn(500, generator=gen, dtype=dtype) * 5
    fixed = torch.tensor([0.0, -30.0, 30.0, -1e-8, 1e-8], dtype=dtype)
    return torch.cat([torch.linspace(-30, 30, 1201, dtype=dtype), rand, fixed])


def autograd_derivative(f, x):
    x = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x).sum(), x)
    return g


def test_registry_covers_the_sheet():
    assert list(act.ACTIVATIONS) == ["sigmoid", "tanh", "ReLU", "softplus", "GELU", "SiLU"]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", list(act.ACTIVATIONS))
def test_activation_matches_torch_builtin(name, dtype):
    f, _ = act.ACTIVATIONS[name]
    x = grid(dtype)
    torch.testing.assert_close(f(x), REFERENCE[name](x), atol=ATOL[dtype], rtol=0)


@pytest.mark.parametrize("name", list(act.ACTIVATIONS))
def test_closed_form_derivative_matches_autograd_float64(name):
    _, f_prime = act.ACTIVATIONS[name]
    x = grid()
    torch.testing.assert_close(
        f_prime(x), autograd_derivative(REFERENCE[name], x), atol=1e-12, rtol=0
    )


@pytest.mark.parametrize("name", list(act.ACTIVATIONS))
def test_closed_form_derivative_matches_central_differences(name):
    f, f_prime = act.ACTIVATIONS[name]
    x = torch.linspace(-6, 6, 1201, dtype=F64)
    x = x[x.abs() > 1e-3]  # away from the ReLU kink
    eps = 1e-5
    fd = (f(x + eps) - f(x - eps)) / (2 * eps)
    torch.testing.assert_close(f_prime(x), fd, atol=1e-8, rtol=0)


def test_relu_grad_is_zero_at_the_kink_like_autograd():
    zero = torch.zeros(3, dtype=F64)
    assert torch.equal(act.relu_grad(zero), autograd_derivative(F.relu, zero))
    assert act.relu_grad(zero).sum() == 0


def test_sigmoid_grad_bounded_by_a_quarter():
    x = grid()
    assert act.sigmoid_grad(x).max() <= 0.25
    assert act.sigmoid_grad(torch.zeros(1, dtype=F64)).item() == 0.25


def test_extreme_inputs_stay_finite_and_exact():
    x = torch.tensor([-800.0, -50.0, 50.0, 800.0], dtype=F64)
    for f, f_prime in act.ACTIVATIONS.values():
        assert torch.isfinite(f(x)).all() and torch.isfinite(f_prime(x)).all()
    torch.testing.assert_close(
        act.softplus(x), torch.tensor([0.0, 0.0, 50.0, 800.0], dtype=F64), atol=1e-15, rtol=0
    )
    assert torch.isinf(act.softplus_naive(torch.tensor([800.0], dtype=F64))).all()


def test_softplus_stable_agrees_with_naive_where_naive_is_safe():
    x = torch.linspace(-30, 30, 601, dtype=F64)
    torch.testing.assert_close(act.softplus(x), act.softplus_naive(x), atol=1e-13, rtol=0)


def test_softplus_relative_precision_in_left_tail():
    x = torch.tensor([-40.0, -100.0, -700.0], dtype=F64)
    # log(1 + e^x) = e^x (1 - e^x / 2 + ...): for x <= -40 equal to e^x to float64 precision.
    torch.testing.assert_close(act.softplus(x), torch.exp(x), atol=0, rtol=1e-15)


def test_normal_cdf_relative_precision_against_scipy():
    x = torch.linspace(-37, 8, 901, dtype=F64)
    ref = torch.from_numpy(special.ndtr(x.numpy()))
    torch.testing.assert_close(act.normal_cdf(x), ref, atol=0, rtol=1e-12)
    pdf_ref = torch.exp(-0.5 * x**2) / math.sqrt(2 * math.pi)
    torch.testing.assert_close(act.normal_pdf(x), pdf_ref, atol=0, rtol=1e-14)


def test_gelu_tanh_matches_torch_and_is_close_to_exact():
    x = torch.linspace(-8, 8, 16001, dtype=F64)
    torch.testing.assert_close(act.gelu_tanh(x), F.gelu(x, approximate="tanh"), atol=1e-14, rtol=0)
    err = (act.gelu_tanh(x) - act.gelu(x)).abs().max().item()
    assert 4.7e-4 < err < 4.8e-4  # the known maximum error of the tanh approximation


def test_gelu_and_silu_minima():
    # GELU'(x) = 0 and SiLU'(x) = 0 at the known minima (-0.7518, -1.2785).
    torch.testing.assert_close(
        act.gelu_grad(torch.tensor(-0.751791524693559, dtype=F64)),
        torch.tensor(0.0, dtype=F64),
        atol=1e-12,
        rtol=0,
    )
    torch.testing.assert_close(
        act.silu_grad(torch.tensor(-1.278464542761074, dtype=F64)),
        torch.tensor(0.0, dtype=F64),
        atol=1e-12,
        rtol=0,
    )


# --- dead units -----------------------------------------------------------------------------------


def test_dead_units_are_the_zero_gradient_units():
    gen = torch.Generator().manual_seed(1)
    X = torch.rand(200, 16, generator=gen, dtype=F64)
    W1 = torch.randn(16, 32, generator=gen, dtype=F64).requires_grad_(True)
    b1 = (torch.randn(32, generator=gen, dtype=F64) - 2.5).requires_grad_(True)
    W2 = torch.randn(32, 3, generator=gen, dtype=F64)
    z = X @ W1 + b1
    loss = (F.relu(z) @ W2).square().sum()
    gW1, gb1 = torch.autograd.grad(loss, (W1, b1))
    zero_grad = (gW1 == 0).all(dim=0) & (gb1 == 0)
    dead = act.dead_units(z.detach())
    assert 0 < int(dead.sum()) < 32
    assert torch.equal(dead, zero_grad)
    assert act.dead_fraction(z.detach()) == pytest.approx(float(dead.double().mean()))


def test_dead_units_counts_zero_as_dead():
    pre = torch.tensor([[0.0, 1.0, -1.0], [0.0, -2.0, -1.0]])
    assert act.dead_units(pre).tolist() == [True, False, True]
    assert act.dead_fraction(pre) == pytest.approx(2 / 3)


def test_dead_units_validation():
    with pytest.raises(ValueError, match="pre must have 2 axes"):
        act.dead_units(torch.zeros(5))
    with pytest.raises(ValueError, match="pre must not be empty"):
        act.dead_units(torch.zeros(0, 4))
    with pytest.raises(TypeError, match="floating-point"):
        act.dead_units(torch.zeros(3, 4, dtype=torch.int64))


# --- SwiGLU FFN -----------------------------------------------------------------------------------


def test_swiglu_hidden_dim():
    assert act.swiglu_hidden_dim(96) == 256
    assert act.swiglu_hidden_dim(100) == 266
    assert act.swiglu_hidden_dim(4096, multiple_of=256) == 11008  # LLaMA-7B
    assert act.swiglu_hidden_dim(100, multiple_of=64) == 320
    for bad in (0, -3):
        with pytest.raises(ValueError, match="d must be a positive int"):
            act.swiglu_hidden_dim(bad)
    for bad in (2.5, True):
        with pytest.raises(TypeError, match="d must be a positive int"):
            act.swiglu_hidden_dim(bad)
    with pytest.raises(ValueError, match="multiple_of must be a positive int"):
        act.swiglu_hidden_dim(96, multiple_of=0)


@pytest.mark.parametrize("d", [48, 96, 384])
def test_parameter_match_when_three_divides_d(d):
    sw, ge = act.SwiGLUFFN(d), act.GELUFFN(d)
    assert act.n_parameters(sw) == 3 * d * sw.h == 8 * d * d
    assert act.n_parameters(ge) == 2 * d * 4 * d
    assert [tuple(p.shape) for p in sw.parameters()] == [(d, sw.h), (d, sw.h), (sw.h, d)]


def test_swiglu_matches_llama_mlp():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaMLP

    gen = torch.Generator().manual_seed(0)
    d = 48
    sw = act.SwiGLUFFN(d, generator=gen, dtype=F64)
    cfg = transformers.LlamaConfig(
        hidden_size=d,
        intermediate_size=sw.h,
        num_attention_heads=4,
        num_key_value_heads=4,
        hidden_act="silu",
        mlp_bias=False,
    )
    ref = LlamaMLP(cfg).to(F64)
    with torch.no_grad():
        ref.gate_proj.weight.copy_(sw.W.T)
        ref.up_proj.weight.copy_(sw.V.T)
        ref.down_proj.weight.copy_(sw.W2.T)
    x = torch.randn(2, 5, d, generator=gen, dtype=F64)
    with torch.no_grad():
        torch.testing.assert_close(sw(x), ref(x), atol=1e-12, rtol=0)
    assert act.n_parameters(sw) == sum(p.numel() for p in ref.parameters())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_swiglu_matches_naive(dtype):
    gen = torch.Generator().manual_seed(2)
    d, h = 32, 80
    W, V = (
        torch.randn(d, h, generator=gen, dtype=dtype),
        torch.randn(d, h, generator=gen, dtype=dtype),
    )
    W2 = torch.randn(h, d, generator=gen, dtype=dtype)
    x = torch.randn(3, 7, d, generator=gen, dtype=dtype)
    naive = act.swiglu_ffn(x, W, V, W2)
    fused = act.swiglu_ffn_fused(x, torch.cat([W, V], dim=1), W2)
    # float32: judged against the naive version's own rounding scale (sum of h ~ 100 products).
    tol = {torch.float64: 1e-10, torch.float32: 1e-6 * float(naive.abs().max())}[dtype]
    torch.testing.assert_close(fused, naive, atol=tol, rtol=0)


def test_swiglu_and_gelu_ffn_match_builtin_compositions():
    gen = torch.Generator().manual_seed(3)
    d, h = 16, 40
    W, V, W1 = (torch.randn(d, h, generator=gen, dtype=F64) for _ in range(3))
    W2 = torch.randn(h, d, generator=gen, dtype=F64)
    x = torch.randn(5, d, generator=gen, dtype=F64)
    ref_sw = F.linear(F.silu(F.linear(x, W.T)) * F.linear(x, V.T), W2.T)
    ref_ge = F.linear(F.gelu(F.linear(x, W1.T)), W2.T)
    torch.testing.assert_close(act.swiglu_ffn(x, W, V, W2), ref_sw, atol=1e-12, rtol=0)
    torch.testing.assert_close(act.gelu_ffn(x, W1, W2), ref_ge, atol=1e-12, rtol=0)
    ge = act.GELUFFN(d, h, generator=gen, dtype=F64)
    torch.testing.assert_close(ge(x), F.gelu(x @ ge.W1) @ ge.W2, atol=1e-12, rtol=0)


def test_swiglu_gradient_by_hand_matches_autograd():
    gen = torch.Generator().manual_seed(4)
    d, h = 12, 32
    X = torch.randn(9, d, generator=gen, dtype=F64)
    G = torch.randn(9, d, generator=gen, dtype=F64)
    W, V = (torch.randn(d, h, generator=gen, dtype=F64).requires_grad_(True) for _ in range(2))
    W2 = torch.randn(h, d, generator=gen, dtype=F64).requires_grad_(True)
    gW, gV, gW2 = torch.autograd.grad((act.swiglu_ffn(X, W, V, W2) * G).sum(), (W, V, W2))
    with torch.no_grad():
        U, B = X @ W, X @ V
        dH = G @ W2.T
        torch.testing.assert_close(gW2, (act.silu(U) * B).T @ G, atol=1e-10, rtol=0)
        torch.testing.assert_close(gV, X.T @ (dH * act.silu(U)), atol=1e-10, rtol=0)
        torch.testing.assert_close(gW, X.T @ (dH * B * act.silu_grad(U)), atol=1e-10, rtol=0)


def test_ffn_validation():
    d, h = 8, 12
    x = torch.randn(4, d)
    W, W2 = torch.randn(d, h), torch.randn(h, d)
    with pytest.raises(ValueError, match="W and V must have the same shape"):
        act.swiglu_ffn(x, W, torch.randn(d, 1), W2)  # would broadcast silently
    with pytest.raises(ValueError, match=r"WV must have shape \(\*, 24\)"):
        act.swiglu_ffn_fused(x, torch.randn(d, 2 * h - 1), W2)  # halves of unequal width


def test_module_and_count_validation():
    for bad in (0, -1):
        with pytest.raises(ValueError, match="d must be a positive int"):
            act.SwiGLUFFN(bad)
        with pytest.raises(ValueError, match="d must be a positive int"):
            act.GELUFFN(bad)
    with pytest.raises(TypeError, match="d must be a positive int"):
        act.GELUFFN(2.0)
    with pytest.raises(ValueError, match="h must be a positive int"):
        act.SwiGLUFFN(8, h=0)
    with pytest.raises(ValueError, match="h must be a positive int"):
        act.GELUFFN(8, h=-4)
    assert act.n_parameters(torch.nn.Linear(3, 2)) == 8
