"""Tests of mlbook.teaching.curriculum on small synthetic chapter notebooks written to tmp_path."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import nbformat
import pytest

from mlbook.teaching import curriculum as cu

ROOT = Path(__file__).resolve().parent.parent


def header(n: int, title: str, prereq: str, time: str | None = "60 minutes to read.") -> str:
    lines = [f"# {n:02d} · {title}", "", "Why it matters.", "", f"**Prerequisites**: {prereq}"]
    if time is not None:
        lines.append(f"**Estimated time**: {time}")
    return "\n".join(lines)


def write(folder: Path, name: str, head: str, body: list[str] = (), code: str = "x = 1"):
    cells = [nbformat.v4.new_markdown_cell(head), nbformat.v4.new_code_cell(code)]
    cells += [nbformat.v4.new_markdown_cell(text) for text in body]
    path = folder / name
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    return path


EX = ":::{{exercise}}\n:label: ex-{n}-{k}\n\nDo it.\n:::\n"
EQ = "$$\na = b\n$$ (eq-{n}-{k})\n"


@pytest.fixture
def book(tmp_path):
    """Chapters 1 <- 2 <- 3, 1 <- 3 (redundant), 1 <- 4; 5 stands alone."""
    write(
        tmp_path,
        "01_one.ipynb",
        header(1, "One", "nothing earlier."),
        [EQ.format(n=1, k=1), EQ.format(n=1, k=2), EX.format(n=1, k=1)],
    )
    write(
        tmp_path,
        "02_two.ipynb",
        header(
            2,
            "Two & More",
            "[chapter 1](01_one.ipynb) and calculus.",
            "about 45 minutes to read; 10 seconds to run.",
        ),
        [EX.format(n=2, k=1) + "\n" + EX.format(n=2, k=2), EQ.format(n=2, k=1)],
    )
    write(
        tmp_path,
        "03_three.ipynb",
        header(
            3,
            "Three",
            "[chapter 2](02_two.ipynb) (which builds on\n"
            "[chapter\n1](01_one.ipynb#section)); a [paper](https://x.org).",
        ),
        ["See [chapter 5](05_five.ipynb) for more, which is not a prerequisite."],
    )
    write(tmp_path, "04_four.ipynb", header(4, "Four", "[chapter 1](01_one.ipynb).", None))
    write(tmp_path, "05_five.ipynb", header(5, "Five", "none.", "an afternoon."))
    return tmp_path


def test_read_chapter_parses_the_header_and_counts(book):
    c = cu.read_chapter(book / "02_two.ipynb")
    assert c == cu.ChapterInfo(2, "Two & More", book / "02_two.ipynb", (1,), 45, 2, 1)
    one = cu.read_chapter(book / "01_one.ipynb")
    assert (one.prerequisites, one.minutes, one.exercises, one.equations) == ((), 60, 1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign"):
        one.number = 7


def test_only_links_in_the_prerequisites_paragraph_count(book):
    three = cu.read_chapter(book / "03_three.ipynb")
    assert three.prerequisites == (1, 2)  # wrapped link text, anchor; chapter 5 of the body ignored


def test_a_new_label_line_or_blank_line_ends_the_paragraph(tmp_path):
    head = header(2, "Two", "calculus.") + "\n**See also**: [chapter 1](01_one.ipynb)."
    head += "\n\n[chapter 1](01_one.ipynb) again."
    assert cu.read_chapter(write(tmp_path, "02_two.ipynb", head)).prerequisites == ()


def test_minutes_missing_or_not_in_minutes_is_none(book):
    assert cu.read_chapter(book / "04_four.ipynb").minutes is None
    assert cu.read_chapter(book / "05_five.ipynb").minutes is None


def test_read_chapters_sorts_by_number_and_checks_the_folder(book, tmp_path):
    chapters = cu.read_chapters(book)
    assert [c.number for c in chapters] == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="no such folder"):
        cu.read_chapters(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no chapter notebooks"):
        cu.read_chapters(tmp_path / "empty")


def test_read_chapters_ignores_other_notebooks_and_defaults_to_the_book(book):
    (book / "01_one-executed.ipynb").write_text("not a notebook", encoding="utf-8")
    (book / "scratch.ipynb").write_text("{}", encoding="utf-8")
    assert [c.number for c in cu.read_chapters(book)] == [1, 2, 3, 4, 5]
    numbers = [c.number for c in cu.read_chapters()]  # the book's own chapters/
    assert numbers[0] == 6 and numbers == sorted(numbers)


def test_reading_time_counts_words_cells_and_exercises():
    md = {"cell_type": "markdown", "source": "word " * 400}  # 2 minutes of reading
    time_line = {"cell_type": "markdown", "source": "**Estimated time**: 99 minutes"}
    code = {"cell_type": "code", "source": "x = 1"}
    ex = {"cell_type": "markdown", "source": ":::{exercise} 1.1 · Predict\n:label: ex-1-1\n:::"}
    t = cu.reading_time({"cells": [md, time_line, code, code, {**code, "source": " "}, ex]})
    assert (t.words, t.code_cells, t.exercises) == (400 + 7, 2, 1)
    # 407/200 + 2 * 0.5 + 8 = 11.04 minutes, rounded to 10
    assert t.minutes == 10
    assert cu.time_line(t, "about 5 s to run").startswith("**Estimated time**: 10 minutes")


def test_edges_order_depths_closure(book):
    chapters = cu.read_chapters(book)
    assert cu.dependency_edges(chapters) == [(1, 2), (1, 3), (1, 4), (2, 3)]
    assert cu.topological_order(chapters) == [1, 2, 3, 4, 5]
    assert cu.topological_depths(chapters) == {1: 0, 2: 1, 3: 2, 4: 1, 5: 0}
    assert cu.prerequisite_closure(chapters, 3) == [1, 2]
    assert cu.prerequisite_closure(chapters, 5) == []
    assert cu.transitive_reduction(chapters) == [(1, 2), (1, 4), (2, 3)]


def test_topological_order_is_not_just_numeric(tmp_path):
    write(tmp_path, "01_a.ipynb", header(1, "A", "[chapter 3](03_c.ipynb)."))
    write(tmp_path, "02_b.ipynb", header(2, "B", "none."))
    write(tmp_path, "03_c.ipynb", header(3, "C", "[chapter 2](02_b.ipynb)."))
    chapters = cu.read_chapters(tmp_path)
    assert cu.topological_order(chapters) == [2, 3, 1]
    assert cu.prerequisite_closure(chapters, 1) == [2, 3]


def test_cycle_raises_and_names_it(book):
    chapters = cu.read_chapters(book)
    looped = [dataclasses.replace(c, prerequisites=(3,)) if c.number == 1 else c for c in chapters]
    with pytest.raises(ValueError, match=r"prerequisite cycle: 1 -> 3 -> 1$"):
        cu.topological_order(looped)
    three = [dataclasses.replace(c, prerequisites=(2,)) if c.number == 3 else c for c in looped]
    with pytest.raises(ValueError, match=r"prerequisite cycle: 1 -> 2 -> 3 -> 1$"):
        cu.topological_order(three)
    with pytest.raises(ValueError, match="cycle"):
        cu.prerequisite_closure(looped, 4)
    two = [
        dataclasses.replace(c, prerequisites=(5,))
        if c.number == 4
        else dataclasses.replace(c, prerequisites=(4,))
        if c.number == 5
        else c
        for c in chapters
    ]
    with pytest.raises(ValueError, match=r"prerequisite cycle: 4 -> 5 -> 4"):
        cu.topological_order(two)


def test_layered_layout_is_deterministic_and_layered(book):
    chapters = cu.read_chapters(book)
    pos = cu.layered_layout(chapters, spacing=2.0)
    assert pos == cu.layered_layout(list(reversed(chapters)), spacing=2.0)
    depths = cu.topological_depths(chapters)
    assert all(pos[n][0] == depths[n] for n in pos)
    assert pos[1] == (0.0, -1.0) and pos[5] == (0.0, 1.0)  # layer 0 centred on y = 0
    with pytest.raises(ValueError, match="spacing"):
        cu.layered_layout(chapters, spacing=0)


@pytest.mark.parametrize(
    "name, head, match",
    [
        ("1_one.ipynb", header(1, "One", "none."), "NN_slug"),
        ("01_one.ipynb", "# One\n\n**Prerequisites**: none.", "# NN · Title"),
        ("01_one.ipynb", header(2, "One", "none."), "file name"),
        ("01_one.ipynb", "# 01 · One\n\nNo prerequisites stated.", "Prerequisites"),
        ("02_two.ipynb", header(2, "Two", "[chapter 3](01_one.ipynb)."), "says chapter 3"),
        ("02_two.ipynb", header(2, "Two", "[chapter 2](02_two.ipynb)."), "itself"),
        ("02_two.ipynb", header(2, "Two", "a.") + "\n\n**Prerequisites**: b.", "2 '\\*\\*Prereq"),
    ],
)
def test_malformed_headers_raise(tmp_path, name, head, match):
    with pytest.raises(ValueError, match=match):
        cu.read_chapter(write(tmp_path, name, head))


def test_malformed_files_raise(tmp_path):
    bad = tmp_path / "01_one.ipynb"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="not a JSON notebook"):
        cu.read_chapter(bad)
    bad.write_text('{"cells": []}', encoding="utf-8")
    with pytest.raises(ValueError, match="no cells"):
        cu.read_chapter(bad)
    bad.write_text('{"cells": [{"cell_type": "code", "source": "# 01 · One"}]}', encoding="utf-8")
    with pytest.raises(ValueError, match="first cell"):
        cu.read_chapter(bad)
    head = header(1, "One", "none.")
    with pytest.raises(ValueError, match="eq-1-1 used more than once"):
        cu.read_chapter(write(tmp_path, "01_one.ipynb", head, [EQ.format(n=1, k=1)] * 2))
    with pytest.raises(ValueError, match="eq-2-1, which belong"):
        cu.read_chapter(write(tmp_path, "01_one.ipynb", head, [EQ.format(n=2, k=1)]))


def test_graph_functions_reject_bad_sets(book):
    chapters = cu.read_chapters(book)
    with pytest.raises(ValueError, match="chapter 3 appears twice"):
        cu.dependency_edges(chapters + [chapters[2]])
    with pytest.raises(ValueError, match="lists chapter 9 as a prerequisite"):
        cu.topological_order([dataclasses.replace(chapters[0], prerequisites=(9,))])
    with pytest.raises(ValueError, match=r"n must be one of \(1, 2, 3"):
        cu.prerequisite_closure(chapters, 7)


def test_the_books_own_chapters_form_a_forward_graph():
    folder = ROOT / "chapters"
    if not folder.is_dir():
        pytest.skip("no chapters/ beside the tests")
    chapters = cu.read_chapters(folder)
    assert all(p < n for p, n in cu.dependency_edges(chapters))
    assert cu.topological_order(chapters) == [c.number for c in chapters]
