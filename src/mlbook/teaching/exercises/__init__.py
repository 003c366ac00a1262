"""Self-checking exercises: every exercise of the book has a check that says what is wrong.

An exercise asks the reader to write one or more small functions. In a chapter notebook the
reference answer sits in the hidden solution, and the cell right after the solution reads

    check_exercise("12.1", entropy_slope)

It prints one line:

    ✓ exercise 12.1 — <what was verified>                      the answer passed
    ✗ exercise 12.1 — <what is wrong: a shape, a sign, a term>  the answer is wrong
    ○ exercise 12.1 — not attempted yet: ...                   the stub still raises
    ? exercise 12.1 — cannot check here: ...                   a package the check needs is missing

The checks live in one module per chapter (``mlbook.teaching.exercises.ch12`` for ``"12.1"``;
``appa`` for ``"A.1"`` of appendix A), imported only when a check of that chapter runs. Each check
is a small function, registered with :func:`exercise`, that calls the reader's functions through
:func:`attempt`, compares the results with an independent reference through :func:`expect_answer`,
and raises :class:`Incorrect` with specific feedback. Before it gives the generic "off by ..."
message, :func:`expect_answer` compares the answer with the typical wrong answers that the check
lists (the transposed matrix, the flipped sign, the missing factor), so that a reader hears *which*
mistake they made.

Each chapter module also lists the typical wrong answers of its exercises, once:
``MISTAKES = {"12.1": [(answer, feedback), ...]}``, where ``answer`` is a wrong answer function
(or a tuple of them, in the order of the check's arguments), often built from the reference
answers through :func:`reference_answer`, and ``feedback`` is the part of the message that names
the mistake. The tests run every check on every listed mistake (:func:`mistakes`).

``check_exercise(..., strict=True)`` raises ``AssertionError`` on anything but a pass; the
autograder's hidden tests use it (see :mod:`mlbook.teaching.assign`).

Shape legend: answers are compared as float64 tensors of the reference's shape; a shape that differs
is reported with both shapes before any value is compared.
"""

from __future__ import annotations

import functools
import importlib
import math
import numbers
import pkgutil
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..check import fmt

__all__ = [
    "Incorrect",
    "NotAttempted",
    "Exercise",
    "Result",
    "exercise",
    "registered",
    "evaluate",
    "check_exercise",
    "attempt",
    "expect",
    "as_tensor",
    "as_int",
    "as_number",
    "expect_tuple",
    "expect_guess",
    "is_close",
    "expect_answer",
    "mistakes",
    "reference_answers",
    "reference_answer",
    "wrong_values",
    "paired_mistakes",
]

_ID_RE = re.compile(r"^([1-9]\d*|[A-Z])\.([1-9]\d*)$")  # "12.1", or "A.1" in appendix A
_REGISTRY: dict[str, Exercise] = {}
_SYMBOLS = {"passed": "✓", "failed": "✗", "not attempted": "○", "unavailable": "?"}


class Incorrect(Exception):
    """The answer is wrong; the message says how (raised by checks, shown to the reader)."""


class NotAttempted(Exception):
    """The reader's function still raises ``NotImplementedError`` (the student stub)."""


@dataclass(frozen=True)
class Exercise:
    """A registered exercise: its id ``"N.k"``, the names of the answer functions, its check."""

    id: str
    answers: tuple[str, ...]
    check: Callable[..., str]

    @property
    def chapter(self) -> int | str:
        """The chapter number N of the id ``"N.k"`` (the letter of an appendix's ``"A.k"``)."""
        return _parse_id(self.id)[0]


@dataclass(frozen=True)
class Result:
    """The outcome of one check: ``status`` is "passed", "failed", "not attempted" or
    "unavailable" (the check's own reference needs a package that is not installed)."""

    exercise: str
    status: str
    message: str

    def __bool__(self) -> bool:
        return self.status == "passed"

    def line(self) -> str:
        """The one line that :func:`check_exercise` prints."""
        return f"{_SYMBOLS[self.status]} exercise {self.exercise} — {self.message}"


