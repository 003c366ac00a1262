"""Train the small vision transformer of chapter 31 and its comparisons on the 8 x 8 digits.

Every model is trained from scratch with :func:`mlbook.nn.fit.fit_classifier` (AdamW,
cross-entropy, the same steps, learning rate and minibatches) on the training part of
:func:`mlbook.datasets.digits` and scored on its test part, for several seeds:

- the chapter's ViT (:class:`mlbook.architectures.vit.ViT`, 2 x 2 patches) with a [CLS] token
  and with mean pooling;
- the same ViT with patches of 1, 4 and 8 pixels (64, 4 and 1 patches);
- an MLP and a small CNN of (nearly) the same parameter count (``vit.small_mlp``,
  ``vit.small_cnn``).

It writes ``src/mlbook/data/vit_digits.json``: the settings, and per run the model, patch size,
pooling, seed, parameter count, forward FLOPs per image (ViTs), the test and training accuracy
and the loss of every step. Chapter 31 trains the seed-0 ViT itself and checks that it matches
the stored run.

Run from the repository root (a few minutes on one quiet CPU core; each run is printed):

    python scripts/train_vit_digits.py
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from mlbook.architectures import vit
from mlbook.datasets import digits
from mlbook.nn.fit import accuracy, fit_classifier

OUT = Path(__file__).resolve().parent.parent / "src" / "mlbook" / "data" / "vit_digits.json"

#: The chapter's ViT: 8 x 8 images, 2 x 2 patches (16 of them), width 16, two layers of two heads.
CONFIG = vit.ViTConfig(
    image_size=8, patch_size=2, channels=1, d_model=16, n_layers=2, n_heads=2, d_ff=32
)
SETTINGS = {"steps": 200, "lr": 1e-2, "batch_size": 64, "weight_decay": 0.0}


def build(kind: str, seed: int, patch: int = 2, pool: str = "cls") -> torch.nn.Module:
    """The model of one run; its initialisation is seeded by ``seed``."""
    if kind == "vit":
        cfg = replace(CONFIG, patch_size=patch, pool=pool)
        return vit.ViT(cfg, generator=torch.Generator().manual_seed(seed))
    torch.manual_seed(seed)  # torch.nn layers draw from the global generator
    return vit.small_mlp() if kind == "mlp" else vit.small_cnn()


def runs(seeds: int) -> list[dict]:
    """The (kind, patch, pool, seed) of every run."""
    out = []
    for seed in range(seeds):
        out += [dict(kind="vit", patch=2, pool=pool, seed=seed) for pool in ("cls", "mean")]
        out += [dict(kind="vit", patch=p, pool="cls", seed=seed) for p in (1, 4, 8)]
        out += [dict(kind=k, patch=None, pool=None, seed=seed) for k in ("mlp", "cnn")]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5, help="seeds per model (default 5)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    data = digits()
    results = []
    for run in runs(args.seeds):
        model = build(run["kind"], run["seed"], run["patch"] or 2, run["pool"] or "cls")
        start = time.perf_counter()
        losses = fit_classifier(model, data.x_train, data.y_train, seed=run["seed"], **SETTINGS)
        flops = None
        if run["kind"] == "vit":
            flops = vit.forward_flops(model.config)["total"]
        row = {
            **run,
            "params": sum(p.numel() for p in model.parameters()),
            "flops_per_image": flops,
            "test_accuracy": accuracy(model, data.x_test, data.y_test),
            "train_accuracy": accuracy(model, data.x_train, data.y_train),
            "loss": [float(f"{v:.4g}") for v in losses],
        }
        results.append(row)
        print(
            f"{run['kind']:<4} P={run['patch']} pool={run['pool']} seed={run['seed']}: "
            f"{row['params']} parameters, test accuracy {row['test_accuracy']:.4f} "
            f"({time.perf_counter() - start:.1f} s)",
            flush=True,
        )
    out = {
        "config": asdict(CONFIG),
        "settings": SETTINGS,
        "data": "mlbook.datasets.digits(test_fraction=0.25, seed=0)",
        "runs": results,
    }
    OUT.write_text(json.dumps(out, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({OUT.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
