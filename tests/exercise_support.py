"""Helpers for the tests of the exercise checks (``tests/test_exercises_chNN.py``).

``reference("12.1")`` returns the reference answer functions of an exercise, taken from the
chapter notebook itself (its setup cell and the answer cells), so that the tests check the very
code that the book shows. ``rejected(eid, answer, feedback)`` asserts that a typical wrong answer
fails its check with a message that names the mistake.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from mlbook.teaching.assign import load_answers
from mlbook.teaching.exercises import evaluate, registered

ROOT = Path(__file__).resolve().parents[1]


def chapter_notebook(chapter: int) -> Path:
    """The notebook file of a chapter number."""
    found = [p for p in (ROOT / "chapters").glob("*.ipynb") if re.match(rf"^0*{chapter}_", p.name)]
    assert len(found) == 1, f"chapter {chapter}: found {found}"
    return found[0]


@functools.cache
def reference(eid: str) -> dict:
    """The reference answer functions of exercise ``eid``, by name, in the order in which its
    check takes them."""
    chapter = int(eid.split(".")[0])
    answers = load_answers(chapter_notebook(chapter), eid)
    (ex,) = [e for e in registered(chapter) if e.id == eid]
    return {name: answers[name] for name in ex.answers}


def reference_passes(eid: str) -> None:
    """Assert that the reference answers pass their check."""
    result = evaluate(eid, *reference(eid).values())
    assert result.status == "passed", result.line()


def rejected(eid: str, answer, feedback: str) -> None:
    """Assert that ``answer`` (a function, or a tuple of functions) fails exercise ``eid`` with
    a message containing ``feedback``."""
    answers = answer if isinstance(answer, tuple) else (answer,)
    result = evaluate(eid, *answers)
    assert result.status == "failed", f"a wrong answer was not rejected: {result.line()}"
    assert feedback in result.message, f"expected {feedback!r} in: {result.message}"


def cases(wrong: dict) -> list:
    """``WRONG = {eid: [(answer, feedback), ...]}`` as pytest parameters with readable ids."""
    import pytest

    return [
        pytest.param(eid, answer, feedback, id=f"{eid}-{n}")
        for eid, pairs in wrong.items()
        for n, (answer, feedback) in enumerate(pairs)
    ]
