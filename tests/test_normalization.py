"""mlbook.nn.normalization against torch (F.layer_norm, F.rms_norm, nn.BatchNorm1d) and autograd."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mlbook.nn import normalization as nz

F64 = torch.float64
TOL = {torch.float64: 1e-12, torch.float32: 1e-5}


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_layer_norm_forward_matches_torch(gen, dtype):
    x = (torch.randn(3, 5, 8, generator=gen, dtype=F64) * 4 - 2).to(dtype)
    g = torch.randn(8, generator=gen, dtype=F64).to(dtype)
    b = torch.randn(8, generator=gen, dtype=F64).to(dtype)
    torch.testing.assert_close(
        nz.layer_norm(x, g, b), F.layer_norm(x, (8,), g, b, 1e-5), atol=TOL[dtype], rtol=0
    )
    torch.testing.assert_close(nz.layer_norm(x), F.layer_norm(x, (8,)), atol=TOL[dtype], rtol=0)


def test_layer_norm_backward_matches_autograd_and_naive(gen):
    x = torch.randn(2, 4, 7, generator=gen, dtype=F64)
    g = torch.randn(7, generator=gen, dtype=F64)
    b = torch.randn(7, generator=gen, dtype=F64)
    dy = torch.randn(2, 4, 7, generator=gen, dtype=F64)
    xr, gr, br = (t.clone().requires_grad_(True) for t in (x, g, b))
    ref = torch.autograd.grad((F.layer_norm(xr, (7,), gr, br, 1e-5) * dy).sum(), (xr, gr, br))
    mine = nz.layer_norm_backward(dy, x, g)
    for a, r in zip(mine, ref, strict=True):
        torch.testing.assert_close(a, r, atol=1e-12, rtol=0)
    torch.testing.assert_close(nz.layer_norm_backward_naive(dy, x, g), mine[0], atol=1e-12, rtol=0)
    assert torch.autograd.gradcheck(lambda a: nz.layer_norm(a, g, b), (xr[0, :2],))


def test_layer_norm_jacobian_matches_autograd_and_its_spectrum(gen):
    x = torch.randn(6, generator=gen, dtype=F64) * 2
    J_auto = torch.autograd.functional.jacobian(lambda v: nz.standardize(v)[0], x)
    torch.testing.assert_close(nz.layer_norm_jacobian(x), J_auto, atol=1e-12, rtol=0)
    s = 1 / math.sqrt(x.var(unbiased=False).item() + 1e-5)
    eigs = torch.linalg.eigvalsh(nz.layer_norm_jacobian(x))
    expected = torch.tensor([0.0, s**3 * 1e-5] + [s] * 4, dtype=F64)
    torch.testing.assert_close(eigs, expected, atol=1e-12, rtol=0)


def test_standardize_along_batch_axis(gen):
    x = torch.randn(10, 3, generator=gen, dtype=F64)
    x_hat, inv_std = nz.standardize(x, dim=0, eps=0.0)
    torch.testing.assert_close(x_hat.mean(0), torch.zeros(3, dtype=F64), atol=1e-14, rtol=0)
    torch.testing.assert_close(
        x_hat.var(0, unbiased=False), torch.ones(3, dtype=F64), atol=1e-14, rtol=0
    )
    assert inv_std.shape == (1, 3)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_rms_norm_matches_torch(gen, dtype):
    x = (torch.randn(4, 9, generator=gen, dtype=F64) * 3 + 1).to(dtype)
    g = torch.randn(9, generator=gen, dtype=F64).to(dtype)
    torch.testing.assert_close(
        nz.rms_norm(x, g, 1e-6), F.rms_norm(x, (9,), g, 1e-6), atol=TOL[dtype], rtol=0
    )
    layer = nn.RMSNorm(9, eps=1e-6).to(dtype)
    with torch.no_grad():
        layer.weight.copy_(g)
    torch.testing.assert_close(nz.rms_norm(x, g, 1e-6), layer(x), atol=TOL[dtype], rtol=0)


def test_rms_norm_backward_matches_autograd_and_naive(gen):
    x = torch.randn(3, 2, 6, generator=gen, dtype=F64)
    g = torch.randn(6, generator=gen, dtype=F64)
    dy = torch.randn(3, 2, 6, generator=gen, dtype=F64)
    xr, gr = x.clone().requires_grad_(True), g.clone().requires_grad_(True)
    ref = torch.autograd.grad((F.rms_norm(xr, (6,), gr, 1e-6) * dy).sum(), (xr, gr))
    mine = nz.rms_norm_backward(dy, x, g)
    for a, r in zip(mine, ref, strict=True):
        torch.testing.assert_close(a, r, atol=1e-12, rtol=0)
    torch.testing.assert_close(nz.rms_norm_backward_naive(dy, x, g), mine[0], atol=1e-12, rtol=0)
    J_auto = torch.autograd.functional.jacobian(lambda v: nz.rms_norm(v), x[0, 0])
    torch.testing.assert_close(nz.rms_norm_jacobian(x[0, 0]), J_auto, atol=1e-12, rtol=0)


def test_rms_norm_equals_layer_norm_on_centred_rows(gen):
    x = torch.randn(5, 8, generator=gen, dtype=F64) + 3
    c = x - x.mean(-1, keepdim=True)
    torch.testing.assert_close(
        nz.rms_norm(c, eps=1e-5), nz.layer_norm(x, eps=1e-5), atol=1e-12, rtol=0
    )


def test_batch_norm_matches_nn_batchnorm1d_over_steps(gen):
    D = 4
    bn = nn.BatchNorm1d(D, momentum=0.3).double()
    with torch.no_grad():
        bn.weight.copy_(torch.randn(D, generator=gen, dtype=F64))
        bn.bias.copy_(torch.randn(D, generator=gen, dtype=F64))
    g, b = bn.weight.detach().clone(), bn.bias.detach().clone()
    rm, rv = torch.zeros(D, dtype=F64), torch.ones(D, dtype=F64)
    for B in (2, 5, 16):
        x = torch.randn(B, D, generator=gen, dtype=F64) * 2 + 1
        y_ref = bn(x)
        y, rm, rv = nz.batch_norm_train(x, g, b, rm, rv, momentum=0.3)
        torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=0)
        torch.testing.assert_close(rm, bn.running_mean, atol=1e-12, rtol=0)
        torch.testing.assert_close(rv, bn.running_var, atol=1e-12, rtol=0)
    bn.eval()
    x = torch.randn(3, D, generator=gen, dtype=F64)
    torch.testing.assert_close(nz.batch_norm_eval(x, g, b, rm, rv), bn(x), atol=1e-12, rtol=0)


def test_batch_norm_backward_matches_autograd(gen):
    x = torch.randn(6, 3, generator=gen, dtype=F64)
    g = torch.randn(3, generator=gen, dtype=F64)
    b = torch.randn(3, generator=gen, dtype=F64)
    dy = torch.randn(6, 3, generator=gen, dtype=F64)
    xr, gr, br = (t.clone().requires_grad_(True) for t in (x, g, b))
    out = F.batch_norm(xr, None, None, gr, br, training=True, eps=1e-5)
    ref = torch.autograd.grad((out * dy).sum(), (xr, gr, br))
    for a, r in zip(nz.batch_norm_backward(dy, x, g), ref, strict=True):
        torch.testing.assert_close(a, r, atol=1e-12, rtol=0)


def test_update_running_stats_formula():
    rm, rv = torch.tensor([1.0]), torch.tensor([2.0])
    new_m, new_v = nz.update_running_stats(
        rm, rv, torch.tensor([3.0]), torch.tensor([4.0]), 5, momentum=0.25
    )
    assert new_m.item() == pytest.approx(0.75 * 1 + 0.25 * 3)
    assert new_v.item() == pytest.approx(0.75 * 2 + 0.25 * 4 * 5 / 4)


def test_residual_backward_matches_autograd(gen):
    blocks = nz.init_blocks(5, 6, 10, gen)
    x = torch.randn(3, 6, generator=gen, dtype=F64).requires_grad_(True)
    probe = torch.randn(3, 6, generator=gen, dtype=F64)
    out, states = nz.stack_forward(x, blocks, "residual", branch_scale=0.5)
    auto = torch.autograd.grad((out * probe).sum(), states)
    hand = nz.residual_backward(probe, [s.detach() for s in states], blocks, branch_scale=0.5)
    for a, r in zip(hand, auto, strict=True):
        torch.testing.assert_close(a, r, atol=1e-12, rtol=0)


def test_mlp_block_vjp_matches_autograd(gen):
    W1 = torch.randn(4, 7, generator=gen, dtype=F64)
    W2 = torch.randn(7, 4, generator=gen, dtype=F64)
    x = torch.randn(2, 4, generator=gen, dtype=F64).requires_grad_(True)
    g = torch.randn(2, 4, generator=gen, dtype=F64)
    (ref,) = torch.autograd.grad((nz.mlp_block(x, W1, W2) * g).sum(), x)
    torch.testing.assert_close(nz.mlp_block_vjp(g, x.detach(), W1, W2), ref, atol=1e-12, rtol=0)


def test_stack_arrangements_and_grad_norms(gen):
    blocks = nz.init_blocks(3, 8, 16, gen)
    x = torch.randn(4, 8, generator=gen, dtype=F64)
    W1, W2 = blocks[0]
    out, states = nz.stack_forward(x, blocks[:1], "post_ln")
    torch.testing.assert_close(
        out, F.layer_norm(x + nz.mlp_block(x, W1, W2), (8,)), atol=1e-12, rtol=0
    )
    out, states = nz.stack_forward(x, blocks[:1], "pre_ln")
    torch.testing.assert_close(
        states[1], x + nz.mlp_block(F.layer_norm(x, (8,)), W1, W2), atol=1e-12, rtol=0
    )
    torch.testing.assert_close(out, F.layer_norm(states[1], (8,)), atol=1e-12, rtol=0)
    probe = torch.randn(4, 8, generator=gen, dtype=F64)
    s_norms, w_norms = nz.stack_grad_norms(x, blocks, probe, "residual")
    assert s_norms.shape == (4,) and w_norms.shape == (3,)
    assert s_norms[-1].item() == pytest.approx(probe.norm().item() / 4)
    zero = [(a, torch.zeros_like(b)) for a, b in blocks]
    s_norms, _ = nz.stack_grad_norms(x, zero, probe, "residual")
    torch.testing.assert_close(s_norms, torch.full((4,), probe.norm().item() / 4, dtype=F64))


def test_bad_input_raises(gen):
    x = torch.randn(3, 4)
    with pytest.raises(TypeError, match="floating-point"):
        nz.layer_norm(torch.ones(3, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="gamma must have shape"):  # would broadcast silently
        nz.layer_norm(x, torch.ones(1))
    with pytest.raises(ValueError, match="eps"):
        nz.layer_norm(x, eps=-1.0)
    with pytest.raises(ValueError, match="x must not be empty"):
        nz.layer_norm(torch.ones(3, 0))
    with pytest.raises(ValueError, match="constant"):
        nz.standardize(torch.ones(2, 3), eps=0.0)
    with pytest.raises(ValueError, match="same shape"):
        nz.standardize_backward(torch.ones(3, 5), x, torch.ones(3, 1))
    with pytest.raises(ValueError, match="same shape"):
        nz.layer_norm_backward(torch.ones(3, 5), x)
    with pytest.raises(ValueError, match="same shape"):
        nz.layer_norm_backward_naive(torch.ones(1, 4), x)
    with pytest.raises(ValueError, match="all-zero"):
        nz.rms_norm(torch.zeros(2, 3), eps=0.0)
    with pytest.raises(ValueError, match="gamma must have shape"):
        nz.rms_norm(x, torch.ones(1))
    with pytest.raises(ValueError, match="same shape"):
        nz.rms_norm_backward(torch.ones(3, 5), x)
    with pytest.raises(ValueError, match="same shape"):
        nz.rms_norm_backward_naive(torch.ones(3, 5), x)
    with pytest.raises(ValueError, match="all-zero"):
        nz.rms_norm_jacobian(torch.zeros(3), eps=0.0)
    rm, rv = torch.zeros(4), torch.ones(4)
    with pytest.raises(ValueError, match="B >= 2"):
        nz.batch_norm_train(torch.ones(1, 4), None, None, rm, rv)
    with pytest.raises(ValueError, match="x must have 2 axes"):
        nz.batch_norm_train(torch.ones(2, 3, 4), None, None, rm, rv)
    with pytest.raises(ValueError, match="momentum"):
        nz.batch_norm_train(x, None, None, rm, rv, momentum=1.5)
    with pytest.raises(ValueError, match="running_mean"):
        nz.batch_norm_eval(x, None, None, torch.zeros(1), rv)
    with pytest.raises(ValueError, match="non-negative"):
        nz.batch_norm_eval(x, None, None, rm, -rv)
    with pytest.raises(ValueError, match="batch_size"):
        nz.update_running_stats(rm, rv, rm, rv, 1)
    with pytest.raises(ValueError, match="same shape"):
        nz.update_running_stats(rm, torch.ones(1), rm, rv, 4)
    with pytest.raises(ValueError, match="same shape"):
        nz.batch_norm_backward(torch.ones(3, 5), x)
    with pytest.raises(ValueError, match="depth"):
        nz.init_blocks(0, 4, 4, gen)
    W1, W2 = torch.ones(4, 6), torch.ones(6, 4)
    with pytest.raises(ValueError, match="W2 must have shape"):  # output width 1 would broadcast
        nz.mlp_block(x, W1, torch.ones(6, 1))
    with pytest.raises(ValueError, match="same shape"):
        nz.mlp_block_vjp(torch.ones(3, 5), x, W1, W2)
    with pytest.raises(ValueError, match="arch"):
        nz.stack_forward(x, [(W1, W2)], "sideways")
    with pytest.raises(ValueError, match="branch_scale"):
        nz.stack_forward(x, [(W1, W2)], "residual", branch_scale=math.nan)
    with pytest.raises(ValueError, match="same shape"):
        nz.stack_grad_norms(x, [(W1, W2)], torch.ones(2, 4))


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_16_bit_inputs_are_normalised_in_float32(gen, norm):
    # Rows of RMS about 500: float16's squares overflow 65504 from |x| = 256 on, so a same-dtype
    # computation returns zero rows; accumulating in float32 matches float32 to float16 rounding.
    x32 = torch.randn(6, 64, generator=gen) * 500
    g32, b32 = torch.randn(64, generator=gen), torch.randn(64, generator=gen)
    x16, g16, b16 = x32.half(), g32.half(), b32.half()
    if norm == "layer":
        ref = F.layer_norm(x16.float(), (64,), g16.float(), b16.float(), 1e-5)
        out = nz.layer_norm(x16, g16, b16)
        var16 = ((x16 - x16.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True)
        naive = g16 * (x16 - x16.mean(-1, keepdim=True)) * torch.rsqrt(var16 + 1e-5) + b16
    else:
        ref = F.rms_norm(x16.float(), (64,), g16.float(), 1e-6)
        out = nz.rms_norm(x16, g16)
        naive = g16 * x16 * torch.rsqrt((x16 * x16).mean(-1, keepdim=True) + 1e-6)
    assert out.dtype == torch.float16
    # the naive float16 version fails here (what the package did before accumulating in float32)
    assert not torch.allclose(naive.float(), ref, atol=0.1, rtol=0.1)
    # one rounding to float16: at most half a float16 spacing, 2^-11 relative
    torch.testing.assert_close(out.float(), ref, atol=1e-5, rtol=2**-10)
    dy = torch.randn(6, 64, generator=gen).half()
    xr = x16.float().requires_grad_(True)
    if norm == "layer":
        dx_ref = torch.autograd.grad((F.layer_norm(xr, (64,), g16.float()) * dy).sum(), xr)[0]
        dx = nz.layer_norm_backward(dy, x16, g16)[0]
    else:
        dx_ref = torch.autograd.grad((F.rms_norm(xr, (64,), g16.float()) * dy).sum(), xr)[0]
        dx = nz.rms_norm_backward(dy, x16, g16)[0]
    assert bool(torch.isfinite(dx).all()) and dx.abs().max() > 0
    torch.testing.assert_close(dx.float(), dx_ref, atol=2e-3 * dx_ref.abs().max().item(), rtol=0)
    # bfloat16 has float32's range but 8 bits of precision: one rounding, 2^-8 relative
    outb = nz.layer_norm(x32.bfloat16()) if norm == "layer" else nz.rms_norm(x32.bfloat16())
    refb = (
        F.layer_norm(x32.bfloat16().float(), (64,))
        if norm == "layer"
        else F.rms_norm(x32.bfloat16().float(), (64,), eps=1e-6)
    )
    assert outb.dtype == torch.bfloat16
    torch.testing.assert_close(outb.float(), refb, atol=1e-5, rtol=2**-8)


def test_batch_norm_statistics_of_float16_input_in_float32(gen):
    x = (torch.randn(8, 4, generator=gen) * 400).half()
    y, rm, rv = nz.batch_norm_train(x, None, None, torch.zeros(4), torch.ones(4))
    ref = F.batch_norm(x.float(), None, None, training=True, eps=1e-5)
    torch.testing.assert_close(y.float(), ref, atol=1e-5, rtol=2**-10)
    torch.testing.assert_close(rv, 0.9 + 0.1 * x.float().var(0), atol=0, rtol=1e-6)
    torch.testing.assert_close(rm, 0.1 * x.float().mean(0), atol=0, rtol=1e-6)
