"""Checks of the exercises of chapter 25 (multi-head latent attention).

The references are independent of the reader's answer: the merged matrices against a loop over heads
and the two-step absorbed query; parameter counts as the number of entries of the tensors and FLOPs
as counted by torch's ``FlopCounterMode`` on real products (small layers) and by closed forms
written out per term (DeepSeek-V3's shapes); the largest context as the floor of the budget over the
bytes of one token's cache, read off tensors allocated on the ``meta`` device, verified by
allocating T_max and T_max + 1 tokens; GQA against ``F.scaled_dot_product_attention`` on explicitly
gathered key/value heads.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from ...attention import mla
from . import Incorrect, as_int, as_tensor, attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

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
                "d_c)": want.transpose(1, 2),
                "the heads are summed into one matrix; every head keeps its own merged "
                "matrix": want.sum(0),
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
            "these are the counts of one head; sum over all H heads": [v // H for v in want],
            "the FLOPs equal the parameter counts; one multiply-add per entry is two FLOPs": params
            + params,
            "the factored count has only one factor; both W_UQ,h (d_cq x d_h) and W_UK,h "
            "(d_c x d_h) are stored and applied": [
                params[0],
                params[1] - H * d_c * d_h,
                flops[0],
                flops[1] - 2 * H * d_c * d_h,
            ],
            "merged and factored are swapped": [params[1], params[0], flops[1], flops[0]],
        }
        expect_answer(
            torch.tensor(got, dtype=F64),
            torch.tensor(want, dtype=F64),
            what + " (merged_params, factored_params, merged_flops, factored_flops)",
            wrong={k: torch.tensor(v, dtype=F64) for k, v in wrong.items()},
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


def _compare(answer, cfg, T, form, B, want, where) -> None:
    terms = _prefill_terms(cfg, T, form)
    pair = terms["scores"] + terms["sum"]
    half = pair * (T + 1) // (2 * T)  # scores of the causal triangle only
    other = "absorbed" if form == "naive" else "naive"
    wrong = {
        "only the causal half of the scores is counted; this dense implementation computes "
        "all T^2 scores and masks them afterwards": B * (sum(terms.values()) - pair + half),
        "that is the other form's count": B * sum(_prefill_terms(cfg, T, other).values()),
        "the shared projections (query latent, W_UQ, W_QR, latent, RoPE key, W_O) are missing": B
        * sum(v for k, v in terms.items() if k not in _SHARED),
    }
    if form == "naive":
        wrong[
            "that is T decoding steps: a prefill pass up-projects each token's key and value "
            "once, not once per query"
        ] = B * sum(mla.mla_decode_flops(cfg, t, "naive")["total"] for t in range(1, T + 1))
    if B > 1:
        wrong["that is one sequence; multiply by the batch"] = sum(terms.values())
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
                "the cache counts the keys only; it stores a key and a value (the factor 2)": budget
                // _meta_bytes(L, G, 1, d_h),
                "the layers are missing: every one of the L layers has its own cache": budget
                // _meta_bytes(2, G, 1, d_h),
                "that counts 4 bytes per element; bfloat16 takes 2": budget // (2 * cache(1)),
                "that rounds up: the cache of T_max + 1 tokens would not fit": -(
                    -budget // cache(1)
                ),
            }
            _expect_int(got, want, what, wrong)
        want = budget // _meta_bytes(L, 1, d_c + d_R)
        what = f"mla_max_tokens for DeepSeek-V3, a budget of {where}"
        got = as_int(attempt(mla_answer, L, d_c, d_R, budget), what, "tokens")
        wrong = {
            "the RoPE key is missing: the cache holds the latent (d_c) and the shared RoPE "
            "key (d_R) of every token": budget // _meta_bytes(L, 1, d_c),
            "the layers are missing: every one of the L layers caches its own latents": budget
            // _meta_bytes(1, d_c + d_R),
            "the latent is counted twice, as if it held keys and values separately; "
            "one latent serves both": budget // _meta_bytes(L, 1, 2 * d_c + d_R),
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
        interleaved = [h % G for h in range(H)]
        for got, want, other, name in (
            (k_mla, k_gqa, v_gqa, "keys"),
            (v_mla, v_gqa, k_gqa, "values"),
        ):
            wrong = {
                f"the {name} are the other projection's: w_uk selects the key block of the "
                "latent, w_uv the value block": other
            }
            if interleaved != g:
                wrong[
                    "query head h reads key/value head h mod G; eq. 24.3 says "
                    "g(h) = floor(h G / H) (neighbouring heads share)"
                ] = (heads_k if name == "keys" else heads_v)[:, interleaved]
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


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


# --- 25.1 ---


def merge_transposed(w_uq, w_uk):
    return w_uk @ w_uq.transpose(1, 2)


def merge_summed_heads(w_uq, w_uk):
    return torch.einsum("hcd,hld->cl", w_uq, w_uk)


def costs_one_head(cfg):
    return tuple(v // cfg.n_heads for v in _ref("25.1", "merge_costs")(cfg))


def costs_flops_as_params(cfg):
    merged, factored, _, _ = _ref("25.1", "merge_costs")(cfg)
    return merged, factored, merged, factored


def costs_one_factor(cfg):
    H, d_h, d_c, d_cq = cfg.n_heads, cfg.d_head, cfg.d_latent, cfg.d_q_latent
    return H * d_cq * d_c, H * d_h * d_cq, 2 * H * d_cq * d_c, 2 * H * d_h * d_cq


def costs_pair(cfg):
    return _ref("25.1", "merge_costs")(cfg)[:2]


# --- 25.2 ---


def prefill_causal_half(cfg, T, form, batch=1):
    full = _ref("25.2", "prefill_attention_flops")(cfg, T, form, batch)
    H, d_h, d_c, d_R = cfg.n_heads, cfg.d_head, cfg.d_latent, cfg.d_rope
    per_pair = 2 * H * (2 * d_h + d_R) if form == "naive" else 2 * H * (2 * d_c + d_R)
    return full - batch * per_pair * (T * T - T * (T + 1) // 2)


def prefill_as_decode_steps(cfg, T, form, batch=1):
    return sum(mla.mla_decode_flops(cfg, t, form, batch)["total"] for t in range(1, T + 1))


def prefill_forgets_batch(cfg, T, form, batch=1):
    return _ref("25.2", "prefill_attention_flops")(cfg, T, form)


def prefill_swapped_forms(cfg, T, form, batch=1):
    other = "absorbed" if form == "naive" else "naive"
    return _ref("25.2", "prefill_attention_flops")(cfg, T, other, batch)


def prefill_attention_only(cfg, T, form, batch=1):
    H, d_h, d_c, d_R = cfg.n_heads, cfg.d_head, cfg.d_latent, cfg.d_rope
    if form == "naive":
        return batch * (T * 4 * d_c * H * d_h + T * T * 2 * H * (2 * d_h + d_R))
    return batch * (T * 4 * H * d_h * d_c + T * T * 2 * H * (2 * d_c + d_R))


# --- 25.3 ---


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


def as_mla_interleaved(w_k, w_v, H, G):
    d_h = w_k.shape[1] // G
    w_dkv = torch.cat([w_k, w_v], dim=1)
    eye = torch.eye(2 * G * d_h, dtype=w_k.dtype)
    group = [h % G for h in range(H)]
    w_uk = torch.stack([eye[:, g * d_h : (g + 1) * d_h] for g in group])
    w_uv = torch.stack([eye[:, (G + g) * d_h : (G + g + 1) * d_h] for g in group])
    return w_dkv, w_uk, w_uv


def as_mla_swapped(w_k, w_v, H, G):
    w_dkv, w_uk, w_uv = _ref("25.4", "gqa_as_mla")(w_k, w_v, H, G)
    return w_dkv, w_uv, w_uk


def as_mla_integer_groups(w_k, w_v, H, G):
    d_h = w_k.shape[1] // G
    w_dkv = torch.cat([w_k, w_v], dim=1)
    eye = torch.eye(2 * G * d_h, dtype=w_k.dtype)
    group = [h // (H // G) for h in range(H)]  # breaks when G does not divide H
    w_uk = torch.stack([eye[:, g * d_h : (g + 1) * d_h] for g in group])
    w_uv = torch.stack([eye[:, (G + g) * d_h : (G + g + 1) * d_h] for g in group])
    return w_dkv, w_uk, w_uv


def as_mla_float32(w_k, w_v, H, G):
    return tuple(t.float() for t in _ref("25.4", "gqa_as_mla")(w_k, w_v, H, G))


def as_mla_pair(w_k, w_v, H, G):
    return _ref("25.4", "gqa_as_mla")(w_k, w_v, H, G)[1:]


_MERGE, _COSTS = _ref("25.1", "merge_query_key"), _ref("25.1", "merge_costs")
_GQA, _MLA = _ref("25.3", "gqa_max_tokens"), _ref("25.3", "mla_max_tokens")

MISTAKES = {
    "25.1": [
        ((merge_transposed, _COSTS), "transpose of each head's matrix"),
        ((merge_summed_heads, _COSTS), "heads are summed"),
        ((_MERGE, costs_one_head), "counts of one head"),
        ((_MERGE, costs_flops_as_params), "is two FLOPs"),
        ((_MERGE, costs_one_factor), "only one factor"),
        ((_MERGE, costs_pair), "tuple of 4 ints"),
    ],
    "25.2": [
        (prefill_causal_half, "only the causal half"),
        (prefill_as_decode_steps, "T decoding steps"),
        (prefill_forgets_batch, "multiply by the batch"),
        (prefill_swapped_forms, "other form's count"),
        (prefill_attention_only, "shared projections"),
    ],
    "25.3": [
        ((gqa_keys_only, _MLA), "keys only"),
        ((gqa_rounds_up, _MLA), "rounds up"),
        ((gqa_float, _MLA), "whole number (tokens)"),
        ((_GQA, mla_without_rope), "RoPE key is missing"),
        ((_GQA, mla_without_layers), "layers are missing"),
        ((_GQA, mla_latent_twice), "latent is counted twice"),
    ],
    "25.4": [
        (as_mla_interleaved, "h mod G"),
        (as_mla_swapped, "other projection's"),
        (as_mla_integer_groups, "raised RuntimeError"),
        (as_mla_float32, "float64 tensor"),
        (as_mla_pair, "should return a triple"),
    ],
}
