"""`python -m mlbook.teaching.assign`: the transforms, the files it writes for every chapter, and
that no solution leaks into a student notebook. (Executing the student notebooks and grading them
with nbgrader is in test_assign_run.py.)"""

import ast
import json
import re

import pytest
from exercise_support import ROOT

from mlbook.teaching import assign
from mlbook.teaching.assign import (
    BEGIN,
    END,
    STUB,
    WRITTEN_STUB,
    clear_solutions,
    find_exercises,
    mark_solutions,
)

CHAPTERS = sorted((ROOT / "chapters").glob("[0-9]*.ipynb"))
NUMBERS = [int(p.name.split("_")[0]) for p in CHAPTERS]

ANSWER = '''def f(x, y=2):
    """Spec of f: x (N,) -> (N,)."""
    # a comment that belongs to the solution
    z = x * y  # (N,)
    return z


def g(
    a,
):
    """Spec of g."""
    def inner(b):
        return b + 1

    return inner(a)'''


def text(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_mark_and_clear_solutions_keep_signature_and_docstring():
    marked = mark_solutions(ANSWER)
    assert marked.count(BEGIN) == 2 and marked.count(END) == 2
    assert (
        "\n".join(line for line in marked.splitlines() if line.strip() not in (BEGIN, END))
        == ANSWER
    )
    stub = clear_solutions(marked)
    ast.parse(stub)
    assert "x * y" not in stub and "inner" not in stub and "solution" not in stub
    assert '"""Spec of f: x (N,) -> (N,)."""' in stub and "def g(\n    a,\n):" in stub
    assert stub.count(f"    {STUB[1]}") == 2 and stub.count(f"    {STUB[0]}") == 2
    namespace = {}
    exec(stub, namespace)  # noqa: S102
    with pytest.raises(NotImplementedError, match="^$"):
        namespace["f"](1)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("### BEGIN SOLUTION\nx = 1", "without ### END"),
        ("### END SOLUTION", "without ### BEGIN"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION", "nested"),
    ],
)
def test_clear_solutions_rejects_broken_markers(source, message):
    with pytest.raises(ValueError, match=message):
        clear_solutions(source)


def exercise_cells(
    answer='def f(x):\n    """Spec."""\n    return x',
    check='check_exercise("9.1", f)',
    label="ex-9-1",
    end="```{solution-end}\n```",
):
    def md(s):
        return {"cell_type": "markdown", "metadata": {}, "source": s}

    def code(s):
        return {
            "cell_type": "code",
            "metadata": {},
            "source": s,
            "outputs": [],
            "execution_count": None,
        }

    return {
        "cells": [
            md(f":::{{exercise}} 9.1\n:label: {label}\n:nonumber:\n\nWrite `f(x)`.\n:::"),
            md(f"```{{solution-start}} {label}\n:class: dropdown\n```\n\nBecause."),
            code(answer),
            md(end),
            code(check),
        ]
    }


def test_find_exercises_reads_the_layout():
    (ex,) = find_exercises(exercise_cells())
    assert (ex.id, ex.task, ex.solution, ex.answers, ex.end, ex.check, ex.functions) == (
        "9.1",
        0,
        1,
        (2,),
        3,
        4,
        ("f",),
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"answer": "x = 1"}, "only function definitions, found Assign"),
        ({"answer": "def f(x):\n    return x"}, "needs a docstring"),
        ({"answer": "def f(x:\n"}, "not valid Python"),
        ({"check": 'check_exercise("9.2", f)'}, 'check_exercise\\("9.1"'),
        ({"check": 'check_exercise("9.1", g)'}, "names \\('g',\\)"),
        ({"check": "print(f(1))"}, "holds only"),
        ({"end": "text"}, "solution-end"),
        ({"label": "ex-9"}, "exactly one"),
        ({"label": "ex-9-2"}, "exactly one"),
    ],
)
def test_find_exercises_names_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        find_exercises(exercise_cells(**kwargs), "nb.ipynb")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("assignment")
    summary = assign.build_assignment(
        ROOT, NUMBERS, out, name="all", repo="me/course", branch="spring", path="hw/all"
    )
    return out, summary


