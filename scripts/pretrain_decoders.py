"""Pretrain the two decoders that chapters 33-44 start from; writes src/mlbook/data/decoders.pt.

Both are Llama-form decoders (RMSNorm, RoPE, SwiGLU) trained with the book's training loop
(chapter 23) on sentences of the toy corpus mixed with one-digit sums that are right half of the
time (mlbook.posttraining.task.pretraining_text). Run: python scripts/pretrain_decoders.py
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import torch

from mlbook.models import training
from mlbook.models.config import llama_config
from mlbook.models.decoder import Decoder
from mlbook.posttraining import task

OUT = Path(__file__).resolve().parents[1] / "src" / "mlbook" / "data" / "decoders.pt"
TEXT = dict(n_sentences=3000, n_sums=3000, correct_rate=0.5, seed=0)
MODELS = {
    "base": dict(d_model=64, n_layers=2, n_heads=4, steps=1500, peak_lr=3e-3),
    "draft": dict(d_model=32, n_layers=1, n_heads=2, steps=1000, peak_lr=5e-3),
}
BATCH, WINDOW = 32, 64


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(2)
    data = task.encode(task.pretraining_text(**TEXT))
    n_train = int(0.95 * len(data))
    train, val = data[:n_train], data[n_train:]
    stored = {}
    for name, m in MODELS.items():
        cfg = llama_config(
            len(task.VOCAB),
            m["d_model"],
            m["n_layers"],
            m["n_heads"],
            max_seq_len=WINDOW,
            name=name,
        )
        model = Decoder(cfg, generator=torch.Generator().manual_seed(0))
        start = time.perf_counter()
        hist = training.train(
            model,
            train,
            steps=m["steps"],
            batch_size=BATCH,
            peak_lr=m["peak_lr"],
            warmup_steps=100,
            generator=torch.Generator().manual_seed(1),
        )
        seconds = time.perf_counter() - start
        model.eval()
        val_loss = training.evaluate(model, val)
        acc = task.accuracy(model, task.problems())
        sampled = task.accuracy(
            model,
            task.problems(),
            n=20,
            temperature=1.0,
            generator=torch.Generator().manual_seed(2),
        )
        info = dict(
            steps=m["steps"],
            batch_size=BATCH,
            window=WINDOW,
            peak_lr=m["peak_lr"],
            final_train_loss=sum(hist["loss"][-50:]) / 50,
            val_loss=val_loss,
            greedy_accuracy=acc,
            sampled_accuracy=sampled,
            seconds=seconds,
            **TEXT,
        )
        print(name, {k: round(v, 4) if isinstance(v, float) else v for k, v in info.items()})
        stored[name] = {
            "config": asdict(cfg),
            "info": info,
            "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
        }
    torch.save(stored, OUT)
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
