"""Turn chapters of the book into an assignment: student and instructor notebooks, an autograder.

    python -m mlbook.teaching.assign 12 19 --out DIR

run from the root of the book (the folder with ``chapters/``), writes

    DIR/student/12_softmax_cross_entropy.ipynb     solutions removed, stubs, checks kept
    DIR/instructor/12_softmax_cross_entropy.ipynb  solutions kept (nbgrader source notebooks)
    DIR/autograder/                                an nbgrader course: nbgrader_config.py,
                                                   source/<name>/*.ipynb, README.md
    DIR/README.md                                  what is where and how to grade

**The exercise layout** that every chapter follows (the book's tests enforce it):

    markdown  :::{exercise} N.k · Tier, :label: ex-N-k, :nonumber:  the task; names the functions
              to write; Tier is one of TIERS (predict-then-run, implement the core, derive, explore)
    markdown  ```{solution-start} ex-N-k``` + derivation   the written solution
    code      answer cell(s): only top-level ``def``s, each with a docstring
    markdown  ```{solution-end}```
    code      check_exercise("N.k", f, ...)                kept in the student version

**Student notebooks**: outputs cleared; each answer function keeps its signature and docstring and
its body becomes ``# YOUR CODE HERE`` / ``raise NotImplementedError()`` (exactly what nbgrader's
``generate_assignment`` writes); the written solution becomes a "YOUR ANSWER HERE" cell; the
exercise directives become plain headings (Jupyter and Colab do not render MyST directives); the
Colab badge points at the student copy (``--repo``, ``--branch``, ``--path`` say where the
instructor will publish it).

**Instructor notebooks** are nbgrader *source* notebooks: the same cells with the solutions in
place between ``### BEGIN SOLUTION`` / ``### END SOLUTION``, the nbgrader cell metadata (answer
cells, a manually graded written answer and an autograded check per exercise, one point each)
and a hidden test ``check_exercise(..., strict=True)`` in every check cell, which raises when the
answer is wrong. nbgrader is not needed to build an assignment, only to grade one.

Everything here is a pure function of the notebooks' JSON; malformed chapters raise
``ValueError`` naming the file, the exercise and what is wrong.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "TIERS",
    "ExerciseCells",
    "find_exercises",
    "mark_solutions",
    "clear_solutions",
    "student_notebook",
    "instructor_notebook",
    "colab_badge",
    "setup_source",
    "load_answers",
    "build_assignment",
    "main",
]

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
WRITTEN_STUB = "YOUR ANSWER HERE"
#: The kinds of exercise, in the order a chapter usually poses them: commit to a guess and run
#: the cell that reveals it; write the chapter's core algorithm; derive a result; an open-ended
#: experiment. Every chapter has at least one Predict, one Implement and one Explore.
TIERS = ("Predict", "Implement", "Derive", "Explore")
_PART = r"(\d+|[A-Z])"  # a chapter number, or an appendix letter ("A.1")
_EXERCISE_RE = re.compile(
    r"^:::\{exercise\} " + _PART + r"\.(\d+)(?: · (" + "|".join(TIERS) + r"))?\n"
    r":label: ex-" + _PART + r"-(\d+)\n:nonumber:\n"
    r"(.*?)\n:::\s*$",
    re.S,
)
_SOL_START_RE = re.compile(
    r"^```\{solution-start\}\s+ex-" + _PART + r"-(\d+)\s*\n:class: dropdown\s*\n```"
    r"\s*\n(.*)$",
    re.S,
)
_SOL_END_RE = re.compile(r"^```\{solution-end\}\s*\n```\s*$")
_CHECK_RE = re.compile(r'^check_exercise\("((?:\d+|[A-Z])\.\d+)"((?:,\s*[A-Za-z_]\w*)+)\)\s*$')
_CHAPTER_FILE_RE = re.compile(r"^(\d{2,})_[a-z0-9_]+\.ipynb$")
_BADGE_RE = re.compile(r"^\[!\[Open In Colab\]\(.*$", re.M)


def _eid(part: str, k: str) -> str:
    """The exercise id "N.k" (or "A.k" in an appendix) from a directive's two numbers."""
    return f"{part if part.isalpha() else int(part)}.{int(k)}"


