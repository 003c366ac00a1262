"""Benchmark of chapter 24: greedy decoding with a KV cache vs recomputing the whole prefix.

Usage (from the repository root, with the package installed, e.g. ``pip install -e .``):

    python benchmarks/kv_cache.py --quick     # 256 generated tokens, well under a minute on a CPU
    python benchmarks/kv_cache.py             # 1,024 generated tokens (the recomputation is slow)

What it measures
    The book's decoder in a small Llama form (``mlbook.models.decoder.Decoder``: V = 256, D = 128,
    L = 2, H = 4 query heads, G = 2 key/value heads, F = 384, float32, random weights) generates
    ``--new`` tokens greedily after a 16-token prompt, once with the KV cache
    (``generate(..., use_cache=True)``) and once recomputing every step over the whole sequence
    (``use_cache=False``). Both must produce the same tokens. Recorded: wall-clock seconds and
    tokens per second of each, the speedup, and the exact matrix-multiply FLOPs of each method
    (``generation_flops``), with the hardware (device name, torch version, threads).

Runs on CUDA when available, else on the CPU. The JSON is printed; ``--out FILE`` also writes it
(on CUDA the default file is ``data/gpu_timings_kv_cache.json``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time
from pathlib import Path

import torch

from mlbook.models.config import DecoderConfig
from mlbook.models.counting import generation_flops
from mlbook.models.decoder import Decoder
from mlbook.models.generate import generate

ROOT = Path(__file__).resolve().parents[1]
CONFIG = DecoderConfig(
    vocab_size=256,
    d_model=128,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    d_ff=384,
    max_seq_len=16384,
    name="benchmark decoder",
)
PROMPT_LEN = 16


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def hardware(device: str) -> dict:
    cuda = device == "cuda"
    return {
        "device": torch.cuda.get_device_name(0) if cuda else cpu_name(),
        "cpu_count": os.cpu_count(),
        "device_type": device,
        "cuda_version": torch.version.cuda if cuda else None,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
    }


def timed_generate(model, prompt, n_new: int, use_cache: bool, device: str):
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = generate(model, prompt, n_new, use_cache=use_cache)
    if device == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="generate 256 tokens, not 1,024")
    parser.add_argument("--new", type=int, default=None, help="tokens to generate")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    n_new = args.new or (256 if args.quick else 1024)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    start = time.perf_counter()

    torch.manual_seed(0)
    model = Decoder(CONFIG, generator=torch.Generator().manual_seed(0)).to(device)
    prompt = torch.randint(
        0, CONFIG.vocab_size, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(1)
    ).to(device)
    generate(model, prompt, 8, use_cache=True)  # warm-up (kernels, allocator)
    generate(model, prompt, 8, use_cache=False)

    cached, s_cached = timed_generate(model, prompt, n_new, True, device)
    print(f"cached:     {n_new} tokens in {s_cached:7.2f} s = {n_new / s_cached:8.1f} tokens/s")
    recomputed, s_recomp = timed_generate(model, prompt, n_new, False, device)
    print(f"recomputed: {n_new} tokens in {s_recomp:7.2f} s = {n_new / s_recomp:8.1f} tokens/s")
    same = bool(torch.equal(cached, recomputed))
    f_cached = generation_flops(CONFIG, PROMPT_LEN, n_new, True)
    f_recomp = generation_flops(CONFIG, PROMPT_LEN, n_new, False)
    print(
        f"speedup {s_recomp / s_cached:.1f}x measured, {f_recomp / f_cached:.1f}x in FLOPs; "
        f"same tokens: {same}"
    )

    result = {
        "benchmark": "KV cache vs recomputation (chapter 24)",
        "hardware": hardware(device),
        "config": {
            k: getattr(CONFIG, k)
            for k in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff")
        },
        "dtype": "float32",
        "prompt_len": PROMPT_LEN,
        "generated_tokens": n_new,
        "seconds_cached": s_cached,
        "seconds_recomputed": s_recomp,
        "tokens_per_s_cached": n_new / s_cached,
        "tokens_per_s_recomputed": n_new / s_recomp,
        "speedup": s_recomp / s_cached,
        "flops_cached": f_cached,
        "flops_recomputed": f_recomp,
        "flop_ratio": f_recomp / f_cached,
        "same_tokens": same,
        "script_seconds": round(time.perf_counter() - start, 1),
    }
    out = args.out or (ROOT / "data" / "gpu_timings_kv_cache.json" if device == "cuda" else None)
    text = json.dumps(result, indent=2)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
        print(f"wrote {out}")
    if not same:
        raise SystemExit("cached and recomputed decoding produced different tokens")
    return result


if __name__ == "__main__":
    main()
