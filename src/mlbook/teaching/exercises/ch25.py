"""Checks of the exercises of chapter 25 (multi-head latent attention).

The references are independent of the reader's answer: the merged matrices against a loop over heads
and the two-step absorbed query; parameter counts as the number of entries of the tensors and FLOPs
as counted by torch's ``FlopCounterMode`` on real products (small layers) and by closed forms
written out per term (DeepSeek-V3's shapes); the largest context as the floor of the budget over the
bytes of one token's cache, read off tensors allocated on the ``meta`` device, verified by
allocating T_max and T_max + 1 tokens; GQA against ``F.scaled_dot_product_attention`` on explicitly
gathered key/value heads; the rank of the stacked keys and values with ``torch.linalg.matrix_rank``
on random weights drawn here (25.5); the materialised form against
``F.scaled_dot_product_attention`` on keys and values built with ``F.linear`` (25.6); and the best
latent of every width against the singular values of NumPy's SVD (25.7).

Each typical wrong answer is written once, as a function at the end of the module: the checks
evaluate those functions to recognise a mistake, and ``MISTAKES`` lists them for the tests.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ...attention import mla
from ..check import fmt
from . import Incorrect, as_int, as_tensor, attempt, exercise, expect, expect_answer

F64 = torch.float64
GiB = 2**30
V3, L_V3 = mla.DEEPSEEK_V3, mla.DEEPSEEK_V3_LAYERS

# small layers: d_c > d_h (as in DeepSeek), d_c < d_h, and d_cq = d_c (a transpose keeps the shape)
SMALL = (
    mla.MLAConfig(d_model=32, n_heads=4, d_head=8, d_latent=12, d_rope=4, d_q_latent=16),
    mla.MLAConfig(d_model=24, n_heads=3, d_head=10, d_latent=6, d_rope=2, d_q_latent=8),
    mla.MLAConfig(d_model=16, n_heads=2, d_head=4, d_latent=10, d_rope=2, d_q_latent=10),
)


def _flops(fn) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def _ints(value, what: str, n: int) -> list[int]:
    if not isinstance(value, (tuple, list)) or len(value) != n:
        got = (
            f"a {type(value).__name__} of length {len(value)}"
            if isinstance(value, (tuple, list))
            else type(value).__name__
        )
        raise Incorrect(f"{what} should return a tuple of {n} ints, got {got}")
    return [as_int(v, what) for v in value]


# --- 25.1 ------------------------------------------------------------------------------------


@exercise("25.1", "merge_query_key", "merge_costs")
def merge_query_key(merge_answer, costs_answer) -> str:
    """Merged W_UQ W_UK^T against a loop and the two-step query; costs against FlopCounterMode."""
    gen = torch.Generator().manual_seed(251)
    for cfg in SMALL:
        layer = mla.MultiHeadLatentAttention(cfg, generator=gen, dtype=F64)
        w_uq, w_uk = layer.w_uq.detach(), layer.w_uk.detach()
        H, d_cq, d_c = cfg.n_heads, cfg.d_q_latent, cfg.d_latent
        want = torch.stack([w_uq[h] @ w_uk[h].T for h in range(H)])  # (H, d_cq, d_c)
        what = f"merge_query_key(w_uq, w_uk) for H = {H}, d_cq = {d_cq}, d_c = {d_c}"
        got = expect_answer(
            attempt(merge_answer, w_uq.clone(), w_uk.clone()),
            want,
            what,
            wrong={
                "this is the transpose of each head's matrix, W_UK,h W_UQ,h^T; the query "
                "latent multiplies from the left, so merge W_UQ,h W_UK,h^T (d_cq x "
                "d_c)": merge_transposed(w_uq, w_uk),
                "the heads are summed into one matrix; every head keeps its own merged "
                "matrix": merge_summed_heads(w_uq, w_uk),
            },
            atol=1e-12,
            rtol=1e-10,
        )
        x = torch.randn(2, 5, cfg.d_model, generator=gen, dtype=F64)
        with torch.no_grad():
            c_q = x @ layer.w_dq  # (B, T, d_cq)
            two_steps = mla.absorb_query(layer.queries(x, torch.arange(5))[0], layer.w_uk)
        expect_answer(
            torch.einsum("btc,hcl->bhtl", c_q, got),
            two_steps,
            f"the absorbed queries c^Q M_h with M = {what}",
            atol=1e-10,
            rtol=1e-8,
        )

    for cfg, name in (
        (SMALL[0], "a small layer"),
        (SMALL[1], "a layer with d_c < d_h"),
        (V3, "DeepSeek-V3"),
    ):
        H, d_h, d_c, d_cq = cfg.n_heads, cfg.d_head, cfg.d_latent, cfg.d_q_latent
        params = (math.prod((H, d_cq, d_c)), math.prod((H, d_cq, d_h)) + math.prod((H, d_c, d_h)))
        if cfg is V3:  # one multiply-add per entry, two FLOPs (checked below on small layers)
            flops = (2 * params[0], 2 * params[1])
        else:
            w_uq = torch.randn(H, d_cq, d_h, generator=gen, dtype=F64)
            w_uk = torch.randn(H, d_c, d_h, generator=gen, dtype=F64)
            merged = w_uq @ w_uk.transpose(1, 2)
            c_q = torch.randn(1, d_cq, generator=gen, dtype=F64)  # one token
            flops = (
                _flops(lambda c=c_q, m=merged: torch.einsum("tc,hcl->htl", c, m)),
                _flops(
                    lambda c=c_q, a=w_uq, b=w_uk: torch.einsum(
                        "htd,hld->htl", torch.einsum("tc,hcd->htd", c, a), b
                    )
                ),
            )
        want = [params[0], params[1], flops[0], flops[1]]
        what = f"merge_costs(cfg) for {name}"
        got = _ints(attempt(costs_answer, cfg), what, 4)
        wrong = {
            "these are the counts of one head; sum over all H heads": costs_one_head(cfg),
            "the FLOPs equal the parameter counts; one multiply-add per entry is two "
            "FLOPs": costs_flops_as_params(cfg),
            "the factored count has only one factor; both W_UQ,h (d_cq x d_h) and W_UK,h "
            "(d_c x d_h) are stored and applied": costs_one_factor(cfg),
            "merged and factored are swapped": costs_swapped(cfg),
        }
        expect_answer(
            torch.tensor(got, dtype=F64),
            torch.tensor(want, dtype=F64),
            what + " (merged_params, factored_params, merged_flops, factored_flops)",
            wrong={k: torch.tensor(list(v), dtype=F64) for k, v in wrong.items()},
            atol=0,
            rtol=0,
        )
    return (
        "the merged matrices match W_UQ,h W_UK,h^T and the two-step absorbed queries for 3 "
        "layers; the costs match tensor sizes and FlopCounterMode, and DeepSeek-V3's shapes"
    )


# --- 25.2 ------------------------------------------------------------------------------------


_SHARED = ("x W_DQ", "W_UQ", "W_QR", "W_DKV", "W_KR", "W_O")


def _prefill_terms(cfg: mla.MLAConfig, T: int, form: str) -> dict:
    """FLOPs of one prefill pass over T tokens, term by term (one sequence)."""
    D, H, d_h, d_c, d_R, d_cq = (
        cfg.d_model,
        cfg.n_heads,
        cfg.d_head,
        cfg.d_latent,
        cfg.d_rope,
        cfg.d_q_latent,
    )
    terms = {
        "x W_DQ": 2 * T * D * d_cq,
        "W_UQ": 2 * T * d_cq * H * d_h,
        "W_QR": 2 * T * d_cq * H * d_R,
        "W_DKV": 2 * T * D * d_c,
        "W_KR": 2 * T * D * d_R,
        "W_O": 2 * T * H * d_h * D,
    }
    if form == "naive":
        terms |= {
            "K and V": 2 * 2 * T * d_c * H * d_h,
            "scores": 2 * H * T * T * (d_h + d_R),
            "sum": 2 * H * T * T * d_h,
        }
    else:
        terms |= {
            "absorb W_UK": 2 * T * H * d_h * d_c,
            "W_UV": 2 * T * H * d_c * d_h,
            "scores": 2 * H * T * T * (d_c + d_R),
            "sum": 2 * H * T * T * d_c,
        }
    return terms


@exercise("25.2", "prefill_attention_flops")
def prefill_attention_flops(answer) -> str:
    """Prefill FLOPs of both forms against FlopCounterMode on small layers and DeepSeek-V3."""
    gen = torch.Generator().manual_seed(252)
    cases = [(SMALL[0], 9, 2), (SMALL[0], 1, 1), (SMALL[1], 6, 1)]
    for cfg, T, B in cases:
        layer = mla.MultiHeadLatentAttention(cfg, generator=gen, dtype=F64)
        x = torch.randn(B, T, cfg.d_model, generator=gen, dtype=F64)
        for form in ("naive", "absorbed"):
            want = _flops(lambda f=form, m=layer, x=x: m(x, form=f))
            _compare(answer, cfg, T, form, B, want, f"a small layer (T = {T}, batch {B})")
    for form in ("naive", "absorbed"):
        want = sum(_prefill_terms(V3, 4096, form).values())
        _compare(answer, V3, 4096, form, 1, want, "DeepSeek-V3, T = 4096")
    return (
        "matches FlopCounterMode for both forms on 3 small prefills (T = 1, 6, 9; batch 1 "
        "and 2) and the term-by-term count at DeepSeek-V3's shapes for T = 4096"
    )


def _prefill_total(cfg: mla.MLAConfig, T: int, form: str, batch: int = 1) -> int:
    return batch * sum(_prefill_terms(cfg, T, form).values())


def _compare(answer, cfg, T, form, B, want, where) -> None:
    args = (cfg, T, form, B)
    wrong = {
        "only the causal half of the scores is counted; this dense implementation computes "
        "all T^2 scores and masks them afterwards": prefill_causal_half(*args),
        "that is the other form's count": prefill_swapped_forms(*args),
        "the shared projections (query latent, W_UQ, W_QR, latent, RoPE key, W_O) are "
        "missing": prefill_attention_only(*args),
    }
    if form == "naive":
        wrong[
            "that is T decoding steps: a prefill pass up-projects each token's key and value "
            "once, not once per query"
        ] = prefill_as_decode_steps(*args)
    if B > 1:
        wrong["that is one sequence; multiply by the batch"] = prefill_forgets_batch(*args)
    got = attempt(answer, cfg, T, form, batch=B)
    expect_answer(
        got,
        want,
        f"prefill_attention_flops(cfg, T={T}, {form!r}, batch={B}) for {where}",
        wrong=wrong,
        atol=0,
        rtol=0,
    )


# --- 25.3 ------------------------------------------------------------------------------------


def _meta_bytes(*shape) -> int:
    t = torch.empty(*shape, dtype=torch.bfloat16, device="meta")
    return t.element_size() * t.numel()


@exercise("25.3", "gqa_max_tokens", "mla_max_tokens")
def max_tokens(gqa_answer, mla_answer) -> str:
    """T_max of four caches at DeepSeek-V3's shapes against meta-tensor bytes, fits and T + 1."""
    L, d_h, d_c, d_R = L_V3, V3.d_head, V3.d_latent, V3.d_rope
    budgets = (
        (64 * GiB, "64 GiB"),
        (1000, "1000 bytes (less than one token)"),
        (3 * _meta_bytes(2, L, 8, 1, d_h), "exactly 3 tokens of GQA-8"),
    )
    for budget, where in budgets:
        for G, name in ((V3.n_heads, "MHA"), (8, "GQA (G = 8)"), (1, "MQA")):

            def cache(T, G=G):  # keys and values (2, L, G, T, d_h)
                return _meta_bytes(2, L, G, T, d_h)

            want = budget // cache(1)
            expect(cache(want) <= budget < cache(want + 1), "internal: T_max should fit")
            what = f"gqa_max_tokens for {name}, a budget of {where}"
            got = as_int(attempt(gqa_answer, L, G, d_h, budget), what, "tokens")
            wrong = {
                "the cache counts the keys only; it stores a key and a value (the factor "
                "2)": gqa_keys_only(L, G, d_h, budget),
                "the layers are missing: every one of the L layers has its own cache": budget
                // _meta_bytes(2, G, 1, d_h),
                "that counts 4 bytes per element; bfloat16 takes 2": budget // (2 * cache(1)),
                "that rounds up: the cache of T_max + 1 tokens would not fit": gqa_rounds_up(
                    L, G, d_h, budget
                ),
            }
            _expect_int(got, want, what, wrong)
        want = budget // _meta_bytes(L, 1, d_c + d_R)
        what = f"mla_max_tokens for DeepSeek-V3, a budget of {where}"
        got = as_int(attempt(mla_answer, L, d_c, d_R, budget), what, "tokens")
        args = (L, d_c, d_R, budget)
        wrong = {
            "the RoPE key is missing: the cache holds the latent (d_c) and the shared RoPE "
            "key (d_R) of every token": mla_without_rope(*args),
            "the layers are missing: every one of the L layers caches its own "
            "latents": mla_without_layers(*args),
            "the latent is counted twice, as if it held keys and values separately; "
            "one latent serves both": mla_latent_twice(*args),
            "that counts 4 bytes per element; bfloat16 takes 2": budget
            // (2 * _meta_bytes(L, 1, d_c + d_R)),
            "that rounds up: the cache of T_max + 1 tokens would not fit": -(
                -budget // _meta_bytes(L, 1, d_c + d_R)
            ),
        }
        _expect_int(got, want, what, wrong)
    return (
        "T_max matches the bytes of meta-allocated caches for MHA, GQA-8, MQA and MLA at "
        "64 GiB, for a budget below one token and for an exact fit"
    )


