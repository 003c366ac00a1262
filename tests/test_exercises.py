"""Every exercise of the book checks itself: its check accepts the reference answer shown in the
chapter, reports a stub as not attempted, reports a broken answer without crashing, and rejects
each typical wrong answer that its chapter module lists (``MISTAKES``, at least two an exercise)
with the feedback that names the mistake."""

import json

import pytest
import torch
from exercise_support import ROOT, reference

from mlbook.teaching.assign import find_exercises
from mlbook.teaching.exercises import (
    Incorrect,
    NotAttempted,
    as_int,
    attempt,
    check_exercise,
    evaluate,
    expect_answer,
    expect_tuple,
    mistakes,
    registered,
)

CHAPTERS = sorted((ROOT / "chapters").glob("[0-9]*.ipynb")) + sorted(
    (ROOT / "appendix").glob("[a-c]_*.ipynb")
)


def notebook_ids(path):
    return [e.id for e in find_exercises(json.loads(path.read_text(encoding="utf-8")), path.name)]


ALL_IDS = [eid for p in CHAPTERS for eid in notebook_ids(p)]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_each_chapter_exercise_has_a_registered_check(path):
    ids = notebook_ids(path)
    assert len(ids) >= 3, f"{path.name}: {len(ids)} exercises in the self-checking layout"
    part = path.name.split("_")[0]
    chapter = part.upper() if part.isalpha() else int(part)
    assert [e.id for e in registered(chapter)] == ids


def test_no_check_without_an_exercise():
    assert sorted(e.id for e in registered()) == sorted(ALL_IDS)


@pytest.mark.parametrize("eid", ALL_IDS)
def test_reference_answer_passes(eid):
    result = evaluate(eid, *reference(eid).values())
    assert result.status == "passed", result.line()


@pytest.mark.parametrize("eid", ALL_IDS)
def test_stub_is_not_attempted_and_garbage_is_rejected(eid):
    n = len(reference(eid))

    def stub(*args, **kwargs):
        raise NotImplementedError()

    assert evaluate(eid, *[stub] * n).status == "not attempted"
    result = evaluate(eid, *[lambda *a, **k: None] * n)
    assert result.status == "failed" and result.message


@pytest.mark.parametrize("eid", ALL_IDS)
def test_each_exercise_names_typical_wrong_answers(eid):
    assert len(mistakes(eid)) >= 2, f"{eid}: list at least two wrong answers in MISTAKES"


def mistake_cases():
    """(eid, n) for the n-th listed wrong answer of each exercise; one case (n = -1) for an
    exercise whose chapter module does not import, so that it fails alone and says why."""
    cases = []
    for eid in ALL_IDS:
        try:
            count = len(mistakes(eid))
        except Exception:  # reported by the case itself
            cases.append(pytest.param(eid, -1, id=f"{eid}-import"))
            continue
        cases += [pytest.param(eid, n, id=f"{eid}-{n}") for n in range(count)]
    return cases


@pytest.mark.parametrize(("eid", "n"), mistake_cases())
def test_typical_wrong_answer_is_rejected_with_its_feedback(eid, n):
    answer, feedback = mistakes(eid)[n]
    result = evaluate(eid, *(answer if isinstance(answer, tuple) else (answer,)))
    assert result.status == "failed", f"a wrong answer was not rejected: {result.line()}"
    assert feedback in result.message, f"expected {feedback!r} in: {result.message}"


def test_check_exercise_prints_one_line_and_strict_raises(capsys):
    ref = reference("12.3")["log_softmax_jacobian"]
    check_exercise("12.3", ref)
    assert capsys.readouterr().out.startswith("✓ exercise 12.3 — ")
    with pytest.raises(AssertionError, match="transpose"):
        check_exercise("12.3", lambda z: ref(z).T, strict=True)
    assert capsys.readouterr().out.startswith("✗ exercise 12.3 — ")


def test_bad_calls_raise_clear_errors():
    with pytest.raises(ValueError, match="looks like '12.1'"):
        evaluate("12")
    with pytest.raises(TypeError, match="string"):
        evaluate(12.1)
    with pytest.raises(ValueError, match="no exercise 12.99"):
        evaluate("12.99", print)
    with pytest.raises(ValueError, match="no exercise Z.1"):  # an appendix without exercises
        evaluate("Z.1", print)
    with pytest.raises(ValueError, match="looks like"):
        evaluate("AB.1", print)
    with pytest.raises(TypeError, match="checks 1 function"):
        evaluate("12.1")


def test_a_missing_package_of_a_check_is_named(monkeypatch):
    import mlbook.teaching.exercises as ex

    def needs_a_package(f):
        import package_that_is_not_installed  # noqa: F401

    monkeypatch.setitem(ex._REGISTRY, "99.1", ex.Exercise("99.1", ("f",), needs_a_package))
    result = evaluate("99.1", print)
    assert result.status == "unavailable" and not result
    assert "pip install package_that_is_not_installed" in result.line()


def test_attempt_and_expect_answer_name_the_problem():
    with pytest.raises(NotAttempted, match="`f` still raises NotImplementedError"):
        attempt(lambda: (_ for _ in ()).throw(NotImplementedError()), name="f")
    with pytest.raises(Incorrect, match="should be a function"):
        attempt(3, name="f")
    with pytest.raises(Incorrect, match="raised ZeroDivisionError"):
        attempt(lambda: 1 / 0, name="f")
    with pytest.raises(Incorrect, match=r"should have shape \(2, 3\), got \(3, 2\) \(it looks tr"):
        expect_answer([[0.0] * 2] * 3, [[0.0] * 3] * 2, "M")
    with pytest.raises(Incorrect, match="should be a number or a tensor"):
        expect_answer("x", 1.0, "v")
    with pytest.raises(Incorrect, match="off by 1 at index"):
        expect_answer([1.0, 2.0], [1.0, 3.0], "v")
    with pytest.raises(Incorrect, match="nan or inf"):
        expect_answer([float("nan")], [1.0], "v")
    with pytest.raises(Incorrect, match="v: doubled"):
        expect_answer([2.0], [1.0], "v", wrong={"doubled": [2.0]})


def test_as_int_and_expect_tuple_name_the_problem():
    assert as_int(3.0, "n") == 3 and as_int(torch.tensor([7]), "n") == 7
    with pytest.raises(Incorrect, match=r"whole number \(tokens\), got 2.5"):
        as_int(2.5, "n", "tokens")
    with pytest.raises(Incorrect, match="got a bool"):
        as_int(True, "n")
    with pytest.raises(Incorrect, match=r"one int \(a count\), got shape \(2,\)"):
        as_int([1, 2], "n")
    assert expect_tuple([1, 2], "f", ("a", "b")) == (1, 2)
    with pytest.raises(Incorrect, match=r"f should return a triple \(a, b, c\), got 2 values"):
        expect_tuple((1, 2), "f", ("a", "b", "c"))
    with pytest.raises(Incorrect, match=r"should return a pair \(a, b\), got Tensor"):
        expect_tuple(torch.zeros(2), "f", ("a", "b"))
    with pytest.raises(Incorrect, match="returned None"):
        expect_tuple(None, "f", ("a", "b"))
