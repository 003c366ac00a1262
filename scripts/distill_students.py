"""Distil the base decoder into a small student; writes src/mlbook/data/distilled_students.pt.

Two students of the draft model's shape (d = 32, one layer), initialised identically, are trained
for the same updates on the same windows of the text the teacher was pretrained on
(mlbook.posttraining.task.pretraining_text): one on the hard next-token labels, one on the
teacher's soft targets (T^2 KL, eq. 38.2). The teacher is the stored "base" model
(mlbook.models.checkpoints). Run: python scripts/distill_students.py (a few minutes on two cores).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import torch

from mlbook.models import checkpoints, training
from mlbook.models.decoder import Decoder
from mlbook.posttraining import distillation, task

OUT = Path(__file__).resolve().parents[1] / "src" / "mlbook" / "data" / "distilled_students.pt"
TEXT = dict(n_sentences=3000, n_sums=3000, correct_rate=0.5, seed=0)  # the teacher's text
SETTINGS = dict(steps=1000, batch_size=16, peak_lr=5e-3, warmup_steps=100, temperature=1.0)


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(2)
    data = task.encode(task.pretraining_text(**TEXT))
    n_train = int(0.95 * len(data))  # the teacher's split: the last 5 % is held out
    train, val = data[:n_train], data[n_train:]
    teacher = checkpoints.load("base")
    cfg = checkpoints.config("draft")
    s = dict(SETTINGS)
    weights, history, held_out, seconds = {}, {}, {}, {}
    for name in distillation.STUDENTS:
        student = Decoder(cfg, generator=torch.Generator().manual_seed(0))  # fresh, same init
        start = time.perf_counter()
        history[name] = distillation.train_student(
            student,
            train,
            steps=s["steps"],
            batch_size=s["batch_size"],
            peak_lr=s["peak_lr"],
            warmup_steps=s["warmup_steps"],
            generator=torch.Generator().manual_seed(1),
            teacher=teacher if name == "soft" else None,
            temperature=s["temperature"],
        )
        seconds[name] = time.perf_counter() - start
        held_out[name] = training.evaluate(student, val)
        weights[name] = {k: v.detach().clone() for k, v in student.state_dict().items()}
        print(
            name,
            f"held-out loss {held_out[name]:.4f},",
            f"greedy accuracy {task.accuracy(student, task.problems()):.2f},",
            f"{seconds[name]:.0f} s",
        )
    held_out["teacher"] = training.evaluate(teacher, val)
    info = dict(
        **s,
        text=TEXT,
        teacher="base",
        student_config="draft",
        held_out=held_out,
        history=history,
        seconds=seconds,
    )
    torch.save({"config": asdict(cfg), "weights": weights, "info": info}, OUT)
    print(f"teacher held-out loss {held_out['teacher']:.4f}")
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