def _keys_values(x, weights):
    """Keys and values that MLA weights (w_dkv, w_uk, w_uv) give the tokens x (25.4)."""
    w_dkv, w_uk, w_uv = weights
    return mla.up_project(mla.latent(x, w_dkv), w_uk, w_uv)


def _expect_int(got: int, want: int, what: str, wrong: dict) -> None:
    if got == want:
        return
    for feedback, value in wrong.items():
        if got == value:
            raise Incorrect(f"{what} gives {got}: {feedback}")
    raise Incorrect(f"{what} gives {got}, expected {want}")


# --- 25.4 ------------------------------------------------------------------------------------


@exercise("25.4", "gqa_as_mla")
def gqa_as_mla(answer) -> str:
    """Keys, values and attention of the MLA weights against GQA with SDPA."""
    gen = torch.Generator().manual_seed(254)
    D, T, d_h = 12, 7, 3
    for H, G in ((4, 2), (6, 3), (4, 1), (4, 4), (6, 4)):
        x = torch.randn(1, T, D, generator=gen, dtype=F64)
        w_k = torch.randn(D, G * d_h, generator=gen, dtype=F64)
        w_v = torch.randn(D, G * d_h, generator=gen, dtype=F64)
        q = torch.randn(1, H, T, d_h, generator=gen, dtype=F64)
        where = f"H = {H}, G = {G}"
        out = attempt(answer, w_k.clone(), w_v.clone(), H, G)
        expect(
            isinstance(out, (tuple, list)) and len(out) == 3,
            f"gqa_as_mla(w_k, w_v, {H}, {G}) should return a triple (w_dkv, w_uk, w_uv)",
        )
        w_dkv, w_uk, w_uv = out
        d_c = 2 * G * d_h
        for t, name, shape in (
            (w_dkv, "w_dkv", (D, d_c)),
            (w_uk, "w_uk", (H, d_c, d_h)),
            (w_uv, "w_uv", (H, d_c, d_h)),
        ):
            as_tensor(t, f"{name} for {where} (d_c = 2 G d_h = {d_c})", shape)
            expect(
                isinstance(t, torch.Tensor) and t.dtype == F64,
                f"{name} for {where} should be a float64 tensor like w_k",
            )

        heads_k = (x @ w_k).reshape(1, T, G, d_h).transpose(1, 2)  # (1, G, T, d_h)
        heads_v = (x @ w_v).reshape(1, T, G, d_h).transpose(1, 2)
        g = [h * G // H for h in range(H)]  # eq. 24.3
        k_gqa, v_gqa = heads_k[:, g], heads_v[:, g]  # (1, H, T, d_h)
        k_mla, v_mla = mla.up_project(mla.latent(x, w_dkv), w_uk, w_uv)
        swapped = _keys_values(x, as_mla_swapped(w_k, w_v, H, G))
        interleaved = _keys_values(x, as_mla_interleaved(w_k, w_v, H, G))
        for i, (got, want, name) in enumerate(((k_mla, k_gqa, "keys"), (v_mla, v_gqa, "values"))):
            wrong = {
                f"the {name} are the other projection's: w_uk selects the key block of the "
                "latent, w_uv the value block": swapped[i]
            }
            if [h % G for h in range(H)] != g:
                wrong[
                    "query head h reads key/value head h mod G; eq. 24.3 says "
                    "g(h) = floor(h G / H) (neighbouring heads share)"
                ] = interleaved[i]
            expect_answer(
                got,
                want,
                f"the {name} up-projected from the latent, {where}",
                wrong=wrong,
                atol=1e-12,
                rtol=1e-10,
            )

        zeros_q = torch.zeros(1, H, T, 2, dtype=F64)
        zeros_k = torch.zeros(1, T, 2, dtype=F64)
        got, _ = mla.mla_attention_absorbed(
            q, zeros_q, mla.latent(x, w_dkv), zeros_k, w_uk, w_uv, scale=1 / math.sqrt(d_h)
        )
        want = F.scaled_dot_product_attention(q, k_gqa, v_gqa, is_causal=True)
        expect_answer(
            got, want, f"absorbed MLA attention with these weights, {where}", atol=1e-12, rtol=1e-10
        )
    return (
        "the latent's up-projections give each head its GQA key and value, and absorbed "
        "MLA attention equals torch SDPA on GQA, for (H, G) = (4, 2), (6, 3), (4, 1), "
        "(4, 4), (6, 4)"
    )


# --- 25.5 ------------------------------------------------------------------------------------

RANK_SHAPE = dict(D=64, H=4, d_h=12, d_c=16, T=64)  # the layer of the prediction


def _kv_rank() -> int:
    """Rank of the stacked position-free keys and values of all heads, (T, 2 H d_h)."""
    D, H, d_h, d_c, T = (RANK_SHAPE[k] for k in ("D", "H", "d_h", "d_c", "T"))
    gen = torch.Generator().manual_seed(255)
    x = torch.randn(T, D, generator=gen, dtype=F64)
    c = x @ torch.randn(D, d_c, generator=gen, dtype=F64)  # (T, d_c) latents
    w_uk, w_uv = (torch.randn(H, d_c, d_h, generator=gen, dtype=F64) for _ in range(2))
    keys = torch.cat([c @ w_uk[h] for h in range(H)], dim=1)  # (T, H d_h)
    values = torch.cat([c @ w_uv[h] for h in range(H)], dim=1)
    return int(torch.linalg.matrix_rank(torch.cat([keys, values], dim=1)))


@exercise("25.5", "predict_kv_rank")
def kv_rank(answer) -> str:
    """The guessed rank against the rank of keys and values of random MLA weights, run here."""
    what = "predict_kv_rank()"
    got = as_tensor(attempt(answer), what)
    expect(got.numel() == 1, f"{what} should return one number, got shape {tuple(got.shape)}")
    guess, rank = float(got.reshape(())), _kv_rank()
    D, H, d_h, d_c, T = (RANK_SHAPE[k] for k in ("D", "H", "d_h", "d_c", "T"))
    if abs(guess - rank) < 0.5:
        return (
            f"right: the {T} x {2 * H * d_h} matrix of all keys and values has rank {rank} = d_c, "
            "since every column is a linear function of the same latents; an MHA layer's "
            f"would have rank min(T, D, 2 H d_h) = {min(T, D, 2 * H * d_h)}"
        )
    why = {
        predict_two_latents(): "keys and values do not get a latent each: both are read off "
        "the same c_s",
        predict_tokens(): f"{T} tokens bound the rank, but every row is a function of a "
        f"{d_c}-number latent",
        predict_full_mha(): f"{2 * H * d_h} is the number of columns; even MHA, whose keys "
        f"and values are free linear maps of x, reaches only min(T, D, {2 * H * d_h}) = "
        f"{min(T, D, 2 * H * d_h)}",
        predict_keys_only(): f"{H * d_h} is the width of the keys alone, and they too lie in "
        "the latent's span",
    }.get(guess, "")
    raise Incorrect(
        f"{what} guessed {guess:g}; the rank, computed here, is {rank} = d_c"
        + (f" ({why})" if why else "")
        + ": k_{s,h} = c_s W_UK,h and v_{s,h} = c_s W_UV,h, so [K | V] = C [W_UK | W_UV] with C "
        f"of shape ({T}, {d_c}): a product through {d_c} numbers has rank at most {d_c}"
    )


# --- 25.6 ------------------------------------------------------------------------------------


def _materialised_case(seed: int, B: int, H: int, T_q: int, T_k: int, d_h: int, d_c: int, d_R):
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, T_q, d_h, generator=gen, dtype=F64),
        torch.randn(B, H, T_q, d_R, generator=gen, dtype=F64),
        torch.randn(B, T_k, d_c, generator=gen, dtype=F64),
        torch.randn(B, T_k, d_R, generator=gen, dtype=F64),
        torch.randn(H, d_c, d_h, generator=gen, dtype=F64) / math.sqrt(d_c),
        torch.randn(H, d_c, d_h, generator=gen, dtype=F64) / math.sqrt(d_c),
    )


