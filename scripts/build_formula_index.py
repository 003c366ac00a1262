"""Write the book's formula index into the package, so that it ships (and reaches Colab).

The key equations of every chapter live in ``data/formula_sheets.yml`` at the repository's top,
which a ``pip install`` of the package does not carry. This script copies what the agents and
retrieval chapters (42, 43) search, one entry per equation, into
``src/mlbook/data/formula_index.json``: the equation id ``"N.k"``, the chapter's number and title,
and the LaTeX. Rerun it after the formula sheets change (a fraction of a second):

    python scripts/build_formula_index.py
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SHEETS = ROOT / "data" / "formula_sheets.yml"
OUT = ROOT / "src" / "mlbook" / "data" / "formula_index.json"


def build(sheets: Path = SHEETS) -> list[dict]:
    """One dict per equation: id, chapter (int, or the appendix letter), title, latex."""
    data = yaml.safe_load(sheets.read_text(encoding="utf-8"))
    entries = []
    for chapter in data["chapters"]:
        for eq in chapter.get("equations", []):
            entries.append(
                {
                    "id": str(eq["id"]),
                    "chapter": chapter["number"],
                    "title": chapter["title"],
                    "latex": eq["latex"],
                }
            )
    return entries


if __name__ == "__main__":
    entries = build()
    OUT.write_text(json.dumps(entries, indent=0, ensure_ascii=False) + "\n", encoding="utf-8")
    print(
        f"wrote {len(entries)} equations of {len({e['title'] for e in entries})} chapters to {OUT}"
    )
