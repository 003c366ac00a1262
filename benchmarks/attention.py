"""Benchmark of chapter 26: memory of tiled vs naive attention, and Triton FlashAttention speed.

Usage (from the repository root, with the package installed, e.g. ``pip install -e .``):

    python benchmarks/attention.py --quick     # small CPU run (T = 1024), a few seconds
    python benchmarks/attention.py             # T = 8192 memory; on CUDA also the speed sweep

What it measures
    memory    the largest tensor that naive attention (the (T, T) score matrix) and the tiled
              torch attention (a (T, T/16) tile with block_q=None, or a 128 x 128 tile) allocate,
              counted by ``mlbook.attention.tiled.largest_intermediate_bytes`` on shape-only
              "meta" tensors, with the closed form ``predicted_largest_bytes`` beside it; then
              the same functions run on real tensors (CPU or CUDA) to check that the tiled
              output equals the naive one. On CUDA it also records the peak extra memory
              reported by the allocator (``torch.cuda.max_memory_allocated`` minus the inputs)
              for naive, tiled, the Triton kernel and torch's SDPA.
    speed     CUDA only: forward time of ``mlbook.attention.flash_triton.flash_attention`` and of
              ``torch.nn.functional.scaled_dot_product_attention`` at T in {1k, 4k, 16k},
              d = 128, fp16, causal, B * T = 16k tokens, 16 heads; the Triton throughput as a
              fraction of SDPA's. A few block configurations are tried; the best is kept.

The JSON written records the hardware (device name, torch, Triton and Python versions). On CUDA
it goes to ``data/gpu_timings_attention.json`` by default, which chapter 26 plots; elsewhere it
is printed (pass ``--out`` to keep it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from mlbook.attention import flash_triton as ft
from mlbook.attention import tiled as ta

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [  # (block_m, block_n, num_warps, num_stages) tried on the GPU for d = 128
    (64, 64, 4, 3),
    (128, 64, 8, 3),
    (128, 32, 4, 3),
    (128, 128, 8, 2),
]


def hardware() -> dict:
    cuda = torch.cuda.is_available()
    return {
        "device": torch.cuda.get_device_name(0) if cuda else (platform.processor() or "cpu"),
        "device_type": "cuda" if cuda else "cpu",
        "cuda_version": torch.version.cuda if cuda else None,
        "torch": torch.__version__,
        "triton": ft.triton.__version__ if ft.TRITON_AVAILABLE else None,
        "triton_mode": ft.TRITON_MESSAGE,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
    }


def memory_section(T: int, d: int, device: str) -> dict:
    """Largest intermediate of naive vs tiled attention at sequence length T (fp32, causal)."""
    meta = torch.empty(1, T, d, device="meta")
    res = {"T": T, "d": d, "dtype": "float32", "causal": True, "batch": 1}
    variants = {
        "naive": {},
        f"tiled_bq=all_bk={T // 16}": {"block_q": None, "block_k": T // 16},
        "tiled_bq=128_bk=128": {"block_q": 128, "block_k": 128},
    }
    for name, blocks in variants.items():
        fn = ta.tiled_attention_naive if not blocks else ta.tiled_attention
        nbytes, what = ta.largest_intermediate_bytes(fn, meta, meta, meta, True, **blocks)
        pred = ta.predicted_largest_bytes(T, T, d, d, **blocks)
        res[name] = {"largest_bytes": nbytes, "predicted_bytes": pred, "largest_tensor": what}
    naive = res["naive"]["largest_bytes"]
    for name in variants:
        res[name]["fraction_of_naive"] = res[name]["largest_bytes"] / naive

    # Real tensors: the tiled result must equal the naive one (and the accounting still holds).
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, T, d, generator=g).to(device) for _ in range(3))
    t0 = time.perf_counter()
    ref_bytes, _ = ta.largest_intermediate_bytes(ta.tiled_attention_naive, q, k, v, True)
    ref = ta.tiled_attention_naive(q, k, v, True)
    t1 = time.perf_counter()
    out = ta.tiled_attention(q, k, v, True, block_q=128, block_k=128)
    t2 = time.perf_counter()
    res["real_run"] = {
        "device": device,
        "naive_largest_bytes_measured": ref_bytes,
        "max_abs_diff_tiled_vs_naive": (out - ref).abs().max().item(),
        "seconds_naive_twice": round(t1 - t0, 2),
        "seconds_tiled_128": round(t2 - t1, 2),
    }
    if device == "cuda":
        res["cuda_peak_extra_bytes"] = cuda_peak_extra(q, k, v)
    return res


def cuda_peak_extra(q, k, v) -> dict:
    """Peak allocator memory above the inputs for each implementation (batch 1, one head)."""
    q4, k4, v4 = (x[None] for x in (q, k, v))  # (1, 1, T, d) for the kernel and SDPA
    fns = {
        "naive": lambda: ta.tiled_attention_naive(q, k, v, True),
        "tiled_bq=128_bk=128": lambda: ta.tiled_attention(q, k, v, True, block_q=128, block_k=128),
        "sdpa": lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=True),
    }
    if ft.TRITON_AVAILABLE:
        fns["triton"] = lambda: ft.flash_attention(q4, k4, v4, True)
    out = {}
    for name, fn in fns.items():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        r = fn()
        torch.cuda.synchronize()
        out[name] = torch.cuda.max_memory_allocated() - base
        del r
    return out


def cuda_time_ms(fn, reps: int = 10) -> float:
    """Median of ``reps`` timed calls (CUDA events) after 3 warm-up calls."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def speed_at(T: int, d: int, heads: int, tokens: int) -> dict:
    """Time SDPA and the best Triton configuration at one sequence length (fp16, causal)."""
    B = max(1, tokens // T)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(B, heads, T, d, generator=g, device="cuda", dtype=torch.float16)
        for _ in range(3)
    )
    flops = 4 * B * heads * T * T * d / 2  # two matmuls, causal: half the tiles
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ms_sdpa = cuda_time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    best = None
    for bm, bn, nw, ns in CONFIGS:

        def run(bm=bm, bn=bn, nw=nw, ns=ns):
            return ft.flash_attention(
                q, k, v, True, block_m=bm, block_n=bn, num_warps=nw, num_stages=ns
            )

        try:
            err = (run().float() - ref.float()).abs().max().item()
            ms = cuda_time_ms(run)
        except Exception as exc:  # e.g. out of shared memory for a large tile
            print(f"T={T} config {(bm, bn, nw, ns)} failed: {exc}", file=sys.stderr)
            continue
        if best is None or ms < best["ms_triton"]:
            best = {"ms_triton": ms, "config": [bm, bn, nw, ns], "max_abs_err_vs_sdpa": err}
    row = {
        "T": T,
        "B": B,
        "H": heads,
        "d": d,
        "dtype": "float16",
        "causal": True,
        "ms_sdpa": ms_sdpa,
        "tflops_sdpa": flops / ms_sdpa / 1e9,
    }
    if best is not None:
        row.update(
            best,
            tflops_triton=flops / best["ms_triton"] / 1e9,
            fraction_of_sdpa=ms_sdpa / best["ms_triton"],
        )
    return row


