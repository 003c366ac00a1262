"""mlbook.foundations.autodiff against independent references: torch.autograd in float64,
torch.autograd.functional, central differences, closed forms, and the recursive topological sort."""

import math

import numpy as np
import pytest
import torch

from mlbook.foundations import autodiff as ad

# float64 everywhere: the engines and torch evaluate the same operations in a possibly different
# association order, so agreement is to a few ulps of the gradient's magnitude.
RTOL64 = 1e-12


def _rel_err(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / (1.0 + np.abs(b))))


def _torch_program_grad(program, x):
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    out = ad.run_program(program, list(xt.unbind()))
    (g,) = torch.autograd.grad(out.sum(), xt, materialize_grads=True)
    return out.detach().numpy(), g.numpy()


def _mlp(params, x):
    """Works for Tensor and torch tensors alike: two layers, a broadcast bias, five unary ops."""
    w1, b1, w2 = params
    h = (x @ w1 + b1).tanh()
    z = (h @ w2).relu() + ((h * h).exp().log() @ w2) * 0.5
    return (z * z).sum() / 7.0 + (x @ w1).sum(axis=1).tanh().sum()


# --- forward mode ---------------------------------------------------------------------------


def test_dual_jvp_matches_central_differences_and_torch_func():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 4))

    def f(u):  # R^4 -> R^3, Dual or float64 array
        return (w @ u).tanh() * (u * u).sum() + (w @ u.exp()) / 3.0

    def f_np(u):
        return np.tanh(w @ u) * np.sum(u * u) + (w @ np.exp(u)) / 3.0

    u, u_dot = rng.normal(size=4), rng.normal(size=4)
    value, tangent = ad.jvp(f, u, u_dot)
    np.testing.assert_allclose(value, f_np(u), rtol=0, atol=1e-14)
    h = 1e-5  # central differences: truncation O(h^2), rounding O(eps / h)
    fd = (f_np(u + h * u_dot) - f_np(u - h * u_dot)) / (2 * h)
    np.testing.assert_allclose(tangent, fd, rtol=0, atol=1e-8)
    wt = torch.tensor(w)
    _, ref = torch.autograd.functional.jvp(  # double-backward trick, float64
        lambda t: torch.tanh(wt @ t) * (t * t).sum() + (wt @ t.exp()) / 3.0,
        torch.tensor(u),
        torch.tensor(u_dot),
    )
    assert _rel_err(tangent, ref.numpy()) < RTOL64


def test_dual_scalar_ops_and_constants():
    x = ad.Dual(0.7, 1.0)
    y = 2.0 / x - 3.0 + (x**3) * 4.0 - x.relu() + (-x).relu()
    # d/dx of 2/x - 3 + 4x^3 - relu(x) + relu(-x) at x = 0.7 (relu(-x) is flat there)
    assert y.tangent == pytest.approx(-2 / 0.49 + 12 * 0.49 - 1.0, abs=1e-13)
    assert (x.log().tangent, x.exp().tangent) == pytest.approx((1 / 0.7, math.exp(0.7)))


def test_jacobians_forward_reverse_and_torch_agree():
    rng = np.random.default_rng(1)
    w1, w2 = rng.normal(size=(5, 3)), rng.normal(size=(2, 5))

    def f(u):  # R^3 -> R^2, written once for Dual, Tensor and torch
        return w2 @ (w1 @ u).tanh() + u[0] * u[2]

    u = rng.normal(size=3)
    j_fwd, j_rev = ad.jacobian_forward(f, u), ad.jacobian_reverse(f, u)
    w1t, w2t = torch.tensor(w1), torch.tensor(w2)
    j_ref = torch.autograd.functional.jacobian(
        lambda t: w2t @ (w1t @ t).tanh() + t[0] * t[2], torch.tensor(u)
    ).numpy()
    assert j_fwd.shape == j_rev.shape == (2, 3)
    assert _rel_err(j_fwd, j_ref) < RTOL64
    assert _rel_err(j_rev, j_ref) < RTOL64


