"""mlbook.architectures.ssm against independent references (SciPy expm, ODE solver, formulas)."""

import numpy as np
import pytest
import scipy.linalg
import scipy.special
import torch
from scipy.integrate import solve_ivp

from mlbook.architectures import ssm

f64 = torch.float64


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


def stable_system(gen, n=4):
    A = torch.randn(n, n, generator=gen, dtype=f64)
    A = A - (torch.linalg.eigvals(A).real.max() + 0.5) * torch.eye(n, dtype=f64)
    return A, torch.randn(n, generator=gen, dtype=f64), torch.randn(n, generator=gen, dtype=f64)


def test_zoh_matches_expm_and_the_inverse_formula(gen):
    A, B, _ = stable_system(gen)
    Abar, Bbar = ssm.discretize_zoh(A, B, 0.3)
    E = scipy.linalg.expm(0.3 * A.numpy())
    np.testing.assert_allclose(Abar.numpy(), E, atol=1e-13)
    ref_b = np.linalg.solve(A.numpy(), (E - np.eye(4)) @ B.numpy())
    np.testing.assert_allclose(Bbar.numpy(), ref_b, atol=1e-13)


def test_zoh_is_exact_for_piecewise_constant_input(gen):
    A, B, C = stable_system(gen, 3)
    delta, x = 0.25, torch.randn(12, generator=gen, dtype=f64)
    y, h = ssm.ssm_recurrent(*ssm.discretize_zoh(A, B, delta), C, x, return_states=True)
    An, Bn, hk = A.numpy(), B.numpy(), np.zeros(3)
    for t in range(12):
        sol = solve_ivp(
            lambda _, z, u=float(x[t]): An @ z + Bn * u,
            (0, delta),
            hk,
            method="DOP853",
            rtol=1e-12,
            atol=1e-13,
        )
        hk = sol.y[:, -1]
        np.testing.assert_allclose(h[t].numpy(), hk, atol=1e-10)
    np.testing.assert_allclose(y.numpy(), h.numpy() @ C.numpy(), atol=1e-14)


def test_bilinear_formula_and_third_order_step_error(gen):
    A, B, _ = stable_system(gen)
    An, I = A.numpy(), np.eye(4)
    errs = []
    for delta in (0.1, 0.05):
        Abar, Bbar = ssm.discretize_bilinear(A, B, delta)
        left = np.linalg.inv(I - delta / 2 * An)
        np.testing.assert_allclose(Abar.numpy(), left @ (I + delta / 2 * An), atol=1e-13)
        np.testing.assert_allclose(Bbar.numpy(), left @ (delta * B.numpy()), atol=1e-13)
        errs.append(np.abs(Abar.numpy() - scipy.linalg.expm(delta * An)).max())
    assert 6 < errs[0] / errs[1] < 10  # O(delta^3): halving delta divides by ~8


def test_kernel_fft_direct_and_recurrence_agree(gen):
    A, B, C = stable_system(gen)
    Abar, Bbar = ssm.discretize_zoh(A, B, 0.2)
    for T in (1, 2, 7, 64, 100):
        x = torch.randn(3, T, generator=gen, dtype=f64)
        y = ssm.ssm_recurrent(Abar, Bbar, C, x)
        K = ssm.ssm_kernel(Abar, Bbar, C, T)
        torch.testing.assert_close(
            K[min(3, T - 1)],
            C @ torch.linalg.matrix_power(Abar, min(3, T - 1)) @ Bbar,
            atol=1e-14,
            rtol=0,
        )
        torch.testing.assert_close(ssm.causal_conv_direct(K, x), y, atol=1e-12, rtol=0)
        torch.testing.assert_close(ssm.causal_conv_fft(K, x), y, atol=1e-12, rtol=0)
        torch.testing.assert_close(
            ssm.causal_conv_fft(K, x, n_fft=2 * T - 1), y, atol=1e-12, rtol=0
        )
    npref = np.convolve(K.numpy(), x[0].numpy())[:T]
    np.testing.assert_allclose(ssm.causal_conv_fft(K, x)[0].numpy(), npref, atol=1e-12)


