"""The book's curriculum, read from the chapter notebooks' header cells (for instructors).

A header holds ``# NN · Title``, a **Prerequisites** paragraph linking earlier chapters and an
**Estimated time** line; with the counts of ``{exercise}`` directives and labelled equations
they become :class:`ChapterInfo` records and a graph with an edge p -> n for "p is a prerequisite
of n". Pure functions of the files' text (read as JSON); malformed input raises ``ValueError``
naming the file. No tensors: chapters are ints, edges (p, n) pairs, positions (x, y) floats.
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..validation import one_of, positive

__all__ = [
    "ChapterInfo",
    "ReadingTime",
    "reading_time",
    "time_line",
    "read_chapter",
    "read_chapters",
    "dependency_edges",
    "topological_order",
    "topological_depths",
    "prerequisite_closure",
    "transitive_reduction",
    "layered_layout",
]

_FILE_RE = re.compile(r"^(\d{2,})_[a-z0-9_]+\.ipynb$")
_TITLE_RE = re.compile(r"^#\s+(\d{2,})\s+·\s+(\S.*?)\s*$")
_PREREQ_RE = re.compile(r"^\s*\*\*Prerequisites:?\*\*")
_LABEL_LINE_RE = re.compile(r"^\s*\*\*[^*]+\*\*")  # a new "**Label**" line ends the paragraph
_TIME_RE = re.compile(r"^\s*\*\*Estimated time:?\*\*(.*)$")
_MINUTES_RE = re.compile(r"(\d+)\s*minutes?\b")
_LINK_RE = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
_CHAPTER_LINK_RE = re.compile(r"^(?:\./)?(\d{2,})_[a-z0-9_]+\.ipynb(?:#[\w.-]*)?$")
_LINK_TEXT_RE = re.compile(r"^chapters?\s+(\d+)$")
_EXERCISE_RE = re.compile(r"^\s*(?::{3,}|`{3,})\s*\{exercise(?:-start)?\}", re.M)
_EQ_LABEL_RE = re.compile(r"\$\$\s*\((eq-(\d+)-(\d+))\)")


#: The reading-time model: words of prose read at 200 a minute, half a minute per code cell (read
#: it, run it, look at its output), 8 minutes per exercise; rounded to 5 minutes.
WORDS_PER_MINUTE, MINUTES_PER_CELL, MINUTES_PER_EXERCISE = 200, 0.5, 8


@dataclass(frozen=True)
class ReadingTime:
    """The measured size of a chapter and the time it takes to work through (minutes)."""

    words: int
    code_cells: int
    exercises: int
    minutes: int


def reading_time(nb: dict) -> ReadingTime:
    """Measure a notebook (its JSON as a dict): words of Markdown (the time line itself not
    counted), non-empty code cells and exercises, and the minutes of the reading-time model."""
    md, cells = [], 0
    for c in nb.get("cells", []):
        text = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        if c.get("cell_type") == "markdown":
            md.append("\n".join(ln for ln in text.splitlines() if not _TIME_RE.match(ln)))
        elif c.get("cell_type") == "code" and text.strip():
            cells += 1
    markdown = "\n".join(md)
    words = len(markdown.split())
    exercises = len(_EXERCISE_RE.findall(markdown))
    raw = words / WORDS_PER_MINUTE + cells * MINUTES_PER_CELL + exercises * MINUTES_PER_EXERCISE
    return ReadingTime(words, cells, exercises, max(5, 5 * round(raw / 5)))


def time_line(t: ReadingTime, run: str) -> str:
    """The header's ``**Estimated time**`` line for the measurement ``t``; ``run`` says how long
    the notebook takes to execute (e.g. ``"about 15 s to run"``)."""
    return (
        f"**Estimated time**: {t.minutes} minutes to read and work through (measured: "
        f"{t.words:,} words at {WORDS_PER_MINUTE} a minute, {t.code_cells} code cells at "
        f"{int(MINUTES_PER_CELL * 60)} s, {t.exercises} exercises at {MINUTES_PER_EXERCISE} "
        f"minutes); {run}."
    )


@dataclass(frozen=True)
class ChapterInfo:
    """What one chapter notebook says about itself: number, title, path, sorted prerequisites,
    minutes (None if not given), number of exercises and of labelled equations.
    """

    number: int
    title: str
    path: Path
    prerequisites: tuple[int, ...]
    minutes: int | None
    exercises: int
    equations: int


def _cell_text(cell, path: Path, index: int) -> str:
    if not isinstance(cell, dict) or "source" not in cell:
        raise ValueError(f"{path}: cell {index} is not a notebook cell (no 'source')")
    src = cell["source"]
    if isinstance(src, list) and all(isinstance(s, str) for s in src):
        return "".join(src)
    if isinstance(src, str):
        return src
    raise ValueError(f"{path}: cell {index} has a source of type {type(src).__name__}")


def _prerequisites(header: str, number: int, path: Path) -> tuple[int, ...]:
    """Chapter numbers linked inside the header's Prerequisites paragraph (and nowhere else)."""
    lines = header.splitlines()
    starts = [i for i, line in enumerate(lines) if _PREREQ_RE.match(line)]
    if not starts:
        raise ValueError(f"{path}: the header cell has no '**Prerequisites**' paragraph")
    if len(starts) > 1:
        raise ValueError(
            f"{path}: the header cell has {len(starts)} '**Prerequisites**' paragraphs"
        )
    para = [lines[starts[0]]]
    for line in lines[starts[0] + 1 :]:
        if not line.strip() or _LABEL_LINE_RE.match(line):
            break
        para.append(line)
    text = " ".join(para)
    found = set()
    for link_text, target in _LINK_RE.findall(text):
        m = _CHAPTER_LINK_RE.match(target)
        if not m:
            continue  # a link to something other than a chapter notebook
        target_n = int(m.group(1))
        t = _LINK_TEXT_RE.match(" ".join(link_text.split()))
        if t and int(t.group(1)) != target_n:
            raise ValueError(
                f"{path}: prerequisite link [{link_text}]({target}) says chapter "
                f"{t.group(1)} but points to chapter {target_n}"
            )
        if target_n == number:
            raise ValueError(f"{path}: chapter {number} lists itself as a prerequisite")
        found.add(target_n)
    return tuple(sorted(found))