def test_dot_product_identity_links_jvp_and_vjp():
    rng = np.random.default_rng(2)
    prog = ad.random_program(4, 30, seed=3)
    u, u_dot = rng.uniform(-1, 1, 4), rng.normal(size=4)

    def f(x):  # the program on the entries of one vector, for Dual and Tensor alike
        return ad.run_program(prog, [x[i] for i in range(4)])

    _, v_dot = ad.jvp(f, u, u_dot)
    _, u_bar = ad.vjp(f, u, 1.0)
    assert float(v_dot) == pytest.approx(float(u_bar @ u_dot), rel=1e-12)


def test_gradient_zero_for_unreached_and_all_nodes():
    x, y = ad.Scalar(1.0), ad.Scalar(2.0)
    (x * y).backward()  # y.grad is now 1.0
    assert ad.gradient(x.tanh(), [x, y]) == [pytest.approx(1 - math.tanh(1.0) ** 2), 0.0]
    prog = ad.random_program(2, 6, seed=0)
    nodes = ad.run_program(prog, [0.3, -0.2], all_nodes=True)
    assert len(nodes) == prog.n_nodes
    assert sum(nodes[j] for j in prog.outputs) == pytest.approx(ad.run_program(prog, [0.3, -0.2]))


def test_indexing_scatters_with_accumulation():
    t = ad.Tensor(np.arange(4.0))
    (t[np.array([0, 2, 2])] * 3.0).sum().backward()
    np.testing.assert_array_equal(t.grad, [3.0, 0.0, 6.0, 0.0])


# --- reverse mode -------------------------------------------------------------------------------


def test_fan_out_accumulates():
    x, y = ad.Scalar(1.5), ad.Scalar(-2.0)
    z = x * x + x * y + x  # dz/dx = 2x + y + 1, dz/dy = x
    z.backward()
    assert (x.grad, y.grad) == (pytest.approx(2 * 1.5 - 2.0 + 1), pytest.approx(1.5))
    t = ad.Tensor([1.0, -2.0, 3.0])
    (t * t + t).sum().backward()
    np.testing.assert_allclose(t.grad, 2 * t.value + 1, atol=0)


@pytest.mark.parametrize("seed", range(12))
def test_scalar_and_tensor_engines_match_torch_on_random_programs(seed):
    prog = ad.random_program(5, 50, seed=seed)
    assert prog.fan_out().max() >= 2  # the property under test: nodes with several consumers
    rng = np.random.default_rng(100 + seed)
    x = rng.uniform(-1, 1, 5)
    xs = [ad.Scalar(v) for v in x]
    out = ad.run_program(prog, xs)
    out.backward()
    ref_out, ref_g = _torch_program_grad(prog, x)
    assert out.value == pytest.approx(float(ref_out), rel=1e-13)
    assert _rel_err([s.grad for s in xs], ref_g) < RTOL64
    xv = rng.uniform(-1, 1, (5, 3))  # the same program elementwise on vectors
    ts = [ad.Tensor(row) for row in xv]
    ad.run_program(prog, ts).sum().backward()
    assert _rel_err(np.stack([t.grad for t in ts]), _torch_program_grad(prog, xv)[1]) < RTOL64


def test_tensor_mlp_matches_torch_autograd():
    rng = np.random.default_rng(4)
    raw = [rng.normal(size=(3, 6)) * 0.7, rng.normal(size=(6,)), rng.normal(size=(6, 2))]
    x = rng.normal(size=(8, 3))
    params = [ad.Tensor(p) for p in raw]
    xt = ad.Tensor(x)
    loss = _mlp(params, xt)
    loss.backward()
    tparams = [torch.tensor(p, requires_grad=True) for p in raw]
    txt = torch.tensor(x, requires_grad=True)
    tloss = _mlp(tparams, txt)
    grads = torch.autograd.grad(tloss, [*tparams, txt])
    assert float(loss.value) == pytest.approx(tloss.item(), rel=1e-13)
    for ours, ref in zip([*params, xt], grads, strict=True):
        assert ours.grad.shape == ref.shape
        assert _rel_err(ours.grad, ref.numpy()) < RTOL64


