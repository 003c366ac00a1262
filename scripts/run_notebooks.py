"""Execute notebooks top to bottom; store their outputs (--inplace) and/or time them (--bench).

    python scripts/run_notebooks.py --inplace chapters/06_probability.ipynb ...
    python scripts/run_notebooks.py --bench _build/bench.md chapters/*.ipynb

Each notebook runs in a fresh kernel from its own folder, as a reader's would; ``--jobs`` of
them at a time (default: one per CPU core), so the book's wall time is what a reader's machine
needs to run it all. A notebook over the chapter budget (30 s on 2 CPU cores) is reported; its
time is measured while the other jobs run, an upper bound of its time alone. The whole book is
held to 10 minutes of wall time. Any cell error stops with its traceback.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

BUDGET_S = 30.0
BOOK_BUDGET_S = 600.0


def run(path: Path) -> tuple[nbformat.NotebookNode, float]:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
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
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="notebooks at a time")
    args = ap.parse_args()
    if args.jobs > 1:  # one thread per kernel: more would only contend for the cores
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    rows, failed = [], []
    start = time.perf_counter()
    # "spawn": a fresh interpreter per worker; a forked copy of this process would inherit the
    # state of its ZeroMQ and asyncio libraries, and a kernel's reply can then be lost
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, args.jobs), mp_context=spawn) as pool:
        futures = [(path, pool.submit(run, path)) for path in args.notebooks]
        for path, future in futures:  # in the order given; they finish in any order
            try:
                nb, seconds = future.result()
            except CellExecutionError as err:
                if not args.keep_going:
                    for _, other in futures:
                        other.cancel()
                    raise
                failed.append(str(path))
                print(f"{path}: FAILED\n{str(err)[-1500:]}", flush=True)
                continue
            rows.append((str(path), seconds))
            flag = "" if seconds <= BUDGET_S else f"  OVER the {BUDGET_S:.0f} s budget"
            print(f"{path}: {seconds:.1f} s{flag}", flush=True)
            if args.inplace:
                nbformat.write(nb, path)
    total = time.perf_counter() - start  # wall time of the whole run
    summed = sum(s for _, s in rows)
    print(
        f"total: {total:.1f} s wall for {len(rows)} notebooks, {args.jobs} at a time (book budget"
        f" {BOOK_BUDGET_S:.0f} s); the notebooks' own times add up to {summed:.1f} s"
    )
    if args.bench:
        args.bench.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            f"Notebook run times on {platform.machine()} ({platform.processor() or 'cpu'}),"
            f" {os.cpu_count()} cores, Python {platform.python_version()}; {args.jobs} notebooks"
            " at a time, so each time is an upper bound of the notebook's time alone",
            "",
            "| notebook | seconds | within 30 s |",
            "|---|---:|:---:|",
        ]
        lines += [f"| {n} | {s:.1f} | {'yes' if s <= BUDGET_S else 'NO'} |" for n, s in rows]
        lines += [
            f"| **whole book, wall time** | **{total:.1f}** |"
            f" {'yes' if total <= BOOK_BUDGET_S else 'NO'} (of {BOOK_BUDGET_S:.0f} s) |"
        ]
        args.bench.write_text("\n".join(lines) + "\n", encoding="utf-8")
        args.bench.with_suffix(".json").write_text(
            json.dumps({"rows": rows, "wall_s": total, "jobs": args.jobs}, indent=1),
            encoding="utf-8",
        )
        print(f"wrote {args.bench}")
    over = [n for n, s in rows if s > BUDGET_S]
    if failed:
        print(f"FAILED: {len(failed)} notebooks: {' '.join(failed)}")
    return 1 if over or failed or total > BOOK_BUDGET_S else 0


if __name__ == "__main__":
    sys.exit(main())
