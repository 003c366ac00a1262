"""Unit tests of mlbook.nn.softmax against torch built-ins and float64 autograd (chapter 12)."""

import math

import pytest
import torch
import torch.nn.functional as F

from mlbook.nn import softmax as sm

# Tolerances per dtype: float64 results agree with torch's own kernels to a few ulps.
TOL = {torch.float64: 1e-12, torch.float32: 1e-5}
DTYPES = [torch.float64, torch.float32]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def randn(*shape, dtype=torch.float64, seed=0, scale=1.0):
    return scale * torch.randn(*shape, generator=gen(seed), dtype=dtype)


# --- softmax, logsumexp, log_softmax --------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_matches_torch(dtype, dim):
    z = randn(4, 5, 6, dtype=dtype, scale=3.0)
    for t in (0.5, 1.0, 3.0):
        ref = torch.softmax(z / t, dim=dim)
        torch.testing.assert_close(sm.softmax(z, dim, t), ref, atol=TOL[dtype], rtol=0)
        torch.testing.assert_close(sm.softmax_naive(z, dim, t), ref, atol=TOL[dtype], rtol=0)
        torch.testing.assert_close(
            sm.log_softmax(z, dim, t), F.log_softmax(z / t, dim=dim), atol=TOL[dtype] * 10, rtol=0
        )
    torch.testing.assert_close(
        sm.logsumexp(z, dim), torch.logsumexp(z, dim=dim), atol=TOL[dtype] * 10, rtol=0
    )
    torch.testing.assert_close(
        sm.logsumexp(z, dim, keepdim=True),
        torch.logsumexp(z, dim=dim, keepdim=True),
        atol=TOL[dtype] * 10,
        rtol=0,
    )


def test_shift_invariance_and_stability():
    z = randn(3, 7, scale=2.0)
    for c in (-1e4, -50.0, 0.0, 50.0, 1e4):
        torch.testing.assert_close(sm.softmax(z + c), sm.softmax(z), atol=1e-12, rtol=0)
        torch.testing.assert_close(sm.logsumexp(z + c), sm.logsumexp(z) + c, atol=1e-9, rtol=1e-15)
    # float32 logits around 1000: the naive version is nan, the stable one matches float64.
    big = (randn(3, 7, scale=2.0) + 1000.0).float()
    assert torch.isnan(sm.softmax_naive(big)).all()
    torch.testing.assert_close(
        sm.softmax(big).double(), torch.softmax(big.double(), -1), atol=1e-6, rtol=0
    )
    # log_softmax stays finite where log(softmax) underflows to -inf.
    z32 = torch.tensor([0.0, -200.0])
    assert torch.isinf(torch.log(sm.softmax(z32))[1])
    torch.testing.assert_close(sm.log_softmax(z32), torch.tensor([0.0, -200.0]), atol=1e-6, rtol=0)


def test_masked_rows_match_torch():
    z = torch.tensor([[0.0, -math.inf, 1.0], [-math.inf, -math.inf, -math.inf]])
    torch.testing.assert_close(sm.logsumexp(z), torch.logsumexp(z, -1))
    torch.testing.assert_close(sm.softmax(z), torch.softmax(z, -1), equal_nan=True)
    torch.testing.assert_close(sm.log_softmax(z[:1]), F.log_softmax(z[:1], -1))


def test_gradcheck_softmax_family():
    z = randn(3, 5, seed=1).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: sm.softmax(x, 1, 0.7), (z,))
    assert torch.autograd.gradcheck(lambda x: sm.log_softmax(x, 0), (z,))
    assert torch.autograd.gradcheck(lambda x: sm.logsumexp(x, -1), (z,))


# --- Jacobian -------------------------------------------------------------------------------------


@pytest.mark.parametrize("t", [1.0, 0.5])
def test_jacobian_matches_autograd(t):
    z = randn(6, seed=2)
    ref = torch.autograd.functional.jacobian(lambda x: torch.softmax(x / t, 0), z)
    torch.testing.assert_close(sm.softmax_jacobian(z, temperature=t), ref, atol=1e-14, rtol=0)


