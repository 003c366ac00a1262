"""Train the models of chapter 48 that do not fit its run-time budget; store them as JSON.

    python scripts/train_self_supervised.py          # about 3 minutes on one CPU core
    python scripts/train_self_supervised.py mae      # only the masked-autoencoder sweep

Writes ``src/mlbook/data/self_supervised.json`` (shipped with the package):

- ``mlm``: three copies of the book's decoder trained on the masked-LM loss (eq. 48.1) over
  words of the toy grammar (``lm.toy_corpus``): ``bidirectional`` (no causal mask, BERT's
  80/10/10 corruption), ``causal`` (the same with the causal mask: a control that sees only the
  left context) and ``mask only`` (no mask, every selected token replaced by [MASK]). For each:
  its weights (float16), its loss curve, and the settings; the vocabulary and the corpus
  settings are shared. The chapter loads the weights and recomputes every number it checks.
- ``mae``: the mask-ratio sweep of the MLP masked autoencoder on the digits (eq. 48.3), with
  the settings the chapter uses: for each ratio the linear-probe accuracy of its code and the
  loss on the masked patches of the test images.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from mlbook.architectures import vit
from mlbook.beyond import self_supervised as ssl
from mlbook.datasets import digits
from mlbook.language import language_model as lm
from mlbook.models.decoder import Decoder
from mlbook.nn.fit import linear_probe
from mlbook.teaching import setup

OUT = Path(__file__).resolve().parents[1] / "src" / "mlbook" / "data" / f"{ssl.RESULTS}.json"

CORPUS = {"n_sentences": 4000, "seed": 0, "train_fraction": 0.9}
MLM = {"steps": 2500, "batch_size": 64, "peak_lr": 3e-3, "warmup_steps": 100, "seed": 1}
MLM_RUNS = {
    "bidirectional": {"causal": False, "p_mask": 0.8, "p_random": 0.1},
    "causal": {"causal": True, "p_mask": 0.8, "p_random": 0.1},
    "mask only": {"causal": False, "p_mask": 1.0, "p_random": 0.0},
}
MAE = {
    "p": 2,
    "width": 256,
    "dim": 64,
    "steps": 200,
    "seed": 0,
    "ratios": [0.1, 0.25, 0.5, 0.75, 0.9],
}


def corpus():
    """Word ids of the toy grammar, its vocabulary, and the train / validation streams."""
    tokens = ssl.words(lm.toy_corpus(CORPUS["n_sentences"], seed=CORPUS["seed"]))
    vocab = lm.build_vocab(tokens)
    ids = lm.encode(tokens, vocab)
    n_train = int(CORPUS["train_fraction"] * len(ids))
    return vocab, ids[:n_train], ids[n_train:]


def train_mlms() -> dict:
    vocab, train, _ = corpus()
    cfg = ssl.mlm_config(len(vocab))
    runs = {}
    for name, run in MLM_RUNS.items():
        start = time.process_time()
        model = Decoder(cfg, generator=torch.Generator().manual_seed(0))
        losses = ssl.train_mlm(
            model,
            train,
            steps=MLM["steps"],
            generator=torch.Generator().manual_seed(MLM["seed"]),
            batch_size=MLM["batch_size"],
            peak_lr=MLM["peak_lr"],
            warmup_steps=MLM["warmup_steps"],
            **run,
        )
        every = 25  # the curve: mean loss of each block of 25 steps
        curve = [sum(losses[i : i + every]) / every for i in range(0, len(losses), every)]
        runs[name] = {
            **run,
            "loss_every_25": [round(v, 4) for v in curve],
            "state": ssl.pack_state(model),
        }
        print(f"mlm {name}: final loss {curve[-1]:.3f} ({time.process_time() - start:.0f} s)")
    config = {k: getattr(cfg, k) for k in ("d_model", "n_layers", "n_heads", "max_seq_len")}
    return {"corpus": CORPUS, "training": MLM, "config": config, "vocab": vocab, "runs": runs}


def mae_sweep() -> dict:
    ds = digits()
    p = MAE["p"]
    x_train, x_test = vit.patchify(ds.x_train, p), vit.patchify(ds.x_test, p)
    N, P = x_train.shape[1:]
    probe, test_loss = [], []
    for ratio in MAE["ratios"]:
        model = ssl.MaskedAutoencoder(
            N, P, MAE["width"], MAE["dim"], generator=torch.Generator().manual_seed(MAE["seed"])
        )
        ssl.train_mae(model, x_train, ratio=ratio, steps=MAE["steps"], seed=MAE["seed"])
        none_tr = torch.zeros(x_train.shape[:2], dtype=torch.bool)
        none_te = torch.zeros(x_test.shape[:2], dtype=torch.bool)
        mask = ssl.random_masking(len(x_test), N, ratio, torch.Generator().manual_seed(1))
        with torch.no_grad():
            code_tr, code_te = model.encode(x_train, none_tr), model.encode(x_test, none_te)
            loss = float(ssl.mae_loss(model(x_test, mask), x_test, mask))
        acc = linear_probe(code_tr, ds.y_train, code_te, ds.y_test)
        probe.append(round(acc, 4))
        test_loss.append(round(loss, 5))
        print(f"mae ratio {ratio}: probe {acc:.3f}, masked test loss {loss:.4f}")
    return {**MAE, "probe_accuracy": probe, "test_loss": test_loss}


def main() -> None:
    """Train everything, or only the part named on the command line (mae or mlm), keeping the
    other part of an existing results file."""
    setup(seed=0)
    parts = {"mae": mae_sweep, "mlm": train_mlms}
    only = sys.argv[1:] or list(parts)
    results = json.loads(OUT.read_text(encoding="utf-8")) if OUT.exists() else {}
    for name in only:
        results[name] = parts[name]()
    OUT.write_text(json.dumps(results, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({OUT.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
