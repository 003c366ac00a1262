"""Tests of mlbook.models.gpt against independent references (transformers GPT-2, torch built-ins)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from mlbook.models import gpt

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


def _model(dtype=torch.float64, init_std=0.3, V=11, T=8, L=2, H=2, d=16, seed=0):
    cfg = gpt.GPTConfig(
        vocab_size=V, block_size=T, n_layer=L, n_head=H, d_model=d, init_std=init_std
    )
    return cfg, gpt.GPT(cfg, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _tokens(B, T, V, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# --- config and shapes -----------------------------------------------------------------------


def test_config_validation():
    with pytest.raises(ValueError, match="divisible"):
        gpt.GPTConfig(vocab_size=10, d_model=10, n_head=4)
    with pytest.raises(ValueError):
        gpt.GPTConfig(vocab_size=0)
    with pytest.raises(TypeError):
        gpt.GPTConfig(vocab_size=10.0)
    with pytest.raises(ValueError):
        gpt.GPTConfig(vocab_size=10, init_std=0.0)
    with pytest.raises(TypeError):
        gpt.GPT("config")
    cfg = gpt.GPTConfig(vocab_size=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 8  # type: ignore[misc]
    assert cfg.head_dim == 16


def test_forward_shapes_and_bad_input():
    cfg, m = _model()
    x = _tokens(3, 5, cfg.vocab_size)
    assert m(x).shape == (3, 5, cfg.vocab_size)
    with pytest.raises(ValueError, match="block_size"):
        m(_tokens(1, cfg.block_size + 1, cfg.vocab_size))
    with pytest.raises(ValueError, match="lie in"):
        m(torch.full((1, 3), cfg.vocab_size))
    with pytest.raises(TypeError):
        m(torch.zeros(1, 3))
    with pytest.raises(ValueError):
        m(torch.zeros(3, dtype=torch.long))
    with pytest.raises(TypeError):
        gpt.Projection(3, 4, std="a")
    with pytest.raises(ValueError):
        gpt.LayerNorm(0)


def test_count_parameters():
    for V, T, L, d in [(11, 8, 2, 16), (50, 32, 3, 24)]:
        cfg = gpt.GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=4, d_model=d)
        assert gpt.count_parameters(cfg) == sum(p.numel() for p in gpt.GPT(cfg).parameters())
    with pytest.raises(TypeError):
        gpt.count_parameters(None)


# --- eq. 23.2: against transformers' GPT-2 -----------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_logits_match_transformers_gpt2(dtype):
    transformers = pytest.importorskip("transformers")
    cfg, m = _model(dtype=dtype)
    hf_cfg = transformers.GPT2Config(**gpt.hf_config_kwargs(cfg), attn_implementation="eager")
    hf = transformers.GPT2LMHeadModel(hf_cfg).to(dtype).eval()
    hf.load_state_dict(gpt.to_hf_state_dict(m), strict=True)
    x = _tokens(3, cfg.block_size, cfg.vocab_size)
    with torch.no_grad():
        ours, theirs = m(x), hf(x).logits
    torch.testing.assert_close(ours, theirs, atol=TOL[dtype] * ours.abs().max().item(), rtol=0)
    with pytest.raises(TypeError):
        gpt.to_hf_state_dict(torch.nn.Linear(2, 2))


def test_tied_head_is_embedding():
    cfg, m = _model()
    x = _tokens(2, 6, cfg.vocab_size)
    torch.testing.assert_close(m(x), m.hidden(x) @ m.wte.T, atol=0, rtol=0)
    assert not any(p.shape == (cfg.d_model, cfg.vocab_size) for p in m.parameters())


# --- eq. 23.1: causality and normalisation -----------------------------------------------------


def test_one_pass_equals_per_prefix():
    cfg, m = _model()
    x = _tokens(4, cfg.block_size, cfg.vocab_size)
    torch.testing.assert_close(
        gpt.sequence_log_prob(m, x), gpt.sequence_log_prob_naive(m, x), atol=1e-10, rtol=0
    )
    # changing a later token must not change the logits of earlier positions
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % cfg.vocab_size
    torch.testing.assert_close(m(x)[:, :-1], m(y)[:, :-1], atol=0, rtol=0)
    with pytest.raises(ValueError):
        gpt.sequence_log_prob(m, x[:, :1])
    with pytest.raises(ValueError):
        gpt.sequence_log_prob_naive(m, x[:, :1])


def test_sequence_probabilities_sum_to_one():
    cfg, m = _model(V=3, T=5, d=8, init_std=0.5)
    seqs = torch.tensor([(1, *r) for r in itertools.product(range(3), repeat=4)])
    assert abs(gpt.sequence_log_prob(m, seqs).exp().sum().item() - 1) < 1e-12
    leaky = gpt.sequence_log_prob(m, seqs, causal=False).exp().sum().item()
    assert abs(leaky - 1) > 1e-3  # negative control: no mask, no distribution


# --- eq. 23.3: the loss ------------------------------------------------------------------------


def test_lm_loss_against_torch():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 5, 7, generator=g, dtype=torch.float64)
    y = torch.randint(0, 7, (3, 5), generator=g)
    ref = F.cross_entropy(z.reshape(-1, 7), y.reshape(-1))
    torch.testing.assert_close(gpt.lm_loss(z, y), ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(gpt.lm_loss_naive(z, y), ref, atol=1e-12, rtol=0)
    for fn in (gpt.lm_loss, gpt.lm_loss_naive):
        with pytest.raises(ValueError):
            fn(z, y[:, :-1])
        with pytest.raises(ValueError):
            fn(z[0], y[0])
        with pytest.raises(TypeError):
            fn(z.long(), y)
        with pytest.raises(ValueError):
            fn(z, y + 7)


def test_initial_loss_near_log_v():
    cfg = gpt.GPTConfig(vocab_size=29, block_size=16, n_layer=2, n_head=4, d_model=64)
    m = gpt.GPT(cfg, generator=torch.Generator().manual_seed(0))
    x = _tokens(8, 17, 29)
    with torch.no_grad():
        loss = gpt.lm_loss(m(x[:, :-1]), x[:, 1:]).item()
    assert abs(loss - math.log(29)) < 0.1


# --- eq. 23.4 and the training loop ------------------------------------------------------------


def test_warmup_lr_matches_linear_lr():
    W, peak = 7, 0.3
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=peak)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / W, total_iters=W - 1)
    for s in range(1, 3 * W):
        assert (
            abs(gpt.warmup_lr(s, peak_lr=peak, warmup_steps=W) - opt.param_groups[0]["lr"]) < 1e-15
        )
        assert abs(gpt.warmup_lr(s, peak_lr=peak, warmup_steps=W) - peak * min(1, s / W)) < 1e-15
        opt.step()
        sched.step()
    with pytest.raises(ValueError):
        gpt.warmup_lr(0, peak_lr=peak, warmup_steps=W)
    with pytest.raises(TypeError):
        gpt.warmup_lr(1.5, peak_lr=peak, warmup_steps=W)


def test_get_batch_and_evaluate():
    data = torch.arange(100) % 13
    x, y = gpt.get_batch(data, 6, 9, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (6, 9)
    torch.testing.assert_close(x[:, 1:], y[:, :-1])
    torch.testing.assert_close(y, (x + 1) % 13)
    with pytest.raises(ValueError):
        gpt.get_batch(data[:9], 2, 9, torch.Generator())
    with pytest.raises(ValueError):
        gpt.get_batch(data[None], 2, 9, torch.Generator())
    cfg, m = _model(V=13, T=9)
    # evaluate = mean loss over the non-overlapping windows, computed directly
    n = (len(data) - 1) // 9
    xs, ys = data[: n * 9].view(n, 9), data[1 : n * 9 + 1].view(n, 9)
    with torch.no_grad():
        ref = F.cross_entropy(m(xs).reshape(-1, 13), ys.reshape(-1)).item()
    assert abs(gpt.evaluate(m, data, batch_size=4) - ref) < 1e-10
    with pytest.raises(ValueError):
        gpt.evaluate(m, data[:5])


def test_train_gpt_overfits_and_warms_up():
    text = torch.tensor([0, 1, 2, 3, 4, 5, 6] * 40)
    cfg = gpt.GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, d_model=16)
    m = gpt.GPT(cfg, generator=torch.Generator().manual_seed(0))
    hist = gpt.train_gpt(
        m,
        text,
        steps=60,
        batch_size=8,
        peak_lr=1e-2,
        warmup_steps=10,
        generator=torch.Generator().manual_seed(0),
        val_data=text,
        eval_every=30,
    )
    assert [round(v, 12) for v in hist["lr"][:10]] == [
        round(1e-2 * s / 10, 12) for s in range(1, 11)
    ]
    assert abs(hist["lr"][-1] - 1e-3) < 1e-12  # cosine decay ends at peak / 10
    assert hist["eval_step"] == [30, 60]
    assert hist["val_eval"][-1] < 0.1  # a deterministic cycle is learnt
    with pytest.raises(ValueError):
        gpt.train_gpt(
            m,
            text,
            steps=5,
            batch_size=2,
            peak_lr=1e-2,
            warmup_steps=5,
            generator=torch.Generator(),
        )
    with pytest.raises(ValueError):
        gpt.train_gpt(
            m,
            text,
            steps=5,
            batch_size=2,
            peak_lr=1e-2,
            warmup_steps=1,
            generator=torch.Generator(),
            eval_every=2,
        )
    with pytest.raises(ValueError):
        gpt.train_gpt(
            m,
            text,
            steps=5,
            batch_size=2,
            peak_lr=-1.0,
            warmup_steps=1,
            generator=torch.Generator(),
        )


# --- eq. 23.5: sampling ------------------------------------------------------------------------


def test_top_k_and_sampling_probs():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(4, 9, generator=g, dtype=torch.float64)
    for k in (1, 3, 9, None):
        fast, naive = gpt.top_k_filter(z, k), gpt.top_k_filter_naive(z, k)
        torch.testing.assert_close(fast, naive, atol=0, rtol=0)
    # against an explicit mask built from argsort, then softmax(z / tau)
    tau, k = 0.7, 3
    keep = torch.zeros_like(z, dtype=torch.bool).scatter(-1, z.argsort(-1, True)[:, :k], True)
    ref = torch.softmax(torch.where(keep, z / tau, -torch.inf), -1)
    torch.testing.assert_close(gpt.sampling_probs(z, tau, k), ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(gpt.sampling_probs(z), torch.softmax(z, -1), atol=1e-12, rtol=0)
    with pytest.raises(ValueError):
        gpt.sampling_probs(z, 0.0)
    with pytest.raises(ValueError):
        gpt.top_k_filter(z, 10)
    with pytest.raises(ValueError):
        gpt.top_k_filter_naive(z, 0)
    with pytest.raises(TypeError):
        gpt.top_k_filter(z.long(), 2)
    with pytest.raises(TypeError):
        gpt.top_k_filter_naive(z.long(), 2)


def test_sampling_probs_against_transformers_warpers():
    lp = pytest.importorskip("transformers.generation.logits_process")
    z = torch.randn(3, 12, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    hf = torch.softmax(lp.TopKLogitsWarper(4)(None, lp.TemperatureLogitsWarper(1.7)(None, z)), -1)
    torch.testing.assert_close(gpt.sampling_probs(z, 1.7, 4), hf, atol=1e-12, rtol=0)


def test_generate():
    cfg, m = _model(dtype=torch.float32, V=11, T=8)
    prompt = _tokens(2, 3, 11)
    g = torch.Generator().manual_seed(0)
    greedy = gpt.generate(m, prompt, 12, g, temperature=0.0)
    assert greedy.shape == (2, 15)
    torch.testing.assert_close(greedy[:, :3], prompt)
    torch.testing.assert_close(gpt.generate(m, prompt, 12, g, temperature=2.0, top_k=1), greedy)
    a = gpt.generate(m, prompt, 12, torch.Generator().manual_seed(5), 1.0, 3)
    b = gpt.generate(m, prompt, 12, torch.Generator().manual_seed(5), 1.0, 3)
    torch.testing.assert_close(a, b)
    # frequencies of one step vs the probabilities (5 standard errors)
    n = 4000
    draws = gpt.generate(m, prompt[:1].expand(n, -1), 1, g, 0.8, 4)[:, -1]
    with torch.no_grad():
        p = gpt.sampling_probs(m(prompt[:1])[0, -1].double(), 0.8, 4)
    freq = torch.bincount(draws, minlength=11).double() / n
    assert ((freq - p).abs() <= 5 * (p * (1 - p) / n).sqrt() + 1e-12).all()
    with pytest.raises(ValueError):
        gpt.generate(m, prompt, -1, g)
    with pytest.raises(ValueError):
        gpt.generate(m, prompt, 1, g, temperature=-1.0)
    with pytest.raises(ValueError):
        gpt.generate(m, prompt, 1, g, top_k=12)
    with pytest.raises(ValueError):
        gpt.generate(m, prompt[:, :0], 1, g)
    with pytest.raises(TypeError):
        gpt.generate(m, prompt.float(), 1, g)