def test_vjp_matmul_against_torch_and_shapes():
    rng = np.random.default_rng(5)
    a, w, y_bar = rng.normal(size=(4, 3)), rng.normal(size=(3, 5)), rng.normal(size=(4, 5))
    a_bar, w_bar = ad.vjp_matmul(y_bar, a, w)
    at, wt = torch.tensor(a, requires_grad=True), torch.tensor(w, requires_grad=True)
    ra, rw = torch.autograd.grad(at @ wt, [at, wt], grad_outputs=torch.tensor(y_bar))
    assert a_bar.shape == (4, 3) and w_bar.shape == (3, 5)
    assert _rel_err(a_bar, ra.numpy()) < RTOL64 and _rel_err(w_bar, rw.numpy()) < RTOL64


def test_gradcheck_style_central_differences_for_every_unary_op():
    rng = np.random.default_rng(6)
    x0 = rng.uniform(0.2, 1.5, 5)  # positive, away from relu's kink
    h = 1e-6
    for name in ad.UNARY_OPS:
        t = ad.Tensor(x0)
        ad.apply_op(name, t).sum().backward()
        f = lambda v, name=name: ad.apply_op(name, v).sum()  # noqa: E731
        fd = np.array([(f(x0 + h * e) - f(x0 - h * e)) / (2 * h) for e in np.eye(5)])
        np.testing.assert_allclose(t.grad, fd, rtol=1e-7, atol=1e-8, err_msg=name)


def test_broadcasting_gradients_sum_back():
    rng = np.random.default_rng(7)
    x, b, c = rng.normal(size=(4, 3)), rng.normal(size=(3,)), rng.normal(size=(4, 1))
    tx, tb, tc = ad.Tensor(x), ad.Tensor(b), ad.Tensor(c)
    ((tx + tb) * tc - tb / 2.0).sum().backward()
    refs = [torch.tensor(v, requires_grad=True) for v in (x, b, c)]
    rx, rb, rc = refs
    grads = torch.autograd.grad(((rx + rb) * rc - rb / 2.0).sum(), refs)
    for ours, ref in zip((tx, tb, tc), grads, strict=True):
        assert _rel_err(ours.grad, ref.numpy()) < RTOL64
    np.testing.assert_array_equal(ad.unbroadcast(np.ones((2, 4, 3)), (4, 1)), np.full((4, 1), 6.0))


def test_vjp_seed_and_sum_axis():
    rng = np.random.default_rng(8)
    m = rng.normal(size=(3, 4))
    t = ad.Tensor(m)
    v_bar = rng.normal(size=4)
    t.exp().sum(axis=0).backward(v_bar)
    np.testing.assert_allclose(t.grad, np.exp(m) * v_bar[None, :], rtol=1e-15)
    np.testing.assert_array_equal(
        ad.vjp_sum(np.arange(3.0), (3, 2), axis=1), [[0, 0], [1, 1], [2, 2]]
    )


def test_topological_orders_agree_and_iterative_survives_depth():
    for seed in range(5):
        prog = ad.random_program(3, 40, seed=seed)
        out = ad.run_program(prog, [ad.Scalar(v) for v in (0.1, -0.5, 0.9)])
        it, rec = ad.topological_order(out), ad.topological_order_recursive(out)
        assert [id(n) for n in it] == [id(n) for n in rec]
        pos = {id(n): i for i, n in enumerate(it)}
        assert all(pos[id(p)] < pos[id(n)] for n in it for p in n.parents)
    x = ad.Scalar(0.3)
    y = x
    depth = 5000  # deeper than the recursion limit
    for _ in range(depth):
        y = (y * 1.0001).tanh() + x * 0.0
    with pytest.raises(RecursionError, match="recursion"):
        ad.topological_order_recursive(y)
    xt = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    yt = xt
    for _ in range(depth):
        yt = torch.tanh(yt * 1.0001) + xt * 0.0
    yt.backward()
    y.backward()
    assert x.grad == pytest.approx(xt.grad.item(), rel=1e-11)