def _text(cell) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


@dataclass(frozen=True)
class ExerciseCells:
    """Where one exercise lives in a notebook's cell list (indices into ``nb["cells"]``).

    Attributes:
        id: ``"N.k"``.
        task: the ``:::{exercise}`` markdown cell.
        solution: the ``{solution-start}`` markdown cell (the written solution follows the fence).
        answers: the answer code cells (only ``def``s).
        end: the ``{solution-end}`` markdown cell.
        check: the ``check_exercise`` code cell.
        functions: the names the answer cells define, in order.
        tier: one of ``TIERS``, or None where the title names none.
    """

    id: str
    task: int
    solution: int
    answers: tuple[int, ...]
    end: int
    check: int
    functions: tuple[str, ...]
    tier: str | None = None


def _answer_functions(source: str, where: str) -> list[ast.FunctionDef]:
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise ValueError(f"{where}: the answer cell is not valid Python ({err.msg})") from None
    defs = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            raise ValueError(
                f"{where}: an answer cell holds only function definitions, found "
                f"{type(node).__name__} on line {node.lineno}"
            )
        if ast.get_docstring(node) is None:
            raise ValueError(f"{where}: `{node.name}` needs a docstring (it is the student's spec)")
        defs.append(node)
    if not defs:
        raise ValueError(f"{where}: the answer cell defines no function")
    return defs


def find_exercises(nb: dict, where: str = "notebook") -> list[ExerciseCells]:
    """Locate every exercise of a chapter notebook and check that it follows the layout above."""
    cells = nb.get("cells")
    if not isinstance(cells, list):
        raise ValueError(f"{where}: not a notebook (no cell list)")
    found = []
    for i, cell in enumerate(cells):
        is_task = _text(cell).lstrip().startswith(":::{exercise}")
        if cell.get("cell_type") != "markdown" or not is_task:
            continue
        m = _EXERCISE_RE.match(_text(cell).strip())
        if not m or m.group(1, 2) != m.group(4, 5):
            raise ValueError(
                f"{where}: cell {i} must hold exactly one exercise directive that "
                f"opens ':::{{exercise}} N.k · Tier', ':label: ex-N-k', ':nonumber:' "
                f"(Tier one of {', '.join(TIERS)})"
            )
        eid = _eid(m.group(1), m.group(2))
        here = f"{where}, exercise {eid}"
        j = i + 1
        if j >= len(cells) or cells[j]["cell_type"] != "markdown":
            raise ValueError(f"{here}: the task must be followed by a solution-start cell")
        s = _SOL_START_RE.match(_text(cells[j]).strip())
        if not s or _eid(s.group(1), s.group(2)) != eid:
            raise ValueError(
                f"{here}: cell {j} must open with ```{{solution-start}} "
                f"ex-{eid.replace('.', '-')}``` and ':class: dropdown'"
            )
        if not s.group(3).strip():
            raise ValueError(f"{here}: the solution needs a written derivation after the fence")
        k, answers, names = j + 1, [], []
        while k < len(cells) and cells[k]["cell_type"] == "code":
            names += [f.name for f in _answer_functions(_text(cells[k]), f"{here}, cell {k}")]
            answers.append(k)
            k += 1
        if not answers:
            raise ValueError(f"{here}: the solution needs at least one answer code cell")
        if k >= len(cells) or not _SOL_END_RE.match(_text(cells[k]).strip()):
            raise ValueError(
                f"{here}: the answer cells must be followed by a cell that holds "
                f"only ```{{solution-end}}```"
            )
        c = k + 1
        chk = (
            _CHECK_RE.match(_text(cells[c]).strip())
            if c < len(cells) and cells[c]["cell_type"] == "code"
            else None
        )
        if not chk or chk.group(1) != eid:
            raise ValueError(
                f"{here}: the solution must be followed by a cell that holds only "
                f'check_exercise("{eid}", <answer functions>)'
            )
        checked = tuple(a.strip() for a in chk.group(2).split(",") if a.strip())
        if not set(checked) <= set(names):
            raise ValueError(
                f"{here}: check_exercise names {checked}, the answer cells define {tuple(names)}"
            )
        found.append(ExerciseCells(eid, i, j, tuple(answers), k, c, tuple(names), m.group(3)))
    ids = [e.id for e in found]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{where}: exercise ids repeat: {ids}")
    return found


