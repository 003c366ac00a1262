"""mlbook.foundations.numerics against independent references: NumPy's and PyTorch's broadcasting,
torch.logsumexp, polynomials whose central differences are known exactly, torch.autograd's
Jacobians, and the machine epsilons of torch.finfo, numpy.finfo and the bit layouts."""

import math

import numpy as np
import pytest
import torch

from mlbook.foundations import numerics as nm
from mlbook.nn import precision
from mlbook.nn import softmax as sm

F64 = torch.float64


def test_broadcast_shape_matches_numpy_and_torch_on_random_shapes():
    rng = np.random.default_rng(0)
    for _ in range(300):
        a = tuple(int(s) for s in rng.choice([1, 2, 3], size=rng.integers(0, 4)))
        b = tuple(int(s) for s in rng.choice([1, 2, 3], size=rng.integers(0, 4)))
        try:
            want = np.broadcast_shapes(a, b)
        except ValueError:
            with pytest.raises(ValueError, match="do not broadcast"):
                nm.broadcast_shape(a, b)
            continue
        assert nm.broadcast_shape(a, b) == want == tuple((torch.zeros(a) + torch.zeros(b)).shape)
    assert nm.broadcast_shape((5, 1, 4), (3, 1), (4,)) == (5, 3, 4)
    assert nm.broadcast_shape() == ()


def test_logsumexp_naive_agrees_where_it_can_and_overflows_where_the_stable_one_does_not():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(4, 7, generator=gen, dtype=F64)
    torch.testing.assert_close(nm.logsumexp_naive(z), torch.logsumexp(z, -1), atol=1e-14, rtol=0)
    big = torch.tensor([1000.0, 1000.0], dtype=F64)
    assert torch.isinf(nm.logsumexp_naive(big))
    assert abs(float(sm.logsumexp(big)) - (1000 + math.log(2))) < 1e-12


def test_central_difference_of_a_cubic_is_exact_up_to_h_squared():
    x = torch.tensor([0.5, 1.0, 2.0], dtype=F64)
    h = 1e-2
    cube = lambda t: t * t * t  # noqa: E731
    # (f(x+h) - f(x-h)) / 2h = 3x^2 + h^2 and (f(x+h) - f(x)) / h = 3x^2 + 3xh + h^2, exactly
    torch.testing.assert_close(
        nm.central_difference(cube, x, h), 3 * x**2 + h**2, atol=1e-12, rtol=0
    )
    torch.testing.assert_close(
        nm.forward_difference(cube, x, h), 3 * x**2 + 3 * x * h + h**2, atol=1e-12, rtol=0
    )
    with pytest.raises(ValueError, match="h must be a finite number"):
        nm.central_difference(cube, x, 0.0)


def test_the_error_model_is_smallest_at_the_optimal_step():
    eps, f0, f3 = 2.0**-52, 1.0, 6.0
    hs = torch.logspace(-10, -2, 4001, dtype=F64)
    best = float(hs[torch.argmin(nm.central_difference_error(hs, eps, f0, f3))])
    h_star = nm.optimal_central_step(eps, f0, f3)
    assert abs(math.log(best / h_star)) < 0.01
    assert abs(h_star - (eps / 2) ** (1 / 3)) < 1e-12  # (3 eps |f| / |f'''|)^(1/3), f''' = 6


def test_measured_central_difference_errors_follow_the_model_in_float64():
    x = torch.tensor(1.0, dtype=F64)
    errs = {
        h: abs(float(nm.central_difference(lambda t: t * t * t, x, h)) - 3) for h in (1e-1, 1e-2)
    }
    for h, e in errs.items():
        assert abs(e / h**2 - 1) < 1e-6  # pure truncation: the error is h^2
    tiny = abs(float(nm.central_difference(lambda t: t * t * t, x, 1e-12)) - 3)
    assert 1e-6 < tiny < 1e-2  # rounding: of the order eps / h = 2e-4


def test_jacobian_central_matches_autograd():
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(3, 4, generator=gen, dtype=F64)
    x = torch.randn(2, 3, generator=gen, dtype=F64)

    def f(t):
        return torch.tanh(t @ w)

    want = torch.autograd.functional.jacobian(f, x)  # (2, 4, 2, 3)
    got = nm.jacobian_central(f, x)
    assert got.shape == want.shape == (2, 4, 2, 3)
    torch.testing.assert_close(got, want, atol=1e-9, rtol=0)
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        nm.jacobian_central(f, torch.zeros(3, dtype=torch.long))


@pytest.mark.parametrize("name", ["float64", "float32", "float16", "bfloat16"])
def test_machine_epsilon_by_halving_matches_finfo_and_the_bit_layout(name):
    fmt = precision.FORMATS[name]
    eps = nm.machine_epsilon(fmt.dtype)
    assert eps == torch.finfo(fmt.dtype).eps == fmt.eps == 2.0**-fmt.mantissa_bits
    if name != "bfloat16":  # numpy has no bfloat16
        assert eps == float(np.finfo(getattr(np, name)).eps)
    with pytest.raises(ValueError, match="dtype must be one of"):
        nm.machine_epsilon(torch.int32)
