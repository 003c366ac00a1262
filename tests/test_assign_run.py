"""The assignments work when run: in every chapter's student version the stubs are used only by
their checks (no other cell uses them), each check prints "not attempted", the instructor's
solutions are the chapter's answer cells, and nbgrader grades a submission with the bundle.

The student version runs through its setup cell and its exercise cells only, in this process:
the other cells are the book's own, which the notebook tests (nbval) execute; that none of them
uses an answer function is checked on their code. That the reference answers pass their checks
is tested once, in tests/test_exercises.py. nbgrader grades, in a kernel, a chapter cut down to
its setup and exercises."""

import ast
import contextlib
import copy
import io
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from exercise_support import ROOT

from mlbook.teaching import assign
from mlbook.teaching.assign import BEGIN, END

CHAPTERS = sorted((ROOT / "chapters").glob("[0-9]*.ipynb"))


def text(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def unmarked(source):
    return "\n".join(ln for ln in source.splitlines() if ln.strip() not in (BEGIN, END))


def no_magics(source):
    return re.sub(r"(?m)^(\s*)[%!].*$", r"\1pass", source)


def names_read_and_bound(source):
    """The names a code cell reads without binding them itself, and those it binds."""
    bound, used = set(), set()
    for node in ast.walk(ast.parse(no_magics(source))):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return used - bound, bound


def run(source, namespace, where):
    """Execute a cell's code in ``namespace``; what it prints (nothing on stderr, no warning)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            exec(compile(no_magics(source), where, "exec"), namespace)  # noqa: S102
    assert not err.getvalue() and not caught, (where, err.getvalue(), [str(w) for w in caught])
    return out.getvalue()


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_student_version_runs_and_its_solutions_are_the_chapters(tmp_path, path):
    number = int(path.name.split("_")[0])
    assign.build_assignment(ROOT, [number], tmp_path)
    nb = json.loads((tmp_path / "student" / path.name).read_text(encoding="utf-8"))
    master = json.loads((tmp_path / "instructor" / path.name).read_text(encoding="utf-8"))
    solutions = [
        unmarked(text(c))
        for c in master["cells"]
        if c["metadata"].get("nbgrader", {}).get("solution") and c["cell_type"] == "code"
    ]
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    graded = [c for c in code if "nbgrader" in c["metadata"]]
    is_graded = {id(c) for c in graded}
    stubs = set()  # the answer functions whose stub is the current definition
    for cell in code:
        if id(cell) in is_graded:
            if cell["metadata"]["nbgrader"]["solution"]:
                stubs |= {f.name for f in ast.parse(text(cell)).body}
            continue
        used, bound = names_read_and_bound(text(cell))
        assert not used & stubs, f"{path.name}: a cell outside the exercises uses {used & stubs}"
        stubs -= bound
    namespace = {"__name__": "__main__"}
    run(assign.setup_source(nb), namespace, f"{path.name}:setup")
    checks = []
    for cell in graded:
        meta = cell["metadata"]["nbgrader"]
        printed = run(text(cell), namespace, f"{path.name}:{meta['grade_id']}")
        if meta["grade"]:
            checks.append(cell)
            eid = meta["grade_id"][3:-6].replace("-", ".")
            assert printed.startswith(f"○ exercise {eid} — not attempted yet: "), printed
            assert "NotImplementedError" in printed
    assert checks, f"{path.name}: no check cells"
    chapter = json.loads(path.read_text(encoding="utf-8"))
    answers = [
        text(chapter["cells"][i]).strip()
        for ex in assign.find_exercises(chapter, path.name)
        for i in ex.answers
    ]
    assert [s.strip() for s in solutions] == answers, "the instructor's solutions differ"


def setup_and_exercises(path, folder):
    """A copy of a chapter notebook in ``folder``/chapters cut down to its setup cell, its
    exercises and the markdown: what nbgrader grades, without the chapter's computations."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    keep = {next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")}
    for ex in assign.find_exercises(nb, path.name):
        keep |= {ex.task, ex.solution, ex.end, ex.check, *ex.answers}
    nb["cells"] = [
        c for i, c in enumerate(nb["cells"]) if i in keep or c["cell_type"] == "markdown"
    ]
    (folder / "chapters").mkdir(parents=True, exist_ok=True)
    (folder / "chapters" / path.name).write_text(json.dumps(nb), encoding="utf-8")


def nbgrader(*args, cwd):
    # nbgrader runs its database migrations with the `alembic` command: put the environment's
    # scripts on PATH, as an activated virtual environment would
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def submission(release, source, name, edit=lambda grade_id, code: code):
    """A copy of the released notebook with the answers restored (and edited by ``edit``)."""
    nb = copy.deepcopy(release)
    master = {
        c["metadata"]["nbgrader"]["grade_id"]: unmarked(text(c))
        for c in source["cells"]
        if "nbgrader" in c["metadata"]
    }
    for cell in nb["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id", "")
        if "-answer" in grade_id:
            cell["source"] = edit(grade_id, master[grade_id])
    return nb


def test_nbgrader_grades_submissions_with_the_bundle(tmp_path):
    pytest.importorskip("nbgrader", reason="nbgrader grades assignments (requirements.txt)")
    from nbgrader.api import Gradebook

    chapters = [p for p in CHAPTERS if p.name.startswith("12_")]
    for path in chapters:
        setup_and_exercises(path, tmp_path / "book")
    assign.build_assignment(tmp_path / "book", [12], tmp_path, name="hw1")
    course = tmp_path / "autograder"
    nbgrader("generate_assignment", "hw1", cwd=course)
    for path in chapters:
        release = json.loads((course / "release" / "hw1" / path.name).read_text(encoding="utf-8"))
        ours = json.loads((tmp_path / "student" / path.name).read_text(encoding="utf-8"))
        assert [text(c) for c in release["cells"]] == [text(c) for c in ours["cells"]], (
            "nbgrader's release differs from mlbook.teaching.assign's student notebook"
        )
        source = json.loads((course / "source" / "hw1" / path.name).read_text(encoding="utf-8"))

        def partial(grade_id, code):
            if grade_id == "ex-12-1-answer":
                return code.split("    beta")[0] + "    raise NotImplementedError()"
            if grade_id == "ex-12-3-answer":  # a typical mistake: the transposed Jacobian
                return code.replace("p[None, :]", "p[:, None]")
            return code

        for student, edit in (("full", lambda g, c: c), ("partial", partial)):
            folder = course / "submitted" / student / "hw1"
            folder.mkdir(parents=True, exist_ok=True)
            nb = submission(release, source, student, edit)
            (folder / path.name).write_text(json.dumps(nb), encoding="utf-8")
    nbgrader("autograde", "hw1", cwd=course)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for path in chapters:
            n = len(assign.find_exercises(json.loads(path.read_text(encoding="utf-8"))))
            full = gb.find_submission_notebook(path.stem, "hw1", "full")
            assert (full.code_score, full.max_code_score) == (n, n)
            part = gb.find_submission_notebook(path.stem, "hw1", "partial")
            lost = {g.name for g in part.grades if g.cell.cell_type == "code" and g.score == 0}
            assert lost == {"ex-12-1-check", "ex-12-3-check"}
            assert part.max_score == 2 * n  # plus one written answer per exercise, by hand
    shutil.rmtree(course / "autograded", ignore_errors=True)
