"""mlbook.beyond.convolution against independent references: torch, SciPy and autograd."""

import itertools

import numpy as np
import pytest
import scipy.ndimage
import torch
import torch.nn.functional as F

from mlbook.beyond import convolution as cv

f64 = torch.float64

# (B, C, H, W), (O, k), stride, padding, dilation
SETTINGS = [
    ((2, 3, 9, 11), (4, 3), 1, 1, 1),
    ((1, 2, 10, 7), (3, 2), 2, 0, 1),
    ((2, 1, 12, 12), (2, 3), 3, 2, 2),
    ((1, 3, 8, 9), (5, 1), 1, 0, 1),
    ((3, 2, 7, 13), (2, 5), 2, 2, 1),
]


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


def case(gen, xs, ok):
    (o, k), c = ok, xs[1]
    x = torch.randn(*xs, generator=gen, dtype=f64)
    w = torch.randn(o, c, k, k, generator=gen, dtype=f64)
    b = torch.randn(o, generator=gen, dtype=f64)
    return x, w, b


def test_output_size_matches_conv2d_shapes():
    for n, k, s, p, d in itertools.product(
        range(1, 12), (1, 2, 3, 4), (1, 2, 3), (0, 1, 2), (1, 2)
    ):
        if d * (k - 1) + 1 > n + 2 * p:
            with pytest.raises(ValueError, match="no output position fits"):
                cv.output_size(n, k, s, p, d)
            continue
        got = F.conv2d(torch.zeros(1, 1, n, 1), torch.zeros(1, 1, k, 1), None, s, (p, 0), d)
        assert cv.output_size(n, k, s, p, d) == got.shape[2]


def test_stack_output_size_and_receptive_field_closed_forms():
    plain = [cv.ConvLayer(3, padding=1)] * 5
    assert cv.stack_output_size(32, plain) == 32
    assert [r for r, _ in cv.receptive_field(plain)] == [1, 3, 5, 7, 9, 11]
    dilated = [cv.ConvLayer(3, dilation=2**i) for i in range(5)]
    assert [r for r, _ in cv.receptive_field(dilated)] == [2 ** (i + 1) - 1 for i in range(6)]
    strided = [cv.ConvLayer(2, stride=2)] * 4  # 2 x 2 pools: field = jump = 2^L
    assert cv.receptive_field(strided) == [(2**i, 2**i) for i in range(5)]
    assert cv.stack_output_size(32, strided) == 2


def test_receptive_field_matches_autograd_through_nn_conv2d():
    rng = np.random.default_rng(1)
    for _ in range(15):
        layers = [
            cv.ConvLayer(
                int(rng.integers(1, 5)), int(rng.integers(1, 4)), 0, int(rng.integers(1, 3))
            )
            for _ in range(int(rng.integers(1, 5)))
        ]
        r, j = cv.receptive_field(layers)[-1]
        size = r + 2 * j + 3
        mods = []
        for L in layers:
            conv = torch.nn.Conv2d(1, 1, L.kernel, L.stride, 0, L.dilation, bias=False).double()
            torch.nn.init.ones_(conv.weight)
            mods.append(conv)
        net = torch.nn.Sequential(*mods)
        x = torch.zeros(1, 1, size, size, dtype=f64, requires_grad=True)
        y = net(x)
        mid = y.shape[-1] // 2
        (g,) = torch.autograd.grad(y[0, 0, mid, mid], x)
        rows = torch.nonzero(g[0, 0].abs().sum(1)).flatten()
        assert int(rows[-1] - rows[0]) + 1 == r
        _, h, w = cv.gradient_support(net, x, (0, 0, mid, mid))
        assert h == w == r