def test_combine_is_associative_not_commutative(gen):
    e = [
        (torch.randn(5, generator=gen, dtype=f64), torch.randn(5, generator=gen, dtype=f64))
        for _ in range(3)
    ]
    left = ssm.combine(ssm.combine(e[0], e[1]), e[2])
    right = ssm.combine(e[0], ssm.combine(e[1], e[2]))
    for u, w in zip(left, right, strict=True):
        torch.testing.assert_close(u, w, atol=1e-14, rtol=0)
    assert (ssm.combine(e[0], e[1])[1] - ssm.combine(e[1], e[0])[1]).abs().max() > 1e-3


def test_parallel_scans_equal_sequential_for_every_length(gen):
    for T in list(range(1, 34)) + [100]:
        a = torch.rand(T, 2, 3, generator=gen, dtype=f64) * 1.5
        b = torch.randn(T, 2, 3, generator=gen, dtype=f64)
        ref = torch.zeros(2, 3, dtype=f64)
        hs = []
        for t in range(T):  # the recurrence written out, independently
            ref = a[t] * ref + b[t]
            hs.append(ref)
        ref = torch.stack(hs)
        for scan in (ssm.scan_sequential, ssm.scan_hillis_steele, ssm.scan_blelloch):
            torch.testing.assert_close(scan(a, b), ref, atol=1e-12, rtol=1e-12)
    a32, b32 = a.float(), b.float()
    torch.testing.assert_close(ssm.scan_blelloch(a32, b32), ref.float(), atol=1e-4, rtol=1e-4)


class CountingCombine:
    """The combine operator, counting its calls (parallel rounds) and the elements combined."""

    def __init__(self):
        self.calls, self.elements = 0, 0

    def __call__(self, e1, e2):
        self.calls += 1
        self.elements += e1[0].shape[0]
        return ssm.combine(e1, e2)


@pytest.mark.parametrize("method", ["sequential", "hillis_steele", "blelloch"])
def test_scan_combine_counts(method):
    fn = {
        "sequential": ssm.scan_sequential,
        "hillis_steele": ssm.scan_hillis_steele,
        "blelloch": ssm.scan_blelloch,
    }[method]
    for T in (1, 2, 5, 16, 17, 50):
        op = CountingCombine()
        fn(torch.rand(T, 3, dtype=f64), torch.rand(T, 3, dtype=f64), op=op)
        assert (op.elements, op.calls) == ssm.scan_combines(T, method)


def test_selective_discretize_is_zoh_per_channel(gen):
    delta = torch.rand(4, 3, generator=gen, dtype=f64) + 0.1
    A = -torch.rand(3, 2, generator=gen, dtype=f64) - 0.2
    B = torch.randn(4, 2, generator=gen, dtype=f64)
    Abar, Bbar = ssm.selective_discretize(delta, A, B)
    for t in range(4):
        for d in range(3):
            ref_a, ref_b = ssm.discretize_zoh(torch.diag(A[d]), B[t], float(delta[t, d]))
            torch.testing.assert_close(Abar[t, d], torch.diagonal(ref_a), atol=1e-14, rtol=0)
            torch.testing.assert_close(Bbar[t, d], ref_b, atol=1e-14, rtol=0)


