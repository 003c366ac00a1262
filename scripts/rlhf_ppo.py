"""RLHF with PPO on the book's pretrained decoder, for several KL weights beta (chapter 35).

Every run starts from the stored ``"base"`` decoder (:func:`mlbook.models.checkpoints.load`),
keeps a frozen copy as the reference, and runs :func:`mlbook.posttraining.rlhf.rlhf_ppo` on the
70 training problems of :func:`mlbook.posttraining.task.split`: the exact-match reward minus
beta log(pi_old / pi_ref), a per-prompt baseline, the clipped surrogate. After training it
measures the sampled (tau = 1) accuracy on the training and the held-out problems.

It writes ``src/mlbook/data/rlhf_ppo.json``: the settings, and per beta the mean reward, the KL
estimate and the clipped fraction of every iteration, the held-out greedy accuracy after every
iteration, and the final sampled accuracies. Chapter 35 plots them and reruns the first
iterations of one run to check that its own code reproduces the stored numbers.

Run from the repository root (about three minutes on one quiet CPU core):

    python scripts/rlhf_ppo.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from mlbook.models import checkpoints
from mlbook.posttraining import rlhf, task

OUT = Path(__file__).resolve().parent.parent / "src" / "mlbook" / "data" / "rlhf_ppo.json"

SETTINGS = {
    "betas": [0.1, 0.5, 1.0],
    "iterations": 60,
    "group_size": 4,
    "epochs": 2,
    "eps": 0.2,
    "lr": 3e-4,
    "seed": 0,
    "eval_samples": 8,  # completions per problem for the final sampled accuracies
}


def main() -> None:
    torch.set_num_threads(1)
    train, test = task.split()
    s = SETTINGS
    runs = []
    for beta in s["betas"]:
        t0 = time.time()
        torch.manual_seed(s["seed"])
        policy, reference = checkpoints.load("base"), checkpoints.load("base")
        hist = rlhf.rlhf_ppo(
            policy,
            reference,
            train,
            beta=beta,
            iterations=s["iterations"],
            group_size=s["group_size"],
            epochs=s["epochs"],
            eps=s["eps"],
            lr=s["lr"],
            seed=s["seed"],
            eval_pairs=test,
        )
        gen = torch.Generator().manual_seed(1)
        final = {
            name: task.accuracy(policy, pairs, s["eval_samples"], 1.0, gen)
            for name, pairs in (("train_sampled", train), ("test_sampled", test))
        }
        runs.append({"beta": beta, **hist, **final, "seconds": round(time.time() - t0, 1)})
        print(
            f"beta {beta}: reward {hist['reward'][0]:.3f} -> {hist['reward'][-1]:.3f}, "
            f"KL {hist['kl'][-1]:.3f}, held-out sampled accuracy {final['test_sampled']:.3f} "
            f"({time.time() - t0:.0f} s)"
        )
    OUT.write_text(json.dumps({"settings": s, "runs": runs}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