def _minutes(header: str) -> int | None:
    for line in header.splitlines():
        m = _TIME_RE.match(line)
        if m:
            minutes = _MINUTES_RE.search(m.group(1))
            return int(minutes.group(1)) if minutes else None
    return None


def read_chapter(path: str | Path) -> ChapterInfo:
    """Read one chapter notebook ``NN_slug.ipynb`` into a :class:`ChapterInfo`.

    Raises ValueError for a malformed file name, JSON, header, title or Prerequisites paragraph, a
    link whose text and target disagree, or a duplicated or foreign equation label.
    """
    path = Path(path)
    m = _FILE_RE.match(path.name)
    if not m:
        raise ValueError(f"{path}: a chapter notebook must be named NN_slug.ipynb")
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not a JSON notebook ({err.msg} at line {err.lineno})") from None
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list) or not cells:
        raise ValueError(f"{path}: the notebook has no cells")
    if not isinstance(cells[0], dict) or cells[0].get("cell_type") != "markdown":
        raise ValueError(f"{path}: the first cell must be the Markdown header")
    header = _cell_text(cells[0], path, 0)
    first = next((line for line in header.splitlines() if line.strip()), "")
    t = _TITLE_RE.match(first)
    if not t:
        raise ValueError(f"{path}: the header must start with '# NN · Title', found {first!r}")
    number = int(t.group(1))
    if number != int(m.group(1)):
        raise ValueError(
            f"{path}: the title says chapter {number}, the file name chapter {int(m.group(1))}"
        )
    markdown = "\n".join(
        _cell_text(c, path, i)
        for i, c in enumerate(cells)
        if isinstance(c, dict) and c.get("cell_type") == "markdown"
    )
    labels = _EQ_LABEL_RE.findall(markdown)
    names = [name for name, _, _ in labels]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"{path}: equation label(s) {', '.join(dup)} used more than once")
    foreign = [name for name, n, _ in labels if int(n) != number]
    if foreign:
        raise ValueError(
            f"{path}: chapter {number} labels {', '.join(foreign)}, which belong to another chapter"
        )
    return ChapterInfo(
        number=number,
        title=t.group(2),
        path=path,
        prerequisites=_prerequisites(header, number, path),
        minutes=_minutes(header),
        exercises=len(_EXERCISE_RE.findall(markdown)),
        equations=len(labels),
    )


def read_chapters(folder: str | Path | None = None) -> list[ChapterInfo]:
    """Read every chapter notebook ``NN_slug.ipynb`` of ``folder`` (default: the repository's
    ``chapters/``), by number. Other files (an executed copy, a scratch notebook) are ignored."""
    if folder is None:  # src/mlbook/teaching/curriculum.py -> the repository root
        folder = Path(__file__).resolve().parents[3] / "chapters"
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: no such folder of chapter notebooks")
    chapters = [
        read_chapter(p)
        for p in sorted(folder.glob("*.ipynb"))
        if p.is_file() and _FILE_RE.match(p.name)
    ]
    if not chapters:
        raise ValueError(f"{folder}: no chapter notebooks (*.ipynb) in it")
    _index(chapters)
    return sorted(chapters, key=lambda c: c.number)


