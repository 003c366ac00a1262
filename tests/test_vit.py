"""mlbook.architectures.vit against independent references: F.unfold and F.conv2d, F.interpolate
and np.interp, transformers' ViT (parameter count, position interpolation), torch.nn's
TransformerEncoderLayer, FlopCounterMode, and rollout as a sum over paths."""

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from mlbook import datasets
from mlbook.architectures import vit

f64 = torch.float64


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def small_config(**kw):
    base = dict(image_size=8, patch_size=2, channels=1, d_model=16, n_layers=2, n_heads=2, d_ff=32)
    return vit.ViTConfig(**{**base, **kw})


# --- patches ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("H", "W", "P"), [(8, 8, 2), (6, 12, 3), (16, 8, 8), (5, 5, 1)])
def test_grid_size_and_patchify_match_unfold(H, W, P):
    g_h, g_w, T = vit.grid_size(H, W, P)
    assert (g_h, g_w, T) == (H // P, W // P, H * W // P**2)
    x = torch.randn(3, 2, H, W, generator=gen(), dtype=f64)
    ref = F.unfold(x, kernel_size=P, stride=P).transpose(1, 2)  # (B, T, C P P)
    assert vit.patchify(x, P).shape == (3, T, 2 * P * P)
    torch.testing.assert_close(vit.patchify(x, P), ref, atol=0, rtol=0)
    torch.testing.assert_close(vit.patchify_naive(x, P), ref, atol=0, rtol=0)
    torch.testing.assert_close(vit.unpatchify(vit.patchify(x, P), P, H, W), x, atol=0, rtol=0)


def test_patch_embedding_is_a_strided_convolution():
    B, C, H, W, P, d = 2, 3, 12, 8, 4, 5
    x = torch.randn(B, C, H, W, generator=gen(1), dtype=f64)
    W_E = torch.randn(C * P * P, d, generator=gen(2), dtype=f64)
    b_E = torch.randn(d, generator=gen(3), dtype=f64)
    conv = F.conv2d(x, W_E.T.reshape(d, C, P, P), b_E, stride=P)  # (B, d, G_H, G_W)
    torch.testing.assert_close(
        vit.patch_embed(x, W_E, b_E, P), conv.flatten(2).transpose(1, 2), atol=1e-12, rtol=0
    )
    wrong = x.reshape(B, -1, C * P * P) @ W_E + b_E  # a plain reshape mixes rows of patches
    assert (wrong - conv.flatten(2).transpose(1, 2)).abs().max() > 0.1


def test_patch_checks_name_the_argument():
    with pytest.raises(ValueError, match=r"patch=3 must divide height=8"):
        vit.grid_size(8, 9, 3)
    with pytest.raises(ValueError, match="x must have 4 axes"):
        vit.patchify(torch.zeros(8, 8), 2)
    with pytest.raises(ValueError, match=r"W_E must have shape \(4, \*\)"):
        vit.patch_embed(torch.zeros(1, 1, 4, 4), torch.zeros(5, 3), torch.zeros(3), 2)
    with pytest.raises(ValueError, match=r"b_E must have shape \(3\)"):
        vit.patch_embed(torch.zeros(1, 1, 4, 4), torch.zeros(4, 3), torch.zeros(4), 2)
    with pytest.raises(ValueError, match=r"P\^2=4 must divide the length of a patch=6"):
        vit.unpatchify(torch.zeros(1, 4, 6), 2, 4, 4)


# --- position interpolation ---------------------------------------------------------------------


GRIDS = [((4, 4), (6, 6)), ((4, 4), (3, 3)), ((5, 3), (2, 7)), ((2, 2), (9, 5)), ((4, 4), (4, 4))]


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
@pytest.mark.parametrize(("old", "new"), GRIDS)
def test_interpolation_matches_its_loop_reference(mode, old, new):
    pos = torch.randn(old[0] * old[1], 6, generator=gen(), dtype=f64)
    out = vit.interpolate_positions(pos, old, new, mode)
    assert out.shape == (new[0] * new[1], 6)
    ref = vit.interpolate_positions_naive(pos, old, new, mode)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


def test_bilinear_interpolation_matches_np_interp_row_then_column():
    (g_h, g_w), (n_h, n_w) = (4, 5), (7, 3)
    pos = torch.randn(g_h * g_w, 2, generator=gen(4), dtype=f64)
    grid = pos.reshape(g_h, g_w, 2).numpy()
    src_r = np.clip((np.arange(n_h) + 0.5) * g_h / n_h - 0.5, 0, g_h - 1)  # align_corners=False
    src_c = np.clip((np.arange(n_w) + 0.5) * g_w / n_w - 0.5, 0, g_w - 1)
    ref = np.empty((n_h, n_w, 2))
    for k in range(2):
        cols = np.stack([np.interp(src_c, np.arange(g_w), grid[i, :, k]) for i in range(g_h)])
        ref[:, :, k] = np.stack(
            [np.interp(src_r, np.arange(g_h), cols[:, j]) for j in range(n_w)]
        ).T
    out = vit.interpolate_positions(pos, (g_h, g_w), (n_h, n_w), "bilinear")
    np.testing.assert_allclose(out.numpy(), ref.reshape(-1, 2), atol=1e-12, rtol=0)


def test_interpolation_to_the_same_grid_is_the_identity_and_a_round_trip_is_not():
    pos = torch.randn(16, 8, generator=gen(5), dtype=f64)
    for mode in ("bicubic", "bilinear"):
        torch.testing.assert_close(vit.interpolate_positions(pos, (4, 4), (4, 4), mode), pos)
        back = vit.interpolate_positions(
            vit.interpolate_positions(pos, (4, 4), (6, 6)), (6, 6), (4, 4)
        )
        assert (back - pos).abs().max() > 1e-2


def test_interpolation_matches_transformers_vit():
    pytest.importorskip("transformers")
    from transformers import ViTConfig as HFConfig
    from transformers.models.vit.modeling_vit import ViTEmbeddings

    d, P = 8, 4
    emb = ViTEmbeddings(HFConfig(hidden_size=d, image_size=16, patch_size=P, num_channels=1))
    table = torch.randn(1, 17, d, generator=gen(6))
    with torch.no_grad():
        emb.position_embeddings.copy_(table)
    got = emb.interpolate_pos_encoding(torch.zeros(1, 37, d), 24, 24)[0]  # 6 x 6 patches
    ours = vit.interpolate_positions(table[0, 1:], (4, 4), (6, 6))
    torch.testing.assert_close(got[1:], ours, atol=1e-6, rtol=0)
    torch.testing.assert_close(got[0], table[0, 0], atol=0, rtol=0)


def test_interpolation_checks():
    with pytest.raises(ValueError, match=r"pos must have shape \(16, \*\)"):
        vit.interpolate_positions(torch.zeros(15, 4), (4, 4), (5, 5))
    with pytest.raises(ValueError, match="mode must be one of"):
        vit.interpolate_positions(torch.zeros(16, 4), (4, 4), (5, 5), "nearest")


# --- rollout ------------------------------------------------------------------------------------


def random_weights(L, B, H, S, seed=0):
    return torch.softmax(torch.randn(L, B, H, S, S, generator=gen(seed), dtype=f64), dim=-1)


def test_rollout_is_the_sum_over_paths():
    w = random_weights(3, 2, 2, 4)
    A_hat = (w.mean(2) + torch.eye(4, dtype=f64)) / 2  # (L, B, S, S)
    ref = torch.zeros(2, 4, 4, dtype=f64)
    for i, a, b, j in itertools.product(range(4), repeat=4):  # i <- a <- b <- j, layers 3, 2, 1
        ref[:, i, j] += A_hat[2][:, i, a] * A_hat[1][:, a, b] * A_hat[0][:, b, j]
    torch.testing.assert_close(vit.attention_rollout(w), ref, atol=1e-14, rtol=0)
    torch.testing.assert_close(vit.attention_rollout_naive(w), ref, atol=1e-14, rtol=0)
    R = vit.attention_rollout(random_weights(4, 3, 2, 6, seed=1))
    torch.testing.assert_close(R.sum(-1), torch.ones(3, 6, dtype=f64), atol=1e-14, rtol=0)
    one = random_weights(1, 1, 1, 5, seed=2)
    torch.testing.assert_close(
        vit.attention_rollout(one)[0], (one[0, 0, 0] + torch.eye(5, dtype=f64)) / 2
    )


def test_rollout_refuses_rows_that_do_not_sum_to_one():
    with pytest.raises(ValueError, match="weights must sum to one"):
        vit.attention_rollout(torch.rand(2, 1, 1, 3, 3, generator=gen()) + 0.5)
    with pytest.raises(ValueError, match="weights must have 5 axes"):
        vit.attention_rollout(torch.eye(3)[None])


# --- the model ----------------------------------------------------------------------------------


def torch_reference(model, x):
    """The same ViT from torch.nn parts: conv2d patches, TransformerEncoderLayer, LayerNorm."""
    c = model.config
    d, P = c.d_model, c.patch_size
    z = F.conv2d(x, model.W_E.T.reshape(d, c.channels, P, P), model.b_E, stride=P)
    z = z.flatten(2).transpose(1, 2)  # (B, T, d)
    if c.pool == "cls":
        z = torch.cat([model.cls.expand(len(x), 1, d), z], dim=1)
    z = z + model.pos
    for blk in model.blocks:
        layer = nn.TransformerEncoderLayer(
            d,
            c.n_heads,
            c.d_ff,
            dropout=0.0,
            activation=lambda t: F.gelu(t, approximate="tanh"),
            layer_norm_eps=c.norm_eps,
            batch_first=True,
            norm_first=True,
            dtype=x.dtype,
        )
        a = blk.attn
        with torch.no_grad():
            layer.self_attn.in_proj_weight.copy_(torch.cat([a.Wq, a.Wk, a.Wv], dim=1).T)
            layer.self_attn.in_proj_bias.copy_(torch.cat([a.bq, a.bk, a.bv]))
            layer.self_attn.out_proj.weight.copy_(a.Wo.T)
            layer.self_attn.out_proj.bias.copy_(a.bo)
            layer.linear1.weight.copy_(blk.ffn.W.T)
            layer.linear1.bias.copy_(blk.ffn.bW)
            layer.linear2.weight.copy_(blk.ffn.W2.T)
            layer.linear2.bias.copy_(blk.ffn.bW2)
            for ours, theirs in ((blk.attn_norm, layer.norm1), (blk.ffn_norm, layer.norm2)):
                theirs.weight.copy_(ours.weight)
                theirs.bias.copy_(ours.bias)
        z = layer.eval()(z)
    h = F.layer_norm(z, (d,), model.final_norm.weight, model.final_norm.bias, c.norm_eps)
    emb = h[:, 0] if c.pool == "cls" else h.mean(1)
    return emb @ model.W_head + model.b_head if c.n_classes else emb


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_vit_matches_torch_nn_transformer_layers(pool):
    model = vit.ViT(small_config(pool=pool, image_size=(8, 12)), generator=gen(), dtype=f64)
    x = torch.rand(5, 1, 8, 12, generator=gen(7), dtype=f64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), torch_reference(model, x), atol=1e-10, rtol=0)