def _sdpa_reference(q_nope, q_rope, c, k_rope, w_uk, w_uv):
    """Keys and values built with F.linear per head, then torch's SDPA with the decode mask."""
    H, T_q, T_k = q_nope.shape[1], q_nope.shape[2], c.shape[1]
    keys = torch.stack([F.linear(c, w_uk[h].T) for h in range(H)], dim=1)  # (B, H, T_k, d_h)
    values = torch.stack([F.linear(c, w_uv[h].T) for h in range(H)], dim=1)
    keys = torch.cat([keys, k_rope[:, None].expand(-1, H, -1, -1)], dim=-1)
    mask = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)  # aligned to the last key
    return F.scaled_dot_product_attention(
        torch.cat([q_nope, q_rope], dim=-1), keys, values, attn_mask=mask
    )


@exercise("25.6", "mla_materialised")
def materialised(answer) -> str:
    """The materialised form against torch's SDPA on keys and values built with F.linear."""
    cases = [
        ((2, 4, 7, 7, 8, 12, 4), "a prompt of 7 tokens"),
        ((1, 3, 1, 9, 6, 10, 2), "one decoding step against 9 cached tokens"),
        ((2, 2, 3, 9, 4, 6, 2), "3 new tokens against 9 cached ones"),
    ]
    for seed, ((B, H, T_q, T_k, d_h, d_c, d_R), where) in enumerate(cases):
        args = _materialised_case(256 + seed, B, H, T_q, T_k, d_h, d_c, d_R)
        want = _sdpa_reference(*args)
        wrong = {
            "the RoPE part is missing: every head scores [q^C, q^R] . [c W_UK,h, k^R] "
            "(eq. 25.2 and the decoupled key)": materialised_without_rope(*args),
            "the scale is 1/sqrt(d_h + d_R): the dot products have width d_h + d_R": (
                materialised_scale_dh(*args)
            ),
            "keys come from W_UK,h and values from W_UV,h; they are swapped": (
                materialised_swapped(*args)
            ),
        }
        if T_q > 1:  # a single query sees every cached key anyway
            wrong["the causal mask is missing: query i sees the keys j <= i + T_k - T_q"] = (
                materialised_unmasked(*args)
            )
        if T_q < T_k:
            wrong[
                "the causal mask is aligned top-left (is_causal=True of torch); with a cache "
                "the new queries are the last T_q positions: j <= i + T_k - T_q"
            ] = materialised_top_left(*args)
        expect_answer(
            attempt(answer, *(a.clone() for a in args)),
            want,
            f"mla_materialised(...) for {where}",
            wrong=wrong,
            atol=1e-12,
            rtol=1e-10,
        )
    return (
        "matches torch SDPA on keys and values built with F.linear (RoPE part concatenated, "
        "scale 1/sqrt(d_h + d_R), mask aligned to the last key) for a prompt, one decoding "
        "step and three new tokens against a cache"
    )


