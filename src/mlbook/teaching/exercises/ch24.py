"""Checks of the exercises of chapter 24 (KV cache and grouped-query attention).

The references are independent of the reader's answer: mean-pooling by an explicit loop over query
heads, models pooled by hand and loaded with ``load_state_dict``, parameter counts summed over the
weight shapes of a Llama-style decoder, cache bytes read off tensors allocated on the ``meta``
device, and the receptive field of a sliding window as the reachable set of the L-th power of a
visibility mask built with ``torch.tril``; one grouped-query decoding step against torch's
``F.scaled_dot_product_attention`` on key/value heads expanded with ``repeat_interleave``, with the
largest tensor it allocates measured by intercepting torch calls (24.4); and the FLOPs of cached and
recomputed generation counted by ``FlopCounterMode`` (24.5). The decoders are small
:class:`mlbook.models.decoder.Decoder` models in float64 on the CPU.

Each typical wrong answer is written once, as a function at the end of the module: the checks
evaluate those functions to recognise a mistake, and ``MISTAKES`` lists them for the tests.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ...attention import tiled
from ...models import decoder
from ...models.config import LLAMA2_7B, LLAMA2_70B, MISTRAL_7B, DecoderConfig
from ...models.generate import generate
from ..check import fmt
from . import Incorrect, as_int, as_tensor, attempt, exercise, expect, expect_answer

F64 = torch.float64
GiB = 2**30


# --- 24.1 ------------------------------------------------------------------------------------


def _pool_by_loop(w: torch.Tensor, H: int, G: int) -> torch.Tensor:
    """Block g = mean of the head blocks h with floor(h G / H) = g, one head at a time."""
    d_h = w.shape[1] // H
    blocks = [w[:, h * d_h : (h + 1) * d_h] for h in range(H)]
    pooled = [
        torch.stack([blocks[h] for h in range(H) if h * G // H == g]).mean(0) for g in range(G)
    ]
    return torch.cat(pooled, dim=1)


def _pool_wrong(w: torch.Tensor, H: int, G: int) -> dict:
    return {
        "the groups are interleaved (heads g, g + G, g + 2G, ...); eq. 24.3 groups neighbouring "
        "heads: g(h) = floor(h G / H), so group g holds heads gR .. gR + R - 1": pool_interleaved(
            w, H, G
        ),
        "that is the sum of the heads of each group; pooling takes their mean": pool_sum(w, H, G),
        "that keeps the first head of each group; pooling averages all R heads of a "
        "group": pool_first_head(w, H, G),
        "that averages the first G * d_h columns only; every group g has its own R "
        "heads": pool_first_columns(w, H, G),
    }


def _decoder(seed: int, **extra) -> decoder.Decoder:
    cfg = DecoderConfig(
        vocab_size=32, d_model=32, n_layers=2, n_heads=8, n_kv_heads=8, d_ff=48, **extra
    )
    return decoder.Decoder(cfg, generator=torch.Generator().manual_seed(seed)).double()


def _pooled_by_hand(
    model: decoder.Decoder, G: int, cfg: DecoderConfig | None = None
) -> decoder.Decoder:
    cfg = model.config if cfg is None else cfg
    ref = decoder.Decoder(replace(cfg, n_kv_heads=G), generator=torch.Generator().manual_seed(0))
    ref = ref.double()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for key in list(state):
        if key.endswith((".attn.Wk", ".attn.Wv")):
            state[key] = _pool_by_loop(state[key], model.config.n_heads, G)
    ref.load_state_dict(state)
    return ref


@exercise("24.1", "pool_kv_heads", "pool_kv")
def pool_kv(heads_answer, model_answer) -> str:
    """Mean-pooling of K/V head blocks, then the pooled decoder: logits, config and cache size."""
    gen = torch.Generator().manual_seed(241)
    for D, H, G, d_h in ((6, 8, 2, 3), (5, 8, 4, 2), (4, 6, 3, 2), (6, 8, 8, 3), (3, 4, 1, 5)):
        w = torch.randn(D, H * d_h, generator=gen, dtype=F64)
        want = _pool_by_loop(w, H, G)
        wrong = _pool_wrong(w, H, G) if G not in (1, H) else {}
        expect_answer(
            attempt(heads_answer, w.clone(), H, G),
            want,
            f"pool_kv_heads(w, H={H}, G={G}) for w of shape {tuple(w.shape)}",
            wrong=wrong,
            atol=1e-12,
            rtol=1e-10,
        )

    tokens = torch.randint(0, 32, (2, 10), generator=gen)
    for extra in ({}, {"window": 4, "sinks": 1}):
        model = _decoder(242, **extra)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        with torch.no_grad():
            original = model(tokens)
        where = "a windowed decoder (W = 4, S = 1)" if extra else "a decoder with H = 8"
        for G in (8, 2, 1):
            pooled = attempt(model_answer, model, G)
            expect(
                isinstance(pooled, decoder.Decoder),
                f"pool_kv(model, {G}) should return a decoder.Decoder, got {type(pooled).__name__}",
            )
            expect(
                all(torch.equal(v, before[k]) for k, v in model.state_dict().items()),
                f"pool_kv(model, {G}) changed the original model's weights; pool a copy",
            )
            expect(
                pooled.config.n_kv_heads == G,
                f"pool_kv(model, {G}) returned a model with n_kv_heads = "
                f"{pooled.config.n_kv_heads}; it should have G = {G} key/value heads",
            )
            expect(
                pooled.embedding.dtype == model.embedding.dtype,
                f"pool_kv(model, {G}) returned a {pooled.embedding.dtype} model; keep the "
                f"original's dtype ({model.embedding.dtype}), e.g. with .to(model.embedding)",
            )
            ref = _pooled_by_hand(model, G)
            with torch.no_grad():
                got = attempt(
                    lambda m=pooled: m(tokens), name=f"the model from pool_kv(model, {G})"
                )
                want = ref(tokens)
                wrong = (
                    {
                        "the logits are those of the original MHA model: were Wk and Wv "
                        "pooled?": original
                    }
                    if G < 8
                    else {}
                )
                if extra:
                    lost = pool_kv_drops_window(model, G)
                    wrong[
                        "the pooled model lost the sliding window or the sinks of the "
                        "original configuration; copy every field except n_kv_heads "
                        "(dataclasses.replace)"
                    ] = lost(tokens)
            expect_answer(
                got,
                want,
                f"the logits of pool_kv(model, G={G}) for {where}",
                wrong=wrong,
                atol=1e-10,
                rtol=1e-8,
            )
            n_model = model.new_cache(2, 10).nbytes
            n_pooled = pooled.new_cache(2, 10).nbytes
            expect(
                n_model == (8 // G) * n_pooled,
                f"the cache of pool_kv(model, {G}) holds {n_pooled} bytes; it should be "
                f"H / G = {8 // G} times smaller than the original's {n_model}",
            )
    return (
        "pool_kv_heads averages neighbouring head blocks for 5 (H, G) pairs; pool_kv "
        "reproduces the MHA model at G = H, matches decoders pooled by hand at G = 2 and 1 "
        "(with and without a window), keeps the original intact and shrinks the cache H/G "
        "times"
    )


# --- 24.2 ------------------------------------------------------------------------------------


def _n_params(cfg: DecoderConfig) -> int:
    """Parameters of a Llama-style decoder, summed over its weight shapes."""
    D, F_, V, G, d_h = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_kv_heads, cfg.head_dim
    layer = [
        (D, D),
        (D, G * d_h),
        (D, G * d_h),
        (D, D),  # W_q, W_k, W_v, W_o
        (D, F_),
        (D, F_),
        (F_, D),  # SwiGLU: W_1, W_3, W_2
        (D,),
        (D,),
    ]  # two RMSNorm gains
    shapes = [(V, D), (D, V), (D,)] + layer * cfg.n_layers  # embedding, head, final norm
    return sum(math.prod(s) for s in shapes)


def _cache_per_sequence(cfg: DecoderConfig, T: int, G: int | None = None, n_kv: int = 2) -> int:
    """Bytes of one sequence's fp16 cache, read off meta tensors of shape (L, G, T, d_h)."""
    T = T if cfg.window is None else min(T, cfg.window + cfg.sinks)
    G = cfg.n_kv_heads if G is None else G
    t = torch.empty(cfg.n_layers, G, T, cfg.head_dim, dtype=torch.float16, device="meta")
    return n_kv * t.element_size() * t.numel()