def test_a_causal_mask_would_blind_the_cls_token():
    model = vit.ViT(small_config(), generator=gen(), dtype=f64)
    x = torch.rand(6, 1, 8, 8, generator=gen(8), dtype=f64)
    with torch.no_grad():
        h = model.embed(x)
        for blk in model.blocks:
            h = blk(h, causal=True)  # the decoder's default
        cls_states = h[:, 0]  # (B, d): sees only itself
    torch.testing.assert_close(cls_states, cls_states[:1].expand_as(cls_states), atol=0, rtol=0)
    assert model.encode(x).std(0).max() > 1e-3  # without the mask it depends on the image


def test_parameter_count_matches_the_module_and_transformers_vit_b16():
    for cfg in (small_config(), small_config(pool="mean", n_classes=0)):
        model = vit.ViT(cfg, generator=gen())
        assert vit.parameter_count(cfg)["total"] == sum(p.numel() for p in model.parameters())
    transformers = pytest.importorskip("transformers")

    with torch.device("meta"):
        hf = transformers.ViTForImageClassification(transformers.ViTConfig(num_labels=1000))
    assert vit.parameter_count(vit.VIT_B16)["total"] == sum(p.numel() for p in hf.parameters())
    assert vit.VIT_B16.n_patches == 196 and vit.VIT_B16.patch_dim == 768