# --- 25.7 ------------------------------------------------------------------------------------


WIDTHS = (1, 4, 8, 16, 32, 48, 64)


def _projections(kind: str):
    """(w_k, w_v) of shape (48, 32) each: Gaussian, or with singular values halving every 4."""
    gen = torch.Generator().manual_seed(257)
    w = torch.randn(48, 64, generator=gen, dtype=F64)
    if kind == "decaying":
        u, _, vh = torch.linalg.svd(w, full_matrices=False)
        w = u @ torch.diag(2.0 ** (-torch.arange(48, dtype=F64) / 4)) @ vh
    return w[:, :32], w[:, 32:]


def _best_errors(w_k, w_v, widths, *, squared: bool = False) -> list[float]:
    """Eckart-Young: the discarded share of the squared singular values of [W_K | W_V]."""
    s = np.linalg.svd(np.concatenate([w_k.numpy(), w_v.numpy()], axis=1), compute_uv=False)
    energy = s**2
    out = [float(energy[min(d, len(s)) :].sum() / energy.sum()) for d in widths]
    return out if squared else [math.sqrt(e) for e in out]


@exercise("25.7", "latent_fit_errors")
def latent_fit(answer) -> str:
    """Relative errors of the best latent of each width against NumPy's singular values."""
    found = {}
    for kind in ("Gaussian", "decaying"):
        w_k, w_v = _projections(kind)
        want = _best_errors(w_k, w_v, WIDTHS)
        what = f"latent_fit_errors(w_k, w_v, {list(WIDTHS)}) for the {kind} projections"
        got = attempt(answer, w_k.clone(), w_v.clone(), list(WIDTHS))
        expect(
            isinstance(got, (list, tuple)) and len(got) == len(WIDTHS),
            f"{what} should return a list of {len(WIDTHS)} floats, one per width",
        )
        args = (w_k, w_v, list(WIDTHS))
        expect_answer(
            torch.tensor([float(as_tensor(v, what).reshape(())) for v in got], dtype=F64),
            torch.tensor(want, dtype=F64),
            what,
            wrong={
                "keys and values share ONE latent: factor [W_K | W_V] with one SVD (separate "
                "latents of width d_c would cache 2 d_c numbers)": fit_separately(*args),
                "that is the squared error; the relative Frobenius error is its square "
                "root": fit_squared(*args),
                "that is the part the latent keeps; return the error, the part it loses": fit_kept(
                    *args
                ),
                "the best latent keeps the d_c LARGEST singular values "
                "(Eckart-Young)": fit_smallest(*args),
            },
            atol=1e-9,
            rtol=1e-9,
        )
        found[kind] = want
    show = [WIDTHS.index(d) for d in (8, 16, 32)]
    return (
        "the errors match the singular values of [W_K | W_V] for a Gaussian and a decaying "
        "spectrum: the best latents of width 8, 16 and 32 (of 64 columns) leave relative errors "
        + ", ".join(fmt(found["Gaussian"][i], 3) for i in show)
        + " for the Gaussian projections but "
        + ", ".join(fmt(found["decaying"][i], 3) for i in show)
        + " where the singular values halve every 4"
    )