def test_batched_jacobian_layout():
    z = randn(2, 4, 3, seed=3)  # class axis 1
    jac = sm.softmax_jacobian(z, dim=1)
    assert jac.shape == (2, 3, 4, 4)
    for a in range(2):
        for c in range(3):
            ref = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, 0), z[a, :, c])
            torch.testing.assert_close(jac[a, c], ref, atol=1e-14, rtol=0)


def test_vjp_matches_jacobian_and_autograd():
    z = randn(3, 5, 4, seed=4).requires_grad_(True)
    g = randn(3, 5, 4, seed=5)
    p = torch.softmax(z, dim=1)
    (ref,) = torch.autograd.grad(p, z, g)
    vjp = sm.softmax_vjp(p.detach(), g, dim=1)
    torch.testing.assert_close(vjp, ref, atol=1e-14, rtol=0)
    jac = sm.softmax_jacobian(z.detach(), dim=1)  # (3, 4, 5, 5)
    dense = torch.einsum("bcij,bic->bjc", jac, g)  # J^T g for each (b, c)
    torch.testing.assert_close(vjp, dense, atol=1e-14, rtol=0)


# --- cross-entropy --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.35])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_torch(dtype, eps, reduction):
    z = randn(8, 5, dtype=dtype, seed=6, scale=2.0)
    y = torch.randint(0, 5, (8,), generator=gen(7))
    ref = F.cross_entropy(z, y, label_smoothing=eps, reduction=reduction)
    got = sm.cross_entropy(z, y, label_smoothing=eps, reduction=reduction)
    torch.testing.assert_close(got, ref, atol=TOL[dtype] * 10, rtol=0)
    q = torch.softmax(randn(8, 5, dtype=dtype, seed=8), 1)  # probability targets
    ref_q = F.cross_entropy(z, q, label_smoothing=eps, reduction=reduction)
    torch.testing.assert_close(
        sm.cross_entropy(z, q, label_smoothing=eps, reduction=reduction),
        ref_q,
        atol=TOL[dtype] * 10,
        rtol=0,
    )
    # index targets (gather) and their one-hot distribution (dense sum) are the same loss
    onehot = F.one_hot(y, 5).to(dtype)
    dense = sm.cross_entropy(z, onehot, label_smoothing=eps, reduction=reduction)
    torch.testing.assert_close(dense, got, atol=TOL[dtype] * 10, rtol=0)


