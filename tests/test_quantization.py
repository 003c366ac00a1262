"""mlbook.systems.quantization against references: explicit loops, closed forms, float64 algebra,
torch.ao's dynamic int8 Linear where it is available."""

import warnings

import pytest
import torch

from mlbook.models import checkpoints
from mlbook.systems import quantization as qz

f64 = torch.float64


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=f64)


def test_scale_and_levels_closed_form():
    x = torch.tensor([0.5, -1.27, 0.0, 0.3], dtype=f64)
    s = qz.absmax_scale(x, 8)
    assert abs(float(s) - 0.01) < 1e-15
    assert qz.quantize(x, s, 8).tolist() == [50, -127, 0, 30]
    assert qz.qmax(4) == 7 and qz.qmax(8) == 127
    assert float(qz.absmax_scale(torch.zeros(3, dtype=f64), 8)) == 1 / 127  # no division by 0


@pytest.mark.parametrize("granularity", ["tensor", "channel", "group"])
@pytest.mark.parametrize("bits", [8, 4, 3])
def test_fake_quantize_matches_the_loop_and_the_error_bound(granularity, bits):
    W = randn(50, 7)  # 50 input rows: groups of 16 leave a short last group
    Wq = qz.fake_quantize(W, bits, granularity, 16)
    torch.testing.assert_close(Wq, qz.fake_quantize_naive(W, bits, granularity, 16), atol=0, rtol=0)
    q, s = qz.quantize_weight(W, bits, granularity, 16)
    step = s.expand(q.shape).reshape(-1, 7)[:50]
    assert ((Wq - W).abs() <= step / 2 + 1e-15).all()  # absmax never clips: |error| <= s/2
    assert q.abs().max() <= qz.qmax(bits)


def test_rounding_error_is_close_to_s2_over_12():
    W = randn(256, 64, seed=1)
    for granularity in ("tensor", "channel", "group"):
        q, s = qz.quantize_weight(W, 8, granularity, 32)
        Wq = qz.dequantize_weight(q, s, 256)
        ratio = ((Wq - W) ** 2).mean() / (s.expand(q.shape) ** 2 / 12).mean()
        assert 0.9 < float(ratio) < 1.08


def test_smoothing_is_exact_and_helps_with_outliers():
    X, W = randn(64, 32, seed=2), randn(32, 16, seed=3) * 0.1
    X[:, [3, 17]] *= 40.0  # outlier channels
    s = qz.smooth_scales(X, W, 0.5)
    Xs, Ws = qz.smooth(X, W, s)
    torch.testing.assert_close(Xs @ Ws, X @ W, atol=1e-12, rtol=0)
    ref = s**1  # closed form of s_j at alpha = 0.5
    torch.testing.assert_close(ref, (X.abs().amax(0) / W.abs().amax(1)) ** 0.5)

    def err(A, B):
        Y = qz.quantize_activations(A, 8) @ qz.fake_quantize(B, 8, "channel")
        return float((Y - X @ W).norm() / (X @ W).norm())

    assert err(Xs, Ws) < 0.5 * err(X, W)
    with pytest.raises(ValueError, match="s must be positive"):
        qz.smooth(X, W, torch.zeros(32, dtype=f64))


def test_quadratic_error_is_the_output_error():
    X, W = randn(40, 12, seed=4), randn(12, 5, seed=5)
    Q = qz.fake_quantize(W, 4, "channel")
    direct = ((X @ W - X @ Q) ** 2).sum()
    torch.testing.assert_close(qz.quadratic_error(W, Q, X.T @ X), direct, atol=1e-10, rtol=1e-12)


def test_obq_step_is_the_constrained_minimum():
    X, w = randn(30, 6, seed=6), randn(6, seed=7)
    H = X.T @ X
    j, q = 2, 0.5
    new = qz.obq_step(w, torch.linalg.inv(H), j, q)
    assert abs(float(new[j]) - q) < 1e-12
    # reference: least squares over the free weights with w_j fixed at q
    free = [i for i in range(6) if i != j]
    target = X @ w - X[:, j] * q
    sol = torch.linalg.lstsq(X[:, free], target[:, None]).solution[:, 0]
    torch.testing.assert_close(new[free], sol, atol=1e-10, rtol=0)


def test_gptq_matches_naive_and_beats_round_to_nearest():
    X, W = randn(200, 24, seed=8), randn(24, 6, seed=9)
    X[:, :12] += X[:, 12:]  # correlated inputs, where GPTQ helps
    H = X.T @ X
    Q = qz.gptq_quantize(W, H, 3)
    torch.testing.assert_close(Q, qz.gptq_quantize_naive(W, H, 3), atol=1e-10, rtol=0)
    assert qz.quadratic_error(W, Q, H) < qz.quadratic_error(W, qz.fake_quantize(W, 3), H)


def test_quantized_decoder_keeps_embeddings_and_quantizes_blocks():
    m = checkpoints.load("base")
    m8 = qz.quantize_decoder(m, 8, "group", 16)
    for (name, p), (_, p8) in zip(m.named_parameters(), m8.named_parameters(), strict=True):
        if name.startswith("blocks.") and p.dim() == 2:
            torch.testing.assert_close(p8, qz.fake_quantize_naive(p.detach(), 8, "group", 16))
        else:
            assert torch.equal(p, p8)
    with pytest.raises(TypeError, match="model must be a Decoder"):
        qz.quantize_decoder(None, 8)


def test_decode_intensity_and_roofline():
    P, kv = 7e9, 2e9
    assert qz.decode_intensity(P, kv) == pytest.approx(2 * P / (2 * P + kv))
    assert qz.decode_intensity(P, kv, batch=8, bytes_per_param=1) == pytest.approx(
        16 * P / (P + 8 * kv)
    )
    r = qz.roofline(torch.tensor([1.0, 1e4]), 989e12, 4.8e12)
    assert r.tolist() == [4.8e12, 989e12]
    with pytest.raises(ValueError, match="batch"):
        qz.decode_intensity(P, kv, batch=0)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="granularity"):
        qz.quantize_weight(randn(4, 4), 8, "row")
    with pytest.raises(ValueError, match="bits"):
        qz.qmax(1)


def test_int8_matches_torch_ao_dynamic_linear():
    tq = pytest.importorskip("torch.ao.quantization")
    if "x86" not in torch.backends.quantized.supported_engines and (
        "fbgemm" not in torch.backends.quantized.supported_engines
    ):
        pytest.skip("no quantized CPU engine")
    lin = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False))
    with torch.no_grad():
        lin[0].weight.copy_(randn(32, 64, seed=10).float())
    obs = tq.PerChannelMinMaxObserver.with_args(
        dtype=torch.qint8, qscheme=torch.per_channel_symmetric, quant_min=-127, quant_max=127
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
        qlin = tq.quantize_dynamic(
            lin,
            {torch.nn.Linear: tq.QConfig(activation=tq.default_dynamic_quant_observer, weight=obs)},
        )
        w = qlin[0].weight()
        ref_int, ref_scale = w.int_repr(), w.q_per_channel_scales()
    W = lin[0].weight.detach().T  # (d_in, d_out), the book's layout
    q, s = qz.quantize_weight(W, 8, "channel")
    assert torch.equal(q[0].T.to(torch.int8), ref_int)
    torch.testing.assert_close(s[0, 0].double(), ref_scale.double(), atol=0, rtol=1e-6)