def _parse_id(eid) -> tuple[int | str, int]:
    if not isinstance(eid, str):
        raise TypeError(f"an exercise id is a string like '12.1', got {type(eid).__name__}")
    m = _ID_RE.match(eid)
    if not m:
        raise ValueError(
            f"an exercise id looks like '12.1' (chapter.number) or 'A.1' (appendix), got {eid!r}"
        )
    part = m.group(1)
    return (part if part.isalpha() else int(part)), int(m.group(2))


def _order(eid: str) -> tuple:
    """Chapters in number order, then the appendices in letter order."""
    part, k = _parse_id(eid)
    return (isinstance(part, str), part, k)


def exercise(eid: str, *answers: str) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Register the decorated function as the check of exercise ``eid``.

    The check takes the reader's answer functions in the order of ``answers`` (their names in
    the notebook), raises :class:`Incorrect`/:class:`NotAttempted`, and returns the text shown on
    a pass (what was verified; deterministic, no raw floats).
    """
    _parse_id(eid)
    if not answers or not all(isinstance(a, str) and a.isidentifier() for a in answers):
        raise ValueError(f"exercise {eid}: name the answer functions, got {answers!r}")

    def register(check: Callable[..., str]) -> Callable[..., str]:
        if eid in _REGISTRY and _REGISTRY[eid].check.__qualname__ != check.__qualname__:
            raise ValueError(f"exercise {eid} is registered twice")
        _REGISTRY[eid] = Exercise(eid, tuple(answers), check)
        return check

    return register


def _chapter_module(chapter: int | str) -> str:
    if isinstance(chapter, str):
        return f"{__name__}.app{chapter.lower()}"
    return f"{__name__}.ch{chapter:02d}"


def _lookup(eid: str) -> Exercise:
    chapter, _ = _parse_id(eid)
    if eid not in _REGISTRY:
        try:
            importlib.import_module(_chapter_module(chapter))
        except ModuleNotFoundError as err:
            if err.name != _chapter_module(chapter):
                raise
    if eid not in _REGISTRY:
        known = ", ".join(e.id for e in registered(chapter)) or "none"
        raise ValueError(f"no exercise {eid} (chapter {chapter} has: {known})")
    return _REGISTRY[eid]


def registered(chapter: int | str | None = None) -> list[Exercise]:
    """All registered exercises (of one chapter or appendix if given), in the book's order."""
    for mod in pkgutil.iter_modules(__path__):
        if re.fullmatch(r"ch\d{2,}|app[a-z]", mod.name) and (
            chapter is None or f"{__name__}.{mod.name}" == _chapter_module(chapter)
        ):
            importlib.import_module(f"{__name__}.{mod.name}")
    found = [e for e in _REGISTRY.values() if chapter is None or e.chapter == chapter]
    return sorted(found, key=lambda e: _order(e.id))


def mistakes(eid: str) -> list[tuple[object, str]]:
    """The typical wrong answers of exercise ``eid``: ``(answer, feedback)`` pairs from the
    ``MISTAKES`` of its chapter module (see the module docstring)."""
    ex = _lookup(eid)
    module = importlib.import_module(_chapter_module(ex.chapter))
    return list(getattr(module, "MISTAKES", {}).get(eid, []))


@functools.cache
def reference_answers(eid: str) -> dict[str, Callable]:
    """The reference answer functions of exercise ``eid`` by name, in the order of its check's
    arguments, run from the chapter notebook of the book's source tree (its setup cell and
    answer cells): the very code that the book shows."""
    from ..assign import load_answers

    ex = _lookup(eid)
    book = Path(__file__).resolve().parents[4]
    if isinstance(ex.chapter, str):  # appendix A: appendix/a_slug.ipynb
        folder, pattern = book / "appendix", rf"^{ex.chapter.lower()}_"
    else:
        folder, pattern = book / "chapters", rf"^0*{ex.chapter}_"
    found = [p for p in folder.glob("*.ipynb") if re.match(pattern, p.name)]
    if len(found) != 1:
        raise FileNotFoundError(f"{ex.chapter}: expected one notebook in {folder}")
    answers = load_answers(found[0], eid)
    return {name: answers[name] for name in ex.answers}


