"""Structural tests of the book against BOOK_STANDARD.md: the toc, every notebook, Appendix E.

These read the notebooks as committed and execute nothing (nbval re-executes them separately).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import booktools  # noqa: E402
import make_formula_index  # noqa: E402
import make_students  # noqa: E402
import reading_time  # noqa: E402
import sync_colab  # noqa: E402

from mlbook.teaching.assign import find_exercises  # noqa: E402

IGNORE_RE = re.compile(r"^\s*#+\s*NBVAL_IGNORE_OUTPUT\s*$", re.M)  # exactly as nbval reads it
IMPORT_RE = re.compile(r"^\s*(from\s+mlbook[\s.]|import\s+mlbook\b)", re.M)
CHECK_RE = re.compile(r"\bcheck_\w+\s*\(|\bassert\b|gradcheck\s*\(")
EXERCISE_RE = re.compile(r":::\s*\{exercise\}[^\n]*\n:label:\s*(\S+)")
LABEL_RE = re.compile(r"\$\$\s*\((eq-[0-9A-Ca-c]+-\d+)\)")
FLOAT_RE = re.compile(r"(?<![\w.])-?(\d+)\.(\d+)(?:e[-+]?\d+)?")
# Prose that speaks of a document the reader does not have ("the sheet says", "the essay").
UNSEEN_RE = re.compile(
    r"\bthe\s+(?:formula\s+)?sheet'?s?\b|\bthe\s+essay\b|\bessay'?s\b|\bsource\s+essay\b"
    r"|\bof\s+the\s+source\b|\bthe\s+source\s+(?:claims|says|writes|uses)\b",
    re.I,
)
INLINE_CHECK_RE = re.compile(r"\bcheck_(?!exercise\b)\w+\s*\(")
ANY_CHECK_RE = re.compile(r"\bcheck_\w+\s*\(")
FOLDED = ("hide-", "remove-")  # cell tags that fold a cell on the site
CORE_LINES = 15  # the editable core a reader writes: at most this many lines of code
MAX_DIGITS = 7  # printed numbers are rounded (about 4 significant digits); a raw float has 16
# Parts of the toc and the sheet chapters they hold (issue: parts mirror the formula sheets).
PARTS = {
    "Foundations (6–8)": range(6, 9),
    "Learning and networks (9–16)": range(9, 17),
    "Language models and attention (17–26)": range(17, 27),
    "Architectures (27–32)": range(27, 33),
    "Post-training (33–38)": range(33, 39),
    "Inference, systems and agents (39–44)": range(39, 45),
    "Beyond the sheets (45–51)": range(45, 52),
    "Appendices": None,
    "For instructors": None,
}
GUIDE_PAGES = {"instructors"}  # executed pages at the root that are not chapters (no sheet key)

NOTEBOOKS = booktools.toc_notebooks()
MARKDOWN_PAGES = {"appendix/e_formula_sheets", "appendix/references"}  # pages, not notebooks


def cell_text(cell) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def unrounded_floats(text: str) -> list[str]:
    """Floats printed with more than MAX_DIGITS significant digits (their last bits vary)."""
    found = []
    for m in FLOAT_RE.finditer(text):
        digits = (m.group(1) + m.group(2)).lstrip("0")
        if len(digits) > MAX_DIGITS:
            found.append(m.group(0))
    return found


def notebook_problems(path: Path) -> list[str]:
    """Every way the notebook falls short of the standard (empty list: it complies)."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    problems = []
    key = booktools.sheet_key(path)
    chapter = key is not None  # a guide page (GUIDE_PAGES) skips the chapter-only rules
    cells = nb.cells
    code = [c for c in cells if c.cell_type == "code" and cell_text(c).strip()]
    md = "\n".join(cell_text(c) for c in cells if c.cell_type == "markdown")
    src = "\n".join(cell_text(c) for c in code)

    # Header: "# NN · Title" (appendix: "# A · Title") in the first cell.
    head = key.zfill(2) if key and key.isdigit() else key
    if not chapter:
        if not cells or not cell_text(cells[0]).startswith("# "):
            problems.append("first cell must start with a '# Title' line")
    elif not cells or not cell_text(cells[0]).startswith(f"# {head} · "):
        problems.append(f"first cell must start with '# {head} · Title'")

    # Outputs stored from one real top-to-bottom run.
    counts = [c.execution_count for c in code]
    if any(n is None for n in counts):
        problems.append(f"{sum(n is None for n in counts)} code cells were never executed")
    elif counts != list(range(1, len(code) + 1)):
        problems.append("execution counts are not 1..n in order: not one top-to-bottom run")
    with_out = [c for c in code if c.outputs]
    if not with_out:
        problems.append("no stored outputs (nbval would pass it vacuously)")
    outs = [o for c in code for o in c.outputs]
    if any(o.output_type == "error" for o in outs):
        problems.append("error outputs stored")
    if any(o.output_type == "stream" and o.name == "stderr" for o in outs):
        problems.append("stderr output stored (warnings must be fixed at their cause)")
    for c in with_out:
        if IGNORE_RE.search(cell_text(c)):
            continue
        for o in c.outputs:
            text = (
                o.get("text", "")
                if o.output_type == "stream"
                else o.get("data", {}).get("text/plain", "")
                if o.output_type == "execute_result"
                else ""
            )
            raw = unrounded_floats(text if isinstance(text, str) else "".join(text))
            if raw:
                problems.append(f"unrounded float output {raw[0]} (round printed numbers)")
                break
    ignored = sum(bool(IGNORE_RE.search(cell_text(c))) for c in with_out)
    if ignored > max(1, len(with_out) // 10):
        problems.append(f"{ignored}/{len(with_out)} output cells ignored by nbval (max 1 in 10)")

    # Content.
    if not IMPORT_RE.search(src):
        problems.append("does not import mlbook")
    if not any("image/png" in o.get("data", {}) for o in outs):
        problems.append("no figure")
    if not CHECK_RE.search(src):
        problems.append("no numerical check")
    if not chapter:
        return problems  # no Colab badge, sheet equations or exercises on a guide page
    if "google.colab" not in src:
        problems.append("no Colab setup cell")
    problems += sync_colab.sync(path, write=False)

    # Equations of the sheet, each labelled and cited in the summary.
    ids = booktools.sheet_label_ids().get(key, []) if key else []
    labels = set(LABEL_RE.findall(md))
    missing = [i for i in ids if i not in labels]
    if missing:
        problems.append("missing equation labels " + ", ".join(missing))
    if ids and "## Summary" not in md:
        problems.append("no '## Summary' section")
    summary = md.split("## Summary", 1)[-1]
    uncited = [i for i in ids if f"{{eq}}`{i}`" not in summary]
    if ids and uncited:
        problems.append("summary does not cite " + ", ".join(uncited))

    problems += teaching_problems(nb, path)

    # Exercises: at least three, in the self-checking layout of mlbook.teaching.assign (task, folded
    # written solution, answer cells of functions only, check cell), each check printing a pass.
    if len(EXERCISE_RE.findall(md)) < 3:
        problems.append(f"{len(EXERCISE_RE.findall(md))} exercises (need at least 3)")
    try:
        exercises = find_exercises(json.loads(path.read_text(encoding="utf-8")), path.name)
    except ValueError as err:
        return problems + [str(err)]
    if re.search(r"\{(?:ref|numref)\}`ex-", md):  # a titled, unnumbered exercise shows no number
        problems.append("cite exercises as {ref}`exercise N.k <ex-N-k>`")
    if len(exercises) != len(EXERCISE_RE.findall(md)):
        problems.append("an exercise directive is not in the self-checking layout")
    tiers = {ex.tier for ex in exercises}
    for tier in ("Predict", "Implement", "Explore"):
        if tier not in tiers:
            problems.append(f"no '{tier}' exercise (three tiers: Predict, Implement, Explore)")
    for ex in exercises:
        check = cells[ex.check]
        printed = "".join(o.get("text", "") for o in check.outputs if o.output_type == "stream")
        if not printed.startswith(f"✓ exercise {ex.id} — "):
            problems.append(f"the check of exercise {ex.id} does not print a pass: {printed!r}")
        if any(cells[i].execution_count is None for i in ex.answers):
            problems.append(f"an answer cell of exercise {ex.id} was not executed")
    return problems


def tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def teaching_problems(nb, path: Path) -> list[str]:
    """How the chapter falls short of "How a chapter teaches" (BOOK_STANDARD.md)."""
    problems = []
    cells = nb.cells
    md = "\n".join(cell_text(c) for c in cells if c.cell_type == "markdown")
    unseen = UNSEEN_RE.findall(md)
    if unseen:
        problems.append(f"speaks of a source the reader does not have: {unseen[:3]}")
    # Checks that tell the story: at most two inline per section, the rest in a folded tally.
    section, per_section, total, sections = "(before the first section)", {}, 0, 0
    for c in cells:
        text = cell_text(c)
        if c.cell_type == "markdown":
            for line in text.splitlines():
                if line.startswith("## "):
                    section, sections = line[3:].strip(), sections + 1
        elif c.cell_type == "code" and not any(t.startswith(FOLDED) for t in tags(c)):
            per_section[section] = per_section.get(section, 0) + len(INLINE_CHECK_RE.findall(text))
            total += len(ANY_CHECK_RE.findall(text))
    crowded = {k: v for k, v in per_section.items() if v > 2}
    if crowded:
        problems.append(f"more than two inline checks in sections {crowded} (fold the rest)")
    if total > 2 * max(sections, 1):
        problems.append(f"{total} checks inline in {sections} sections (fold conformance checks)")
    folded = [
        c
        for c in cells
        if c.cell_type == "code"
        and "conformance(" in cell_text(c)
        and tags(c) & {"hide-input", "hide-cell"}
    ]
    if not folded:
        problems.append("no folded cell (tag hide-input) tallying conformance checks")

    # A schematic of the core mechanism, drawn by code; a sentence after every figure.
    def has_figure(c):
        return any("image/png" in o.get("data", {}) for o in c.get("outputs", []))

    if not any(has_figure(c) and "Schematic(" in cell_text(c) for c in cells):
        problems.append("no schematic (viz.Schematic) of the chapter's core mechanism")
    for i, c in enumerate(cells):
        if c.cell_type == "code" and has_figure(c):
            if i + 1 >= len(cells) or cells[i + 1].cell_type != "markdown":
                problems.append(f"figure of cell {i} is not followed by a 'what to see' sentence")
    # The core the reader writes: a short editable cell, checked against the package.
    core = [i for i, c in enumerate(cells) if c.cell_type == "code" and "core" in tags(c)]
    if not core:
        problems.append("no editable core cell (tag 'core')")
    for i in core:
        code_lines = [
            ln
            for ln in cell_text(cells[i]).splitlines()
            if ln.strip() and not ln.strip().startswith("#")
        ]
        if len(code_lines) > CORE_LINES:
            problems.append(f"the core cell {i} has {len(code_lines)} lines (at most {CORE_LINES})")
        after = [c for c in cells[i : i + 3] if c.cell_type == "code"][:2]
        if not any(INLINE_CHECK_RE.search(cell_text(c)) for c in after):
            problems.append(f"the core cell {i} is not checked against the package next to it")
    # Measured reading time in the header.
    problems += reading_time.sync(path, write=False)
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_meets_the_standard(path):
    problems = notebook_problems(path)
    assert not problems, f"{path.relative_to(ROOT)}:\n  - " + "\n  - ".join(problems)


def test_toc_lists_exactly_the_notebooks_that_exist():
    entries = booktools.toc_entries()
    for e in entries:
        assert (ROOT / f"{e}.ipynb").exists() or (ROOT / f"{e}.md").exists(), f"toc lists {e}"
    assert len(entries) == len(set(entries)), "toc lists a file twice"
    on_disk = {
        p.relative_to(ROOT).with_suffix("").as_posix()
        for folder in ("chapters", "appendix")
        for p in (ROOT / folder).glob("*")
        if p.suffix in (".ipynb", ".md")
    }
    assert on_disk <= set(entries), f"not in _toc.yml: {sorted(on_disk - set(entries))}"
    for e in entries[1:]:
        assert booktools.NOTEBOOK_RE.match(e) or e in MARKDOWN_PAGES | GUIDE_PAGES, (
            f"{e}: chapters are chapters/NN_slug, appendices appendix/x_slug"
        )


def test_toc_parts_mirror_the_sheets():
    toc = booktools.toc()
    assert toc["format"] == "jb-book" and toc["root"] == "intro"
    captions = [p["caption"] for p in toc["parts"]]
    assert [c for c in PARTS if c in captions] == captions, f"parts out of order: {captions}"
    for part in toc["parts"]:
        assert part["chapters"], f"part {part['caption']} is empty"
        numbers = []
        for ch in part["chapters"]:
            m = re.match(r"chapters/(\d\d)_", ch["file"])
            if part["caption"] == "For instructors":
                assert ch["file"] in GUIDE_PAGES, ch["file"]
                continue
            if PARTS[part["caption"]] is None:
                assert ch["file"].startswith("appendix/"), ch["file"]
                continue
            assert m and int(m.group(1)) in PARTS[part["caption"]], (
                f"{ch['file']} does not belong to part {part['caption']}"
            )
            numbers.append(int(m.group(1)))
        assert numbers == sorted(numbers), f"chapters of {part['caption']} out of order"


def test_chapter_titles_are_the_sheets_titles():
    """A chapter of the sheets is titled as its sheet ("19 · Scaled Dot-Product Attention"), so
    that the sidebar, Appendix E and the sheets name it alike."""
    titles = {str(ch["number"]): ch["title"] for ch in booktools.sheet()["chapters"]}
    for path in NOTEBOOKS:
        key = booktools.sheet_key(path)
        if key in titles:
            first = next(
                c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"
            )
            heading = next(ln for ln in first.source.splitlines() if ln.startswith("# "))
            number = key.zfill(2) if key.isdigit() else key
            assert heading == f"# {number} · {titles[key]}", f"{path.name}: {heading}"


def test_config_has_the_sheet_macros_and_only_builds_toc_files():
    cfg = booktools.config()
    assert cfg["only_build_toc_files"] is True
    assert cfg["execute"]["execute_notebooks"] == "off"
    macros = cfg["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    assert macros == booktools.sheet()["macros"]
    assert {"sphinx_exercise", "sphinx_togglebutton"} <= set(cfg["sphinx"]["extra_extensions"])


def test_appendix_e_is_up_to_date():
    out = make_formula_index.OUT
    assert out.exists(), "run `make formulas`"
    assert out.read_text(encoding="utf-8") == make_formula_index.render(), "run `make formulas`"


def test_appendix_e_links_every_labelled_equation():
    text = make_formula_index.OUT.read_text(encoding="utf-8")
    for nb in NOTEBOOKS:
        for label in LABEL_RE.findall(
            "\n".join(
                cell_text(c)
                for c in nbformat.read(nb, as_version=4).cells
                if c.cell_type == "markdown"
            )
        ):
            assert f"{{eq}}`{label}`" in text, f"Appendix E does not link {label}"


def test_student_versions_are_up_to_date():
    stale = []
    for path in NOTEBOOKS:
        if path.parent.name != "chapters":
            continue
        rel, text = make_students.render(path)
        target = ROOT / rel
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            stale.append(rel)
    assert not stale, f"run `make students`: out of date {stale}"


def test_unrounded_floats():
    assert unrounded_floats("0.1234 1e-12 2.7755575615628914e-17") == ["2.7755575615628914e-17"]
    assert unrounded_floats("p = 0.000012345 and 123456.7") == []


def test_checker_finds_real_defects(tmp_path):
    """The structural checker itself can fail: break chapter 6 in several ways."""
    src = ROOT / "chapters" / "06_probability.ipynb"
    nb = nbformat.read(src, as_version=4)
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
        elif "(eq-6-3)" in cell_text(c):
            c.source = cell_text(c).replace("(eq-6-3)", "")
    broken = tmp_path / "chapters" / "06_probability.ipynb"
    broken.parent.mkdir()
    nbformat.write(nb, broken)
    orig_root = booktools.ROOT
    booktools.ROOT = tmp_path
    try:
        (tmp_path / "_config.yml").write_text((ROOT / "_config.yml").read_text())
        problems = notebook_problems(broken)
    finally:
        booktools.ROOT = orig_root
    text = "\n".join(problems)
    for expected in (
        "never executed",
        "no stored outputs",
        "no figure",
        "eq-6-3",
        "the check of exercise 6.1 does not print a pass",
        "an answer cell of exercise 6.1 was not executed",
    ):
        assert expected in text, f"checker missed: {expected}\n{text}"