@exercise("24.2", "max_batch")
def max_batch(answer) -> str:
    """Batch size of fp16 caches beside fp16 weights, against parameter and byte counts."""
    L7 = LLAMA2_7B
    cases = [
        (L7, 80 * GiB, 4096, "Llama-2-7B, 80 GiB, T = 4096"),
        (replace(L7, n_kv_heads=8), 80 * GiB, 4096, "Llama-2-7B with G = 8, 80 GiB"),
        (LLAMA2_70B, 192 * GiB, 4096, "Llama-2-70B, 192 GiB, T = 4096"),
        (LLAMA2_70B, 80 * GiB, 4096, "Llama-2-70B, 80 GiB (the weights do not fit)"),
        (MISTRAL_7B, 80 * GiB, 32768, "Mistral-7B (W = 4096), 80 GiB, T = 32768"),
        (
            L7,
            2 * _n_params(L7) + 3 * _cache_per_sequence(L7, 1000),
            1000,
            "Llama-2-7B, memory for exactly 3 sequences of 1000 tokens",
        ),
    ]
    for cfg, memory, T, where in cases:
        free = memory - 2 * _n_params(cfg)
        want = max(free // _cache_per_sequence(cfg, T), 0)
        args = (cfg, memory, T)
        wrong = {
            "the weights are not subtracted: they stay resident and take 2 bytes per "
            "parameter": batch_without_weights(*args),
            "the weights are counted at 4 bytes per parameter; in fp16 they take 2": (
                batch_fp32_weights(*args)
            ),
            "the cache counts the keys only; it stores a key and a value (the factor 2)": (
                batch_keys_only(*args)
            ),
            "the cache counts all H query heads; only the G key/value heads are cached": (
                batch_query_heads(*args)
            ),
            "that rounds up; only whole sequences whose cache fits completely count": (
                batch_rounds_up(*args)
            ),
        }
        if cfg.window is not None:
            wrong[
                "the sliding window is ignored: the cache holds at most S + W positions, "
                "however long the sequence"
            ] = batch_ignores_window(*args)
        if free < 0:
            wrong["the batch is negative: when the weights alone do not fit, return 0"] = (
                batch_negative(*args)
            )
        got = as_int(
            attempt(answer, cfg, memory, T),
            f"max_batch(cfg, memory_bytes, seq_len) for {where}",
            "sequences",
        )
        for feedback, value in wrong.items():
            if got == value and got != want:
                raise Incorrect(f"max_batch for {where} gives {got}: {feedback}")
        expect(got == want, f"max_batch for {where} gives {got}, expected {want}")
    return (
        "the batch sizes match parameter and meta-tensor byte counts for Llama-2-7B "
        "(G = 32 and 8), Llama-2-70B (with and without room), windowed Mistral-7B and an "
        "exact fit"
    )


# --- 24.3 ------------------------------------------------------------------------------------


def _reach(T: int, L: int, W: int | None, S: int, s: int) -> torch.Tensor:
    """Positions reachable from s in L layers: column s of the L-th power of the mask."""
    causal = torch.ones(T, T, dtype=F64).tril()
    if W is None:
        mask = causal
    else:
        recent = torch.ones(T, T, dtype=F64).triu(-(W - 1))  # s' >= t - W + 1
        sinks = torch.zeros(T, T, dtype=F64)
        sinks[:, :S] = 1.0
        mask = causal * ((recent + sinks) > 0)
    return torch.linalg.matrix_power(mask, L)[:, s] > 0  # (T,)


def _band(T: int, lo: int, hi: int) -> torch.Tensor:
    t = torch.arange(T)
    return (t >= lo) & (t <= hi)


@exercise("24.3", "influenced")
def influenced(answer) -> str:
    """Positions whose logits change, against the reachable set of the L-th mask power."""
    gen = torch.Generator().manual_seed(243)
    T = 16
    tokens = torch.randint(0, 32, (2, T), generator=gen)
    cases = [(2, 4, 0, 0), (3, 3, 0, 2), (2, 4, 1, 0), (1, None, 0, 5)]  # (L, W, S, s)
    for L, W, S, s in cases:
        cfg = DecoderConfig(
            vocab_size=32,
            d_model=16,
            n_layers=L,
            n_heads=2,
            n_kv_heads=1,
            d_ff=24,
            window=W,
            sinks=S,
        )
        model = decoder.Decoder(cfg, generator=torch.Generator().manual_seed(7)).double()
        want = _reach(T, L, W, S, s)
        where = f"influenced(model, tokens, s={s}) for L = {L}, " + (
            "no window" if W is None else f"W = {W}, S = {S}"
        )
        wrong = {}
        if W is not None:
            args = (model, tokens, s)
            wrong = {
                f"that is the reach of one layer (s .. s + W - 1); each of the L = {L} layers "
                "carries the change W - 1 positions further": influenced_one_layer(*args),
                "off by L: each layer reaches W - 1 positions back, not W, so the change "
                "reaches s + L(W - 1)": influenced_L_times_W(*args),
                "position s itself is missing: its own embedding changed": influenced_after_s(
                    *args
                ),
            }
            if s > 0:
                wrong[
                    "positions before s are marked; under causal attention they never see token s"
                ] = influenced_before_s(*args)
            if S > 0 and s < S:
                wrong[
                    "the sink is ignored: a sink token stays visible to every later position "
                    "in every layer, so its change reaches the whole sequence"
                ] = influenced_formula_without_sinks(*args)
        got = attempt(answer, model, tokens.clone(), s)
        got = as_tensor(got, where, (T,))
        expect_answer(got, want, where, wrong=wrong, atol=0, rtol=0)
    return (
        "the changed positions match the reachable set s .. s + L(W - 1) of the mask power "
        "for (L, W) = (2, 4), (3, 3), a sink and no window"
    )


# --- 24.4 ------------------------------------------------------------------------------------


_DECODE_CASES = ((2, 8, 2, 11, 16), (1, 4, 4, 5, 8), (2, 6, 1, 7, 4), (1, 8, 4, 1, 16))


@exercise("24.4", "gqa_decode_step")
def gqa_decode_step(answer) -> str:
    """One GQA decoding step against SDPA on expanded K/V heads; no copy of the cache."""
    for seed, (B, H, G, T, d_h) in enumerate(_DECODE_CASES):
        gen = torch.Generator().manual_seed(244 + seed)
        q = torch.randn(B, H, d_h, generator=gen, dtype=F64)
        k, v = (torch.randn(B, G, T, d_h, generator=gen, dtype=F64) for _ in range(2))
        R = H // G
        want = F.scaled_dot_product_attention(
            q[:, :, None], k.repeat_interleave(R, 1), v.repeat_interleave(R, 1)
        )[:, :, 0]  # (B, H, d_h)
        what = f"gqa_decode_step(q, k_cache, v_cache) for H = {H}, G = {G}, T = {T}, d_h = {d_h}"
        wrong = {
            "the scores are not divided by sqrt(d_h)": decode_unscaled(q, k, v),
            "the output keeps the query axis; return (B, H, d_h), one vector per head": (
                decode_keeps_query_axis(q, k, v)
            ),
        }
        if 1 < G < H:
            wrong[
                "query head h reads key/value head h mod G; eq. 24.3 groups neighbouring "
                "heads: g(h) = floor(h G / H), so view q as (B, G, R, d_h)"
            ] = decode_interleaved(q, k, v)
        got = attempt(answer, q.clone(), k.clone(), v.clone())
        expect_answer(got, want, what, wrong=wrong, atol=1e-12, rtol=1e-10)
        if G < H and T > 1:  # a copy of the cache for every query head is (B, H, T, d_h)
            nbytes, made = attempt(
                tiled.largest_intermediate_bytes, answer, q, k, v, name="gqa_decode_step"
            )
            copy = B * H * T * d_h * q.element_size()
            expect(
                nbytes < copy,
                f"{what} allocated {made}, {nbytes} bytes: the cache copied H/G = {R} times. "
                "View the queries as (B, G, R, d_h) instead; broadcasting reads every key/value "
                "head once",
            )
    return (
        "matches torch SDPA on key/value heads expanded with repeat_interleave for (H, G) = "
        "(8, 2), (4, 4), (6, 1), (8, 4), caches of 1 to 11 tokens, and never copies the cache "
        "H/G times"
    )


# --- 24.5 ------------------------------------------------------------------------------------


PROMPT, NEW = 256, 8  # the prediction: the FLOP ratio for 8 tokens after a prompt of 256


def _flop_ratio() -> float:
    """FLOPs of generation without the cache over those with it, counted by FlopCounterMode."""
    cfg = DecoderConfig(
        vocab_size=64, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64, max_seq_len=512
    )
    model = decoder.Decoder(cfg, generator=torch.Generator().manual_seed(245))
    prompt = torch.randint(0, 64, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    flops = {}
    for use_cache in (True, False):
        with FlopCounterMode(display=False) as counter:
            generate(model, prompt, NEW, use_cache=use_cache)
        flops[use_cache] = counter.get_total_flops()
    return flops[False] / flops[True]


@exercise("24.5", "predict_flop_ratio")
def flop_ratio(answer) -> str:
    """The guessed ratio against the FLOPs of both generations, counted here."""
    what = "predict_flop_ratio()"
    got = as_tensor(attempt(answer), what)
    expect(got.numel() == 1, f"{what} should return one number, got shape {tuple(got.shape)}")
    guess, ratio = float(got.reshape(())), _flop_ratio()
    if math.isfinite(guess) and abs(guess - ratio) <= 0.15 * ratio:
        return (
            f"right: recomputation costs {fmt(ratio, 3)} times the FLOPs of the cache for "
            f"{NEW} tokens after a prompt of {PROMPT}; the cached run still processes the "
            "prompt once (prefill), so the saving grows with the tokens generated, about n, "
            "not with the prompt"
        )
    why = {
        predict_prompt_length(): f"each recomputed step processes about {PROMPT} tokens "
        "against 1, but the cached run also processes all of them once, in the prefill",
        predict_table_ratio(): "that is the ratio of 256 tokens generated after a 16-token "
        "prompt; here only 8 are generated",
    }.get(guess, "")
    raise Incorrect(
        f"{what} guessed {guess:g}; the FLOPs counted here give {fmt(ratio, 3)}"
        + (f" ({why})" if why else "")
        + f": both runs process the {PROMPT} prompt tokens; the cached one then processes one "
        f"token a step, the other P + i, so the ratio is about n (P + n/2) / (P + n), close to "
        f"n = {NEW} when the prompt is long"
    )


# Typical wrong answers, written once: the checks above evaluate them to name a mistake, and the
# tests build each one and check that it is rejected with its feedback ---------------------------


# --- 24.1 ---


def pool_interleaved(w, H, G):
    D, d_h = w.shape[0], w.shape[1] // H
    return w.reshape(D, H // G, G, d_h).mean(1).reshape(D, G * d_h)


def pool_sum(w, H, G):
    D, d_h = w.shape[0], w.shape[1] // H
    return w.reshape(D, G, H // G, d_h).sum(2).reshape(D, G * d_h)


def pool_first_head(w, H, G):
    D, d_h = w.shape[0], w.shape[1] // H
    return w.reshape(D, G, H // G, d_h)[:, :, 0].reshape(D, G * d_h)


def pool_first_columns(w, H, G):
    return w[:, : G * (w.shape[1] // H)]


def pool_kv_drops_window(model, G):
    return _pooled_by_hand(model, G, replace(model.config, window=None, sinks=0))


def pool_kv_float32(model, G):
    return _pooled_by_hand(model, G).float()


def pool_kv_in_place(model, G):
    pooled = _pooled_by_hand(model, G)
    with torch.no_grad():
        model.blocks[0].attn.Wo.add_(1.0)  # "tidies up" the original by mistake
    return pooled


# --- 24.2 ---


def _free(cfg, memory_bytes):
    return memory_bytes - 2 * _n_params(cfg)


def _max_batch(cfg, memory_bytes, seq_len):
    return max(_free(cfg, memory_bytes) // _cache_per_sequence(cfg, seq_len), 0)


def batch_without_weights(cfg, memory_bytes, seq_len):
    return memory_bytes // _cache_per_sequence(cfg, seq_len)


def batch_fp32_weights(cfg, memory_bytes, seq_len):
    return max((memory_bytes - 4 * _n_params(cfg)) // _cache_per_sequence(cfg, seq_len), 0)


def batch_keys_only(cfg, memory_bytes, seq_len):
    return max(_free(cfg, memory_bytes) // _cache_per_sequence(cfg, seq_len, n_kv=1), 0)


def batch_query_heads(cfg, memory_bytes, seq_len):
    return max(_free(cfg, memory_bytes) // _cache_per_sequence(cfg, seq_len, G=cfg.n_heads), 0)


def batch_rounds_up(cfg, memory_bytes, seq_len):
    return max(-(-_free(cfg, memory_bytes) // _cache_per_sequence(cfg, seq_len)), 0)


def batch_ignores_window(cfg, memory_bytes, seq_len):
    unwindowed = _cache_per_sequence(replace(cfg, window=None), seq_len)
    return max(_free(cfg, memory_bytes) // unwindowed, 0)


def batch_negative(cfg, memory_bytes, seq_len):
    return _free(cfg, memory_bytes) // _cache_per_sequence(cfg, seq_len)


def batch_float(cfg, memory_bytes, seq_len):
    return _free(cfg, memory_bytes) / _cache_per_sequence(cfg, seq_len)


# --- 24.3 ---


def _reach_of(model, tokens, s):
    cfg = model.config
    return _reach(tokens.shape[1], cfg.n_layers, cfg.window, cfg.sinks, s)


def influenced_one_layer(model, tokens, s):
    return _band(tokens.shape[1], s, s + model.config.window - 1)


def influenced_L_times_W(model, tokens, s):
    cfg = model.config
    return _band(tokens.shape[1], s, s + cfg.n_layers * (cfg.window or tokens.shape[1]))


def influenced_after_s(model, tokens, s):
    return _reach_of(model, tokens, s) & (torch.arange(tokens.shape[1]) > s)


def influenced_before_s(model, tokens, s):
    cfg = model.config
    return _band(tokens.shape[1], 0, s + cfg.n_layers * ((cfg.window or tokens.shape[1]) - 1))


def influenced_formula_without_sinks(model, tokens, s):
    cfg = model.config
    if cfg.window is None:
        return _band(tokens.shape[1], s, tokens.shape[1])
    return _band(tokens.shape[1], s, s + cfg.n_layers * (cfg.window - 1))


def influenced_positions_list(model, tokens, s):
    return _reach_of(model, tokens, s).nonzero().squeeze(1)


# --- 24.4 ---


def _decode(q, k, v, *, interleaved=False, scaled=True):
    """One decoding step of GQA, by broadcasting; the switches make the mistakes below."""
    B, H, d_h = q.shape
    G = k.shape[1]
    q_g = q.reshape(B, H // G, G, d_h).transpose(1, 2) if interleaved else q.reshape(B, G, -1, d_h)
    s = q_g @ k.transpose(-2, -1) / (d_h**0.5 if scaled else 1.0)  # (B, G, R, T)
    out = torch.softmax(s, dim=-1) @ v  # (B, G, R, d_h)
    return (out.transpose(1, 2) if interleaved else out).reshape(B, H, d_h)


def decode_interleaved(q, k, v):
    return _decode(q, k, v, interleaved=True)


def decode_unscaled(q, k, v):
    return _decode(q, k, v, scaled=False)


def decode_keeps_query_axis(q, k, v):
    return _decode(q, k, v)[:, :, None]


def decode_copies_cache(q, k, v):
    R = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(R, 1), v.repeat_interleave(R, 1)  # (B, H, T, d_h): a copy
    s = (q[:, :, None] @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
    return (torch.softmax(s, dim=-1) @ v)[:, :, 0]


# --- 24.5 ---


def predict_prompt_length():
    return PROMPT


def predict_table_ratio():
    return 133.5


MISTAKES = {
    "24.1": [
        ((pool_interleaved, _pooled_by_hand), "interleaved"),
        ((pool_sum, _pooled_by_hand), "sum of the heads"),
        ((pool_first_head, _pooled_by_hand), "first head of each group"),
        ((pool_first_columns, _pooled_by_hand), "first G * d_h columns"),
        ((_pool_by_loop, pool_kv_drops_window), "lost the sliding window"),
        ((_pool_by_loop, pool_kv_float32), "keep the original's dtype"),
        ((_pool_by_loop, pool_kv_in_place), "changed the original"),
    ],
    "24.2": [
        (batch_without_weights, "weights are not subtracted"),
        (batch_fp32_weights, "4 bytes per parameter"),
        (batch_keys_only, "keys only"),
        (batch_query_heads, "all H query heads"),
        (batch_rounds_up, "rounds up"),
        (batch_ignores_window, "sliding window is ignored"),
        (batch_negative, "return 0"),
        (batch_float, "whole number"),
    ],
    "24.3": [
        (influenced_one_layer, "reach of one layer"),
        (influenced_L_times_W, "off by L"),
        (influenced_after_s, "position s itself is missing"),
        (influenced_before_s, "positions before s are marked"),
        (influenced_formula_without_sinks, "the sink is ignored"),
        (influenced_positions_list, "should have shape (16,)"),
    ],
    "24.4": [
        (decode_interleaved, "h mod G"),
        (decode_unscaled, "sqrt(d_h)"),
        (decode_keeps_query_axis, "keeps the query axis"),
        (decode_copies_cache, "copied H/G"),
    ],
    "24.5": [
        (predict_prompt_length, "prefill"),
        (predict_table_ratio, "only 8 are generated"),
    ],
}
