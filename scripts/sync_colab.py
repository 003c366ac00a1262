"""Write each notebook's Colab badge and Colab install line from _config.yml (one source).

    python scripts/sync_colab.py           # rewrite the badge and install line where they differ
    python scripts/sync_colab.py --check   # exit 1 if a notebook disagrees with _config.yml

The badge is the markdown line that starts with "[![Open In Colab]" in the notebook's first
cell; the install line is the `%pip install` line of the setup cell, run only on Colab.
"""

from __future__ import annotations

import re
import sys

import booktools
import nbformat
from booktools import colab_badge, pip_spec, toc_notebooks

BADGE_RE = re.compile(r"^\[!\[Open In Colab\]\(.*$", re.M)
PIP_RE = re.compile(r'^(\s*)%pip install --quiet ".*"$', re.M)


def expected(nb_path) -> tuple[str, str]:
    badge = colab_badge(nb_path.resolve().relative_to(booktools.ROOT).as_posix())
    return badge, f'%pip install --quiet "{pip_spec()}"'


def sync(nb_path, write: bool) -> list[str]:
    nb = nbformat.read(nb_path, as_version=4)
    badge, pip_line = expected(nb_path)
    problems, changed = [], False
    cells = nb["cells"]
    first = "".join(cells[0]["source"]) if cells else ""
    if not BADGE_RE.search(first):
        problems.append("no Colab badge line in the first cell")
    elif BADGE_RE.search(first).group(0) != badge:
        problems.append("Colab badge differs from _config.yml")
        cells[0]["source"] = BADGE_RE.sub(lambda m: badge, first)
        changed = True
    setup = next(
        (c for c in cells if c["cell_type"] == "code" and "google.colab" in "".join(c["source"])),
        None,
    )
    if setup is None or not PIP_RE.search("".join(setup["source"])):
        problems.append('no Colab setup cell with a `%pip install --quiet "..."` line')
    else:
        text = "".join(setup["source"])
        new = PIP_RE.sub(lambda m: m.group(1) + pip_line, text)
        if new != text:
            problems.append("Colab install line differs from _config.yml")
            setup["source"] = new
            changed = True
    if write and changed:
        nbformat.write(nb, nb_path)
    return problems


def main() -> int:
    check = "--check" in sys.argv
    bad = 0
    for nb_path in toc_notebooks():
        if booktools.sheet_key(nb_path) is None:
            continue  # a guide page (instructors.ipynb) has no Colab badge or install line
        for problem in sync(nb_path, write=not check):
            bad += 1
            print(f"{nb_path.relative_to(booktools.ROOT)}: {problem}")
    return 1 if check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
