"""Small data files that ship inside the package, so that nothing downloads at run time.

The files live in ``mlbook/data/`` and travel with ``pip install``, on Colab too.

- ``corpus_en_tr.txt``: twelve short English paragraphs, each followed by a Turkish paragraph
  with the same meaning, written for the book (chapter 17's tokenizer corpus).
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
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    names = available()
    if name not in names:
        raise ValueError(f"no data file {name!r} ships with mlbook; available: {names}")
    return resources.files("mlbook").joinpath("data", name).read_text(encoding="utf-8")
