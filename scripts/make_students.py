"""Write the student version of every chapter: exercises without solutions, for Colab.

    python scripts/make_students.py           # (re)write students/NN_slug.ipynb
    python scripts/make_students.py --check   # exit 1 if a student version is out of date

A chapter's header links its student version (scripts/booktools.colab_badge), so a student who
opens a chapter on Colab from that link never has the solutions in plain view. The student
version is mlbook.teaching.assign.student_notebook of the chapter: outputs cleared, each answer
function reduced to its signature and docstring, written solutions replaced by a prompt.
"""

from __future__ import annotations

import json
import sys

from booktools import COLAB_BADGE_IMG, ROOT, colab_url, student_path, toc_notebooks

from mlbook.teaching.assign import student_notebook


def render(path) -> tuple[str, str]:
    """(relative path, JSON text) of the student version of the chapter at ``path``."""
    rel = student_path(path.resolve().relative_to(ROOT).as_posix())
    nb = json.loads(path.read_text(encoding="utf-8"))
    badge = f"[![Open In Colab]({COLAB_BADGE_IMG})]({colab_url(rel)})"
    student = student_notebook(nb, path.name, badge=badge)
    for cell in student["cells"]:  # run timestamps of the chapter: not part of the student copy
        cell.get("metadata", {}).pop("execution", None)
    return rel, json.dumps(student, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    check = "--check" in sys.argv
    chapters = [p for p in toc_notebooks() if p.parent.name == "chapters"]
    wanted = {}
    for path in chapters:
        rel, text = render(path)
        wanted[rel] = text
    stale = []
    for rel, text in wanted.items():
        target = ROOT / rel
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            stale.append(rel)
            if not check:
                target.parent.mkdir(exist_ok=True)
                target.write_text(text, encoding="utf-8")
    extra = sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "students").glob("*.ipynb")
        if p.relative_to(ROOT).as_posix() not in wanted
    )
    for rel in extra:
        stale.append(rel)
        if not check:
            (ROOT / rel).unlink()
    for rel in stale:
        print(f"{rel}: {'out of date' if check else 'written'}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
