"""Fine-tune the stored base decoder with LoRA of rank 1-16 and in full; writes
src/mlbook/data/lora_sweep.json (chapter 33).

Every run starts from ``checkpoints.load("base")`` and trains with ``sft.finetune`` on the 70
training problems of the addition task; it is measured on the 30 held-out problems (greedy and
sampled accuracy, masked NLL of the right answers). LoRA goes on the query and value projections
(Hu et al.'s choice) or on all seven projections of every layer, ranks 1, 2, 4, 8, 16, three
seeds each; full fine-tuning trains every weight. One thread, as in the chapter, so that the
chapter's rerun of one configuration reproduces the stored numbers.
Run: python scripts/lora_sweep.py (about a minute on two cores).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from mlbook.models import checkpoints
from mlbook.posttraining import lora, sft, task

OUT = Path(__file__).resolve().parents[1] / "src" / "mlbook" / "data" / "lora_sweep.json"
SETTINGS = dict(
    steps=40,
    batch_size=32,
    lr_lora=2e-3,
    lr_full=3e-4,
    alpha=8.0,
    n_samples=16,
    ranks=[1, 2, 4, 8, 16],
    seeds=[0, 1, 2],
    targets={"qv": ["q", "v"], "all": list(lora.TARGETS)},
)


def run(seed: int, r: int | None = None, targets=None) -> dict:
    """One fine-tune (LoRA of rank r on ``targets``, or full when r is None) and its metrics."""
    s = SETTINGS
    train, test = task.split()
    model = checkpoints.load("base")
    if r is not None:
        lora.add_lora(model, r, s["alpha"], targets, torch.Generator().manual_seed(seed))
    trainable = lora.trainable_parameters(model)
    losses = sft.finetune(
        model,
        train,
        steps=s["steps"],
        lr=s["lr_lora"] if r is not None else s["lr_full"],
        batch_size=s["batch_size"],
        generator=torch.Generator().manual_seed(seed),
    )
    out = sft.metrics(
        model, test, n=s["n_samples"], generator=torch.Generator().manual_seed(1000 + seed)
    )
    out.update(trainable=trainable, final_loss=losses[-1])
    out["train_nll"] = sft.sft_loss(model, *task.batch(train)).item()
    return out


def main() -> None:
    torch.set_num_threads(1)
    start = time.perf_counter()
    s = SETTINGS
    base = sft.metrics(
        checkpoints.load("base"),
        task.split()[1],
        n=s["n_samples"],
        generator=torch.Generator().manual_seed(1000),
    )
    runs = []
    for seed in s["seeds"]:
        runs.append(dict(kind="full", r=None, seed=seed, **run(seed)))
        for name, targets in s["targets"].items():
            for r in s["ranks"]:
                runs.append(dict(kind=name, r=r, seed=seed, **run(seed, r, targets)))
                print(runs[-1])
    seconds = time.perf_counter() - start
    OUT.write_text(
        json.dumps(dict(settings=s, base=base, runs=runs, seconds=seconds), indent=1) + "\n"
    )
    print(f"wrote {OUT} in {seconds:.0f} s")


if __name__ == "__main__":
    main()