def test_count_ops_counts_nodes_and_edges():
    x, y = ad.Scalar(2.0), ad.Scalar(3.0)
    with ad.count_ops() as c:
        z = (x * y + x).tanh()  # 3 nodes, 2 + 2 + 1 = 5 edges
        assert (c.primal, c.adjoint) == (3, 0)
        z.backward()
    assert (c.primal, c.tangent, c.adjoint, c.total) == (3, 0, 5, 8)
    with ad.count_ops() as c:
        d = ad.Dual(2.0, 1.0)
        (d * 3.0 + d).tanh()  # 3 nodes; tangent terms: 1 (3 is a constant) + 2 + 1
    assert (c.primal, c.tangent) == (3, 4)


def test_random_program_is_seeded_and_stays_in_bounds():
    p1, p2 = ad.random_program(6, 80, seed=11), ad.random_program(6, 80, seed=11)
    assert p1 == p2 and p1 != ad.random_program(6, 80, seed=12)
    assert len(p1.instructions) == 80
    assert {op for op, _ in p1.instructions} == set(ad.BINARY_OPS + ad.UNARY_OPS)
    corners = np.array(np.meshgrid(*[[-1.0, 1.0]] * 6)).reshape(6, -1)  # (6, 64) cube corners
    inner = np.random.default_rng(0).uniform(-1, 1, (6, 200))
    values = ad.run_program(p1, list(np.concatenate([corners, inner], axis=1)))
    assert np.all(np.isfinite(values))


# --- bad input ------------------------------------------------------------------------------