def speed_section(lengths, d: int = 128, heads: int = 16, tokens: int = 16384) -> list[dict]:
    rows = []
    for T in lengths:
        row = speed_at(T, d, heads, tokens)
        rows.append(row)
        print(
            f"T={T:6d}: SDPA {row['tflops_sdpa']:.0f} TFLOP/s"
            + (
                f", Triton {row['tflops_triton']:.0f} TFLOP/s "
                f"({row['fraction_of_sdpa']:.2f} of SDPA)"
                if "ms_triton" in row
                else ", Triton failed"
            )
        )
    return rows


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small CPU-sized run (T = 1024)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON file to write (default on CUDA: data/gpu_timings_attention.json)",
    )
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    result = {"benchmark": "attention (chapter 26)", "hardware": hardware(), "quick": args.quick}
    T_mem = 1024 if args.quick else 8192
    result["memory"] = memory_section(T_mem, 64, device)
    mem = result["memory"]
    for name in ("naive", f"tiled_bq=all_bk={T_mem // 16}", "tiled_bq=128_bk=128"):
        print(
            f"T={T_mem} {name:22s} largest tensor {mem[name]['largest_bytes'] / 2**20:9.2f} MiB"
            f"  ({mem[name]['fraction_of_naive']:.4f} of naive)"
        )
    print(
        f"tiled vs naive max |diff| on {device}: "
        f"{mem['real_run']['max_abs_diff_tiled_vs_naive']:.1e}"
    )
    if cuda and ft.TRITON_AVAILABLE:
        lengths = [1024, 4096] if args.quick else [1024, 4096, 16384]
        result["speed"] = speed_section(lengths)
    else:
        result["speed"] = None
        print(
            "speed sweep skipped: it needs a CUDA GPU and Triton"
            + ("" if ft.TRITON_AVAILABLE else f" ({ft.TRITON_MESSAGE})")
        )
    out = args.out or (ROOT / "data" / "gpu_timings_attention.json" if cuda else None)
    text = json.dumps(result, indent=2)
    if out is None:
        print(text)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
        print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