def test_selective_scan_sequential_equals_parallel(gen):
    T, D, N = 29, 4, 3
    x = torch.randn(T, D, generator=gen, dtype=f64)
    params = ssm.selective_params(
        x,
        0.5 * torch.randn(D, D, generator=gen, dtype=f64),
        torch.zeros(D, dtype=f64),
        torch.randn(D, N, generator=gen, dtype=f64),
        torch.randn(D, N, generator=gen, dtype=f64),
    )
    delta, B, C = params
    assert (delta > 0).all()
    A = -torch.rand(D, N, generator=gen, dtype=f64) - 0.1
    ref = ssm.selective_scan_sequential(x, delta, A, B, C)
    for scan in (ssm.scan_blelloch, ssm.scan_hillis_steele):
        torch.testing.assert_close(
            ssm.selective_scan_parallel(x, delta, A, B, C, scan=scan), ref, atol=1e-12, rtol=0
        )
    # one channel of the selective scan is an SSD recurrence with a_t = exp(Delta_t A)
    Abar, Bbar = ssm.selective_discretize(delta, A, B)
    torch.testing.assert_close(
        ssm.ssd_recurrent(Abar[:, 0], Bbar[:, 0], C, x[:, 0]), ref[:, 0], atol=1e-12, rtol=0
    )


@pytest.mark.parametrize("diag", [False, True])
def test_ssd_matrix_naive_vectorised_and_recurrence(gen, diag):
    T, N = 16, 3
    a = torch.rand((T, N) if diag else (T,), generator=gen, dtype=f64) * 0.6 + 0.4
    B = torch.randn(T, N, generator=gen, dtype=f64)
    C = torch.randn(T, N, generator=gen, dtype=f64)
    M = ssm.ssd_matrix(a, B, C)
    torch.testing.assert_close(M, ssm.ssd_matrix_naive(a, B, C), atol=1e-13, rtol=0)
    assert (M.triu(1) == 0).all()
    x = torch.randn(T, 2, generator=gen, dtype=f64)
    torch.testing.assert_close(M @ x, ssm.ssd_recurrent(a, B, C, x), atol=1e-12, rtol=0)
    for k in range(1, T):  # off-diagonal blocks have rank <= N
        s = torch.linalg.svdvals(M[k:, :k])
        assert int((s > 1e-10 * s[0]).sum()) <= N


def test_segsum_matches_explicit_sums(gen):
    la = torch.randn(6, generator=gen, dtype=f64)
    out = ssm.segsum(la)
    for i in range(6):
        for j in range(6):
            if i >= j:
                assert abs(out[i, j] - la[j + 1 : i + 1].sum()) < 1e-14
            else:
                assert out[i, j] == -float("inf")


def test_bad_arguments_raise(gen):
    A, B, C = stable_system(gen, 3)
    with pytest.raises(ValueError, match=r"A must have shape \(2, 2\)"):
        ssm.discretize_zoh(A[:2], B, 0.1)
    with pytest.raises(ValueError, match="delta must be a finite number"):
        ssm.discretize_zoh(A, B, 0.0)
    with pytest.raises(TypeError, match="delta must be a real number"):
        ssm.discretize_bilinear(A, B, "0.1")
    with pytest.raises(ValueError, match="T must be a positive int"):
        ssm.ssm_kernel(A, B, C, 0)
    K = torch.ones(5, dtype=f64)
    with pytest.raises(ValueError, match=r"n_fft must be in \[9, inf\]"):
        ssm.causal_conv_fft(K, torch.ones(5, dtype=f64), n_fft=5)  # would wrap around
    with pytest.raises(ValueError, match="method must be one of"):
        ssm.scan_combines(8, "tree")
    with pytest.raises(ValueError, match="T must be a positive int"):
        ssm.scan_combines(0, "blelloch")
    with pytest.raises(TypeError, match="delta must be a torch.Tensor"):
        ssm.selective_discretize([1.0], -torch.ones(2, 4, dtype=f64), torch.ones(6, 4))
    with pytest.raises(ValueError, match="log_a must have at least 1 axes"):
        ssm.segsum(torch.tensor(1.0, dtype=f64))


