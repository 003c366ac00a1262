"""What every chapter notebook does first: seeds, plotting style, and showing package source.

Notebooks never re-define what the package holds; they *show* it with :func:`show_source`, so
the page and the tested code are one and the same text. The page shows the mathematics: docstrings
and argument checks (calls into :mod:`mlbook.validation`, ``if ...: raise ValueError``) are left
out, and a comment under the path says so (``full=True`` shows everything).
"""

from __future__ import annotations

import ast
import inspect
import random
import sys
import textwrap
from pathlib import Path

import numpy as np
import torch

from ..validation import integer, positive_int
from ..viz import use_book_style

__all__ = ["setup", "show_source", "teaching_source"]


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


def show_source(*objects, full: bool = False) -> None:
    """Display the source of package functions or classes as one highlighted code block per file.

    Args:
        objects: functions or classes of the package (decorated ones too).
        full: show docstrings and argument checks as well (default: the mathematics only).
    """
    from IPython.display import Markdown, display

    blocks: dict[str, list[str]] = {}  # file path -> sources, in the order given
    trimmed = False
    for obj in objects:
        text = inspect.getsource(inspect.unwrap(obj)).rstrip()
        short = text if full else teaching_source(obj)
        trimmed |= short != text
        blocks.setdefault(source_path(obj), []).append(short)
    note = "  (docstrings and argument checks omitted)" if trimmed else ""
    display(
        Markdown(
            "\n\n".join(
                f"`{path}`{note}\n```python\n" + "\n\n\n".join(srcs) + "\n```"
                for path, srcs in blocks.items()
            )
        )
    )


def _is_check(node: ast.stmt, checks: set[str]) -> bool:
    """Is ``node`` an argument check: a docstring, a validation call, ``if ...: raise ...``?"""

    def validation_call(v) -> bool:
        return isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in checks

    if isinstance(node, ast.Expr):  # a docstring or a bare validation call
        return (
            isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            or (validation_call(node.value))
        )
    if isinstance(node, ast.Assign) and len(node.targets) == 1:  # x = check(x, "x", ...)
        t, v = node.targets[0], node.value
        targets = t.elts if isinstance(t, ast.Tuple) else [t]
        values = v.elts if isinstance(v, ast.Tuple) else [v]
        return len(targets) == len(values) and all(
            isinstance(tg, ast.Name)
            and validation_call(val)
            and bool(val.args)
            and tg.id in {n.id for n in ast.walk(val.args[0]) if isinstance(n, ast.Name)}
            for tg, val in zip(targets, values, strict=True)
        )
    if isinstance(node, ast.If) and not node.orelse:  # if bad: raise ValueError(...)
        return all(isinstance(b, ast.Raise) for b in node.body)
    return False


def teaching_source(obj) -> str:
    """The source of ``obj`` without docstrings and argument checks: the mathematics only."""
    obj = inspect.unwrap(obj)
    text = textwrap.dedent(inspect.getsource(obj)).rstrip()
    module = sys.modules.get(obj.__module__)
    checks = {
        name
        for name, value in vars(module).items()
        if getattr(value, "__module__", None) == "mlbook.validation" and callable(value)
    }
    drop: set[int] = set()  # 1-based line numbers of the statements left out
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        keep = [b for b in body if not _is_check(b, checks)]
        if not keep:  # never leave an empty body
            keep = body[-1:]
        for b in body:
            if b not in keep:
                drop.update(range(b.lineno, b.end_lineno + 1))
    lines: list[str] = []
    for i, ln in enumerate(text.splitlines(), 1):
        opens_block = bool(lines) and lines[-1].rstrip().endswith(":")
        if i not in drop and not (ln.strip() == "" and opens_block):
            lines.append(ln)
    return "\n".join(lines)


def source_path(obj) -> str:
    """Where ``obj`` lives in the repository, e.g. ``src/mlbook/attention/rope.py``."""
    parts = Path(inspect.getsourcefile(inspect.unwrap(obj))).resolve().parts
    return "/".join(("src",) + parts[len(parts) - 1 - parts[::-1].index("mlbook") :])
