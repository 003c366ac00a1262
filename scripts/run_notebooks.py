"""Execute notebooks top to bottom; store their outputs (--inplace) and/or time them (--bench).

    python scripts/run_notebooks.py --inplace chapters/06_probability.ipynb ...
    python scripts/run_notebooks.py --bench _build/bench.md chapters/*.ipynb

Each notebook runs in a fresh kernel from its own folder, as a reader's would. A notebook over
the chapter budget (30 s on 2 CPU cores) is reported; any cell error stops with its traceback.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

BUDGET_S = 30.0
BOOK_BUDGET_S = 600.0


def run(path: Path) -> tuple[nbformat.NotebookNode, float]:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    start = time.perf_counter()
    client.execute()
    return nb, time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="+", type=Path)
    ap.add_argument("--inplace", action="store_true", help="write the outputs back")
    ap.add_argument("--bench", type=Path, help="write a Markdown table of run times here")
    ap.add_argument(
        "--keep-going", action="store_true", help="run every notebook even if one fails"
    )
    args = ap.parse_args()
    rows, total, failed = [], 0.0, []
    for path in args.notebooks:
        try:
            nb, seconds = run(path)
        except CellExecutionError as err:
            if not args.keep_going:
                raise
            failed.append(str(path))
            print(f"{path}: FAILED\n{str(err)[-1500:]}", flush=True)
            continue
        total += seconds
        rows.append((str(path), seconds))
        flag = "" if seconds <= BUDGET_S else f"  OVER the {BUDGET_S:.0f} s budget"
        print(f"{path}: {seconds:.1f} s{flag}", flush=True)
        if args.inplace:
            nbformat.write(nb, path)
    print(f"total: {total:.1f} s for {len(rows)} notebooks (book budget {BOOK_BUDGET_S:.0f} s)")
    if args.bench:
        args.bench.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            f"Notebook run times on {platform.machine()} ({platform.processor() or 'cpu'}),"
            f" Python {platform.python_version()}",
            "",
            "| notebook | seconds | within 30 s |",
            "|---|---:|:---:|",
        ]
        lines += [f"| {n} | {s:.1f} | {'yes' if s <= BUDGET_S else 'NO'} |" for n, s in rows]
        lines += [f"| **total** | **{total:.1f}** | {'yes' if total <= BOOK_BUDGET_S else 'NO'} |"]
        args.bench.write_text("\n".join(lines) + "\n", encoding="utf-8")
        args.bench.with_suffix(".json").write_text(
            json.dumps({"rows": rows, "total_s": total}, indent=1), encoding="utf-8"
        )
        print(f"wrote {args.bench}")
    over = [n for n, s in rows if s > BUDGET_S]
    if failed:
        print(f"FAILED: {len(failed)} notebooks: {' '.join(failed)}")
    return 1 if over or failed or total > BOOK_BUDGET_S else 0


if __name__ == "__main__":
    sys.exit(main())