def _index(chapters: Iterable[ChapterInfo]) -> dict[int, ChapterInfo]:
    """{number: chapter}; raises on duplicate numbers."""
    out: dict[int, ChapterInfo] = {}
    for c in chapters:
        if c.number in out:
            raise ValueError(f"chapter {c.number} appears twice: {out[c.number].path} and {c.path}")
        out[c.number] = c
    return out


def dependency_edges(chapters: Sequence[ChapterInfo]) -> list[tuple[int, int]]:
    """All prerequisite edges (p, n), "chapter p comes before n", sorted; all must be read."""
    index = _index(chapters)
    edges = []
    for n, c in index.items():
        for p in c.prerequisites:
            if p not in index:
                raise ValueError(
                    f"chapter {n} lists chapter {p} as a prerequisite, but no such chapter was read"
                )
            edges.append((p, n))
    return sorted(edges)


def _find_cycle(nodes: set[int], parents: dict[int, tuple[int, ...]]) -> list[int]:
    """A cycle among ``nodes`` (each of which lies on or leads into one), as p -> ... -> p."""
    start = min(nodes)
    path, seen = [start], {start: 0}
    while True:
        nxt = min(p for p in parents[path[-1]] if p in nodes)
        if nxt in seen:
            cycle = path[seen[nxt] :] + [nxt]
            return cycle[::-1]  # parents were followed backwards: print in reading direction
        seen[nxt] = len(path)
        path.append(nxt)


def topological_order(chapters: Sequence[ChapterInfo]) -> list[int]:
    """Chapter numbers with every prerequisite first (Kahn, smallest number first: unique).

    Raises ValueError naming a cycle, e.g. ``prerequisite cycle: 7 -> 9 -> 7``.
    """
    edges = dependency_edges(chapters)
    index = _index(chapters)
    indegree = {n: 0 for n in index}
    children: dict[int, list[int]] = {n: [] for n in index}
    for p, n in edges:
        indegree[n] += 1
        children[p].append(n)
    ready = [n for n, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        p = heapq.heappop(ready)
        order.append(p)
        for n in children[p]:
            indegree[n] -= 1
            if indegree[n] == 0:
                heapq.heappush(ready, n)
    if len(order) < len(index):
        left = set(index) - set(order)
        cycle = _find_cycle(left, {n: index[n].prerequisites for n in left})
        raise ValueError("prerequisite cycle: " + " -> ".join(map(str, cycle)))
    return order


def topological_depths(chapters: Sequence[ChapterInfo]) -> dict[int, int]:
    """{chapter: depth}: the length of the longest prerequisite chain ending in it."""
    index = _index(chapters)
    depth: dict[int, int] = {}
    for n in topological_order(chapters):
        depth[n] = 1 + max((depth[p] for p in index[n].prerequisites), default=-1)
    return dict(sorted(depth.items()))


def prerequisite_closure(chapters: Sequence[ChapterInfo], n: int) -> list[int]:
    """Every chapter needed before chapter ``n``, direct or indirect, in topological order."""
    index = _index(chapters)
    one_of(n, "n", sorted(index))
    order = topological_order(chapters)
    needed: set[int] = set()
    stack = list(index[n].prerequisites)
    while stack:
        p = stack.pop()
        if p not in needed:
            needed.add(p)
            stack.extend(index[p].prerequisites)
    return [c for c in order if c in needed]


def transitive_reduction(chapters: Sequence[ChapterInfo]) -> list[tuple[int, int]]:
    """The edges (p, n) that no longer prerequisite chain implies, sorted (for figures)."""
    index = _index(chapters)
    closure = {m: set(prerequisite_closure(chapters, m)) for m in index}
    keep = []
    for p, n in dependency_edges(chapters):
        others = [q for q in index[n].prerequisites if q != p]
        if not any(p in closure[q] for q in others):
            keep.append((p, n))
    return keep


def layered_layout(
    chapters: Sequence[ChapterInfo], *, spacing: float = 1.0
) -> dict[int, tuple[float, float]]:
    """Deterministic positions {chapter: (x, y)} for drawing the graph: x = depth.

    Within a layer the chapters are sorted by the mean y of their prerequisites (barycentre
    heuristic; ties by number) and centred on y = 0, ``spacing`` apart.
    """
    positive(spacing, "spacing")
    index = _index(chapters)
    depth = topological_depths(chapters)
    layers: dict[int, list[int]] = {}
    for n, d in depth.items():
        layers.setdefault(d, []).append(n)
    pos: dict[int, tuple[float, float]] = {}
    for d in sorted(layers):

        def key(n: int) -> tuple[float, int]:
            ys = [pos[p][1] for p in index[n].prerequisites]
            return (sum(ys) / len(ys) if ys else 0.0, n)

        layer = sorted(layers[d], key=key)
        offset = (len(layer) - 1) / 2
        for i, n in enumerate(layer):
            pos[n] = (float(d), (i - offset) * spacing)
    return dict(sorted(pos.items()))
