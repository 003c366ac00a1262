"""Train the book's RNN, LSTM and GRU to recall a symbol after a delay (chapter 46).

Each model (:class:`mlbook.beyond.recurrent.SequenceClassifier`: the book's own recurrent cells,
read out at the last step) learns the task of :func:`mlbook.beyond.recurrent.delay_recall`: a
symbol, then ``delay`` blank tokens, then a query; the answer is the symbol. Every run trains
from scratch with :func:`mlbook.nn.fit.fit_classifier` (AdamW, cross-entropy) on the same
training sequences and is scored on the same held-out sequences, for several delays.

It writes ``src/mlbook/data/delay_recall.json``: the settings, and per run the kind of cell, the
forget-gate bias, the delay, the loss of every update and the held-out accuracy. Chapter 46 plots
them, and retrains two of the runs (delay 40) for their first updates to check that its own code
reproduces the stored losses.

Run from the repository root (about ten minutes on one quiet CPU core; each run is printed):

    python scripts/train_delay_recall.py
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from mlbook.beyond import recurrent as rec
from mlbook.nn.fit import accuracy, fit_classifier

OUT = Path(__file__).resolve().parent.parent / "src" / "mlbook" / "data" / "delay_recall.json"

SETTINGS = {
    "n_symbols": 4,  # symbols to remember; chance accuracy 1/4
    "n_noise": 1,  # one blank token fills the delay
    "hidden_size": 16,
    "n_train": 1024,
    "n_test": 512,
    "data_seeds": {"train": 1, "test": 2},
    "steps": 300,
    "lr": 1e-2,
    "batch_size": 64,
    "seed_init": 0,
    "seed_batches": 0,
}
DELAYS = (5, 10, 20, 40, 80)
MODELS = (("rnn", 0.0), ("gru", 0.0), ("lstm", 0.0), ("lstm", 1.0), ("lstm", 3.0))  # kind, b_f


def data(delay: int, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The training or test sequences of one delay."""
    s = SETTINGS
    return rec.delay_recall(
        s[f"n_{split}"], delay, s["n_symbols"], s["n_noise"], seed=s["data_seeds"][split]
    )


def model(kind: str, forget_bias: float) -> rec.SequenceClassifier:
    """A fresh model, initialised from the settings' seed."""
    s = SETTINGS
    vocab = s["n_symbols"] + s["n_noise"] + 1
    return rec.SequenceClassifier(
        kind,
        vocab,
        s["hidden_size"],
        s["n_symbols"],
        forget_bias=forget_bias,
        seed=s["seed_init"],
    )


def run(kind: str, forget_bias: float, delay: int) -> dict:
    """Train one model from scratch and return its record."""
    torch.set_num_threads(1)
    net = model(kind, forget_bias)
    x, y = data(delay, "train")
    losses = fit_classifier(
        net,
        x,
        y,
        steps=SETTINGS["steps"],
        lr=SETTINGS["lr"],
        batch_size=SETTINGS["batch_size"],
        seed=SETTINGS["seed_batches"],
    )
    return {
        "kind": kind,
        "forget_bias": forget_bias,
        "delay": delay,
        "losses": [float(f"{v:.5g}") for v in losses],
        "test_accuracy": accuracy(net, *data(delay, "test")),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--delays", type=int, nargs="+", default=list(DELAYS))
    args = ap.parse_args()
    runs = []
    for delay in args.delays:
        for kind, forget_bias in MODELS:
            start = time.perf_counter()
            runs.append(run(kind, forget_bias, delay))
            r = runs[-1]
            print(
                f"delay {delay:3d} {kind:4s} (forget bias {forget_bias:g}): loss "
                f"{r['losses'][0]:.3f} -> {sum(r['losses'][-20:]) / 20:.3f}, test accuracy "
                f"{r['test_accuracy']:.3f} ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
    out = {"settings": SETTINGS, "delays": args.delays, "runs": runs}
    args.out.write_text(json.dumps(out, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
