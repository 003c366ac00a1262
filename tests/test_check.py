"""The check helpers must pass correct results, fail wrong ones, and print one stable line."""

import math

import numpy as np
import pytest
import torch

from mlbook.teaching.check import (
    CheckFailed,
    as_numpy,
    check_close,
    check_interval,
    check_mc_mean,
    check_true,
    fmt,
    magnitude,
)


def test_check_close_passes_and_prints_one_line(capsys):
    res = check_close("a vs b", torch.tensor([1.0, 2.0]), np.array([1.0, 2.0 + 3e-12]), atol=1e-9)
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert out.startswith("check a vs b: max abs error < 1e-11 (atol 1e-09)")
    assert out.rstrip().endswith("ok")
    assert res is None  # a cell that ends in a check shows only the printed line


def test_check_close_fails_with_the_numbers():
    with pytest.raises(CheckFailed, match=r"worst at index \(1,\)"):
        check_close("x", [1.0, 2.0], [1.0, 2.1], atol=1e-3)
    with pytest.raises(AssertionError):  # CheckFailed is an AssertionError
        check_close("x", 1.0, 1.0 + 1e-6, atol=0, rtol=1e-9)


def test_check_close_relative_tolerance():
    check_close("rel", 1e6 + 1.0, 1e6, atol=0, rtol=1e-5, quiet=True)
    with pytest.raises(CheckFailed):
        check_close("rel", 1e6 + 100.0, 1e6, atol=0, rtol=1e-5, quiet=True)


def test_check_close_non_finite_values_must_match():
    check_close("nan", [math.nan, 1.0], [math.nan, 1.0], quiet=True)
    check_close("inf", [math.inf], [math.inf], quiet=True)
    with pytest.raises(CheckFailed, match="non-finite"):
        check_close("nan", [math.nan], [1.0], quiet=True)
    with pytest.raises(CheckFailed, match="non-finite"):
        check_close("inf", [math.inf], [-math.inf], quiet=True)


def test_check_close_bad_input():
    with pytest.raises(ValueError, match="do not broadcast"):
        check_close("shapes", np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="non-negative"):
        check_close("tol", 1.0, 1.0, atol=-1)
    with pytest.raises(ValueError, match="empty"):
        check_close("empty", np.ones(0), np.ones(0))
    with pytest.raises(TypeError):
        check_close("obj", ["a"], [1.0])


def test_magnitude_is_stable_below_the_floor():
    assert magnitude(0.0, 1e-10) == magnitude(3e-17, 1e-10) == "< 1e-13"
    assert magnitude(2.5e-6, 1e-3) == "< 1e-5"
    assert magnitude(math.inf, 1.0) == "= inf"
    assert magnitude(0.0, 0.0) == "= 0"  # atol=0: an exact match


def test_fmt_and_as_numpy():
    assert fmt(3.14159265) == "3.142" and fmt(0.0) == "0"
    assert as_numpy(torch.tensor([1, 2])).dtype == np.float64


def test_check_true_and_interval(capsys):
    check_true("positive", True)
    check_interval("p-value", 0.123456, 0.001, 1.0, digits=2)
    assert capsys.readouterr().out.splitlines()[1] == "check p-value: 0.12 in [0.001, 1] ok"
    with pytest.raises(CheckFailed):
        check_true("positive", False, "min is -1")
    with pytest.raises(CheckFailed):
        check_interval("p", 2.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="empty interval"):
        check_interval("p", 0.5, 1.0, 0.0)


def test_check_mc_mean_accepts_unbiased_and_rejects_biased():
    rng = np.random.default_rng(0)
    x = rng.normal(1.0, 1.0, size=10_000)
    check_mc_mean("mean", x, 1.0, z=4.0)
    with pytest.raises(CheckFailed, match="standard errors"):
        check_mc_mean("biased", x + 0.1, 1.0)
    with pytest.raises(ValueError, match="at least 2"):
        check_mc_mean("one", [1.0], 1.0)
    with pytest.raises(ValueError, match="positive"):
        check_mc_mean("z", x, 1.0, z=0)
