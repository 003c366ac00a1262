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
    with pytest.raises(AssertionError, match="max abs error"):  # CheckFailed is one
        check_close("x", 1.0, 1.0 + 1e-6, atol=0, rtol=1e-9)


def test_check_close_relative_tolerance():
    check_close("rel", 1e6 + 1.0, 1e6, atol=0, rtol=1e-5, quiet=True)
    with pytest.raises(CheckFailed, match="rtol=1e-05"):
        check_close("rel", 1e6 + 100.0, 1e6, atol=0, rtol=1e-5, quiet=True)


def test_check_close_fails_on_nan_even_where_both_are_nan():
    with pytest.raises(CheckFailed, match=r"actual is not finite at index \(0,\)"):
        check_close("nan", [math.nan, 1.0], [math.nan, 1.0], quiet=True)
    with pytest.raises(CheckFailed, match="expected is not finite"):
        check_close("nan", torch.ones(2), torch.tensor([1.0, math.nan]), quiet=True)
    with pytest.raises(CheckFailed, match="not finite"):
        check_close("nan", [math.nan], [math.nan], allow_inf=True, quiet=True)


def test_check_close_infinities_only_when_allowed_and_matching():
    with pytest.raises(CheckFailed, match="actual is not finite"):
        check_close("inf", [math.inf, 1.0], [math.inf, 1.0], quiet=True)
    check_close("inf", [math.inf, 1.0], [math.inf, 1.0], allow_inf=True, quiet=True)
    with pytest.raises(CheckFailed, match="non-finite mismatch"):
        check_close("inf", [math.inf], [-math.inf], allow_inf=True, quiet=True)
    with pytest.raises(CheckFailed, match="non-finite mismatch"):
        check_close("inf", [1.0], [math.inf], allow_inf=True, quiet=True)


def test_check_close_fails_on_empty_input():
    with pytest.raises(CheckFailed, match="empty"):
        check_close("empty", np.ones(0), np.ones(0))
    with pytest.raises(CheckFailed, match="actual is empty"):
        check_close("empty vs number", torch.ones(0, 3), 1.0)  # broadcast would compare nothing


def test_check_close_compares_shapes_exactly():
    expected = np.ones((3, 4))
    for shape in [(4,), (1, 4), (3, 1), (4, 3), ()]:
        with pytest.raises(CheckFailed, match="no broadcasting"):
            check_close("shapes", np.ones(shape), expected, quiet=True)
    with pytest.raises(CheckFailed, match="no broadcasting"):
        check_close("shapes", np.ones((3, 1)), np.ones(3), quiet=True)
    with pytest.raises(CheckFailed, match="no broadcasting"):
        check_close("shapes", np.ones(3), np.ones(4))
    check_close("one number for every entry", expected, 1.0, quiet=True)
    check_close("0-d vs (1,)", torch.tensor(2.0), np.array([2.0]), quiet=True)
    check_close("(1, 1) vs number", np.full((1, 1), 2.0), 2, quiet=True)


def test_check_close_bad_arguments():
    with pytest.raises(ValueError, match="atol must be a finite number"):
        check_close("tol", 1.0, 1.0, atol=-1)
    with pytest.raises(TypeError, match="non-numeric"):
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
    with pytest.raises(CheckFailed, match="min is -1"):
        check_true("positive", False, "min is -1")
    with pytest.raises(CheckFailed, match="outside"):
        check_interval("p", 2.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="empty interval"):
        check_interval("p", 0.5, 1.0, 0.0)


def test_check_true_fails_on_nan_and_empty_conditions():
    check_true("tensor", torch.tensor(True))
    with pytest.raises(CheckFailed, match="NaN"):
        check_true("nan", math.nan)  # bool(nan) is True
    with pytest.raises(CheckFailed, match="one truth value"):
        check_true("empty", np.array([], dtype=bool))
    with pytest.raises(CheckFailed, match="one truth value"):
        check_true("many", torch.ones(3, dtype=torch.bool))


def test_check_interval_fails_on_non_finite_or_empty_values():
    check_interval("open above", 5.0, 0.0, math.inf)
    with pytest.raises(CheckFailed, match="not finite"):
        check_interval("inf", math.inf, 0.0, math.inf)  # low <= inf <= inf holds
    with pytest.raises(CheckFailed, match="not finite"):
        check_interval("nan", torch.tensor(math.nan), 0.0, 1.0)
    with pytest.raises(CheckFailed, match="empty"):
        check_interval("empty", np.array([]), 0.0, 1.0)


def test_check_mc_mean_accepts_unbiased_and_rejects_biased():
    rng = np.random.default_rng(0)
    x = rng.normal(1.0, 1.0, size=10_000)
    check_mc_mean("mean", x, 1.0, z=4.0)
    with pytest.raises(CheckFailed, match="standard errors"):
        check_mc_mean("biased", x + 0.1, 1.0)
    with pytest.raises(CheckFailed, match="at least 2"):
        check_mc_mean("one", [1.0], 1.0)
    with pytest.raises(ValueError, match="z must be a finite number"):
        check_mc_mean("z", x, 1.0, z=0)


def test_check_mc_mean_fails_on_nan_inf_and_empty_samples():
    x = np.random.default_rng(0).normal(1.0, 1.0, size=1000)
    with pytest.raises(CheckFailed, match="samples is not finite"):
        check_mc_mean("nan", np.append(x, math.nan), 1.0)  # a NaN mean passed before
    with pytest.raises(CheckFailed, match="samples is not finite"):
        check_mc_mean("inf", torch.tensor(np.append(x, math.inf)), 1.0)
    with pytest.raises(CheckFailed, match="expected is not finite"):
        check_mc_mean("nan expected", x, math.nan)
    with pytest.raises(CheckFailed, match="samples is empty"):
        check_mc_mean("empty", [], 1.0)


from mlbook.teaching import check  # noqa: E402


def test_conformance_tallies_checks_into_one_line(capsys):
    with check.conformance("against numpy"):
        check.check_close("a", [1.0, 2.0], [1.0, 2.0 + 1e-14], atol=1e-12)
        check.check_close("b", 1.0, 1.0 + 3e-4, atol=1e-3, quiet=True)
        check.check_true("c", True)
    out = capsys.readouterr().out.splitlines()
    # the worst error relative to its tolerance is b: 3e-4 of 1e-3
    assert out == ["3 checks against numpy: all hold; largest error < 1e-3 (its tolerance 1e-3)"]


def test_conformance_fails_at_once_and_on_an_empty_block(capsys):
    with pytest.raises(check.CheckFailed, match="check b FAILED"):
        with check.conformance("against numpy"):
            check.check_close("a", 1.0, 1.0)
            check.check_close("b", 1.0, 2.0)
    assert capsys.readouterr().out == ""
    with pytest.raises(check.CheckFailed, match="ran no check"):
        with check.conformance("against nothing"):
            pass
    check.check_true("after", True)  # the tally is closed: checks print again
    assert capsys.readouterr().out == "check after: holds ok\n"


def test_conformance_tally_does_not_depend_on_last_bits(capsys):
    """Errors below the printed floor: the largest tolerance is reported, whatever the bits."""
    for tiny in (1e-17, 3e-18):
        with check.conformance("against x"):
            check.check_close("a", 1.0, 1.0 + tiny, atol=1e-12)
            check.check_close("b", 1.0, 1.0, atol=1e-9)
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0]
        == out[1]
        == "2 checks against x: all hold; largest error < 1e-12 (its tolerance 1e-9)"
    )