# Typical wrong answers, written once: the checks above evaluate them to name a mistake, and the
# tests build each one and check that it is rejected with its feedback ---------------------------


# --- 25.1 ---


def merge_transposed(w_uq, w_uk):
    return w_uk @ w_uq.transpose(1, 2)


def merge_summed_heads(w_uq, w_uk):
    return torch.einsum("hcd,hld->cl", w_uq, w_uk)


def _merge(w_uq, w_uk):
    return w_uq @ w_uk.transpose(1, 2)


def _costs(cfg):
    """(merged_params, factored_params, merged_flops, factored_flops), written out."""
    H, d_h, d_c, d_cq = cfg.n_heads, cfg.d_head, cfg.d_latent, cfg.d_q_latent
    merged, factored = H * d_cq * d_c, H * d_h * (d_cq + d_c)
    return merged, factored, 2 * merged, 2 * factored


def costs_one_head(cfg):
    return tuple(v // cfg.n_heads for v in _costs(cfg))


def costs_flops_as_params(cfg):
    merged, factored, _, _ = _costs(cfg)
    return merged, factored, merged, factored


def costs_one_factor(cfg):
    H, d_h, d_c, d_cq = cfg.n_heads, cfg.d_head, cfg.d_latent, cfg.d_q_latent
    return H * d_cq * d_c, H * d_h * d_cq, 2 * H * d_cq * d_c, 2 * H * d_h * d_cq


def costs_swapped(cfg):
    merged, factored, merged_flops, factored_flops = _costs(cfg)
    return factored, merged, factored_flops, merged_flops


def costs_pair(cfg):
    return _costs(cfg)[:2]


# --- 25.2 ---


def _prefill(cfg, T, form, batch=1):
    return _prefill_total(cfg, T, form, batch)


def prefill_causal_half(cfg, T, form, batch=1):
    terms = _prefill_terms(cfg, T, form)
    pair = terms["scores"] + terms["sum"]  # all T^2 pairs
    return batch * (sum(terms.values()) - pair + pair * (T + 1) // (2 * T))


def prefill_as_decode_steps(cfg, T, form, batch=1):
    return sum(mla.mla_decode_flops(cfg, t, form, batch)["total"] for t in range(1, T + 1))


def prefill_forgets_batch(cfg, T, form, batch=1):
    return _prefill_total(cfg, T, form)


def prefill_swapped_forms(cfg, T, form, batch=1):
    return _prefill_total(cfg, T, "absorbed" if form == "naive" else "naive", batch)


def prefill_attention_only(cfg, T, form, batch=1):
    terms = _prefill_terms(cfg, T, form)
    return batch * sum(v for k, v in terms.items() if k not in _SHARED)


# --- 25.3 ---


def _gqa_tokens(n_layers, n_kv_heads, d_head, budget, bytes_per_element=2):
    return budget // (2 * n_layers * n_kv_heads * d_head * bytes_per_element)


def _mla_tokens(n_layers, d_latent, d_rope, budget, bytes_per_element=2):
    return budget // (n_layers * (d_latent + d_rope) * bytes_per_element)


def gqa_keys_only(n_layers, n_kv_heads, d_head, budget, bytes_per_element=2):
    return budget // (n_layers * n_kv_heads * d_head * bytes_per_element)


def gqa_rounds_up(n_layers, n_kv_heads, d_head, budget, bytes_per_element=2):
    return -(-budget // (2 * n_layers * n_kv_heads * d_head * bytes_per_element))


def gqa_float(n_layers, n_kv_heads, d_head, budget, bytes_per_element=2):
    return budget / (2 * n_layers * n_kv_heads * d_head * bytes_per_element)


def mla_without_rope(n_layers, d_latent, d_rope, budget, bytes_per_element=2):
    return budget // (n_layers * d_latent * bytes_per_element)


def mla_without_layers(n_layers, d_latent, d_rope, budget, bytes_per_element=2):
    return budget // ((d_latent + d_rope) * bytes_per_element)


def mla_latent_twice(n_layers, d_latent, d_rope, budget, bytes_per_element=2):
    return budget // (n_layers * (2 * d_latent + d_rope) * bytes_per_element)


# --- 25.4 ---


def _selection(w_k, w_v, H, G, group):
    """W_DKV = [W_K W_V] and up-projections that select the blocks of the heads ``group``."""
    d_h = w_k.shape[1] // G
    w_dkv = torch.cat([w_k, w_v], dim=1)  # (D, 2 G d_h)
    eye = torch.eye(2 * G * d_h, dtype=w_k.dtype)
    w_uk = torch.stack([eye[:, g * d_h : (g + 1) * d_h] for g in group])  # (H, d_c, d_h)
    w_uv = torch.stack([eye[:, (G + g) * d_h : (G + g + 1) * d_h] for g in group])
    return w_dkv, w_uk, w_uv


def _mla_from(w_k, w_v, H, G):
    return _selection(w_k, w_v, H, G, [h * G // H for h in range(H)])


def as_mla_interleaved(w_k, w_v, H, G):
    return _selection(w_k, w_v, H, G, [h % G for h in range(H)])


def as_mla_swapped(w_k, w_v, H, G):
    w_dkv, w_uk, w_uv = _mla_from(w_k, w_v, H, G)
    return w_dkv, w_uv, w_uk


def as_mla_integer_groups(w_k, w_v, H, G):
    return _selection(w_k, w_v, H, G, [h // (H // G) for h in range(H)])  # G must divide H


def as_mla_float32(w_k, w_v, H, G):
    return tuple(t.float() for t in _mla_from(w_k, w_v, H, G))


def as_mla_pair(w_k, w_v, H, G):
    return _mla_from(w_k, w_v, H, G)[1:]


# --- 25.5 ---


def predict_two_latents():
    return 2 * RANK_SHAPE["d_c"]


def predict_tokens():
    return RANK_SHAPE["T"]


def predict_full_mha():
    return 2 * RANK_SHAPE["H"] * RANK_SHAPE["d_h"]


def predict_keys_only():
    return RANK_SHAPE["H"] * RANK_SHAPE["d_h"]


# --- 25.6 ---


def _attend(q, k, v, scale, mask):
    s = scale * q @ k.transpose(-2, -1)  # (B, H, T_q, T_k)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    return torch.softmax(s, dim=-1) @ v


def _variant(q_nope, q_rope, c, k_rope, w_uk, w_uv, *, rope=True, scale=None, mask="last"):
    """The materialised form with one choice changed (the mistakes below)."""
    H, T_q, T_k = q_nope.shape[1], q_nope.shape[2], c.shape[1]
    k = torch.einsum("bsc,hcd->bhsd", c, w_uk)  # (B, H, T_k, d_h)
    v = torch.einsum("bsc,hcd->bhsd", c, w_uv)
    q = q_nope
    if rope:
        q = torch.cat([q_nope, q_rope], dim=-1)
        k = torch.cat([k, k_rope[:, None].expand(-1, H, -1, -1)], dim=-1)
    if scale is None:
        scale = 1 / math.sqrt(q_nope.shape[-1] + q_rope.shape[-1])
    masks = {
        "last": torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q),
        "first": torch.ones(T_q, T_k, dtype=torch.bool).tril(0),
        None: None,
    }
    return _attend(q, k, v, scale, masks[mask])


def materialised_without_rope(q_nope, q_rope, c, k_rope, w_uk, w_uv):
    return _variant(q_nope, q_rope, c, k_rope, w_uk, w_uv, rope=False)


def materialised_scale_dh(q_nope, q_rope, c, k_rope, w_uk, w_uv):
    return _variant(q_nope, q_rope, c, k_rope, w_uk, w_uv, scale=q_nope.shape[-1] ** -0.5)


def materialised_swapped(q_nope, q_rope, c, k_rope, w_uk, w_uv):
    return _variant(q_nope, q_rope, c, k_rope, w_uv, w_uk)


def materialised_unmasked(q_nope, q_rope, c, k_rope, w_uk, w_uv):
    return _variant(q_nope, q_rope, c, k_rope, w_uk, w_uv, mask=None)


def materialised_top_left(q_nope, q_rope, c, k_rope, w_uk, w_uv):
    return _variant(q_nope, q_rope, c, k_rope, w_uk, w_uv, mask="first")


# --- 25.7 ---


def fit_separately(w_k, w_v, widths):
    def energy(w):
        return np.linalg.svd(w.numpy(), compute_uv=False) ** 2

    e_k, e_v = energy(w_k), energy(w_v)
    total = e_k.sum() + e_v.sum()
    return [math.sqrt((e_k[d:].sum() + e_v[d:].sum()) / total) for d in widths]


def fit_squared(w_k, w_v, widths):
    return _best_errors(w_k, w_v, widths, squared=True)


def fit_kept(w_k, w_v, widths):
    return [math.sqrt(1 - e) for e in _best_errors(w_k, w_v, widths, squared=True)]


def fit_smallest(w_k, w_v, widths):
    s = np.linalg.svd(np.concatenate([w_k.numpy(), w_v.numpy()], axis=1), compute_uv=False)
    energy = (s**2)[::-1]  # smallest first
    return [math.sqrt(energy[min(d, len(s)) :].sum() / energy.sum()) for d in widths]


def fit_one_number(w_k, w_v, widths):
    return _best_errors(w_k, w_v, widths)[0]


MISTAKES = {
    "25.1": [
        ((merge_transposed, _costs), "transpose of each head's matrix"),
        ((merge_summed_heads, _costs), "heads are summed"),
        ((_merge, costs_one_head), "counts of one head"),
        ((_merge, costs_flops_as_params), "is two FLOPs"),
        ((_merge, costs_one_factor), "only one factor"),
        ((_merge, costs_swapped), "swapped"),
        ((_merge, costs_pair), "tuple of 4 ints"),
    ],
    "25.2": [
        (prefill_causal_half, "only the causal half"),
        (prefill_as_decode_steps, "T decoding steps"),
        (prefill_forgets_batch, "multiply by the batch"),
        (prefill_swapped_forms, "other form's count"),
        (prefill_attention_only, "shared projections"),
    ],
    "25.3": [
        ((gqa_keys_only, _mla_tokens), "keys only"),
        ((gqa_rounds_up, _mla_tokens), "rounds up"),
        ((gqa_float, _mla_tokens), "whole number (tokens)"),
        ((_gqa_tokens, mla_without_rope), "RoPE key is missing"),
        ((_gqa_tokens, mla_without_layers), "layers are missing"),
        ((_gqa_tokens, mla_latent_twice), "latent is counted twice"),
    ],
    "25.4": [
        (as_mla_interleaved, "h mod G"),
        (as_mla_swapped, "other projection's"),
        (as_mla_integer_groups, "raised RuntimeError"),
        (as_mla_float32, "float64 tensor"),
        (as_mla_pair, "should return a triple"),
    ],
    "25.5": [
        (predict_two_latents, "do not get a latent each"),
        (predict_tokens, "tokens bound the rank"),
        (predict_full_mha, "even MHA"),
        (predict_keys_only, "width of the keys alone"),
    ],
    "25.6": [
        (materialised_without_rope, "RoPE part is missing"),
        (materialised_scale_dh, "1/sqrt(d_h + d_R)"),
        (materialised_swapped, "swapped"),
        (materialised_unmasked, "mask is missing"),
        (materialised_top_left, "top-left"),
    ],
    "25.7": [
        (fit_separately, "share ONE latent"),
        (fit_squared, "squared error"),
        (fit_kept, "the part the latent keeps"),
        (fit_smallest, "LARGEST singular values"),
        (fit_one_number, "should return a list of 7 floats"),
    ],
}
