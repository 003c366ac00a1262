"""Supervised fine-tuning (chapter 33): the masked loss, its gradient, the training loop."""

import pytest
import torch
import torch.nn.functional as F

from mlbook.models import checkpoints
from mlbook.posttraining import lora, sft, task

F64 = torch.float64


def _close(actual, expected, atol):
    """Max-abs agreement (torch.testing.assert_close costs seconds on its first call)."""
    err = (actual - expected).abs().max().item()
    assert actual.shape == expected.shape and err <= atol, f"max abs error {err:.3g} > {atol:g}"


def _logits(seed=0, B=3, T=5, V=7):
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(B, T, V, generator=gen, dtype=F64)
    y = torch.randint(V, (B, T), generator=gen)
    m = (torch.rand(B, T, generator=gen) < 0.6).to(F64)
    m[0, 0] = 1.0  # at least one completion token
    return z, y, m


def test_masked_nll_matches_cross_entropy_and_the_loop():
    z, y, m = _logits()
    per_token = F.cross_entropy(z.reshape(-1, 7), y.reshape(-1), reduction="none")  # (B T,)
    ref = (per_token * m.reshape(-1)).sum() / m.sum()
    _close(sft.masked_nll(z, y, m), ref, atol=1e-12)
    _close(sft.masked_nll_naive(z, y, m), ref, atol=1e-12)
    unmasked = F.cross_entropy(z.reshape(-1, 7), y.reshape(-1))
    assert abs(sft.masked_nll(z, y, torch.ones_like(m)) - unmasked) < 1e-12
    assert abs(sft.masked_nll(z, y, m) - unmasked) > 1e-3  # the mask matters


def test_logit_gradient_matches_autograd_in_float64():
    z, y, m = _logits(seed=1)
    z_ = z.clone().requires_grad_(True)
    sft.masked_nll(z_, y, m).backward()
    _close(sft.masked_nll_grad(z, y, m), z_.grad, atol=1e-14)
    assert not sft.masked_nll_grad(z, y, m)[m == 0].any()  # masked positions get no gradient


def test_bad_masks_and_targets_are_refused():
    z, y, m = _logits()
    with pytest.raises(ValueError, match="M, the number of completion tokens"):
        sft.masked_nll(z, y, torch.zeros_like(m))
    with pytest.raises(ValueError, match="mask and targets must have the same shape"):
        sft.masked_nll(z, y, m[:, :1])
    with pytest.raises(ValueError, match="targets must hold indices"):
        sft.masked_nll(z, y + 7, m)


def test_sft_loss_is_the_mean_completion_log_likelihood():
    model = checkpoints.load("base", F64)
    tokens, mask = task.batch(task.problems()[::9])
    ref = -task.completion_log_probs(model, tokens, mask).sum() / mask.sum()
    _close(sft.sft_loss(model, tokens, mask), ref, atol=1e-12)


def test_finetune_lowers_the_loss_and_moves_only_trainable_weights():
    train, _ = task.split()
    model = checkpoints.load("base")
    lora.add_lora(model, 2, 4.0, generator=torch.Generator().manual_seed(0))
    frozen = model.blocks[0].ffn.W.clone()
    before = sft.sft_loss(model, *task.batch(train)).item()
    losses = sft.finetune(
        model, train, steps=8, lr=3e-3, batch_size=16, generator=torch.Generator().manual_seed(0)
    )
    assert len(losses) == 8 and not model.training
    assert sft.sft_loss(model, *task.batch(train)).item() < before - 0.02
    assert torch.equal(model.blocks[0].ffn.W, frozen)
    again = checkpoints.load("base")
    lora.add_lora(again, 2, 4.0, generator=torch.Generator().manual_seed(0))
    assert (
        sft.finetune(
            again,
            train,
            steps=8,
            lr=3e-3,
            batch_size=16,
            generator=torch.Generator().manual_seed(0),
        )
        == losses
    )
    for p in again.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameter"):
        sft.finetune(
            again, train, steps=1, lr=1e-3, batch_size=4, generator=torch.Generator().manual_seed(0)
        )


def test_metrics_of_the_base_model():
    _, test = task.split()
    out = sft.metrics(
        checkpoints.load("base"), test, n=4, generator=torch.Generator().manual_seed(0)
    )
    assert set(out) == {"greedy", "sampled", "nll"} and 0 <= out["sampled"] <= 1 and out["nll"] > 0
