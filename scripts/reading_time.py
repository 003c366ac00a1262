"""Measure every chapter and appendix; write its header's **Estimated time** line (from the text).

    python scripts/reading_time.py           # rewrite the lines that differ from the measurement
    python scripts/reading_time.py --check   # exit 1 if a header disagrees with the measurement

The minutes follow mlbook.teaching.curriculum's reading-time model (words, code cells, exercises);
what the line says after the semicolon (how long the notebook takes to run) is kept.
"""

from __future__ import annotations

import json
import re
import sys

from booktools import toc_notebooks

from mlbook.teaching.curriculum import reading_time, time_line

TIME_RE = re.compile(r"^\*\*Estimated time:?\*\*.*$", re.M)
RUN_RE = re.compile(r";\s*([^;]*?)\.?\s*$")


def expected(nb: dict) -> str | None:
    """The measured time line for a notebook, or None if its header has no time line."""
    header = "".join(nb["cells"][0]["source"])
    m = TIME_RE.search(header)
    if not m:
        return None
    run = RUN_RE.search(m.group(0))
    return time_line(reading_time(nb), run.group(1) if run else "seconds to run")


def sync(path, write: bool) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    line = expected(nb)
    if line is None:
        return ["no **Estimated time** line in the header"]
    header = "".join(nb["cells"][0]["source"])
    if TIME_RE.search(header).group(0) == line:
        return []
    if write:
        nb["cells"][0]["source"] = TIME_RE.sub(lambda m: line, header)
        path.write_text(
            json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    return [f"the estimated time differs from the measurement: {line}"]


def main() -> int:
    check = "--check" in sys.argv
    bad = 0
    for path in toc_notebooks():
        if not re.match(r"^(\d\d|[a-c])_", path.name):  # the chapters and appendices A-C
            continue
        problems = sync(path, write=not check)
        bad += bool(problems)
        for p in problems:
            print(f"{path.name}: {p}")
    return 1 if check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