def reference_answer(eid: str, name: str) -> Callable:
    """The reference answer function ``name`` of exercise ``eid``, loaded when first called
    (so that a chapter module can list wrong answers built from it without loading anything)."""

    def call(*args, **kwargs):
        return reference_answers(eid)[name](*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def evaluate(eid: str, *answers) -> Result:
    """Run the check of exercise ``eid`` on the reader's answer functions; never raises for a
    wrong or missing answer (it returns a failed or not-attempted :class:`Result`)."""
    ex = _lookup(eid)
    if len(answers) != len(ex.answers):
        names = ", ".join(ex.answers)
        raise TypeError(
            f"exercise {eid} checks {len(ex.answers)} function(s) ({names}), got {len(answers)}"
        )
    try:
        message = ex.check(*answers)
    except NotAttempted as err:
        return Result(eid, "not attempted", f"not attempted yet: {err}")
    except Incorrect as err:
        return Result(eid, "failed", str(err))
    except ModuleNotFoundError as err:  # the reference needs an optional package
        return Result(
            eid,
            "unavailable",
            f"cannot check here: the check needs the package `{err.name}` (pip install {err.name})",
        )
    return Result(eid, "passed", message)


def check_exercise(eid: str, *answers, strict: bool = False) -> None:
    """Check the reader's answer to exercise ``eid`` and print one line (✓, ✗ or ○).

    With ``strict=True`` anything but a pass raises ``AssertionError`` with that line (the
    autograder's hidden tests).
    """
    result = evaluate(eid, *answers)
    print(result.line())
    if strict and not result:
        raise AssertionError(result.line())


def attempt(fn, *args, name: str | None = None, **kwargs):
    """Call the reader's function ``fn(*args, **kwargs)``, turning its failures into feedback.

    ``NotImplementedError`` becomes :class:`NotAttempted`; any other exception becomes
    :class:`Incorrect` naming the call and the exception.
    """
    label = name or getattr(fn, "__name__", "the answer")
    if not callable(fn):
        raise Incorrect(f"`{label}` should be a function, got {type(fn).__name__}")
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise NotAttempted(f"`{label}` still raises NotImplementedError") from None
    except Exception as err:  # the reader's code failed: report it, do not crash the check
        raise Incorrect(f"`{label}` raised {type(err).__name__}: {err}") from None


def expect(condition: bool, message: str) -> None:
    """Raise :class:`Incorrect` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise Incorrect(message)


def as_tensor(value, what: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """``value`` (tensor, array or number) as a float64 tensor, with a clear message if it is
    not numeric or not of ``shape``; a transposed matrix is named as such."""
    if value is None:
        raise Incorrect(f"{what} returned None (is a `return` missing?)")
    if isinstance(value, torch.Tensor):
        if value.is_complex():
            raise Incorrect(f"{what} should be real, got a complex tensor")
        t = value.detach().to(torch.float64)
    else:
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise Incorrect(
                f"{what} should be a number or a tensor, got {type(value).__name__}"
            ) from None
        t = torch.from_numpy(arr)
    if shape is not None and tuple(t.shape) != tuple(shape):
        hint = ""
        if t.dim() == 2 and tuple(t.shape) == tuple(reversed(shape)) and shape[0] != shape[1]:
            hint = " (it looks transposed)"
        raise Incorrect(f"{what} should have shape {tuple(shape)}, got {tuple(t.shape)}{hint}")
    return t


def as_int(value, what: str, unit: str = "a count") -> int:
    """``value`` (an int, or a whole float or one-element tensor) as an int; a bool, several
    values or a fraction get a message that names ``unit`` ("tokens", "sequences")."""
    if isinstance(value, bool):
        raise Incorrect(f"{what} should be an int ({unit}), got a bool")
    t = as_tensor(value, what)
    expect(t.numel() == 1, f"{what} should be one int ({unit}), got shape {tuple(t.shape)}")
    x = float(t.reshape(()))
    expect(math.isfinite(x) and x == int(x), f"{what} should be a whole number ({unit}), got {x}")
    return int(x)


def as_number(value, what: str, unit: str = "") -> float:
    """``value`` (a Python or NumPy real, not a bool) as a finite float; anything else gets a
    message that ``what`` should return a number (of ``unit``: "tokens", "nats")."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    expect(ok and math.isfinite(value), f"{what} should return a number{unit}, got {value!r}")
    return float(value)


def expect_guess(got, want: float, what: str, wrong: Mapping[float, str], rtol: float = 0.05):
    """A guessed number against the measured ``want`` within ``rtol``; ``wrong`` maps the usual
    wrong guesses to the feedback that names them."""
    got = as_tensor(got, what)
    expect(got.numel() == 1, f"{what} should be one number, got shape {tuple(got.shape)}")
    expect_answer(
        got.reshape(()), want, what, wrong={fb: v for v, fb in wrong.items()}, atol=0, rtol=rtol
    )


def expect_tuple(value, what: str, names: Sequence[str]) -> tuple:
    """The parts of an answer that must be a tuple (or list) of ``len(names)`` items, named in
    the message: ``expect_tuple(out, "f(x)", ("mean", "sd"))``."""
    kind = {2: "pair", 3: "triple"}.get(len(names), f"tuple of {len(names)}")
    if value is None:
        raise Incorrect(f"{what} returned None (is a `return` missing?)")
    if not isinstance(value, (tuple, list)) or len(value) != len(names):
        got = f"{len(value)} values" if isinstance(value, (tuple, list)) else type(value).__name__
        raise Incorrect(f"{what} should return a {kind} ({', '.join(names)}), got {got}")
    return tuple(value)


def is_close(got, want, *, atol: float = 1e-8, rtol: float = 1e-6) -> bool:
    """Whether two tensors of the same shape agree within ``atol + rtol * |want|``."""
    g = as_tensor(got, "value")
    w = as_tensor(want, "value")
    if g.shape != w.shape:
        return False
    return bool(torch.allclose(g, w, atol=atol, rtol=rtol, equal_nan=False))


def expect_answer(
    got,
    want,
    what: str,
    *,
    wrong: Mapping[str, object] | None = None,
    atol: float = 1e-8,
    rtol: float = 1e-6,
) -> torch.Tensor:
    """Raise :class:`Incorrect` unless ``got`` matches ``want``; name the typical mistake.

    Args:
        got: the reader's result (tensor, array or number).
        want: the independent reference (its shape is the required shape).
        what: how to name the quantity in feedback, e.g. ``"entropy_slope(z, 0.7)"``.
        wrong: typical wrong answers, ``{feedback: value}``; if ``got`` matches one of them
            (and not ``want``) that feedback is raised. A value of None is skipped (a mistake
            that does not apply to this case).
        atol, rtol: the tolerance of the comparison.

    Returns the answer as a float64 tensor.
    """
    w = as_tensor(want, "the reference")
    g = as_tensor(got, what)
    if g.shape == w.shape and torch.isfinite(g).all() and is_close(g, w, atol=atol, rtol=rtol):
        return g
    for feedback, value in (wrong or {}).items():  # a typical mistake, possibly of another shape
        if value is None:
            continue
        if is_close(g, as_tensor(value, "a wrong answer"), atol=atol, rtol=rtol):
            raise Incorrect(f"{what}: {feedback}")
    g = as_tensor(g, what, shape=tuple(w.shape))
    if not torch.isfinite(g).all():
        raise Incorrect(f"{what} contains nan or inf (is the computation numerically stable?)")
    diff = (g - w).abs().reshape(-1)
    i = int(torch.argmax(diff))
    where = (
        ""
        if w.dim() == 0
        else f" at index {tuple(int(j) for j in np.unravel_index(i, tuple(w.shape)))}"
    )
    expected, actual = float(w.reshape(-1)[i]), float(g.reshape(-1)[i])
    raise Incorrect(
        f"{what} is off by {fmt(float(diff[i]), 3)}{where}: "
        f"expected {fmt(expected)}, got {fmt(actual)}"
    )


def wrong_values(mistakes, *args) -> dict:
    """``{feedback: wrong(*args)}`` for a ``MISTAKES``-style list of ``(wrong, feedback)``: the
    values :func:`expect_answer` compares an answer with, to name the mistake."""
    return {feedback: wrong(*args) for wrong, feedback in mistakes}


def paired_mistakes(first, second, mistakes_first, mistakes_second) -> list:
    """``MISTAKES`` entries of a two-function exercise: each wrong first answer beside the right
    second one, then the right first answer beside each wrong second one."""
    return [((wrong, second), feedback) for wrong, feedback in mistakes_first] + [
        ((first, wrong), feedback) for wrong, feedback in mistakes_second
    ]