def _function_bodies(source: str) -> list[tuple[int, int, str]]:
    """(first body line, last line, indentation) of each top-level function, 0-based lines,
    the body counted after the docstring."""
    spans = []
    lines = source.splitlines()
    for fn in ast.parse(source).body:
        body = fn.body[1:]  # the docstring is kept
        if not body:
            raise ValueError(f"`{fn.name}` has only a docstring: nothing to turn into a stub")
        first, last = body[0].lineno - 1, fn.end_lineno - 1
        # comments just above the first statement belong to the solution too
        while first - 1 > fn.body[0].end_lineno - 1 and lines[first - 1].strip().startswith("#"):
            first -= 1
        indent = re.match(r"\s*", lines[body[0].lineno - 1]).group(0)
        spans.append((first, last, indent))
    return spans


def mark_solutions(source: str) -> str:
    """Wrap the body of every top-level function (after its docstring) in nbgrader's
    ``### BEGIN SOLUTION`` / ``### END SOLUTION`` markers."""
    lines = source.splitlines()
    for first, last, indent in reversed(_function_bodies(source)):
        lines[last + 1 : last + 1] = [indent + END]
        lines[first:first] = [indent + BEGIN]
    return "\n".join(lines)


def clear_solutions(source: str) -> str:
    """Replace each marked solution region by the stub, as nbgrader's ``ClearSolutions`` does:
    ``# YOUR CODE HERE`` and ``raise NotImplementedError()`` at the marker's indentation."""
    out, inside = [], False
    for line in source.splitlines():
        if line.strip() == BEGIN:
            if inside:
                raise ValueError("nested ### BEGIN SOLUTION")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out += [indent + STUB[0], indent + STUB[1]]
        elif line.strip() == END:
            if not inside:
                raise ValueError("### END SOLUTION without ### BEGIN SOLUTION")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError("### BEGIN SOLUTION without ### END SOLUTION")
    return "\n".join(out)


def _heading(task_text: str, eid: str) -> str:
    m = _EXERCISE_RE.match(task_text.strip())
    tier = f" · {m.group(3)}" if m.group(3) else ""
    return f"**Exercise {eid}{tier}.**\n\n{m.group(6).strip()}"


def _written_solution(solution_text: str) -> str:
    return _SOL_START_RE.match(solution_text.strip()).group(3).strip()


def _code(source: str, metadata: dict | None = None) -> dict:
    return {
        "cell_type": "code",
        "metadata": metadata or {},
        "source": source,
        "outputs": [],
        "execution_count": None,
    }


def _markdown(source: str, metadata: dict | None = None) -> dict:
    return {"cell_type": "markdown", "metadata": metadata or {}, "source": source}


