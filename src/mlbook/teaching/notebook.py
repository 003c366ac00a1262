"""What every chapter notebook does first: seeds, plotting style, and showing package source.

Notebooks never re-define what the package holds; they *show* it with :func:`show_source`, so
the page and the tested code are one and the same text.
"""

from __future__ import annotations

import inspect
import random
from pathlib import Path

import numpy as np
import torch

from ..validation import integer, positive_int
from ..viz import use_book_style

__all__ = ["setup", "show_source"]


def setup(seed: int = 0, threads: int | None = 1) -> np.random.Generator:
    """Seed Python, NumPy and torch, use float32 and the book's plot style; return a seeded
    NumPy Generator. One thread (``threads=None``: torch's default) sums in the same order on
    every machine, so printed results reproduce."""
    integer(seed, "seed", 0)
    if threads is not None:
        torch.set_num_threads(positive_int(threads, "threads"))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_default_dtype(torch.float32)
    use_book_style()
    return np.random.default_rng(seed)


def show_source(*objects) -> None:
    """Display the source of package functions or classes as one highlighted code block."""
    from IPython.display import Markdown, display

    blocks: dict[str, list[str]] = {}  # file path -> sources, in the order given
    for obj in objects:
        blocks.setdefault(source_path(obj), []).append(inspect.getsource(obj).rstrip())
    display(
        Markdown(
            "\n\n".join(
                f"`{path}`\n```python\n" + "\n\n\n".join(srcs) + "\n```"
                for path, srcs in blocks.items()
            )
        )
    )


def source_path(obj) -> str:
    """Where ``obj`` lives in the repository, e.g. ``src/mlbook/attention/rope.py``."""
    parts = Path(inspect.getsourcefile(obj)).resolve().parts
    return "/".join(("src",) + parts[len(parts) - 1 - parts[::-1].index("mlbook") :])
