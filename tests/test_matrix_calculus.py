"""mlbook.foundations.matrix_calculus against independent references: float64 autograd, full
Jacobians from torch.autograd.functional and central differences, torch.nn.Linear's own
gradients, and each rule's usual slip, which must fail."""

import pytest
import torch
import torch.nn.functional as F

from mlbook.foundations import matrix_calculus as mc
from mlbook.foundations import numerics as nm

F64 = torch.float64
ATOL = 1e-12  # float64: the rules and autograd differ by a few ulps of gradients of order 1


def _autograd_vjp(rule, inputs, y_bar):
    """The adjoints of the floating-point inputs by torch.autograd, in float64."""
    xs = [x.clone().requires_grad_(True) for x in inputs]
    return torch.autograd.grad(rule.f(*xs), xs, y_bar)


def _case(rule, seed):
    gen = torch.Generator().manual_seed(seed)
    inputs = rule.example(gen)
    y = rule.f(*inputs)
    return inputs, torch.randn(y.shape, generator=gen, dtype=F64)


@pytest.mark.parametrize("rule", mc.RULES, ids=[r.name for r in mc.RULES])
def test_each_rule_matches_float64_autograd_and_its_slip_does_not(rule):
    for seed in (0, 1):
        inputs, y_bar = _case(rule, seed)
        want = _autograd_vjp(rule, inputs, y_bar)
        got = rule.vjp(y_bar, *inputs)
        assert len(got) == len(want)
        for g, w, x in zip(got, want, inputs, strict=True):
            assert g.shape == x.shape  # eq. A.1: each adjoint has its variable's shape
            torch.testing.assert_close(g, w, atol=ATOL, rtol=1e-10)
        slip = rule.slip(y_bar, *inputs)
        worst = max(
            float((s - w).abs().max()) if s.shape == w.shape else float("inf")
            for s, w in zip(slip, want, strict=True)
        )
        assert worst > 1e-2, f"the slip of {rule.name} is not caught ({worst:.1e})"


def test_rules_equal_the_full_jacobian_contraction():
    """Every single-input rule is eq. C.1 with the Jacobian from torch.autograd.functional."""
    for rule in mc.RULES:
        inputs, y_bar = _case(rule, 2)
        if len(inputs) != 1:
            continue
        jac = torch.autograd.functional.jacobian(rule.f, inputs[0])
        torch.testing.assert_close(
            rule.vjp(y_bar, *inputs)[0], mc.vjp_from_jacobian(jac, y_bar), atol=ATOL, rtol=1e-10
        )


def test_vjp_from_jacobian_with_central_differences_and_its_wrong_contraction():
    gen = torch.Generator().manual_seed(3)
    m = torch.randn(4, 4, generator=gen, dtype=F64)
    x = torch.randn(4, generator=gen, dtype=F64)
    y_bar = torch.randn(4, generator=gen, dtype=F64)

    def f(v):
        return torch.tanh(m @ v)

    jac = nm.jacobian_central(f, x, h=1e-6)  # (4, 4), error ~1e-10
    xs = x.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(f(xs), xs, y_bar)
    torch.testing.assert_close(mc.vjp_from_jacobian(jac, y_bar), want, atol=1e-8, rtol=0)
    assert float((jac @ y_bar - want).abs().max()) > 1e-2  # J y_bar is not J^T y_bar


