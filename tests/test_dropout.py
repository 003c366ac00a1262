"""mlbook.nn.dropout against closed-form moments and torch's F.dropout scaling."""

import math

import pytest
import torch
import torch.nn.functional as F

from mlbook.nn import dropout as dr


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


def test_dropout_values_and_eval_identity(gen):
    x = torch.rand(1000, dtype=torch.float64) + 0.5
    y = dr.dropout(x, 0.7, gen)
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / 0.7, atol=1e-15, rtol=0)
    assert torch.equal(dr.dropout(x, 0.7, gen, training=False), x)
    assert torch.equal(dr.dropout(x, 1.0, gen), x)


def test_dropout_matches_torch_scaling():
    torch.manual_seed(0)
    x = torch.rand(1000, dtype=torch.float64) + 0.5
    y = F.dropout(x, p=0.3)
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / 0.7, atol=1e-15, rtol=0)


@pytest.mark.parametrize("p_keep", [0.5, 0.8, 0.95])
def test_dropout_moments_by_monte_carlo(gen, p_keep):
    n, x = 200_000, 2.0
    y = dr.dropout(torch.full((n,), x, dtype=torch.float64), p_keep, gen)
    mean, var = dr.dropout_moments(torch.tensor(x, dtype=torch.float64), p_keep)
    se_mean = math.sqrt(var.item() / n)
    assert abs(y.mean().item() - mean.item()) < 5 * se_mean
    sq = (y - x) ** 2
    se_var = sq.std().item() / math.sqrt(n)
    assert abs(sq.mean().item() - var.item()) <= 5 * se_var + 1e-12


def test_mask_keep_rate_and_dtype(gen):
    m = dr.dropout_mask((100, 100), 0.25, gen, torch.float64)
    assert m.dtype == torch.float64 and set(m.unique().tolist()) <= {0.0, 1.0}
    assert abs(m.mean().item() - 0.25) < 5 * math.sqrt(0.25 * 0.75 / 10_000)


def test_bad_input_raises(gen):
    x = torch.ones(3)
    for bad in (0.0, -0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="p_keep"):
            dr.dropout(x, bad, gen)
    with pytest.raises(TypeError, match="p_keep must be a real number"):
        dr.dropout(x, True, gen)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        dr.dropout([1.0], 0.5, gen)
    with pytest.raises(TypeError, match="floating-point"):
        dr.dropout(torch.ones(3, dtype=torch.int64), 0.5, gen)
    with pytest.raises(TypeError, match="Generator"):
        dr.dropout_mask((3,), 0.5, 0)
    with pytest.raises(ValueError, match="p_keep"):
        dr.dropout_moments(x, 0.0)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        dr.dropout_moments(1.0, 0.5)