def test_shapes_that_would_broadcast_raise(gen):
    A, B, C = stable_system(gen, 3)
    with pytest.raises(ValueError, match=r"B must have shape \(3\)"):
        ssm.discretize_bilinear(A, B[:1], 0.1)
    with pytest.raises(ValueError, match=r"h0 must have shape \(2, 3\)"):
        ssm.ssm_recurrent(A, B, C, torch.ones(2, 5, dtype=f64), h0=torch.zeros(3, dtype=f64))
    with pytest.raises(ValueError, match=r"Bbar must have shape \(3\)"):
        ssm.ssm_recurrent(A, B[:1], C, torch.ones(5, dtype=f64))
    K = torch.ones(5, dtype=f64)
    with pytest.raises(ValueError, match=r"K must have shape \(4\)"):
        ssm.causal_conv_fft(K, torch.ones(4, dtype=f64))  # FFT would pad silently
    with pytest.raises(ValueError, match=r"K must have shape \(4\)"):
        ssm.causal_conv_direct(K, torch.ones(4, dtype=f64))
    with pytest.raises(ValueError, match="a and b must have the same shape"):
        ssm.scan_sequential(torch.ones(3, 2), torch.ones(3, 1))
    x = torch.randn(6, 2, dtype=f64)
    with pytest.raises(ValueError, match=r"b_delta must have shape \(2\)"):
        ssm.selective_params(
            x,
            torch.ones(2, 2, dtype=f64),
            torch.ones(1, dtype=f64),
            torch.ones(2, 4, dtype=f64),
            torch.ones(2, 4, dtype=f64),
        )
    with pytest.raises(ValueError, match=r"W_delta must have shape \(2, 2\)"):
        ssm.selective_params(
            x,
            torch.ones(2, 1, dtype=f64),
            torch.ones(2, dtype=f64),
            torch.ones(2, 4, dtype=f64),
            torch.ones(2, 4, dtype=f64),
        )
    delta, Bs, Cs = (
        torch.ones(6, 2, dtype=f64),
        torch.ones(6, 4, dtype=f64),
        torch.ones(6, 4, dtype=f64),
    )
    Ad = -torch.ones(2, 4, dtype=f64)
    with pytest.raises(ValueError, match="x and delta must have the same shape"):
        ssm.selective_scan_sequential(x, delta[:1], Ad, Bs, Cs)
    with pytest.raises(ValueError, match=r"A must have shape \(2, \*\)"):
        ssm.selective_scan_parallel(x, delta, Ad[:1], Bs, Cs)
    with pytest.raises(ValueError, match=r"B must have shape \(6, 4\)"):
        ssm.selective_scan_sequential(x, delta, Ad, Bs[:1], Cs[:1])
    with pytest.raises(ValueError, match="C and B must have the same shape"):
        ssm.selective_scan_sequential(x, delta, Ad, Bs, Cs[:1])
    with pytest.raises(ValueError, match="a.shape must be one of"):
        ssm.ssd_matrix(torch.ones(1, dtype=f64), Bs, Cs)
    with pytest.raises(ValueError, match="C and B must have the same shape"):
        ssm.ssd_matrix_naive(torch.ones(6, dtype=f64), Bs, Cs[:1])
    with pytest.raises(ValueError, match=r"x must have shape \(6\)"):
        ssm.ssd_recurrent(torch.ones(6, dtype=f64), Bs, Cs, torch.ones(5, dtype=f64))


def test_inputs_that_would_give_nan_raise():
    x, delta = torch.randn(6, 2, dtype=f64), torch.ones(6, 2, dtype=f64)
    Bs, Cs, Ad = torch.ones(6, 4, dtype=f64), torch.ones(6, 4, dtype=f64), -torch.ones(2, 4)
    Ad = Ad.double()
    with pytest.raises(ValueError, match="delta must be positive everywhere"):
        ssm.selective_scan_sequential(x, -delta, Ad, Bs, Cs)
    with pytest.raises(ValueError, match="a must be positive everywhere"):
        ssm.ssd_matrix(-torch.ones(6, dtype=f64), Bs, Cs)  # log of a negative number