def _nbgrader(
    grade_id: str, *, solution: bool, grade: bool, locked: bool, points: int | None = None
) -> dict:
    meta = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": 3,
        "solution": solution,
        "task": False,
    }
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def _assignment_cells(nb: dict, where: str, *, student: bool) -> list[dict]:
    """The cells of the student or instructor version (before badge and output handling)."""
    cells = nb["cells"]
    exercises = find_exercises(nb, where)
    by_cell = {}
    for ex in exercises:
        for idx in (ex.task, ex.solution, ex.end, ex.check, *ex.answers):
            by_cell[idx] = ex
    out = []
    for i, cell in enumerate(cells):
        ex = by_cell.get(i)
        if ex is None:
            new = copy.deepcopy(cell)
            new["metadata"] = {k: v for k, v in new.get("metadata", {}).items() if k != "nbgrader"}
            out.append(new)
            continue
        slug = "ex-" + ex.id.replace(".", "-")
        if i == ex.task:
            out.append(_markdown(_heading(_text(cell), ex.id)))
        elif i == ex.solution:
            written = WRITTEN_STUB if student else _written_solution(_text(cell))
            out.append(
                _markdown(
                    written,
                    _nbgrader(f"{slug}-written", solution=True, grade=True, locked=False, points=1),
                )
            )
        elif i in ex.answers:
            marked = mark_solutions(_text(cell))
            k = ex.answers.index(i)
            out.append(
                _code(
                    clear_solutions(marked) if student else marked,
                    _nbgrader(
                        f"{slug}-answer" + (f"-{k + 1}" if k else ""),
                        solution=True,
                        grade=False,
                        locked=False,
                    ),
                )
            )
        elif i == ex.end:
            continue
        elif i == ex.check:
            visible = _text(cell).strip()
            hidden = visible[:-1] + ", strict=True)"
            source = visible if student else f"{visible}\n{BEGIN_HIDDEN}\n{hidden}\n{END_HIDDEN}"
            out.append(
                _code(
                    source,
                    _nbgrader(f"{slug}-check", solution=False, grade=True, locked=True, points=1),
                )
            )
    return out


def _notebook(nb: dict, cells: list[dict], *, keep_outputs: bool) -> dict:
    new = {k: copy.deepcopy(v) for k, v in nb.items() if k != "cells"}
    new["cells"] = []
    for n, cell in enumerate(cells):
        cell = copy.deepcopy(cell)
        cell["id"] = f"cell-{n:03d}"
        if cell["cell_type"] == "code" and not keep_outputs:
            cell["outputs"], cell["execution_count"] = [], None
        new["cells"].append(cell)
    new["nbformat"], new["nbformat_minor"] = 4, max(5, int(nb.get("nbformat_minor", 5)))
    return new


