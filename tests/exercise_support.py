"""Helpers for the tests of the exercise checks: the book's root and the reference answers of an
exercise (``reference("12.1")``, taken from the chapter notebook itself by
:func:`mlbook.teaching.exercises.reference_answers`)."""

from pathlib import Path

from mlbook.teaching.exercises import reference_answers as reference

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["ROOT", "reference"]
