"""mlbook.nn.mlp against independent references: torch.nn, F.cross_entropy, autograd, np.interp."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mlbook.nn import mlp

F64 = torch.float64
ATOL = {torch.float64: 1e-12, torch.float32: 1e-5}


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


def _problem(gen, dtype=F64, B=9, D=6, H=5, K=3):
    params = mlp.init_mlp(D, H, K, generator=gen, dtype=dtype)
    params["b1"] = 0.1 * torch.randn(H, generator=gen, dtype=dtype)
    params["b2"] = 0.1 * torch.randn(K, generator=gen, dtype=dtype)
    X = torch.randn(B, D, generator=gen, dtype=dtype)
    y = torch.randint(0, K, (B,), generator=gen)
    return params, X, y


def _torch_loss(params, X, y):
    return F.cross_entropy(F.relu(X @ params["W1"] + params["b1"]) @ params["W2"] + params["b2"], y)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_forward_matches_torch_nn(gen, dtype):
    params, X, _ = _problem(gen, dtype)
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    net = net.to(dtype)
    with torch.no_grad():
        net[0].weight.copy_(params["W1"].T)
        net[0].bias.copy_(params["b1"])
        net[2].weight.copy_(params["W2"].T)
        net[2].bias.copy_(params["b2"])
        logits, cache = mlp.forward(params, X)
        torch.testing.assert_close(logits, net(X), atol=ATOL[dtype], rtol=0)
    assert cache["H"].min() >= 0 and cache["Z1"].shape == (9, 5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_loss_and_output_grad_match_torch(gen, dtype):
    params, X, y = _problem(gen, dtype)
    logits, _ = mlp.forward(params, X)
    z = logits.clone().requires_grad_(True)
    ref = F.cross_entropy(z, y)
    (g_ref,) = torch.autograd.grad(ref, z)
    loss, _ = mlp.loss_and_grads(params, X, y)
    torch.testing.assert_close(loss, ref.detach(), atol=ATOL[dtype], rtol=0)
    torch.testing.assert_close(mlp.output_grad(logits, y), g_ref, atol=ATOL[dtype], rtol=0)
    big = 1e4 * logits.double()  # the naive -log softmax is inf here
    z = big.clone().requires_grad_(True)
    (g_big,) = torch.autograd.grad(F.cross_entropy(z, y), z)
    torch.testing.assert_close(mlp.output_grad(big, y), g_big, atol=1e-15, rtol=0)


def test_backward_matches_autograd_and_finite_differences(gen):
    params, X, y = _problem(gen)
    loss, grads = mlp.loss_and_grads(params, X, y)
    leaf = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    ref = torch.autograd.grad(_torch_loss(leaf, X, y), list(leaf.values()))
    for name, g_ref in zip(leaf, ref, strict=True):
        torch.testing.assert_close(grads[name], g_ref, atol=1e-14, rtol=0)
    fd = mlp.grads_finite_difference(params, X, y, eps=1e-6)
    for name in mlp.PARAM_NAMES:
        torch.testing.assert_close(grads[name], fd[name], atol=1e-8, rtol=0)
    assert loss.item() == pytest.approx(_torch_loss(params, X, y).item(), abs=1e-14)


def test_linear_backward_matches_autograd(gen):
    A = torch.randn(4, 3, generator=gen, dtype=F64, requires_grad=True)
    W = torch.randn(3, 2, generator=gen, dtype=F64, requires_grad=True)
    b = torch.randn(2, generator=gen, dtype=F64, requires_grad=True)
    Z_bar = torch.randn(4, 2, generator=gen, dtype=F64)
    gA, gW, gb = torch.autograd.grad(A @ W + b, (A, W, b), Z_bar)
    W_bar, b_bar, A_bar = mlp.linear_backward(A.detach(), W.detach(), Z_bar)
    for ours, ref in ((W_bar, gW), (b_bar, gb), (A_bar, gA)):
        torch.testing.assert_close(ours, ref, atol=1e-14, rtol=0)


def test_training_matches_sgd_on_autograd_gradients(gen):
    params, X, y = _problem(gen, B=40)
    ours, hist = mlp.train(
        params, X, y, lr=0.2, epochs=3, batch_size=16, generator=torch.Generator().manual_seed(5)
    )
    leaf = {k: v.clone() for k, v in params.items()}
    shuffle = torch.Generator().manual_seed(5)
    for _ in range(3):
        order = torch.randperm(40, generator=shuffle)
        for i0 in range(0, 40, 16):
            idx = order[i0 : i0 + 16]
            req = {k: v.clone().requires_grad_(True) for k, v in leaf.items()}
            gs = torch.autograd.grad(_torch_loss(req, X[idx], y[idx]), list(req.values()))
            leaf = {k: leaf[k] - 0.2 * g for k, g in zip(leaf, gs, strict=True)}
    for name in mlp.PARAM_NAMES:
        torch.testing.assert_close(ours[name], leaf[name], atol=1e-12, rtol=0)
    assert len(hist) == 3 and all(math.isfinite(h) for h in hist)
    full, _ = mlp.sgd_epoch(params, X, y, lr=0.2)  # full batch = one step
    grads = mlp.loss_and_grads(params, X, y)[1]
    for name in mlp.PARAM_NAMES:
        torch.testing.assert_close(full[name], params[name] - 0.2 * grads[name], atol=0, rtol=0)


def test_training_reduces_loss_and_predict_accuracy(gen):
    X = torch.randn(200, 2, generator=gen, dtype=F64)
    y = (X[:, 0] * X[:, 1] > 0).long()  # XOR of the signs
    params = mlp.init_mlp(2, 16, 2, generator=torch.Generator().manual_seed(1))
    trained, hist = mlp.train(params, X, y, lr=0.5, epochs=300)
    assert hist[-1] < 0.5 * hist[0]
    assert mlp.accuracy(trained, X, y) > 0.9
    assert mlp.predict(trained, X).shape == (200,)


def test_one_function_per_concept():
    # the ReLU, the loss and the SGD step live in activations, probability and optim only
    from mlbook.nn import activations

    for name in ("relu", "nll_loss", "sgd_step"):
        assert not hasattr(mlp, name), f"mlp.{name} duplicates a function of another module"
    assert mlp._ACTIVATIONS["relu"] is activations.relu


def test_init_std_and_layers():
    assert mlp.init_std(100, 100, "lecun") == pytest.approx(0.1)
    assert mlp.init_std(100, 300, "xavier") == pytest.approx(math.sqrt(2 / 400))
    assert mlp.init_std(50, 10, "he") == pytest.approx(math.sqrt(2 / 50))
    layers = mlp.init_layers([400, 300, 200], "he", generator=torch.Generator().manual_seed(0))
    assert [tuple(W.shape) for W, _ in layers] == [(400, 300), (300, 200)]
    assert layers[0][0].std().item() == pytest.approx(math.sqrt(2 / 400), rel=0.02)
    assert layers[1][1].abs().max().item() == 0.0


def test_he_preserves_relu_variance_and_lecun_halves_it():
    X = torch.randn(512, 256, generator=torch.Generator().manual_seed(0))
    for scheme, factor in (("he", 1.0), ("lecun", 0.5)):
        layers = mlp.init_layers(
            [256] * 6, scheme, generator=torch.Generator().manual_seed(1), dtype=torch.float32
        )
        _, pre = mlp.deep_forward(X, layers, "relu")
        v = np.array([z.pow(2).mean().item() for z in pre])
        relu2 = np.array([z.clamp_min(0).pow(2).mean().item() for z in pre[:-1]])
        gain = 256 * mlp.init_std(256, 256, scheme) ** 2
        per_layer = v[1:] / (gain * relu2)  # eq. 14.5, layer by layer
        assert np.all(np.abs(per_layer - 1) < 0.1), per_layer
        overall = (v[-1] / v[0]) ** (1 / (len(v) - 1))  # geometric mean per layer
        assert abs(overall / factor - 1) < 0.1, overall


def test_deep_forward_linear_collapse(gen):
    layers = mlp.init_layers([3, 4, 2], "lecun", generator=gen)
    X = torch.randn(5, 3, generator=gen, dtype=F64)
    out, pre = mlp.deep_forward(X, layers, "linear")
    (W1, b1), (W2, b2) = layers
    torch.testing.assert_close(out, X @ W1 @ W2 + b1 @ W2 + b2, atol=1e-14, rtol=0)
    assert len(pre) == 2
    out_t, _ = mlp.deep_forward(X, layers, "tanh")
    torch.testing.assert_close(out_t, torch.tanh(X @ W1 + b1) @ W2 + b2, atol=1e-14, rtol=0)


def test_relu_interpolant_matches_np_interp():
    rng = np.random.default_rng(0)
    knots = torch.tensor(np.sort(rng.uniform(-2, 3, 12)), dtype=F64)
    values = torch.tensor(rng.standard_normal(12), dtype=F64)
    params = mlp.relu_interpolant(knots, values)
    x = torch.linspace(knots[0].item(), knots[-1].item(), 5001, dtype=F64)
    g = mlp.forward(params, x[:, None])[0][:, 0]
    ref = np.interp(x.numpy(), knots.numpy(), values.numpy())
    np.testing.assert_allclose(g.numpy(), ref, atol=1e-12)
    assert params["W1"].shape == (1, 11)


def test_interpolation_error_bound():
    for m in (5, 20, 80):
        knots = torch.linspace(0, 1, m + 1, dtype=F64)
        params = mlp.relu_interpolant(knots, torch.exp(2 * knots))
        x = torch.linspace(0, 1, 20001, dtype=F64)
        err = (mlp.forward(params, x[:, None])[0][:, 0] - torch.exp(2 * x)).abs().max().item()
        bound = (1 / m) ** 2 * 4 * math.exp(2) / 8  # max |f''| = 4 e^2
        assert err <= bound
        assert err >= 0.5 * bound


def test_tent_pieces_and_shallow_equivalence():
    for k in range(1, 8):
        x = torch.arange(2 ** (k + 3) + 1, dtype=F64) / 2 ** (k + 3)
        out, _ = mlp.deep_forward(x[:, None], mlp.tent_layers(k))
        assert mlp.count_linear_pieces(x, out[:, 0]) == 2**k
        assert out.min().item() == 0.0 and out.max().item() == 1.0
    # T^2 by composition of the one-layer tent
    x = torch.linspace(0, 1, 101, dtype=F64)[:, None]
    t1 = mlp.deep_forward(x, mlp.tent_layers(1))[0]
    t2 = mlp.deep_forward(t1, mlp.tent_layers(1))[0]
    torch.testing.assert_close(mlp.deep_forward(x, mlp.tent_layers(2))[0], t2, atol=1e-15, rtol=0)


def test_count_linear_pieces_off_grid_kinks():
    x = torch.linspace(-1, 1, 2001, dtype=F64)
    f = torch.relu(x - 0.12345) + 2 * torch.relu(-x - 0.5001) - 0.5 * torch.relu(x - 0.7003)
    assert mlp.count_linear_pieces(x, f) == 4
    assert mlp.count_linear_pieces(x, 3 * x + 1) == 1


def test_symmetric_units_stay_identical():
    gen = torch.Generator().manual_seed(3)
    X = torch.randn(30, 4, generator=gen, dtype=F64)
    y = torch.randint(0, 3, (30,), generator=gen)
    params = {
        "W1": torch.full((4, 6), 0.2, dtype=F64),
        "b1": torch.zeros(6, dtype=F64),
        "W2": torch.full((6, 3), 0.1, dtype=F64),
        "b2": torch.zeros(3, dtype=F64),
    }
    trained, _ = mlp.train(params, X, y, lr=0.3, epochs=50)
    torch.testing.assert_close(trained["W1"], trained["W1"][:, :1].expand(4, 6), atol=1e-13, rtol=0)
    assert (trained["W1"] - params["W1"]).abs().max() > 1e-3


def test_bad_input_raises(gen):
    params, X, y = _problem(gen)
    with pytest.raises(TypeError, match="floating"):
        mlp.forward(params, torch.ones(3, 6, dtype=torch.int64))
    with pytest.raises(ValueError, match="b1 must have shape"):  # would broadcast silently
        mlp.forward({**params, "b1": torch.zeros(1, dtype=F64)}, X)
    with pytest.raises(ValueError, match="X must not be empty"):
        mlp.forward(params, X[:0])
    logits = mlp.forward(params, X)[0]
    with pytest.raises(ValueError, match=r"y must hold indices in \[0, 3\)"):
        mlp.output_grad(logits, torch.full((9,), 3))
    with pytest.raises(ValueError, match=r"y must hold indices in \[0, 3\)"):
        mlp.loss_and_grads(params, X, torch.full((9,), 3))
    with pytest.raises(TypeError, match="integer"):
        mlp.output_grad(logits, y.double())
    with pytest.raises(ValueError, match="y must have shape"):
        mlp.output_grad(logits, y[:4])
    with pytest.raises(ValueError, match="logits must not be empty"):
        mlp.output_grad(torch.zeros(0, 3, dtype=F64), torch.zeros(0, dtype=torch.long))
    with pytest.raises(ValueError, match="eps"):
        mlp.grads_finite_difference(params, X, y, eps=0.0)
    with pytest.raises(ValueError, match="lr must be"):
        mlp.sgd_epoch(params, X, y, lr=-1.0)
    with pytest.raises(ValueError, match="batch_size"):
        mlp.sgd_epoch(params, X, y, lr=0.1, batch_size=0)
    with pytest.raises(ValueError, match="epochs"):
        mlp.train(params, X, y, lr=0.1, epochs=0)
    with pytest.raises(ValueError, match="y must have shape"):
        mlp.accuracy(params, X, y[:3])
    with pytest.raises(ValueError, match="scheme must be one of"):
        mlp.init_std(3, 3, "orthogonal")
    with pytest.raises(ValueError, match="fan_in"):
        mlp.init_std(0, 3, "he")
    with pytest.raises(ValueError, match="an input and an output width"):
        mlp.init_layers([5], "he")
    with pytest.raises(ValueError, match="activation must be one of"):
        mlp.deep_forward(X, [(params["W1"], params["b1"])], "gelu")
    with pytest.raises(ValueError, match="b of layer 1 must have shape"):
        mlp.deep_forward(X, [(params["W1"], params["b1"][:1])])
    with pytest.raises(ValueError, match="strictly increasing"):
        mlp.relu_interpolant(torch.tensor([0.0, 1.0, 1.0], dtype=F64), torch.zeros(3, dtype=F64))
    with pytest.raises(ValueError, match="same shape"):
        mlp.relu_interpolant(torch.tensor([0.0, 1.0], dtype=F64), torch.zeros(1, dtype=F64))
    with pytest.raises(ValueError, match="positive int"):
        mlp.tent_layers(0)
    with pytest.raises(ValueError, match="at least 3 grid points"):
        mlp.count_linear_pieces(torch.zeros(2, dtype=F64), torch.zeros(2, dtype=F64))
    with pytest.raises(ValueError, match="strictly increasing"):
        mlp.count_linear_pieces(torch.tensor([0.0, 2.0, 1.0]), torch.zeros(3))