def colab_badge(url_path: str, repo: str, branch: str) -> str:
    """The Colab badge line for a notebook at ``url_path`` in GitHub repository ``repo``."""
    return (
        "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"(https://colab.research.google.com/github/{repo}/blob/{branch}/{url_path})"
    )


def _with_badge(cells: list[dict], badge: str | None) -> list[dict]:
    if badge is None or not cells or cells[0]["cell_type"] != "markdown":
        return cells
    first = _text(cells[0])
    if _BADGE_RE.search(first):
        cells[0]["source"] = _BADGE_RE.sub(lambda m: badge, first)
    return cells


def student_notebook(nb: dict, where: str = "notebook", badge: str | None = None) -> dict:
    """The student version of a chapter notebook (see the module docstring); outputs cleared."""
    cells = _with_badge(_assignment_cells(nb, where, student=True), badge)
    return _notebook(nb, cells, keep_outputs=False)


def instructor_notebook(nb: dict, where: str = "notebook") -> dict:
    """The instructor version: an nbgrader source notebook with the solutions and the outputs."""
    return _notebook(nb, _assignment_cells(nb, where, student=False), keep_outputs=True)


def setup_source(nb: dict) -> str:
    """The chapter's first code cell with IPython magics turned into ``pass``."""
    code = next((c for c in nb["cells"] if c["cell_type"] == "code"), None)
    if code is None:
        return ""
    return "\n".join(re.sub(r"^(\s*)[%!].*$", r"\1pass", line) for line in _text(code).splitlines())


def load_answers(path: str | Path, eid: str) -> dict:
    """The reference answer functions of exercise ``eid`` from a chapter notebook, by name.

    Runs the chapter's setup cell (its imports) and the exercise's answer cells in a fresh
    namespace; used by the tests of the checks and to grade a single exercise by hand.
    """
    path = Path(path)
    nb = json.loads(path.read_text(encoding="utf-8"))
    ex = {e.id: e for e in find_exercises(nb, str(path))}.get(eid)
    if ex is None:
        raise ValueError(f"{path}: no exercise {eid}")
    namespace: dict = {"__name__": f"answers_{eid.replace('.', '_')}"}
    exec(compile(setup_source(nb), f"{path.name}:setup", "exec"), namespace)  # noqa: S102
    for idx in ex.answers:
        exec(compile(_text(nb["cells"][idx]), f"{path.name}:cell{idx}", "exec"), namespace)  # noqa: S102
    return {name: namespace[name] for name in ex.functions}


# --------------------------------------------------------------------------- the command

_CONFIG_TEMPLATE = """\
# nbgrader configuration of this assignment, written by `python -m mlbook.teaching.assign`.
import os

c = get_config()  # noqa: F821
c.CourseDirectory.course_id = {course!r}
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))  # noqa: F821
c.ClearSolutions.code_stub = {{"python": "# YOUR CODE HERE\\nraise NotImplementedError()"}}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
c.ExecutePreprocessor.timeout = 300
"""


def _book_repository(root: Path) -> tuple[str, str]:
    config = root / "_config.yml"
    text = config.read_text(encoding="utf-8") if config.exists() else ""
    url = re.search(r"^\s*url:\s*https://github\.com/([\w.-]+/[\w.-]+?)/?\s*$", text, re.M)
    branch = re.search(r"^\s*branch:\s*([\w./-]+)\s*$", text, re.M)
    return (url.group(1) if url else "OWNER/REPOSITORY"), (branch.group(1) if branch else "main")


def _chapter_files(root: Path, chapters: Sequence[int]) -> list[Path]:
    folder = root / "chapters"
    if not folder.is_dir():
        raise ValueError(f"{root}: no chapters/ folder; run from the book's root or pass --book")
    by_number = {}
    for p in folder.glob("*.ipynb"):
        m = _CHAPTER_FILE_RE.match(p.name)
        if m:
            by_number[int(m.group(1))] = p
    missing = [c for c in chapters if c not in by_number]
    if missing:
        have = ", ".join(str(n) for n in sorted(by_number))
        raise ValueError(f"no chapter {missing} in {folder} (the book has {have})")
    return [by_number[c] for c in chapters]


def build_assignment(
    root: str | Path,
    chapters: Sequence[int],
    out: str | Path,
    *,
    name: str | None = None,
    repo: str | None = None,
    branch: str | None = None,
    path: str | None = None,
) -> dict:
    """Write the student, instructor and autograder folders for ``chapters`` under ``out``.

    Returns a summary: the assignment name, the exercises per chapter, the files written.
    """
    root, out = Path(root), Path(out)
    chapters = list(dict.fromkeys(int(c) for c in chapters))
    if not chapters:
        raise ValueError("name at least one chapter, e.g. `python -m mlbook.teaching.assign 12 19`")
    name = name or "ch" + "-".join(str(c) for c in chapters)
    if not re.fullmatch(r"[A-Za-z0-9][\w-]*", name):
        raise ValueError(f"an assignment name uses letters, digits, '-' and '_', got {name!r}")
    default_repo, default_branch = _book_repository(root)
    repo, branch = repo or default_repo, branch or default_branch
    path = (path if path is not None else f"assignments/{name}").strip("/")
    files = _chapter_files(root, chapters)
    student_dir, instructor_dir = out / "student", out / "instructor"
    grader_dir = out / "autograder"
    source_dir = grader_dir / "source" / name
    for d in (student_dir, instructor_dir, source_dir):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    summary = {"name": name, "chapters": {}, "files": []}
    for f in files:
        nb = json.loads(f.read_text(encoding="utf-8"))
        where = f"chapters/{f.name}"
        exercises = find_exercises(nb, where)
        if not exercises:
            raise ValueError(f"{where} has no exercises to assign")
        url_path = f"{path}/student/{f.name}" if path else f"student/{f.name}"
        student_badge = colab_badge(url_path, repo, branch)
        student = student_notebook(nb, where, student_badge)
        instructor = instructor_notebook(nb, where)
        # nbgrader releases the source notebooks to students: they carry the student badge
        source = _notebook(
            instructor,
            _with_badge(copy.deepcopy(instructor["cells"]), student_badge),
            keep_outputs=True,
        )
        for target, book in (
            (student_dir / f.name, student),
            (instructor_dir / f.name, instructor),
            (source_dir / f.name, source),
        ):
            target.write_text(
                json.dumps(book, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
            )
            summary["files"].append(str(target))
        summary["chapters"][f.name] = [e.id for e in exercises]
    (grader_dir / "nbgrader_config.py").write_text(
        _CONFIG_TEMPLATE.format(course=name, name=name), encoding="utf-8"
    )
    readme = _readme(name, summary["chapters"], repo, branch, path)
    (out / "README.md").write_text(readme, encoding="utf-8")
    shutil.copy(out / "README.md", grader_dir / "README.md")
    summary["files"] += [
        str(grader_dir / "nbgrader_config.py"),
        str(out / "README.md"),
        str(grader_dir / "README.md"),
    ]
    return summary


_README = """\
# Assignment `{name}`

| notebook | exercises | points |
|---|---|---:|
{rows}

Each exercise is worth 2 points: 1 for the autograded check of the code, 1 for the written
derivation, graded by hand. Total: {total} points.

- `student/`: give these to students. Their Colab badges point at
  `https://github.com/{repo}/tree/{branch}/{path}student`: publish them there.
  Each answer function raises `NotImplementedError` until it is written; the check cell under
  it prints ✓, ✗ with what is wrong, or ○ (not attempted).
- `instructor/`: the same notebooks with the solutions and their outputs.
- `autograder/`: an nbgrader course directory (`pip install nbgrader`).

The book's website shows every reference solution, folded. Weigh that when you grade: the
autograded point says that the function works, the written derivation graded by hand says
whether the student understood why.

## Grading with nbgrader

    cd autograder
    nbgrader generate_assignment {name}   # release/{name}/ = the student notebooks
    # put each submission at submitted/<student id>/{name}/<notebook>.ipynb, then
    nbgrader autograde {name}             # runs the hidden strict checks
    nbgrader formgrade                    # or the formgrader in Jupyter: the written answers
    nbgrader export                       # grades.csv

The hidden test under each check cell calls `check_exercise(..., strict=True)`, which raises
unless the answer passes, so nbgrader gives the point only to a correct function. The
notebooks need the book's package (`mlbook`) where they run; on Colab their first code cell
installs it.
"""


def _readme(name: str, chapters: dict, repo: str, branch: str, path: str) -> str:
    rows = "\n".join(
        f"| `{f}` | {', '.join(ids)} | {2 * len(ids)} |" for f, ids in chapters.items()
    )
    total = sum(2 * len(ids) for ids in chapters.values())
    return _README.format(
        name=name, rows=rows, total=total, repo=repo, branch=branch, path=f"{path}/" if path else ""
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: ``python -m mlbook.teaching.assign CHAPTER [CHAPTER ...] --out DIR``."""
    ap = argparse.ArgumentParser(
        prog="python -m mlbook.teaching.assign",
        description="Turn chapters of the book into an assignment.",
    )
    ap.add_argument("chapters", nargs="+", type=int, help="chapter numbers, e.g. 12 19")
    ap.add_argument("--out", required=True, type=Path, help="folder to write the assignment to")
    ap.add_argument("--name", help="assignment name (default: ch12-19)")
    ap.add_argument("--book", type=Path, default=Path("."), help="the book's root folder")
    ap.add_argument("--repo", help="GitHub OWNER/NAME where the student copies will be published")
    ap.add_argument("--branch", help="branch of --repo (default: the book's branch)")
    ap.add_argument(
        "--path", help="folder in --repo for this assignment (default: assignments/NAME)"
    )
    args = ap.parse_args(argv)
    try:
        summary = build_assignment(
            args.book,
            args.chapters,
            args.out,
            name=args.name,
            repo=args.repo,
            branch=args.branch,
            path=args.path,
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    n = sum(len(ids) for ids in summary["chapters"].values())
    print(f"assignment {summary['name']}: {len(summary['chapters'])} chapter(s), {n} exercises")
    for f, ids in summary["chapters"].items():
        print(f"  {f}: exercises {', '.join(ids)}")
    print(
        f"wrote {args.out}/student, {args.out}/instructor, {args.out}/autograder "
        f"({len(summary['files'])} files); see {args.out}/README.md"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
