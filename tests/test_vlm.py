"""Unit tests of mlbook.architectures.vlm: zero-shot scores and the learned scale, projectors and
splicing, the decoder run from embeddings, query resampling, gated cross-attention, token merging
and counts, and the toy CLIP."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from mlbook.architectures import vit, vlm
from mlbook.models.config import DecoderConfig, gpt2_config
from mlbook.models.decoder import Decoder

F64 = torch.float64


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def randn(g, *shape):
    return torch.randn(*shape, generator=g, dtype=F64)


# --- eq. 32.1 -------------------------------------------------------------------------------------


def test_logit_scale_value_gradient_and_clip():
    for s, alpha, grad in ((1.0, math.e, math.e), (math.log(50), 50.0, 50.0), (5.0, 100.0, 0.0)):
        t = torch.tensor(s, dtype=F64, requires_grad=True)
        a = vlm.logit_scale(t)
        (g,) = torch.autograd.grad(a, t)
        assert abs(float(a.detach()) - alpha) < 1e-12 and abs(float(g) - grad) < 1e-12
    assert abs(float(vlm.logit_scale(4.0, max_scale=10.0)) - 10.0) < 1e-12
    with pytest.raises(ValueError, match="max_scale"):
        vlm.logit_scale(1.0, max_scale=0.0)


def test_zero_shot_probs_against_cosine_softmax_and_loop():
    g = gen(1)
    i, t = randn(g, 7, 12), randn(g, 4, 12)
    for s in (0.0, 2.5, 6.0):  # 6 is above the clip
        alpha = min(math.exp(s), 100.0)
        ref = torch.softmax(alpha * F.cosine_similarity(i[:, None], t[None], dim=-1), dim=-1)
        torch.testing.assert_close(vlm.zero_shot_probs(i, t, s), ref, atol=1e-12, rtol=0)
        torch.testing.assert_close(
            vlm.zero_shot_probs(i, t, s), vlm.zero_shot_probs_naive(i, t, s), atol=1e-12, rtol=0
        )
    p = vlm.zero_shot_probs(3.0 * i, 0.5 * t, 2.0)  # lengths do not matter
    torch.testing.assert_close(p, vlm.zero_shot_probs(i, t, 2.0), atol=1e-12, rtol=0)
    torch.testing.assert_close(p.sum(1), torch.ones(7, dtype=F64), atol=1e-12, rtol=0)


def test_zero_shot_rejects_mismatched_widths():
    with pytest.raises(ValueError, match="class_emb must have shape"):
        vlm.zero_shot_probs(torch.randn(3, 8), torch.randn(2, 5), 1.0)
    with pytest.raises(ValueError, match="image_emb must not be empty"):
        vlm.zero_shot_probs(torch.randn(0, 8), torch.randn(2, 8), 1.0)


def test_prompt_ensemble_is_the_normalised_mean_of_unit_prompts():
    P = randn(gen(2), 3, 5, 6) * torch.rand(3, 5, 1, generator=gen(3), dtype=F64)
    ref = torch.stack([sum(P[c, m] / P[c, m].norm() for m in range(5)) for c in range(3)])
    torch.testing.assert_close(
        vlm.prompt_ensemble(P), ref / ref.norm(dim=-1, keepdim=True), atol=1e-12, rtol=0
    )
    with pytest.raises(ValueError, match="prompt_emb must have 3 axes"):
        vlm.prompt_ensemble(torch.randn(3, 6))


def _explicit_clip_loss(s, a, b):
    logits = torch.exp(s) * (F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T)
    target = torch.arange(len(a))
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))


@pytest.mark.parametrize("s", [0.5, math.log(1 / 0.07), 4.0])
def test_log_scale_grad_against_autograd(s):
    g = gen(4)
    a, b = randn(g, 20, 8), randn(g, 20, 8)
    t = torch.tensor(s, dtype=F64, requires_grad=True)
    (want,) = torch.autograd.grad(_explicit_clip_loss(t, a, b), t)
    torch.testing.assert_close(vlm.log_scale_grad(a, b, s), want, atol=1e-12, rtol=0)
    assert float(vlm.log_scale_grad(a, b, 4.7)) == 0.0  # above log 100


# --- eq. 32.2 -------------------------------------------------------------------------------------


def test_projectors_against_torch_and_their_counts():
    g = gen(5)
    z = randn(g, 2, 9, 6)
    for kind in ("linear", "mlp"):
        P = vlm.Projector(6, 10, kind, generator=g, dtype=F64)
        if kind == "linear":
            ref = F.linear(z, P.W1.T, P.b1)
        else:
            ref = F.linear(F.gelu(F.linear(z, P.W1.T, P.b1)), P.W2.T, P.b2)
        torch.testing.assert_close(P(z), ref, atol=1e-12, rtol=0)
        assert vlm.projector_parameters(6, 10, kind) == sum(p.numel() for p in P.parameters())
    assert vlm.projector_parameters(1024, 4096, "mlp") == 20_979_712  # LLaVA-1.5-7B
    with pytest.raises(ValueError, match="kind must be one of"):
        vlm.Projector(6, 10, "conv")
    with pytest.raises(ValueError, match="W1 must have shape"):
        vlm.project(z, torch.randn(5, 10, dtype=F64), torch.zeros(10, dtype=F64))


def test_splice_matches_cat_and_marks_the_image_rows():
    g = gen(6)
    tokens = torch.tensor([[9, 1, 2, 3], [1, 9, 2, 3], [1, 2, 3, 9]])
    text, image = randn(g, 3, 4, 5), randn(g, 3, 6, 5)
    x, mask = vlm.splice_image_tokens(tokens, text, image, 9)
    x_ref, mask_ref = vlm.splice_image_tokens_naive(tokens, text, image, 9)
    assert torch.equal(x, x_ref) and torch.equal(mask, mask_ref)
    assert x.shape == (3, 9, 5) and mask.sum(1).tolist() == [6, 6, 6]
    assert torch.equal(x[1, 0], text[1, 0]) and torch.equal(x[1, 1:7], image[1])
    with pytest.raises(ValueError, match="exactly once per sequence"):
        vlm.splice_image_tokens(torch.tensor([[9, 9, 1, 2]]), text[:1], image[:1], 9)
    with pytest.raises(ValueError, match="image_emb must have shape"):
        vlm.splice_image_tokens(tokens, text, randn(g, 3, 6, 4), 9)


@pytest.mark.parametrize(
    "cfg",
    [gpt2_config(30, 16, 2, 2, max_seq_len=12), DecoderConfig(30, 16, 2, 2, max_seq_len=12)],
    ids=["gpt2", "llama"],
)
def test_decoder_from_embeddings_equals_the_decoder(cfg):
    model = Decoder(cfg, generator=gen(7), dtype=F64)
    tokens = torch.randint(0, 30, (3, 10), generator=gen(8))
    with torch.no_grad():
        h = model.hidden(embeddings=model.embedding[tokens])
        assert torch.equal(model.logits(h), model(tokens))
        assert torch.equal(model(embeddings=model.embedding[tokens]), model(tokens))
    with pytest.raises(ValueError, match="max_seq_len"):
        model.hidden(embeddings=torch.zeros(1, 13, 16, dtype=F64))
    with pytest.raises(ValueError, match="embeddings must have shape"):
        model.hidden(embeddings=torch.zeros(1, 4, 8, dtype=F64))
    with pytest.raises(ValueError, match="either tokens or embeddings"):
        model.hidden(tokens, embeddings=model.embedding[tokens])


# --- eq. 32.3 -------------------------------------------------------------------------------------


def _resampler(seed=9):
    return vlm.Resampler(3, 6, 8, n_heads=2, generator=gen(seed), dtype=F64)


def test_resample_against_loop_and_torch_multihead_attention():
    r = _resampler()
    z = randn(gen(10), 2, 7, 6)
    lat = r.latents.detach()
    torch.testing.assert_close(
        vlm.resample(lat, z, r.attn), vlm.resample_naive(lat, z, r.attn), atol=1e-12, rtol=0
    )
    mha = torch.nn.MultiheadAttention(8, 2, bias=False, kdim=6, vdim=6, batch_first=True, dtype=F64)
    with torch.no_grad():
        mha.q_proj_weight.copy_(r.attn.W_Q.T)
        mha.k_proj_weight.copy_(r.attn.W_K.T)
        mha.v_proj_weight.copy_(r.attn.W_V.T)
        mha.out_proj.weight.copy_(r.attn.W_O.T)
        ref = mha(lat.expand(2, -1, -1), z, z, need_weights=False)[0]
    torch.testing.assert_close(vlm.resample(lat, z, r.attn), ref, atol=1e-12, rtol=0)


def test_resampler_gives_q_tokens_for_any_length_and_ignores_order():
    r = _resampler()
    for T_v in (1, 5, 40):
        assert r(randn(gen(T_v), 2, T_v, 6)).shape == (2, 3, 8)
    z = randn(gen(11), 2, 9, 6)
    perm = torch.randperm(9, generator=gen(12))
    torch.testing.assert_close(r(z[:, perm]), r(z), atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="z must have shape"):
        r(randn(gen(13), 2, 9, 5))


def test_resampler_flops_against_flop_counter():
    r = _resampler()
    z = randn(gen(14), 1, 11, 6)
    with FlopCounterMode(display=False) as fc:
        vlm.resample(r.latents.detach(), z, r.attn)
    assert fc.get_total_flops() == vlm.resampler_flops(3, 11, 6, 8)


# --- eq. 32.4 -------------------------------------------------------------------------------------


def _gated(seed=15):
    block = vlm.GatedCrossAttentionBlock(8, 5, n_heads=2, generator=gen(seed), dtype=F64)
    g = gen(seed + 1)
    return block, randn(g, 2, 4, 8), randn(g, 2, 6, 5)


def test_gated_cross_attention_against_loop_and_identity_at_zero():
    block, x, z = _gated()
    for gate in (0.3, -1.2):
        torch.testing.assert_close(
            vlm.gated_cross_attention(x, z, gate, block.attn),
            vlm.gated_cross_attention_naive(x, z, gate, block.attn),
            atol=1e-12,
            rtol=0,
        )
    assert torch.equal(vlm.gated_cross_attention(x, z, 0.0, block.attn), x)
    assert torch.equal(block(x, z), x)  # both gates start at 0
    with pytest.raises(ValueError, match="z must have shape"):
        vlm.gated_cross_attention(x, z[:1], 0.0, block.attn)
    with pytest.raises(TypeError, match="attn must be a MultiHeadAttention"):
        vlm.gated_cross_attention(x, z, 0.0, torch.nn.Linear(8, 8))


def test_gradients_at_gate_zero():
    block, x, z = _gated()
    x, z = x.clone().requires_grad_(True), z.clone().requires_grad_(True)
    G = randn(gen(17), *x.shape)
    out = vlm.gated_cross_attention(x, z, block.attn_gate, block.attn)
    weights = [block.attn.W_Q, block.attn.W_K, block.attn.W_V, block.attn.W_O]
    grads = torch.autograd.grad((G * out).sum(), [block.attn_gate, x, z, *weights])
    with torch.no_grad():
        C = block.attn(F.layer_norm(x, (8,), eps=1e-5), z)[0]
    torch.testing.assert_close(grads[0], (G * C).sum(), atol=1e-12, rtol=0)
    assert torch.equal(grads[1], G)
    assert all(bool((gr == 0).all()) for gr in grads[2:])


# --- eq. 32.5 -------------------------------------------------------------------------------------


def test_merge_2x2_against_loop_and_pixel_unshuffle():
    t = randn(gen(18), 2, 6 * 4, 3)
    merged = vlm.merge_2x2(t, 6, 4)
    assert torch.equal(merged, vlm.merge_2x2_naive(t, 6, 4))
    un = F.pixel_unshuffle(t.transpose(1, 2).reshape(2, 3, 6, 4), 2)  # (B, 4 d, 3, 2)
    ref = un.reshape(2, 3, 4, 6).permute(0, 3, 2, 1).reshape(2, 6, 12)
    assert torch.equal(merged, ref)
    with pytest.raises(ValueError, match="must divide h"):
        vlm.merge_2x2(randn(gen(19), 1, 5 * 4, 3), 5, 4)
    with pytest.raises(ValueError, match="tokens must have shape"):
        vlm.merge_2x2(t, 4, 4)


def test_merge_after_patchify_matches_qwen2_vl_patch_order():
    """Qwen2-VL's image processor lays patches out as (G_H/2, G_W/2, 2, 2) with each patch
    flattened (C, P, P); four consecutive rows are then one 2 x 2 block. Written here in NumPy."""
    C, P, H, W = 3, 14, 56, 84
    img = np.random.default_rng(0).random((C, H, W))
    gh, gw = H // P, W // P
    ref = img.reshape(C, gh // 2, 2, P, gw // 2, 2, P).transpose(1, 4, 2, 5, 0, 3, 6)
    ref = ref.reshape(gh * gw // 4, 4 * C * P * P)
    ours = vlm.merge_2x2(vit.patchify(torch.from_numpy(img)[None], P), gh, gw)[0]
    assert np.array_equal(ours.numpy(), ref)


def test_token_grid_counts():
    assert vlm.token_grid(1, 224, 224) == vlm.TokenGrid(1, 16, 16, 64)
    assert vlm.token_grid(9, 56, 84) == vlm.TokenGrid(5, 4, 6, 30)  # 9 frames: 5 pairs
    assert vlm.token_grid(4, 336, 336, merge=1).n_tokens == 2 * 576
    with pytest.raises(ValueError, match="must divide height"):
        vlm.token_grid(2, 100, 224)
    with pytest.raises(TypeError, match="frames must be a positive int"):
        vlm.token_grid(2.0, 224, 224)


# --- the toy CLIP ---------------------------------------------------------------------------------


def test_captions_and_the_bag_of_words_text_tower():
    vocab = vlm.caption_vocab()
    ids, last = vlm.encode_captions(("the number {}", "a {}"), vocab, length=6)
    assert ids.shape == (10, 2, 6) and last[3].tolist() == [3, 2]
    assert [vocab[i] for i in ids[7, 0, :4]] == ["the", "number", "seven", vlm.EOT]
    with pytest.raises(ValueError, match="not in vocab"):
        vlm.encode_captions(("a drawing of {}",), vocab)
    model = vlm.ToyClip(len(vocab), generator=gen(20))
    flat_ids, flat_last = ids.view(-1, 6), last.view(-1)
    with torch.no_grad():
        got = model.encode_text(flat_ids, flat_last)
        ref = torch.stack(
            [model.words[i[:n]].mean(0) for i, n in zip(flat_ids, flat_last.tolist(), strict=True)]
        )
        torch.testing.assert_close(got, ref @ model.W_text, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="last must be >= 1"):
        model.encode_text(flat_ids[:1], torch.tensor([0]))


def test_train_toy_clip_runs_and_clips_the_scale():
    x = torch.rand(40, 1, 8, 8, generator=gen(21))
    y = torch.arange(40) % 10
    model, hist = vlm.train_toy_clip(x, y, steps=3, batch_size=8, seed=1)
    assert len(hist["loss"]) == 3 and hist["alpha"][0] == pytest.approx(1 / 0.07, rel=1e-6)
    assert float(model.log_scale.detach()) <= math.log(100) + 1e-6 and not model.training
    assert model.image_tokens(x[:2]).shape == (2, 16, 32)
    with pytest.raises(ValueError, match="y must have shape"):
        vlm.train_toy_clip(x, y[:5], steps=1)