@pytest.mark.parametrize(("xs", "ok", "s", "p", "d"), SETTINGS)
def test_conv2d_and_naive_match_torch(gen, xs, ok, s, p, d):
    x, w, b = case(gen, xs, ok)
    ref = F.conv2d(x, w, b, s, p, d)
    torch.testing.assert_close(cv.conv2d(x, w, b, s, p, d), ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(cv.conv2d_naive(x, w, b, s, p, d), ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(cv.conv2d(x, w, None, s, p, d), F.conv2d(x, w, None, s, p, d))
    circ = F.conv2d(F.pad(x, (p,) * 4, mode="circular"), w, b, s, 0, d)
    for fn in (cv.conv2d, cv.conv2d_naive):
        torch.testing.assert_close(fn(x, w, b, s, p, d, "circular"), circ, atol=1e-12, rtol=0)


@pytest.mark.parametrize(("xs", "ok", "s", "p", "d"), SETTINGS)
def test_im2col_matches_unfold(gen, xs, ok, s, p, d):
    x, w, _ = case(gen, xs, ok)
    k = w.shape[-1]
    assert torch.equal(cv.im2col(x, k, s, p, d), F.unfold(x, k, dilation=d, padding=p, stride=s))


def test_conv2d_matches_scipy_correlate_and_not_convolve(gen):
    x = torch.randn(1, 1, 9, 8, generator=gen, dtype=f64)
    w = torch.randn(1, 1, 3, 3, generator=gen, dtype=f64)
    y = cv.conv2d(x, w, padding=1)[0, 0].numpy()
    ref = scipy.ndimage.correlate(x[0, 0].numpy(), w[0, 0].numpy(), mode="constant")
    np.testing.assert_allclose(y, ref, atol=1e-12)
    flipped = scipy.ndimage.convolve(x[0, 0].numpy(), w[0, 0].numpy(), mode="constant")
    assert np.abs(y - flipped).max() > 0.1


@pytest.mark.parametrize(("xs", "ok", "s", "p", "d"), SETTINGS)
def test_conv_matrix_is_the_layer_and_its_transpose_the_backward(gen, xs, ok, s, p, d):
    x, w, b = case(gen, xs, ok)
    B, C, H, W = xs
    for mode in cv.PADDING_MODES:
        if mode == "circular" and d * (w.shape[-1] - 1) >= min(H, W):
            continue
        T = cv.conv_matrix(w, (H, W), s, p, d, mode)
        ref = cv.conv2d_naive(x, w, b, s, p, d, mode)
        got = (x.reshape(B, -1) @ T.T).reshape(ref.shape) + b[:, None, None]
        torch.testing.assert_close(got, ref, atol=1e-12, rtol=0)
    T = cv.conv_matrix(w, (H, W), s, p, d)
    g = torch.randn(*F.conv2d(x, w, None, s, p, d).shape, generator=gen, dtype=f64)
    xr = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(F.conv2d(xr, w, None, s, p, d), xr, g)
    torch.testing.assert_close((g.reshape(B, -1) @ T).reshape(x.shape), grad, atol=1e-12, rtol=0)


def test_tap_map_entries_and_sharing():
    taps = cv.tap_map(3, (5, 5), stride=1, padding=1)
    assert taps.shape == (25, 25)
    assert taps[12].ge(0).sum() == 9  # the centre output sees the whole kernel
    assert taps[0].ge(0).sum() == 4  # a corner loses the taps on the padding
    assert taps[12, 6] == 0 and taps[12, 18] == 8  # w[0, 0] top left, w[2, 2] bottom right
    w = torch.arange(9.0, dtype=f64).reshape(1, 1, 3, 3) + 1
    T = cv.conv_matrix(w, (5, 5), padding=1)
    assert set(T[T != 0].tolist()) == set(range(1, 10))
    with pytest.raises(ValueError, match="share a matrix entry"):
        cv.tap_map(3, (2, 5), padding=1, padding_mode="circular")


def test_pad_and_shift_against_numpy(gen):
    x = torch.randn(2, 3, 5, 6, generator=gen, dtype=f64)
    torch.testing.assert_close(cv.pad2d(x, 2, "circular"), F.pad(x, (2,) * 4, mode="circular"))
    torch.testing.assert_close(cv.pad2d(x, 1), F.pad(x, (1,) * 4))
    torch.testing.assert_close(cv.shift2d(x, 2, -1), torch.roll(x, (2, -1), (-2, -1)))
    ref = np.zeros_like(x.numpy())
    ref[..., 2:, :5] = x.numpy()[..., :3, 1:]  # moved down by 2 and left by 1, zeros in
    np.testing.assert_array_equal(cv.shift2d(x, 2, -1, "zeros").numpy(), ref)


def test_circular_convolution_is_equivariant_and_zero_padding_is_not(gen):
    x, w, b = case(gen, (1, 2, 8, 9), (3, 3))
    for t in [(1, 0), (-2, 3), (4, 4)]:
        lhs = cv.conv2d(cv.shift2d(x, *t), w, b, padding=1, padding_mode="circular")
        torch.testing.assert_close(lhs, cv.shift2d(cv.conv2d(x, w, b, 1, 1, 1, "circular"), *t))
    lhs = cv.conv2d(cv.shift2d(x, 1, 0, "zeros"), w, b, padding=1)
    rhs = cv.shift2d(cv.conv2d(x, w, b, padding=1), 1, 0, "zeros")
    assert (lhs - rhs).abs().max() > 0.1


def test_parameter_counts_match_torch_modules():
    for c, o, k in [(1, 4, 3), (3, 64, 7), (16, 8, 1)]:
        n = sum(p.numel() for p in torch.nn.Conv2d(c, o, k).parameters())
        assert cv.conv_params(c, o, k) == n
        assert cv.conv_params(c, o, k, bias=False) == n - o
        n = sum(p.numel() for p in torch.nn.Linear(c * 10, o).parameters())
        assert cv.dense_params(c * 10, o) == n


def test_classifiers_shapes_and_counts():
    torch.manual_seed(0)
    cnn, mlp = cv.small_cnn(4, 8), cv.mlp_classifier(64, 9)
    x = torch.rand(5, 1, 8, 8)
    assert cnn(x).shape == mlp(x).shape == (5, 10)
    assert sum(p.numel() for p in cnn.parameters()) == 666
    assert sum(p.numel() for p in mlp.parameters()) == 685
    assert cv.small_cnn(2, 3, k=5, size=16)(torch.rand(2, 1, 16, 16)).shape == (2, 10)
    with pytest.raises(ValueError, match="k must be odd"):
        cv.small_cnn(4, 8, k=2)


def test_stack_forward_with_given_kernels_matches_sequential_conv(gen):
    layers = [cv.ConvLayer(3, 1, 1), cv.ConvLayer(2, 2, 0, 1)]
    ks = [torch.randn(3, 3, generator=gen, dtype=f64), torch.randn(2, 2, generator=gen, dtype=f64)]
    x = torch.randn(2, 1, 9, 9, generator=gen, dtype=f64)
    ref = F.conv2d(F.conv2d(x, ks[0][None, None], padding=1), ks[1][None, None], stride=2)
    torch.testing.assert_close(cv.stack_forward(x, layers, ks), ref)
    with pytest.raises(ValueError, match="one kernel per layer"):
        cv.stack_forward(x, layers, ks[:1])


def test_argument_checks_name_the_argument(gen):
    x, w, b = case(gen, (1, 3, 6, 6), (2, 3))
    with pytest.raises(ValueError, match="x must have 4 axes"):
        cv.conv2d(x[0], w, b)
    with pytest.raises(ValueError, match=r"w must have shape \(2, 3, 3, 3\)"):
        cv.conv2d(x, w[:, :2], b)
    with pytest.raises(ValueError, match=r"b must have shape \(2\), got \(1,\)"):
        cv.conv2d_naive(x, w, b[:1])
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        cv.conv2d(x, w, b, padding=1, padding_mode="reflect")
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        cv.im2col(torch.ones(1, 1, 4, 4, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="no output position fits"):
        cv.conv2d(x, torch.randn(2, 3, 7, 7, dtype=f64))
    with pytest.raises(ValueError, match="stride must be a positive int"):
        cv.ConvLayer(3, stride=0)
    with pytest.raises(ValueError, match="padding must be in"):
        cv.ConvLayer(3, padding=-1)
