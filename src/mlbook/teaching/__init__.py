"""The book's teaching machinery, apart from its subject matter.

    check       numerical checks that print one line and raise on failure
    exercises   self-checking exercises: one check per exercise, specific feedback
    notebook    notebook setup (seeds, style) and showing package source
    curriculum  chapter headers, the prerequisite graph, study plans (instructors)
    assign      student/instructor notebooks, an nbgrader bundle (a command:
                ``python -m mlbook.teaching.assign``; import it explicitly)

Notebooks import what they use from here: ``from mlbook.teaching import setup, show_source,
check_close, check_exercise``; ``conformance`` folds many checks into one tally line.
"""

from .check import (
    CheckFailed,
    check_close,
    check_interval,
    check_mc_mean,
    check_true,
    conformance,
    fmt,
    magnitude,
)
from .exercises import check_exercise
from .notebook import setup, show_source

__all__ = [
    "CheckFailed",
    "check_close",
    "check_interval",
    "check_mc_mean",
    "check_true",
    "check_exercise",
    "conformance",
    "fmt",
    "magnitude",
    "setup",
    "show_source",
]
