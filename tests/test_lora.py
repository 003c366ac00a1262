"""LoRA (chapter 33): the bypass, its gradients, its parameter count, the adapted decoder."""

import pytest
import torch
import torch.nn.functional as F

from mlbook.models import checkpoints
from mlbook.posttraining import lora, task

F64 = torch.float64


def _close(actual, expected, atol):
    """Max-abs agreement (torch.testing.assert_close costs seconds on its first call)."""
    err = (actual - expected).abs().max().item()
    assert actual.shape == expected.shape and err <= atol, f"max abs error {err:.3g} > {atol:g}"


def _rand(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=F64)


def _problem(seed=0, N=6, d_in=7, d_out=5, r=3):
    gen = torch.Generator().manual_seed(seed)
    return _rand(gen, N, d_in), _rand(gen, d_out, d_in), _rand(gen, r, d_in), _rand(gen, d_out, r)


def test_bypass_matches_the_merged_weight_and_two_linear_layers():
    x, W, A, B = _problem()
    alpha = 6.0
    ref = F.linear(x, W) + alpha / 3 * F.linear(F.linear(x, A), B)  # torch's layers, (N, d_out)
    _close(lora.lora_linear(x, W, A, B, alpha), ref, atol=1e-12)
    _close(lora.lora_linear_naive(x, W, A, B, alpha), ref, atol=1e-12)
    s = torch.linalg.svdvals(lora.lora_delta(A, B, alpha))  # rank r = 3: two zero singular values
    assert s[2] > 1e-3 and s[3:].max() < 1e-12


def test_gradients_of_A_and_B_match_autograd_in_float64():
    x, W, A, B = _problem(seed=1)
    alpha = 2.0
    A_, B_ = A.clone().requires_grad_(True), B.clone().requires_grad_(True)
    y = lora.lora_linear(x, W, A_, B_, alpha)
    G = _rand(torch.Generator().manual_seed(2), *y.shape)
    (y * G).sum().backward()  # dL/dy = G
    for impl in (lora.lora_grads, lora.lora_grads_naive):
        A_bar, B_bar = impl(x, G, A, B, alpha)
        _close(A_bar, A_.grad, atol=1e-12)
        _close(B_bar, B_.grad, atol=1e-12)


def test_mismatched_factors_are_refused():
    x, W, A, B = _problem()
    with pytest.raises(ValueError, match="B must have shape"):
        lora.lora_delta(A, B[:, :2], 1.0)
    with pytest.raises(ValueError, match="alpha must be"):
        lora.lora_delta(A, B, 0.0)
    with pytest.raises(ValueError, match="W must have shape"):
        lora.lora_linear(x, W.T, A, B, 1.0)
    with pytest.raises(ValueError, match="r must be in"):
        lora.lora_parameters(4, 6, 5)


def test_layer_starts_as_the_base_map_counts_its_parameters_and_merges():
    x, W, _, _ = _problem(seed=3)
    bias = torch.arange(5, dtype=F64)
    layer = lora.LoRALinear(W, 2, 4.0, bias=bias, generator=torch.Generator().manual_seed(0))
    assert torch.equal(layer(x), F.linear(x, W, bias))  # B = 0: bit-exact
    trainable = sum(p.numel() for p in layer.parameters() if p.requires_grad)
    assert trainable == lora.lora_parameters(7, 5, 2) == 2 * (7 + 5)
    with torch.no_grad():
        layer.B.normal_(generator=torch.Generator().manual_seed(1))
    y = layer(x)
    layer.merge()
    _close(layer(x), y, atol=1e-12)
    with pytest.raises(ValueError, match="already merged"):
        layer.merge()
    layer.unmerge()
    _close(layer.weight, W, atol=1e-14)


def test_init_matches_nn_linear_bounds_and_zero_B():
    A, B = lora.init_lora(64, 32, 8, generator=torch.Generator().manual_seed(0))
    assert A.shape == (8, 64) and B.shape == (32, 8) and not B.any()
    assert A.abs().max() <= 1 / 8 and A.abs().max() > 0.9 / 8


def test_adapted_decoder_starts_bit_exact_and_trains_only_the_adapters():
    base, model = checkpoints.load("base"), checkpoints.load("base")
    adapters = lora.add_lora(model, 4, 8.0, ("q", "v", "down"), torch.Generator().manual_seed(0))
    tokens, mask = task.batch([(3, 4), (9, 9), (0, 5)])
    assert torch.equal(model(tokens), base(tokens))
    c = model.config
    per_layer = 2 * lora.lora_parameters(c.d_model, c.d_model, 4) + lora.lora_parameters(
        c.d_ff, c.d_model, 4
    )
    assert lora.trainable_parameters(model) == c.n_layers * per_layer
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert len(trainable) == 2 * len(adapters) and all(n.endswith((".A", ".B")) for n in trainable)
    with pytest.raises(ValueError, match="already has LoRA"):
        lora.add_lora(model, 4, 8.0)
    with pytest.raises(ValueError, match="targets must be one of"):
        lora.add_lora(checkpoints.load("base"), 4, 8.0, ("query",))


def test_merge_unmerge_and_unload_preserve_the_function():
    model = checkpoints.load("base", F64)
    lora.add_lora(model, 2, 4.0, ("q", "k", "v", "o"), torch.Generator().manual_seed(0))
    with torch.no_grad():
        for a in lora.adapters(model).values():
            a.B.normal_(generator=torch.Generator().manual_seed(1))
    tokens, _ = task.batch(task.problems()[:10])
    before = model(tokens)
    W0 = model.blocks[0].attn.parametrizations.Wq.original.clone()
    lora.merge(model)
    _close(model(tokens), before, atol=1e-12)
    lora.unmerge(model)
    _close(model.blocks[0].attn.parametrizations.Wq.original, W0, atol=1e-15)
    plain = lora.merge_and_unload(model)
    assert set(plain.state_dict()) == set(checkpoints.load("base").state_dict())
    _close(plain(tokens), before, atol=1e-12)
    with pytest.raises(ValueError, match="no LoRA adapters"):
        lora.merge(plain)