def test_forward_flops_match_flop_counter():
    for cfg in (small_config(), small_config(pool="mean", patch_size=4, n_layers=1)):
        model = vit.ViT(cfg, generator=gen())
        x = torch.rand(3, 1, 8, 8, generator=gen(9))
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(x)
        assert counter.get_total_flops() == 3 * vit.forward_flops(cfg)["total"]


def test_mean_pooling_without_positions_ignores_the_order_of_patches():
    model = vit.ViT(small_config(pool="mean"), generator=gen(), dtype=f64)
    x = torch.rand(4, 1, 8, 8, generator=gen(10), dtype=f64)
    perm = torch.randperm(16, generator=gen(11))
    shuffled = vit.unpatchify(vit.patchify(x, 2)[:, perm], 2, 8, 8)
    with torch.no_grad():
        assert (model(x) - model(shuffled)).abs().max() > 1e-4  # positions see the order
        model.pos.zero_()
        torch.testing.assert_close(model(x), model(shuffled), atol=1e-12, rtol=0)


def test_encoder_outputs_tokens_weights_and_resizes():
    cfg = small_config(n_classes=0)
    model = vit.ViT(cfg, generator=gen(), dtype=f64)
    x = torch.rand(3, 1, 8, 8, generator=gen(12), dtype=f64)
    with torch.no_grad():
        emb, h = model(x, return_tokens=True)
    assert emb.shape == (3, 16) and h.shape == (3, 17, 16)
    torch.testing.assert_close(emb, h[:, 0], atol=0, rtol=0)
    w = model.attention_weights(x)
    assert w.shape == (2, 3, 2, 17, 17)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 2, 17, dtype=f64), atol=1e-12, rtol=0)
    same = model.resized(8)
    torch.testing.assert_close(same(x), model(x).detach(), atol=0, rtol=0)
    big = model.resized(12)
    assert big.config.grid == (6, 6) and big.pos.shape == (37, 16)
    torch.testing.assert_close(big.pos[0], model.pos[0].detach(), atol=0, rtol=0)
    torch.testing.assert_close(
        big.pos[1:], vit.interpolate_positions(model.pos[1:].detach(), (4, 4), (6, 6))
    )
    assert big(torch.rand(2, 1, 12, 12, dtype=f64)).shape == (2, 16)