def test_selective_discretize_is_exact_at_near_and_far_from_a_zero_A():
    # Before: A = 0 was refused, and (e^(dA) - 1) / A is 0 / 0 there; the limit is Bbar = Delta B.
    delta = torch.tensor([1e-3, 0.5, 2.0, 10.0], dtype=f64)[:, None].expand(4, 6)  # (T, D)
    A = torch.tensor([0.0, -0.0, 1e-300, -1e-9, -50.0, -1e3], dtype=f64).expand(6, 6)  # (D, N)
    B = torch.randn(4, 6, generator=torch.Generator().manual_seed(3), dtype=f64)
    Abar, Bbar = ssm.selective_discretize(delta, A, B)
    dA = (delta[:, :, None] * A[None]).numpy()
    ref_b = delta[:, :, None].numpy() * scipy.special.exprel(dA) * B[:, None, :].numpy()
    assert torch.isfinite(Abar).all() and torch.isfinite(Bbar).all()
    np.testing.assert_allclose(Abar.numpy(), np.exp(dA), rtol=1e-15, atol=0)
    np.testing.assert_allclose(Bbar.numpy(), ref_b, rtol=1e-14, atol=0)
    assert torch.equal(Abar[:, :, :2], torch.ones(4, 6, 2, dtype=f64))  # A = 0: no decay
    assert torch.equal(Bbar[:, :, 0], delta * B[:, None, 0])  # A = 0: Bbar = Delta B


def test_exprel_value_and_slope_at_zero_and_beyond():
    z = torch.tensor([0.0, 1e-20, -1e-8, 1e-3, -30.0, 20.0], dtype=f64, requires_grad=True)
    out = ssm.exprel(z)
    np.testing.assert_allclose(
        out.detach().numpy(), scipy.special.exprel(z.detach().numpy()), rtol=1e-14
    )
    (grad,) = torch.autograd.grad(out.sum(), z)
    zn = z.detach().numpy()[3:]
    slope = (np.exp(zn) * (zn - 1) + 1) / zn**2  # d/dz (e^z - 1) / z
    np.testing.assert_allclose(grad.numpy()[3:], slope, rtol=1e-6)
    np.testing.assert_allclose(grad.numpy()[:3], 0.5, rtol=1e-7)  # the slope at 0 is 1/2


def test_bilinear_refuses_a_singular_system_with_a_clear_message():
    # Before: torch.linalg.solve failed with an error that names no argument of ours.
    delta = 0.5
    A = torch.tensor([[2 / delta, 1.0], [0.0, -1.0]], dtype=f64)  # eigenvalue 2 / delta
    B = torch.ones(2, dtype=f64)
    with pytest.raises(
        ValueError,
        match=r"I - \(delta/2\) A, for the bilinear rule with delta = 0.5, must be invertible",
    ):
        ssm.discretize_bilinear(A, B, delta)
    ssm.discretize_bilinear(A, B, 0.4)  # another step: fine


@pytest.mark.parametrize("delta", [0.1, 1.0, 5.0])
def test_zoh_and_bilinear_are_stable_exactly_when_re_lambda_is_negative(delta):
    B = torch.ones(2, dtype=f64)
    for a in np.linspace(-3, 3, 13):
        if a == 0:
            continue
        for b in np.linspace(-3, 3, 7):
            A = torch.tensor([[a, -b], [b, a]], dtype=f64)  # eigenvalues a +- i b
            for rule in (ssm.discretize_zoh, ssm.discretize_bilinear):
                if rule is ssm.discretize_bilinear and abs(delta * complex(a, b) - 2) < 1e-9:
                    continue
                radius = torch.linalg.eigvals(rule(A, B, delta)[0]).abs().max()
                assert bool(radius < 1) == (a < 0), (rule.__name__, a, b, float(radius))