def test_cross_entropy_class_axis_and_ignore_index():
    z = randn(2, 5, 7, seed=9)  # (B, K, T) as F.cross_entropy wants; ours takes dim=1
    y = torch.randint(0, 5, (2, 7), generator=gen(10))
    y[0, :3] = -100
    ref = F.cross_entropy(z, y, label_smoothing=0.2, ignore_index=-100)
    got = sm.cross_entropy(z, y, dim=1, label_smoothing=0.2, ignore_index=-100)
    torch.testing.assert_close(got, ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(
        sm.cross_entropy(z.movedim(1, -1), y, ignore_index=-100),
        F.cross_entropy(z, y, ignore_index=-100),
        atol=1e-12,
        rtol=0,
    )


@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_cross_entropy_grad_is_p_minus_y(eps):
    z = randn(6, 4, seed=11).requires_grad_(True)
    y = torch.randint(0, 4, (6,), generator=gen(12))
    (auto,) = torch.autograd.grad(F.cross_entropy(z, y, label_smoothing=eps, reduction="sum"), z)
    torch.testing.assert_close(
        sm.cross_entropy_grad(z.detach(), y, label_smoothing=eps), auto, atol=1e-14, rtol=0
    )
    q = torch.softmax(randn(6, 4, seed=13), 1)
    (auto_q,) = torch.autograd.grad(sm.cross_entropy(z, q, label_smoothing=eps, reduction="sum"), z)
    torch.testing.assert_close(
        sm.cross_entropy_grad(z.detach(), q, label_smoothing=eps), auto_q, atol=1e-14, rtol=0
    )
    assert torch.autograd.gradcheck(lambda x: sm.cross_entropy(x, y, label_smoothing=eps), (z,))


def test_smooth_labels():
    y = torch.tensor([2, 0])
    got = sm.smooth_labels(y, 4, eps=0.2, dtype=torch.float64)
    ref = torch.tensor([[0.05, 0.05, 0.85, 0.05], [0.85, 0.05, 0.05, 0.05]], dtype=torch.float64)
    torch.testing.assert_close(got, ref, atol=1e-15, rtol=0)
    torch.testing.assert_close(sm.smooth_labels(y, 4, eps=0.2, dim=0, dtype=torch.float64), ref.T)
    torch.testing.assert_close(sm.smooth_labels(ref, eps=0.0), ref)
    torch.testing.assert_close(sm.smooth_labels(ref, eps=1.0), torch.full_like(ref, 0.25))


# --- z-loss ---------------------------------------------------------------------------------------


def test_z_loss_and_gradient():
    z = randn(5, 6, seed=14, scale=3.0).requires_grad_(True)
    lam = 1e-3
    ref = lam * (torch.logsumexp(z, 1) ** 2).mean()
    torch.testing.assert_close(sm.z_loss(z, lam), ref, atol=1e-14, rtol=0)
    (auto,) = torch.autograd.grad(sm.z_loss(z, lam, reduction="sum"), z)
    torch.testing.assert_close(sm.z_loss_grad(z.detach(), lam), auto, atol=1e-14, rtol=0)
    assert torch.autograd.gradcheck(lambda x: sm.z_loss(x, 0.5, dim=0), (z,))


# --- bad input ------------------------------------------------------------------------------------


def test_bad_input_raises():
    z = torch.zeros(3, 4)
    y = torch.tensor([0, 1, 2])
    for f in (sm.softmax_naive, sm.softmax, sm.log_softmax, sm.softmax_jacobian):
        with pytest.raises(ValueError, match="temperature"):
            f(z, temperature=0.0)
    with pytest.raises(ValueError, match="grad_p"):
        sm.softmax_vjp(torch.softmax(z, -1), torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        sm.cross_entropy(z, torch.tensor([0, 1, 4]))
    with pytest.raises(ValueError, match="target must have shape"):
        sm.cross_entropy(z, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"\(3, 4\)"):
        sm.cross_entropy(z, torch.zeros(3, 5))
    with pytest.raises(TypeError, match="integer"):
        sm.cross_entropy(z, torch.tensor([True, False, True]))
    with pytest.raises(ValueError, match="label_smoothing"):
        sm.cross_entropy(z, y, label_smoothing=1.5)
    with pytest.raises(ValueError, match="reduction"):
        sm.cross_entropy(z, y, reduction="avg")
    with pytest.raises(ValueError, match="ignore_index"):
        sm.cross_entropy(z, torch.zeros(3, 4), ignore_index=-100)
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        sm.cross_entropy_grad(z, torch.tensor([0, 1, 7]))
    with pytest.raises(TypeError, match="num_classes"):
        sm.smooth_labels(y)
    with pytest.raises(ValueError, match="num_classes=5"):
        sm.smooth_labels(torch.full((3, 4), 0.25), 5)
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        sm.smooth_labels(y, 2)
    with pytest.raises(ValueError, match="weight"):
        sm.z_loss(z, -1.0)
    with pytest.raises(ValueError, match="weight"):
        sm.z_loss_grad(z, math.nan)
    with pytest.raises(ValueError, match="reduction"):
        sm.z_loss(z, reduction="max")


def test_empty_batch_raises_instead_of_nan():
    # torch's own F.cross_entropy returns nan here; a silent nan would poison training
    empty = torch.zeros(0, 4)
    assert torch.isnan(F.cross_entropy(empty, torch.zeros(0, dtype=torch.long)))
    with pytest.raises(ValueError, match="logits must not be empty"):
        sm.cross_entropy(empty, torch.zeros(0, dtype=torch.long))
    with pytest.raises(ValueError, match="logits must not be empty"):
        sm.cross_entropy(empty, torch.zeros(0, 4))
    with pytest.raises(ValueError, match="logits must not be empty"):
        sm.z_loss(empty)
    with pytest.raises(ValueError, match="target: every position is ignore_index"):
        sm.cross_entropy(torch.zeros(2, 4), torch.tensor([-100, -100]), ignore_index=-100)
    # a sum over no positions is a well-defined 0
    got = sm.cross_entropy(
        torch.zeros(2, 4), torch.tensor([-100, -100]), ignore_index=-100, reduction="sum"
    )
    assert got.item() == 0.0


# --- low precision: the normaliser is accumulated in float32 --------------------------------------

VOCAB = 131072  # 2^17 tokens: a sum of 2^17 terms exp(0) = 1 overflows float16 (max 65504)
LOW = [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", LOW)
def test_low_precision_uniform_vocabulary_does_not_overflow(dtype):
    z = torch.zeros(2, VOCAB, dtype=dtype)  # uniform logits: p = 1/K everywhere
    p, logp = sm.softmax(z), sm.log_softmax(z)
    lse = sm.logsumexp(z)
    ce = sm.cross_entropy(z, torch.tensor([0, VOCAB - 1]))
    for out in (p, logp, lse, ce):
        assert out.dtype == dtype  # computed in float32, returned in the input's dtype
        assert torch.isfinite(out).all()
    log_k = math.log(VOCAB)  # 11.78
    exact = torch.full((2, VOCAB), 1.0 / VOCAB, dtype=torch.float64)
    # within the rounding of a float16 subnormal (p = 7.6e-6 < 6.1e-5, spacing 6e-8) or bfloat16
    torch.testing.assert_close(p.double(), exact, atol=0, rtol=1e-2)
    torch.testing.assert_close(logp.double(), torch.full_like(exact, -log_k), atol=0, rtol=1e-2)
    torch.testing.assert_close(
        lse.double(), torch.full((2,), log_k, dtype=torch.float64), rtol=1e-2, atol=0
    )
    assert ce.item() == pytest.approx(log_k, rel=1e-2)


@pytest.mark.parametrize("dtype", LOW)
def test_low_precision_matches_float32_to_its_rounding(dtype):
    # near-uniform logits over the vocabulary: sum_j exp(z_j - max z) is about 8e4 > 65504
    z = randn(3, VOCAB, dtype=torch.float32, seed=15, scale=0.1).to(dtype)  # (B, K), rounded
    ref = z.float()  # the same rounded logits, computed in float32
    if dtype == torch.float16:  # the formula computed in float16 itself overflows its sum
        assert torch.isinf(torch.exp(z - z.amax(-1, keepdim=True)).sum(-1)).all()
    rtol = 2 * torch.finfo(dtype).eps
    tiny = torch.finfo(dtype).smallest_normal  # p ~ 1e-5 is subnormal in float16
    torch.testing.assert_close(sm.softmax(z).float(), torch.softmax(ref, -1), atol=tiny, rtol=rtol)
    torch.testing.assert_close(sm.log_softmax(z).float(), F.log_softmax(ref, -1), atol=0, rtol=rtol)
    torch.testing.assert_close(sm.logsumexp(z).float(), torch.logsumexp(ref, -1), atol=0, rtol=rtol)
    y = torch.randint(0, VOCAB, (3,), generator=gen(16))
    torch.testing.assert_close(
        sm.cross_entropy(z, y).float(), F.cross_entropy(ref, y), atol=0, rtol=rtol
    )
    torch.testing.assert_close(
        sm.cross_entropy_grad(z, y).float(),
        torch.softmax(ref, -1) - F.one_hot(y, VOCAB).float(),
        atol=tiny,
        rtol=rtol,
    )
