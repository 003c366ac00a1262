"""Facts about the book's structure, shared by the scripts and by tests/test_book.py.

One place reads _config.yml (repository URL and branch for Colab), _toc.yml (which notebooks
exist and in which order) and data/formula_sheets.yml (the sheets' equations and macros).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SHEETS = ROOT / "data" / "formula_sheets.yml"
# The badge image ships with the book (the site fetches nothing from other hosts); the path is
# relative to a notebook one folder deep (chapters/, appendix/, students/).
COLAB_BADGE_IMG = "../images/colab-badge.svg"
NOTEBOOK_RE = re.compile(r"^(chapters/(\d\d)_[a-z0-9_]+|appendix/([a-c])_[a-z0-9_]+)$")


def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))


def repository() -> tuple[str, str]:
    """(https URL without .git, branch) of the book's repository, from _config.yml."""
    repo = config()["repository"]
    return repo["url"].rstrip("/").removesuffix(".git"), repo.get("branch", "main")


def colab_url(rel_path: str) -> str:
    """The Colab address of a notebook (path relative to the repository root)."""
    url, branch = repository()
    gh = url.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{gh}/blob/{branch}/{rel_path}"


def student_path(rel_path: str) -> str | None:
    """Where the student version of a chapter lives (``students/NN_slug.ipynb``), else None."""
    m = re.match(r"^chapters/(\d\d_[a-z0-9_]+\.ipynb)$", rel_path)
    return f"students/{m.group(1)}" if m else None


def colab_badge(rel_path: str) -> str:
    """The badge line of a notebook's header: Colab, and for a chapter also a link that opens
    its student version (exercises without solutions) in Colab."""
    badge = f"[![Open In Colab]({COLAB_BADGE_IMG})]({colab_url(rel_path)})"
    student = student_path(rel_path)
    if student:
        badge += f" · [exercises without solutions, in Colab]({colab_url(student)})"
    return badge


def pip_spec() -> str:
    """What Colab's setup cell installs: the package straight from the repository."""
    url, branch = repository()
    return f"mlbook @ git+{url}@{branch}"


def toc() -> dict:
    return yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))


def toc_entries() -> list[str]:
    """Every file of the toc (without suffix), in reading order, root first."""
    t = toc()
    out = [t["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                out.append(node["file"])
            for key in ("parts", "chapters", "sections"):
                for child in node.get(key, []):
                    walk(child)

    walk(t)
    return out


def toc_notebooks() -> list[Path]:
    """The notebooks of the toc, in reading order."""
    return [ROOT / f"{e}.ipynb" for e in toc_entries() if (ROOT / f"{e}.ipynb").exists()]


def sheet() -> dict:
    return yaml.safe_load(SHEETS.read_text(encoding="utf-8"))


def sheet_key(nb: Path) -> str | None:
    """'6' for chapters/06_x.ipynb, 'A' for appendix/a_x.ipynb, None otherwise."""
    rel = nb.resolve().relative_to(ROOT).with_suffix("").as_posix()
    m = NOTEBOOK_RE.match(rel)
    if not m:
        return None
    return str(int(m.group(2))) if m.group(2) else m.group(3).upper()


def sheet_label_ids() -> dict[str, list[str]]:
    """{'6': ['eq-6-1', ...], 'A': [...]}: the label every sheet equation must carry."""
    return {
        str(ch["number"]): [f"eq-{e['id'].replace('.', '-')}" for e in ch.get("equations", [])]
        for ch in sheet()["chapters"]
    }
