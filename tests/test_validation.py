"""The one module of argument checks: integers from NumPy are integers, bools and floats are not."""

import numpy as np
import pytest

from mlbook.validation import integer, positive_int


def test_numpy_integers_are_accepted_and_returned_as_python_ints():
    for v in (3, np.int64(3), np.int32(3), np.uint8(3)):
        out = positive_int(v, "n")
        assert out == 3 and type(out) is int
    assert integer(np.int16(-2), "k", -5, 5) == -2


@pytest.mark.parametrize("bad", [True, np.bool_(True), 2.0, np.float64(2.0), "2", None])
def test_bools_floats_and_strings_are_not_integers(bad):
    with pytest.raises(TypeError, match="n must be a positive int"):
        positive_int(bad, "n")
    with pytest.raises(TypeError, match="n must be an int"):
        integer(bad, "n")


def test_range_is_checked_after_conversion():
    with pytest.raises(ValueError, match="n must be a positive int, got 0"):
        positive_int(np.int64(0), "n")
    with pytest.raises(ValueError, match=r"k must be in \[0, 3\], got 4"):
        integer(np.int64(4), "k", 0, 3)


def test_nonempty_names_the_argument_for_tensors_arrays_and_sequences():
    import torch

    from mlbook.validation import nonempty

    for empty, says in (
        (torch.zeros(0, 3), r"shape \(0, 3\)"),
        (np.zeros((2, 0)), r"shape \(2, 0\)"),
        ([], "an empty list"),
    ):
        with pytest.raises(ValueError, match=f"batch must not be empty, got {says}"):
            nonempty(empty, "batch")
    assert nonempty([0], "batch") == [0]