def test_vjp_from_jacobian_contracts_every_axis_of_y():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, generator=gen, dtype=F64)
    w = torch.randn(3, 5, generator=gen, dtype=F64)
    y_bar = torch.randn(2, 5, generator=gen, dtype=F64)
    jac = torch.autograd.functional.jacobian(lambda t: torch.sin(t @ w), x)  # (2, 5, 2, 3)
    xs = x.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(torch.sin(xs @ w), xs, y_bar)
    torch.testing.assert_close(mc.vjp_from_jacobian(jac, y_bar), want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("lead", [(7,), (2, 5), (2, 3, 4)])
def test_linear_vjp_against_autograd_the_naive_loop_and_nn_linear(lead):
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(*lead, 6, generator=gen, dtype=F64)
    w = torch.randn(6, 3, generator=gen, dtype=F64)
    b = torch.randn(3, generator=gen, dtype=F64)
    y_bar = torch.randn(*lead, 3, generator=gen, dtype=F64)
    xs, ws, bs = (t.clone().requires_grad_(True) for t in (x, w, b))
    want = torch.autograd.grad(mc.linear(xs, ws, bs), (xs, ws, bs), y_bar)
    got = mc.linear_vjp(x, w, y_bar)
    naive = mc.linear_vjp_naive(x, w, y_bar)
    for g, n, wt in zip(got, naive, want, strict=True):
        torch.testing.assert_close(g, wt, atol=ATOL, rtol=0)
        torch.testing.assert_close(n, wt, atol=ATOL, rtol=0)
    layer = torch.nn.Linear(6, 3, dtype=F64)  # stores weight (D_out, D_in): y = x W^T + b
    with torch.no_grad():
        layer.weight.copy_(w.T)
        layer.bias.copy_(b)
    torch.testing.assert_close(layer(x), mc.linear(x, w, b), atol=ATOL, rtol=0)
    layer(x).backward(y_bar)
    torch.testing.assert_close(layer.weight.grad, got[1].T, atol=ATOL, rtol=0)
    torch.testing.assert_close(F.linear(x, w.T, b), mc.linear(x, w, b), atol=ATOL, rtol=0)


def test_matmul_vjp_batched_rectangular_against_autograd():
    gen = torch.Generator().manual_seed(6)
    a = torch.randn(2, 3, 4, 5, generator=gen, dtype=F64)
    b = torch.randn(2, 3, 5, 2, generator=gen, dtype=F64)
    y_bar = torch.randn(2, 3, 4, 2, generator=gen, dtype=F64)
    a_s, b_s = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    want = torch.autograd.grad(a_s @ b_s, (a_s, b_s), y_bar)
    for g, w in zip(mc.matmul_vjp(a, b, y_bar), want, strict=True):
        torch.testing.assert_close(g, w, atol=ATOL, rtol=0)


def test_cross_entropy_vjp_is_eq_c4_and_matches_f_cross_entropy():
    gen = torch.Generator().manual_seed(7)
    z = torch.randn(8, 10, generator=gen, dtype=F64)
    t = torch.randint(0, 10, (8,), generator=gen)
    zs = z.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(F.cross_entropy(zs, t), zs)
    torch.testing.assert_close(mc.cross_entropy_vjp(z, t), want, atol=ATOL, rtol=0)
    closed = (torch.softmax(z, -1) - F.one_hot(t, 10).to(F64)) / 8
    torch.testing.assert_close(mc.cross_entropy_vjp(z, t), closed, atol=ATOL, rtol=0)


def test_inverse_and_logdet_rules_at_a_diagonal_matrix_in_closed_form():
    d = torch.tensor([1.0, 2.0, 4.0], dtype=F64)
    m = torch.diag(d)
    torch.testing.assert_close(mc.logdet_vjp(m, 1.0), torch.diag(1 / d), atol=ATOL, rtol=0)
    y_bar = torch.ones(3, 3, dtype=F64)
    # d(M^-1)_ij / dM_kl at a diagonal M: -delta_ik delta_lj / (d_i d_j); summed with y_bar = 1
    torch.testing.assert_close(
        mc.inverse_vjp(m, y_bar), -torch.outer(1 / d, 1 / d), atol=ATOL, rtol=0
    )


def test_bad_shapes_and_names_raise_clear_errors():
    x, w = torch.zeros(4, 3, dtype=F64), torch.zeros(3, 2, dtype=F64)
    with pytest.raises(ValueError, match="y_bar must have shape"):
        mc.linear_vjp(x, w, torch.zeros(2, 4, dtype=F64))  # same numel, wrong rows
    with pytest.raises(ValueError, match="b must have shape"):
        mc.matmul_vjp(torch.zeros(2, 3, 4), torch.zeros(3, 4, 5), torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match="jac must have shape"):
        mc.vjp_from_jacobian(torch.zeros(3, 4), torch.zeros(4))
    with pytest.raises(ValueError, match="z must have 2 axes"):
        mc.cross_entropy_vjp(torch.zeros(5, dtype=F64), torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="name must be one of .* got 'Y = A B C'"):
        mc.rule("Y = A B C")
    assert mc.rule("Y = A B") is mc.RULES[0]