def test_config_and_model_checks():
    with pytest.raises(ValueError, match="patch=3 must divide height=8"):
        vit.ViTConfig(image_size=8, patch_size=3)
    with pytest.raises(ValueError, match="pool must be one of"):
        vit.ViTConfig(pool="max")
    with pytest.raises(ValueError, match="n_heads=3 must divide d_model=16"):
        vit.ViTConfig(d_model=16, n_heads=3)
    with pytest.raises(TypeError, match="image_size must be an int or a pair"):
        vit.ViTConfig(image_size=[8, 8])
    with pytest.raises(TypeError, match="config must be a ViTConfig"):
        vit.ViT(small_config().block_config())
    model = vit.ViT(small_config(), generator=gen())
    with pytest.raises(ValueError, match=r"x must have shape \(\*, 1, 8, 8\)"):
        model(torch.zeros(2, 1, 12, 12))
    assert math.isclose(vit.ViTConfig().d_ff, 4 * vit.ViTConfig().d_model)


def test_baselines_and_stored_runs():
    x = torch.rand(3, 1, 8, 8, generator=gen(13))
    assert vit.small_mlp()(x).shape == (3, 10) and vit.small_cnn()(x).shape == (3, 10)
    sizes = {
        "mlp": sum(p.numel() for p in vit.small_mlp().parameters()),
        "cnn": sum(p.numel() for p in vit.small_cnn().parameters()),
    }
    with pytest.raises(ValueError, match="2\\^stages=4 must divide height=6"):
        vit.small_cnn(image_size=(6, 8))
    stored = datasets.stored("vit_digits")
    cfg = vit.ViTConfig(**{**stored["config"], "image_size": tuple(stored["config"]["image_size"])})
    for run in stored["runs"]:
        if run["kind"] == "vit":
            c = vit.ViTConfig(**{**cfg.__dict__, "patch_size": run["patch"], "pool": run["pool"]})
            assert run["params"] == vit.parameter_count(c)["total"]
            assert run["flops_per_image"] == vit.forward_flops(c)["total"]
        else:
            assert run["params"] == sizes[run["kind"]]
        assert 0.1 < run["test_accuracy"] <= 1 and len(run["loss"]) == stored["settings"]["steps"]
    seeds = {r["seed"] for r in stored["runs"]}
    assert len(seeds) >= 3 and len(stored["runs"]) == 7 * len(seeds)
