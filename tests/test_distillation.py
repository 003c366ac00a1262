"""mlbook.posttraining.distillation against references: F.kl_div, float64 autograd, the literal
formulas, and the book's next-token loss."""

import pytest
import torch
import torch.nn.functional as F

from mlbook.models.config import llama_config
from mlbook.models.decoder import Decoder
from mlbook.posttraining import distillation as D

f64 = torch.float64


def logits(seed=0, shape=(3, 5, 11), scale=3.0):
    gen = torch.Generator().manual_seed(seed)
    return scale * torch.randn(*shape, generator=gen, dtype=f64)


@pytest.mark.parametrize("T", [0.5, 1.0, 2.0, 8.0])
def test_kd_loss_matches_torch_recipe_and_literal_formula(T):
    zs, zt = logits(0), logits(1)
    ref = T**2 * F.kl_div(F.log_softmax(zs / T, -1), F.softmax(zt / T, -1), reduction="none").sum(
        -1
    )  # (3, 5) per position
    torch.testing.assert_close(D.kd_loss(zs, zt, T, reduction="none"), ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(D.kd_loss(zs, zt, T), ref.mean(), atol=1e-12, rtol=0)
    torch.testing.assert_close(D.kd_loss_naive(zs, zt, T), ref, atol=1e-12, rtol=0)
    assert (ref >= 0).all() and D.kd_loss(zt, zt, T).abs() < 1e-14  # zero only at z^s = z^t


@pytest.mark.parametrize("T", [0.5, 1.0, 4.0, 30.0])
def test_kd_grad_is_T_times_p_minus_q_by_autograd(T):
    zs, zt = logits(2), logits(3)
    z = zs.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(D.kd_loss(z, zt, T, reduction="none").sum(), z)
    torch.testing.assert_close(D.kd_grad(zs, zt, T), g, atol=1e-12, rtol=0)
    torch.testing.assert_close(D.kd_grad_naive(zs, zt, T), g, atol=1e-12, rtol=0)
    p_T, q_T = torch.softmax(zs / T, -1), torch.softmax(zt / T, -1)
    torch.testing.assert_close(g, T * (p_T - q_T), atol=1e-12, rtol=0)
    assert (g.sum(-1)).abs().max() < 1e-12  # rows sum to zero


def test_large_T_limit_is_centred_logit_matching():
    zs, zt = logits(4, (2, 7)), logits(5, (2, 7))
    V = zs.shape[-1]
    limit = ((zs - zs.mean(-1, keepdim=True)) - (zt - zt.mean(-1, keepdim=True))) / V
    err = [(D.kd_grad(zs, zt, T) - limit).abs().max().item() for T in (1e2, 1e3)]
    assert err[1] < err[0] / 5 and err[1] < 1e-2  # the gap shrinks like 1/T


def test_soft_targets_and_temperature_limits():
    z = logits(6, (4, 9))
    torch.testing.assert_close(D.soft_targets(z, 2.0), torch.softmax(z / 2, -1), atol=1e-15, rtol=0)
    flat = D.soft_targets(z, 1e6)
    torch.testing.assert_close(flat, torch.full_like(flat, 1 / 9), atol=1e-5, rtol=0)
    sharp = D.soft_targets(z, 1e-3)
    assert torch.equal(sharp.argmax(-1), z.argmax(-1)) and (sharp.max(-1).values > 0.999).all()


def tiny_models():
    cfg = llama_config(11, 16, 1, 2, max_seq_len=8)
    teacher = Decoder(cfg, generator=torch.Generator().manual_seed(0)).eval()
    student = Decoder(cfg, generator=torch.Generator().manual_seed(1))
    return teacher, student


def test_student_loss_hard_is_lm_loss_and_soft_is_kd():
    teacher, student = tiny_models()
    gen = torch.Generator().manual_seed(2)
    x = torch.randint(0, 11, (3, 8), generator=gen)
    y = torch.randint(0, 11, (3, 8), generator=gen)
    with torch.no_grad():
        zs, zt = student(x), teacher(x)
        hard = F.cross_entropy(zs.reshape(-1, 11), y.reshape(-1))
        soft = (
            F.kl_div(
                F.log_softmax(zs, -1), F.log_softmax(zt, -1), log_target=True, reduction="batchmean"
            )
            / 8
        )  # batchmean divides by B only
        torch.testing.assert_close(D.student_loss(student, x, y), hard, atol=1e-6, rtol=0)
        torch.testing.assert_close(D.student_loss(student, x, y, teacher), soft, atol=1e-6, rtol=0)


def test_train_student_learns_the_teacher_and_leaves_it_unchanged():
    teacher, student = tiny_models()
    data = torch.randint(0, 11, (400,), generator=torch.Generator().manual_seed(3))
    before = [p.detach().clone() for p in teacher.parameters()]
    kl0 = D.held_out_kl(student, teacher, data)
    hist = D.train_student(
        student,
        data,
        steps=30,
        batch_size=8,
        peak_lr=1e-2,
        warmup_steps=3,
        generator=torch.Generator().manual_seed(4),
        teacher=teacher,
    )
    assert len(hist["loss"]) == len(hist["hard"]) == 30
    assert D.held_out_kl(student, teacher, data) < 0.5 * kl0
    assert all(torch.equal(a, b) for a, b in zip(before, teacher.parameters(), strict=True))


def test_argument_checks():
    z = logits(7, (2, 5))
    with pytest.raises(ValueError, match="temperature must be"):
        D.kd_loss(z, z, 0.0)
    with pytest.raises(ValueError, match="same shape"):
        D.kd_loss(z, z[:, :4], 1.0)
    with pytest.raises(ValueError, match="reduction must be one of"):
        D.kd_loss(z, z, 1.0, reduction="sum")
    with pytest.raises(TypeError, match="student_logits must be a floating-point"):
        D.kd_grad(torch.ones(2, 5, dtype=torch.long), z, 1.0)
    teacher, student = tiny_models()
    other = Decoder(llama_config(12, 16, 1, 2, max_seq_len=8))
    with pytest.raises(ValueError, match="same vocabulary"):
        D.train_student(
            student,
            torch.zeros(50, dtype=torch.long),
            steps=1,
            batch_size=2,
            peak_lr=1e-3,
            warmup_steps=0,
            generator=torch.Generator(),
            teacher=other,
        )
