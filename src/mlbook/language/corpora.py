"""Small data files shipped inside the package (``mlbook/data/``): nothing downloads at run time.

``corpus_en_tr.txt``: twelve English paragraphs, each followed by its Turkish version.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["available", "read_text"]


def available() -> list[str]:
    """Names of the data files that ship with the package."""
    return sorted(
        p.name
        for p in resources.files("mlbook").joinpath("data").iterdir()
        if p.name.endswith(".txt")
    )


def read_text(name: str) -> str:
    """The UTF-8 text of the shipped data file ``name`` (see :func:`available`)."""
    names = available()
    if name not in names:
        raise ValueError(f"no data file {name!r} ships with mlbook; available: {names}")
    return resources.files("mlbook").joinpath("data", name).read_text(encoding="utf-8")
