"""Supervised fine-tuning (SFT): the next-token loss on the completion tokens only (chapter 33).

A demonstration is a prompt x followed by the completion y that the model should learn to
produce. The loss is the mean negative log-likelihood of the completion tokens (mask m_t = 1),
the prompt tokens masked out (eq. 33.1); its gradient with respect to the logits is the softmax
minus the one-hot target, weighted by m_t / M (eq. 33.2). :func:`finetune` trains a model on
the task's demonstrations with the book's AdamW; whatever the model leaves trainable is trained
(all weights, or only LoRA adapters after :func:`mlbook.posttraining.lora.add_lora`).

Shape legend
    B sequences;  T positions scored (the prediction t -> t + 1);  V vocabulary
    logits (B, T, V);  targets (B, T) int, the token at t + 1;  mask (B, T) float, m_t
    tokens (B, T + 1) int (a :func:`mlbook.posttraining.task.batch`), mask (B, T)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..nn.optim import Optimizer, OptimizerConfig
from ..validation import (
    float_tensor,
    index_tensor,
    nonempty,
    number,
    positive,
    positive_int,
    same_shape,
    shape_is,
)
from . import task

__all__ = [
    "masked_nll",
    "masked_nll_naive",
    "masked_nll_grad",
    "sft_loss",
    "finetune",
    "metrics",
]


def _masked_args(logits, targets, mask) -> torch.Tensor:
    """Checked arguments of eq. 33.1; returns the mask in the logits' dtype."""
    float_tensor(logits, "logits", ndim=3)
    index_tensor(targets, "targets", logits.shape[-1])
    shape_is(targets, "targets", logits.shape[:2])
    same_shape(mask, targets, ("mask", "targets"))
    m = mask.to(logits.dtype)
    positive(float(m.sum()), "M, the number of completion tokens in mask,")
    return m


def masked_nll(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """L = -(1/M) sum_t m_t log p(y_t | y_<t), M = sum_t m_t, over all B T positions.
    Implements eq. 33.1.

    logits: (B, T, V); targets: (B, T) ids; mask: (B, T), 1 on completion tokens, 0 on the
    prompt (and padding). Returns the scalar loss in nats.
    """
    m = _masked_args(logits, targets, mask)
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None].long())[..., 0]
    return -(m * logp).sum() / m.sum()  # (B, T) -> ()


def masked_nll_naive(logits, targets, mask) -> torch.Tensor:
    """Eq. 33.1 term by term: the softmax of each position written out, the masked ones skipped."""
    m = _masked_args(logits, targets, mask)
    total = logits.new_zeros(())
    for b in range(logits.shape[0]):
        for t in range(logits.shape[1]):
            if m[b, t] != 0:
                z = logits[b, t] - logits[b, t].max()  # (V,) shifted for exp
                total = total - m[b, t] * (z[targets[b, t]] - torch.log(torch.exp(z).sum()))
    return total / m.sum()


def masked_nll_grad(logits, targets, mask) -> torch.Tensor:
    """dL/dz_{t,k} = (m_t / M)(p_{t,k} - 1[k = y_t]), (B, T, V). Implements eq. 33.2."""
    m = _masked_args(logits, targets, mask)
    p = torch.softmax(logits, dim=-1)  # (B, T, V)
    onehot = torch.zeros_like(p).scatter_(-1, targets[..., None].long(), 1.0)
    return (m / m.sum())[..., None] * (p - onehot)


def sft_loss(model, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The masked loss (eq. 33.1) of ``model`` on demonstrations: one causal pass over
    tokens[:, :-1], scored against tokens[:, 1:].

    model: maps token ids (B, T) to logits (B, T, V) (the book's Decoder); tokens: (B, T + 1);
    mask: (B, T), as :func:`mlbook.posttraining.task.batch` returns them.
    """
    index_tensor(tokens, "tokens", ndim=2)
    return masked_nll(model(tokens[:, :-1]), tokens[:, 1:], mask)


def finetune(
    model,
    pairs: Sequence[tuple[int, int]],
    *,
    steps: int,
    lr: float,
    batch_size: int,
    generator: torch.Generator,
    weight_decay: float = 0.0,
    completions: Sequence[str] | None = None,
) -> list[float]:
    """Supervised fine-tuning on the demonstrations ``task.batch(pairs, completions)``.

    Each of ``steps`` updates draws ``batch_size`` demonstrations uniformly with replacement
    (from ``generator``) and takes one step of the book's AdamW (eq. 15.4, betas 0.9, 0.999) on
    :func:`sft_loss`, over the parameters with ``requires_grad`` (after ``lora.add_lora``: the
    adapters only). The model trains in place and is left in eval mode. Returns the loss of
    every step (before its update).
    """
    tokens, mask = task.batch(nonempty(pairs, "pairs"), completions)  # (N, 8), (N, 7)
    steps, batch_size = positive_int(steps, "steps"), positive_int(batch_size, "batch_size")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameter (requires_grad is False everywhere)")
    config = OptimizerConfig(
        "adamw", lr=positive(lr, "lr"), weight_decay=number(weight_decay, "weight_decay", 0.0)
    )
    opt = Optimizer(params, config)
    model.train()
    losses = []
    for _ in range(steps):
        idx = torch.randint(len(tokens), (batch_size,), generator=generator)  # (batch_size,)
        loss = sft_loss(model, tokens[idx], mask[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def metrics(
    model, pairs: Sequence[tuple[int, int]], *, n: int = 16, generator: torch.Generator
) -> dict[str, float]:
    """Quality on ``pairs``: ``greedy`` accuracy, ``sampled`` accuracy (``n`` samples per
    problem at temperature 1, from ``generator``) and ``nll``, the masked loss of the right
    answers (eq. 33.1)."""
    return {
        "greedy": task.accuracy(model, pairs),
        "sampled": task.accuracy(model, pairs, n, 1.0, generator),
        "nll": sft_loss(model, *task.batch(pairs)).item(),
    }
