"""Generate Appendix E (appendix/e_formula_sheets.md) from data/formula_sheets.yml.

Every equation of the sheets is rendered; where a notebook of the book carries its label
`eq-N-k`, the entry links to that derivation with the `{eq}` role, and otherwise says that the
chapter is not yet written. The chapters beyond the sheets (45+) choose their own key equations;
they follow under "Beyond the sheets", each equation as its chapter writes it.
tests/test_book.py checks that the committed page is up to date:

    python scripts/make_formula_index.py           # rewrite the page
    python scripts/make_formula_index.py --check   # exit 1 if the page is stale
"""

from __future__ import annotations

import json
import re
import sys

from booktools import ROOT, sheet, toc_notebooks

OUT = ROOT / "appendix" / "e_formula_sheets.md"
LABEL_RE = re.compile(r"\$\$\s*\((eq-[0-9A-Ca-c]+-\d+)\)")
# a labelled display equation: its LaTeX (no $$ inside) and its label
DISPLAY_RE = re.compile(r"\$\$((?:(?!\$\$).)*?)\$\$\s*\((eq-(\d+)-(\d+))\)", re.DOTALL)


def labelled() -> dict[str, str]:
    """{label: notebook path relative to appendix/} for every labelled equation in the toc."""
    found = {}
    for nb_path in toc_notebooks():
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            if cell["cell_type"] == "markdown":
                for label in LABEL_RE.findall("".join(cell["source"])):
                    found[label] = "../" + nb_path.relative_to(ROOT).as_posix()
    return found


def beyond_the_sheets(numbers: set[int]) -> list[str]:
    """Appendix E's lines for the chapters whose number the sheets do not have."""
    lines = []
    for nb_path in toc_notebooks():
        m = re.match(r"(\d\d)_", nb_path.name)
        if not m or int(m.group(1)) in numbers:
            continue
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
        title = cells[0].splitlines()[0].lstrip("# ").strip()
        found = sorted(
            (int(k), label, latex.strip())
            for cell in cells
            for latex, label, n, k in DISPLAY_RE.findall(cell)
            if int(n) == int(m.group(1))
        )
        if not lines:
            lines += [
                "## Beyond the sheets",
                "",
                "The chapters after 44 go beyond the sheets; each chooses its own key equations.",
                "",
            ]
        link = f"[chapter {int(m.group(1))}](../{nb_path.relative_to(ROOT).as_posix()})"
        lines += [f"### {title}", ""]
        for _, label, latex in found:
            lines += [f"{{eq}}`{label}` · derived in {link}", "", "$$", latex, "$$", ""]
    return lines


def render() -> str:
    data = sheet()
    links = labelled()
    lines = [
        "# E · Formula sheets",
        "",
        "Every key equation of the book, chapter by chapter, in the notation of the sheets.",
        "Each entry links to the place where the book derives, implements and checks it; entries",
        "of chapters that are not yet written say so. This page is generated from",
        "`data/formula_sheets.yml` by `scripts/make_formula_index.py` (`make formulas`); do not",
        "edit it by hand.",
        "",
    ]
    total = sum(len(ch.get("equations", [])) for ch in data["chapters"])
    done = sum(
        1
        for ch in data["chapters"]
        for e in ch.get("equations", [])
        if f"eq-{e['id'].replace('.', '-')}" in links
    )
    lines += [f"Derived so far: **{done} of {total}** equations.", ""]
    for ch in data["chapters"]:
        num = ch["number"]
        head = f"{int(num):d}" if str(num).isdigit() else f"Appendix {num}"
        lines += [f"## {head} · {ch['title']}", ""]
        place = f"chapter {num}" if str(num).isdigit() else f"appendix {num}"
        for note in ch.get("notes", []):
            lines += [f"- {note}"]
        if ch.get("notes"):
            lines += [""]
        for eq in ch.get("equations", []):
            label = f"eq-{eq['id'].replace('.', '-')}"
            if label in links:  # the {eq} reference shows the number, (N.k), and links to it
                head = f"{{eq}}`{label}` · derived in [{place}]({links[label]})"
            else:
                head = f"**({eq['id']})** · not yet written"
            lines += [head, "", "$$", eq["latex"], "$$", ""]
    lines += beyond_the_sheets(
        {int(ch["number"]) for ch in data["chapters"] if str(ch["number"]).isdigit()}
    )
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run `make formulas`")
            return 1
        print(f"{OUT.relative_to(ROOT)} is up to date")
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