def test_build_writes_every_chapter(built):
    out, summary = built
    assert summary["name"] == "all" and list(summary["chapters"]) == [p.name for p in CHAPTERS]
    for p in CHAPTERS:
        for folder in ("student", "instructor", "autograder/source/all"):
            assert (out / folder / p.name).exists()
    config = (out / "autograder" / "nbgrader_config.py").read_text()
    assert "course_id = 'all'" in config
    readme = (out / "README.md").read_text()
    assert "nbgrader autograde all" in readme
    assert "https://github.com/me/course/tree/spring/hw/all" in readme


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_student_version_has_stubs_and_checks_but_no_solution(built, path):
    out, _ = built
    book = json.loads(path.read_text(encoding="utf-8"))
    student = json.loads((out / "student" / path.name).read_text(encoding="utf-8"))
    instructor = json.loads((out / "instructor" / path.name).read_text(encoding="utf-8"))
    s_text = "\n".join(text(c) for c in student["cells"])
    exercises = find_exercises(book, path.name)
    assert len(student["cells"]) == len(instructor["cells"]) == len(book["cells"]) - len(exercises)

    # outputs cleared, badge to the published student copy
    assert all(not c.get("outputs") for c in student["cells"] if c["cell_type"] == "code")
    assert (
        f"colab.research.google.com/github/me/course/blob/spring/hw/all/student/{path.name}"
        in text(student["cells"][0])
    )
    assert "{solution-start}" not in s_text and "{solution-end}" not in s_text
    assert ":::{exercise}" not in s_text and BEGIN not in s_text

    # no solution text: the body lines of the answers and the written derivations are gone
    shared = "\n".join(
        text(c)
        for i, c in enumerate(book["cells"])
        if not any(i in (e.solution, *e.answers) for e in exercises)
    )
    for ex in exercises:
        tier = f" · {ex.tier}" if ex.tier else ""
        assert f"**Exercise {ex.id}{tier}.**" in s_text
        assert f'check_exercise("{ex.id}"' in s_text
        written = text(book["cells"][ex.solution]).split("```", 2)[2].strip()
        for paragraph in written.split("\n\n"):
            assert paragraph[:80] not in s_text, f"{ex.id}: written solution leaks"
        for i in ex.answers:
            source = text(book["cells"][i])
            tree = ast.parse(source)
            lines = source.splitlines()
            for fn in tree.body:
                for node in fn.body[1:]:
                    for line in lines[node.lineno - 1 : node.end_lineno]:
                        line = line.strip()
                        if len(line) > 12 and line not in shared:
                            assert line not in s_text, f"{ex.id}: solution line leaks: {line}"

    # the student stubs are exactly the cleared instructor answers; the instructor answers,
    # without markers, are the book's answers
    by_id = {
        c["metadata"]["nbgrader"]["grade_id"]: c
        for c in instructor["cells"]
        if "nbgrader" in c["metadata"]
    }
    for cell in student["cells"]:
        meta = cell["metadata"].get("nbgrader")
        if not meta:
            continue
        master = text(by_id[meta["grade_id"]])
        if meta["grade_id"].endswith("-written"):
            assert text(cell) == WRITTEN_STUB and master != WRITTEN_STUB
        elif meta["solution"]:
            assert text(cell) == clear_solutions(master)
            assert STUB[1] in text(cell)
        else:
            assert meta["grade"] and meta["locked"] and meta["points"] == 1
            assert (
                master == f"{text(cell)}\n### BEGIN HIDDEN TESTS\n"
                f"{text(cell)[:-1]}, strict=True)\n### END HIDDEN TESTS"
            )
    answers = [text(book["cells"][i]) for ex in exercises for i in ex.answers]
    unmarked = [
        "\n".join(ln for ln in text(c).splitlines() if ln.strip() not in (BEGIN, END))
        for c in instructor["cells"]
        if c["metadata"].get("nbgrader", {}).get("grade_id", "").count("-answer")
    ]
    assert unmarked == answers


def test_command_line(tmp_path, capsys):
    assert assign.main(["12", "--out", str(tmp_path), "--book", str(ROOT)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"assignment ch12: 1 chapter\(s\), \d+ exercises", out)
    assert "12_softmax_cross_entropy.ipynb: exercises 12.1" in out
    assert assign.main(["99", "--out", str(tmp_path), "--book", str(ROOT)]) == 2
    assert "no chapter [99]" in capsys.readouterr().err
    assert assign.main(["12", "--out", str(tmp_path), "--book", str(tmp_path)]) == 2
    assert "no chapters/ folder" in capsys.readouterr().err
    assert (
        assign.main(["12", "--name", "bad name", "--out", str(tmp_path), "--book", str(ROOT)]) == 2
    )


def test_python_dash_m_runs_cleanly(tmp_path):
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "mlbook.teaching.assign", "12", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.startswith("assignment ch12: 1 chapter(s)")