def test_bad_input_raises():
    with pytest.raises(ValueError, match="tangent shape"):
        ad.Dual(np.ones(3), np.ones(2))
    with pytest.raises(TypeError, match="numeric"):
        ad.Dual("a")
    with pytest.raises(TypeError, match="mix"):
        ad.Dual(1.0, 1.0) + ad.Scalar(1.0)
    with pytest.raises(ValueError, match="log"):
        ad.Dual(-1.0, 1.0).log()
    with pytest.raises(ValueError, match="u_dot"):
        ad.jvp(lambda d: d, np.ones(3), np.ones(2))
    with pytest.raises(TypeError, match="Dual"):
        ad.jvp(lambda d: 1.0, np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="u must have 1 axes"):
        ad.jacobian_forward(lambda d: d, np.ones((2, 2)))
    with pytest.raises(TypeError, match="real"):
        ad.Scalar("x")
    with pytest.raises(ValueError, match="log"):
        ad.Scalar(0.0).log()
    with pytest.raises(TypeError, match="exponent"):
        ad.Scalar(2.0) ** ad.Scalar(2.0)
    with pytest.raises(TypeError, match="numeric"):
        ad.Tensor(np.array(["a"]))
    with pytest.raises(ValueError, match="matmul"):
        ad.Tensor(np.ones((2, 3))) @ ad.Tensor(np.ones((2, 3)))
    with pytest.raises(ValueError, match="broadcast"):
        ad.Tensor(np.ones(3)) + ad.Tensor(np.ones(4))
    with pytest.raises(ValueError, match="axis"):
        ad.Tensor(np.ones(3)).sum(axis=2)
    with pytest.raises(TypeError, match="graph node"):
        ad.topological_order(3.0)
    with pytest.raises(TypeError, match="graph node"):
        ad.topological_order_recursive(3.0)
    with pytest.raises(ValueError, match="explicit grad"):
        ad.backward(ad.Tensor(np.ones(3)) * 2.0)
    with pytest.raises(ValueError, match="grad has shape"):
        ad.backward(ad.Tensor(np.ones(3)) * 2.0, np.ones(2))
    with pytest.raises(ValueError, match="v_bar"):
        ad.vjp(lambda t: t * 2.0, np.ones(3), np.ones(2))
    with pytest.raises(TypeError, match="Tensor"):
        ad.vjp(lambda t: 2.0, np.ones(3), 1.0)
    with pytest.raises(ValueError, match="jacobian_reverse"):
        ad.jacobian_reverse(lambda t: t + ad.Tensor(np.zeros((2, 1))), np.ones(3))
    with pytest.raises(ValueError, match="unbroadcast|broadcast"):
        ad.unbroadcast(np.ones((2, 3)), (4,))
    with pytest.raises(ValueError, match="unbroadcast"):
        ad.vjp_add(np.ones(3), (2, 3), (3,))
    with pytest.raises(ValueError, match="broadcast"):
        ad.vjp_mul(np.ones(3), np.ones(4), np.ones(4))
    with pytest.raises(ValueError, match="vjp_matmul"):
        ad.vjp_matmul(np.ones((2, 2)), np.ones((2, 3)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="y_bar"):
        ad.vjp_matmul(np.ones((2, 3)), np.ones((2, 3)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="unknown unary"):
        ad.vjp_unary("sin", np.ones(2), np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="broadcast"):
        ad.vjp_sum(np.ones(4), (3, 2), axis=1)
    with pytest.raises(ValueError, match="unknown op"):
        ad.apply_op("sin", 1.0)
    with pytest.raises(ValueError, match="takes 2"):
        ad.apply_op("add", 1.0)
    with pytest.raises(ValueError, match="not defined yet"):
        ad.Program(2, (("add", (0, 2)),), (2,))
    with pytest.raises(ValueError, match="bad op"):
        ad.Program(2, (("tanh", (0, 1)),), (2,))
    with pytest.raises(ValueError, match="n_inputs"):
        ad.random_program(0, 5, seed=0)
    with pytest.raises(TypeError, match="n_ops"):
        ad.random_program(2, 5.0, seed=0)
    with pytest.raises(ValueError, match="inputs"):
        ad.run_program(ad.random_program(2, 5, seed=0), [1.0])
    with pytest.raises(TypeError, match="Program"):
        ad.run_program("x", [1.0])


def test_dual_arrays_matmul_pow_div_against_torch():
    rng = np.random.default_rng(9)
    a, w = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))
    a_dot, w_dot = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))
    out = (ad.Dual(a, a_dot) @ ad.Dual(w, w_dot)).tanh() ** 3 / 2.0 + 1.0 / (
        ad.Dual(a, a_dot).exp().sum() + 1.0
    )
    at, wt = torch.tensor(a), torch.tensor(w)
    _, ref = torch.autograd.functional.jvp(
        lambda x, y: (x @ y).tanh() ** 3 / 2.0 + 1.0 / (x.exp().sum() + 1.0),
        (at, wt),
        (torch.tensor(a_dot), torch.tensor(w_dot)),
    )
    assert out.tangent.shape == (3, 2)
    assert _rel_err(out.tangent, ref.numpy()) < RTOL64


def test_count_ops_nests_and_scalar_seed():
    x = ad.Scalar(0.5)
    with ad.count_ops() as outer:
        with ad.count_ops() as inner:
            y = x.exp()
        z = y * y
    assert (inner.primal, outer.primal) == (1, 2)
    z.backward(np.float64(2.0))  # a NumPy scalar seed is accepted, grads stay Python floats
    assert isinstance(x.grad, float) and x.grad == pytest.approx(2.0 * 2.0 * math.exp(1.0))
