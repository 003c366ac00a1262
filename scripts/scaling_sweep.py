"""A small scaling sweep of the book's decoder: model sizes x token budgets (chapter 29).

Trains the book's one decoder (:mod:`mlbook.models`) on characters of the book's training corpus
(:func:`mlbook.language.language_model.toy_corpus`: fresh sentences, so no run sees a window
twice on purpose), five widths x four token budgets, and scores every run on the same held-out
text. The runs of one width share a trunk: warmup-stable-decay (:func:`mlbook.nn.schedules.
warmup_stable_decay`) trains at a constant rate, and for each budget of S updates a copy of the
model and its optimizer leaves the trunk after 0.8 S updates and decays the rate linearly to zero
over the last 0.2 S. Each branch is a complete run of S updates with its own schedule, at a
fraction of the cost of separate runs (Hägele et al., 2024). A second seed repeats every width at
the second budget, to measure the seed-to-seed spread of the final loss.

It writes ``src/mlbook/data/scaling_sweep.json``: the settings, and per run its configuration,
parameter counts, tokens, training FLOPs (the exact matrix-product count and 6ND), the FLOPs of
one update as ``FlopCounterMode`` measured them, the seeds and the final held-out loss.
Chapter 29 loads that file and fits scaling laws to it.

Run from the repository root (a few minutes on one CPU core):

    python scripts/scaling_sweep.py
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch

from mlbook.language import language_model as lm
from mlbook.models import counting, decoder, training
from mlbook.models.config import DecoderConfig
from mlbook.nn.schedules import warmup_stable_decay

OUT = Path(__file__).resolve().parent.parent / "src" / "mlbook" / "data" / "scaling_sweep.json"

WIDTHS = (8, 16, 24, 32, 48)  # d_model; head width 8, so H = d / 8
N_LAYERS = 1
BUDGETS = (96, 192, 384, 768)  # updates S of a run; tokens D = S x batch x context
COOLDOWN = 0.2  # the last fifth of a run decays the rate linearly to zero
WARMUP = 32  # updates of linear warmup, shared by every run of a width
SEQ_LEN, BATCH = 64, 16
TRAIN_SENTENCES, VAL_SENTENCES = 30000, 400
CORPUS_SEEDS = {"train": 1, "validation": 2}
SEEDS = ({"init": 0, "batches": 1}, {"init": 100, "batches": 101})  # the second: BUDGETS[1]


def peak_lr(d_model: int) -> float:
    """The peak learning rate of a width: 0.02 sqrt(64 / d), chosen by a short pilot."""
    return 0.02 * (64 / d_model) ** 0.5


def optimizer(model: decoder.Decoder, lr: float) -> torch.optim.AdamW:
    """AdamW as :func:`mlbook.models.training.train` sets it up: decay on matrices only."""
    groups = [
        {"params": [p for p in model.parameters() if p.ndim >= 2], "weight_decay": 0.1},
        {"params": [p for p in model.parameters() if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), foreach=True)


def update(model, opt, lr: float, data: torch.Tensor, gen: torch.Generator) -> float:
    """One update of :func:`mlbook.models.training.train` at rate lr; returns the batch loss."""
    for group in opt.param_groups:
        group["lr"] = lr
    x, y = training.get_batch(data, BATCH, SEQ_LEN, gen)  # (B, T) each
    loss = training.lm_loss(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


def sweep_width(cfg, budgets, seeds, train_data, val_data, log) -> list[dict]:
    """The runs of one width: a constant-rate trunk, one decaying branch per budget."""
    model = decoder.Decoder(cfg, generator=torch.Generator().manual_seed(seeds["init"]))
    gen = torch.Generator().manual_seed(seeds["batches"])
    lr = peak_lr(cfg.d_model)
    opt = optimizer(model, lr)
    n_params = counting.count_parameters(cfg, embeddings=False)
    records, done = [], 0
    for S in sorted(budgets):
        stable_end = round((1 - COOLDOWN) * S)  # the branch leaves the trunk here
        for t in range(done, stable_end):  # the trunk: warmup, then the constant rate
            update(
                model,
                opt,
                warmup_stable_decay(
                    t, peak_lr=lr, warmup_steps=WARMUP, stable_steps=10**9, decay_steps=1
                ),
                train_data,
                gen,
            )
        done = stable_end
        branch, branch_opt = copy.deepcopy((model, opt))  # the optimizer follows its copy
        branch_gen = torch.Generator().set_state(gen.get_state())
        for t in range(stable_end, S):
            rate = warmup_stable_decay(
                t,
                peak_lr=lr,
                warmup_steps=WARMUP,
                stable_steps=stable_end - WARMUP,
                decay_steps=S - stable_end,
            )
            last = update(branch, branch_opt, rate, train_data, branch_gen)
        branch.eval()
        tokens = S * BATCH * SEQ_LEN
        records.append(
            {
                "d_model": cfg.d_model,
                "n_layers": cfg.n_layers,
                "n_heads": cfg.n_heads,
                "d_ff": cfg.d_ff,
                "params": n_params,
                "params_total": counting.count_parameters(cfg),
                "steps": S,
                "tokens": tokens,
                "flops": S * counting.training_flops(cfg, SEQ_LEN, BATCH),
                "flops_6nd": counting.approx_training_flops(n_params, tokens),
                "peak_lr": lr,
                "seed_init": seeds["init"],
                "seed_batches": seeds["batches"],
                "last_batch_loss": last,
                "val_loss": training.evaluate(branch, val_data),
            }
        )
        log(records[-1])
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where to write the JSON")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()

    def log(r):
        print(
            f"d = {r['d_model']:3d}, N = {r['params']:6d}, D = {r['tokens']:7d}, seed "
            f"{r['seed_init']}: held-out loss {r['val_loss']:.4f} "
            f"({time.perf_counter() - start:.0f} s)",
            flush=True,
        )

    train_text = lm.toy_corpus(TRAIN_SENTENCES, seed=CORPUS_SEEDS["train"])
    val_text = lm.toy_corpus(VAL_SENTENCES, seed=CORPUS_SEEDS["validation"])
    vocab = lm.build_vocab(train_text + val_text)
    train_data, val_data = lm.encode(train_text, vocab), lm.encode(val_text, vocab)
    runs = []
    for d in WIDTHS:
        cfg = DecoderConfig(len(vocab), d, N_LAYERS, d // 8, max_seq_len=SEQ_LEN)
        probe = decoder.Decoder(cfg, generator=torch.Generator().manual_seed(0))
        x = train_data[: BATCH * SEQ_LEN].view(BATCH, SEQ_LEN)  # (B, T): one batch
        measured = counting.measure_training_flops(probe, x)
        for k, seeds in enumerate(SEEDS):
            budgets = BUDGETS if k == 0 else BUDGETS[1:2]
            for record in sweep_width(cfg, budgets, seeds, train_data, val_data, log):
                record["flops_measured_per_step"] = measured
                record["replicate"] = bool(k)
                runs.append(record)
    out = {
        "description": "Scaling sweep of the book's decoder on characters of toy_corpus "
        "(chapter 29), written by scripts/scaling_sweep.py",
        "command": "python scripts/scaling_sweep.py",
        "corpus": {
            "generator": "mlbook.language.language_model.toy_corpus",
            "train_sentences": TRAIN_SENTENCES,
            "validation_sentences": VAL_SENTENCES,
            "seeds": CORPUS_SEEDS,
            "train_tokens": int(train_data.numel()),
            "validation_tokens": int(val_data.numel()),
        },
        "vocab_size": len(vocab),
        "seq_len": SEQ_LEN,
        "batch_size": BATCH,
        "n_layers": N_LAYERS,
        "schedule": f"AdamW (0.9, 0.95), weight decay 0.1 on matrices, clip 1; {WARMUP} warmup "
        f"updates, constant peak_lr = 0.02 sqrt(64 / d_model), linear decay to 0 over the last "
        f"{COOLDOWN:.0%} of each run",
        "dtype": "float32",
        "seconds": round(time.perf_counter() - start, 1),
        "runs": runs,
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(runs)} runs, {out['seconds']} s)")


if __name__ == "__main__":
    main()
