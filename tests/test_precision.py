"""mlbook.nn.precision against torch.finfo, torch's casts and nextafter, GradScaler and autograd."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mlbook.nn import precision as prec


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


@pytest.mark.parametrize("name", list(prec.FORMATS))
def test_format_constants_match_finfo(name):
    f = prec.FORMATS[name]
    fi = torch.finfo(f.dtype)
    assert (f.eps, f.max, f.smallest_normal, f.bits) == (
        fi.eps,
        fi.max,
        fi.smallest_normal,
        fi.bits,
    )
    assert f.smallest_subnormal == fi.smallest_normal * fi.eps
    assert prec.float_format(f.dtype) is f and prec.float_format(name) is f


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_round_to_format_matches_torch_cast_from_float32(gen, name):
    expo = torch.randint(-40, 40, (50_000,), generator=gen).double()
    vals = (torch.randn(50_000, generator=gen, dtype=torch.float64) * torch.exp2(expo)).float()
    mine = prec.round_to_format(vals, name)
    theirs = vals.to(prec.FORMATS[name].dtype).double()
    assert torch.equal(mine, theirs)


def test_round_to_format_float16_matches_numpy_from_float64(gen):
    # numpy rounds float64 -> float16 once (torch goes through float32 and may round twice).
    vals = torch.randn(50_000, generator=gen, dtype=torch.float64) * 100
    mine = prec.round_to_format(vals, "float16").numpy()
    np.testing.assert_array_equal(mine, vals.numpy().astype(np.float16).astype(np.float64))


def test_round_to_format_ties_and_specials():
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7 in bfloat16: ties to even give 1.
    assert prec.round_to_format(1 + 2**-8, "bfloat16").item() == 1.0
    assert prec.round_to_format(1 + 3 * 2**-8, "bfloat16").item() == 1 + 2**-6
    assert prec.round_to_format(65520.0, "float16").item() == math.inf  # max + ulp/2 -> inf
    assert prec.round_to_format(65519.0, "float16").item() == 65504.0
    assert prec.round_to_format(2.0**-25, "float16").item() == 0.0  # half min subnormal
    x = torch.tensor([math.inf, -math.inf, math.nan, 0.0])
    out = prec.round_to_format(x, "float16")
    assert out[0] == math.inf and out[1] == -math.inf and math.isnan(out[2]) and out[3] == 0


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32"])
def test_spacing_matches_nextafter(gen, name):
    dtype = prec.FORMATS[name].dtype
    w = (torch.randn(5000, generator=gen) * 10).to(dtype)
    w = w[w != 0]
    gap = (torch.nextafter(w.abs(), torch.full_like(w, math.inf)) - w.abs()).double()
    torch.testing.assert_close(prec.spacing(w, name), gap, atol=0, rtol=0)
    sub = torch.tensor([prec.FORMATS[name].smallest_subnormal * 3]).to(dtype)
    assert prec.spacing(sub, name).item() == prec.FORMATS[name].smallest_subnormal


def test_accumulate_updates_lost_and_recovered():
    lost = prec.accumulate_updates(1.0, 1e-3, 100, torch.bfloat16)
    assert torch.all(lost == 1.0)
    master = prec.accumulate_updates(1.0, 1e-3, 100, torch.bfloat16, torch.float32)
    exact = 1 + 1e-3 * torch.arange(101, dtype=torch.float64)
    assert torch.all((master - exact).abs() <= 2**-8 + 1e-5)
    f32 = prec.accumulate_updates(1.0, 1e-3, 100, torch.float32)
    torch.testing.assert_close(f32, exact, atol=100 * 2**-24, rtol=0)


def test_scaled_grads_recovers_underflowing_fp16_gradient(gen):
    N = 2**16
    X = torch.randn(N, 4, generator=gen).to(torch.bfloat16).double()
    w = (1e-4 * torch.randn(4, generator=gen)).to(torch.bfloat16).double()
    t = X @ (1e-4 * torch.randn(4, generator=gen)).to(torch.bfloat16).double()
    wr = w.clone().requires_grad_(True)
    (ref,) = torch.autograd.grad((X @ wr - t).pow(2).mean(), wr)

    def rel(scale):
        w16 = w.half().requires_grad_(True)
        (g,), inf = prec.scaled_grads(
            lambda: ((X.half() @ w16).float() - t.float()).pow(2).mean(), [w16], scale
        )
        assert not inf and g.dtype == torch.float32
        return ((g.double() - ref).norm() / ref.norm()).item()

    assert rel(2.0**16) < 5e-3
    assert rel(1.0) > 0.1


def test_scaled_grads_reports_overflow():
    p = torch.tensor([1.0], dtype=torch.float16, requires_grad=True)
    _, inf = prec.scaled_grads(lambda: (p * 1000).sum(), [p], 2.0**10)
    assert inf


def test_update_loss_scale_matches_gradscaler():
    flags = [0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1]
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3)
    p = torch.tensor(1.0, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.0)
    scale, tracker = 1024.0, 0
    for flag in flags:
        scaler.scale(p * (math.inf if flag else 1.0)).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        scale, tracker = prec.update_loss_scale(scale, tracker, bool(flag), growth_interval=3)
        assert scale == scaler.get_scale()


def test_gradient_accumulation_equals_full_batch(gen):
    X = torch.randn(30, 5, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (30,), generator=gen)
    W = torch.randn(3, 5, generator=gen, dtype=torch.float64).requires_grad_(True)

    def loss_fn(ps, Xs, ys):
        return F.cross_entropy(Xs @ ps[0].T, ys)

    (full,) = torch.autograd.grad(loss_fn([W], X, y), [W])
    (acc,) = prec.accumulate_gradients(loss_fn, [W], prec.micro_batches(X, y, 5))
    torch.testing.assert_close(acc, full, atol=1e-14, rtol=0)
    uneven = prec.micro_batches(X, y, 4)  # sizes 8, 8, 7, 7
    (acc_size,) = prec.accumulate_gradients(loss_fn, [W], uneven, "size")
    torch.testing.assert_close(acc_size, full, atol=1e-14, rtol=0)
    (acc_eq,) = prec.accumulate_gradients(loss_fn, [W], uneven, "equal")
    assert (acc_eq - full).abs().max() > 1e-6


def test_bad_input_raises():
    with pytest.raises(ValueError, match="unknown"):
        prec.float_format("float8")
    with pytest.raises(TypeError, match="str"):
        prec.round_to_format("1.0", "float16")
    with pytest.raises(ValueError, match="unknown"):
        prec.round_to_format(1.0, torch.int8)
    with pytest.raises(ValueError, match="finite"):
        prec.spacing(torch.tensor([math.inf]), "float16")
    with pytest.raises(ValueError, match="steps"):
        prec.accumulate_updates(1.0, 1e-3, -1, torch.bfloat16)
    with pytest.raises(ValueError, match="dtype must be one of"):
        prec.accumulate_updates(1.0, 1e-3, 3, torch.int32)
    with pytest.raises(ValueError, match="finite"):
        prec.accumulate_updates(math.nan, 1e-3, 3, torch.bfloat16)
    p = torch.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="scale"):
        prec.scaled_grads(lambda: p.sum(), [p], 0.0)
    with pytest.raises(ValueError, match="scale"):
        prec.update_loss_scale(-1.0, 0, False)
    with pytest.raises(ValueError, match="growth_tracker"):
        prec.update_loss_scale(1.0, -1, False)
    with pytest.raises(ValueError, match="growth_factor"):
        prec.update_loss_scale(1.0, 0, False, growth_factor=0.5)
    with pytest.raises(ValueError, match="growth_interval"):
        prec.update_loss_scale(1.0, 0, False, growth_interval=0)
    X, y = torch.ones(4, 2), torch.ones(3)
    with pytest.raises(ValueError, match="y must have shape"):
        prec.micro_batches(X, y, 2)
    with pytest.raises(ValueError, match="num_micro"):
        prec.micro_batches(X, torch.ones(4), 5)
    with pytest.raises(ValueError, match="weighting"):
        prec.accumulate_gradients(lambda *a: p.sum(), [p], [(X, y)], "median")
    with pytest.raises(ValueError, match="empty"):
        prec.accumulate_gradients(lambda *a: p.sum(), [p], [])


@pytest.mark.parametrize("name", ["float64", "float32", "float16"])
def test_spacing_matches_numpy_including_zero(gen, name):
    dtype = prec.FORMATS[name].dtype
    np_dtype = {"float64": np.float64, "float32": np.float32, "float16": np.float16}[name]
    tiny = prec.FORMATS[name].smallest_subnormal
    w = torch.cat(
        [
            torch.tensor([0.0, -0.0, tiny, 5 * tiny, -3 * tiny]),
            torch.randn(2000, generator=gen, dtype=torch.float64) * 100,
        ]
    ).to(dtype)
    ref = np.spacing(np.abs(w.numpy().astype(np_dtype))).astype(np.float64)
    np.testing.assert_array_equal(prec.spacing(w, name).numpy(), ref)
    assert prec.spacing(0.0, name).item() == float(np.spacing(np_dtype(0)))


def test_spacing_of_bfloat16_at_zero_is_the_bit_pattern_one():
    smallest = torch.tensor(1, dtype=torch.int16).view(torch.bfloat16).double().item()
    assert smallest == 2.0**-133
    assert prec.spacing(0.0, "bfloat16").item() == smallest
    zero = torch.zeros(1, dtype=torch.bfloat16)
    up = torch.nextafter(zero, torch.ones(1, dtype=torch.bfloat16)).double().item()
    assert prec.spacing(zero, "bfloat16").item() == up
