"""Typical wrong answers to the exercises of chapter 24 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import pytest
import torch
from exercise_support import cases, reference, rejected

from mlbook.attention import kv_cache as kc


def _ref(eid, name):
    return reference(eid)[name]


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


def pool_kv_drops_window(model, G):
    cfg = model.cfg
    new_cfg = kc.DecoderConfig(
        cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, G, cfg.d_ff
    )  # window and sinks forgotten
    pooled = kc.TinyDecoder(new_cfg).to(model.embed)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for key in list(state):
        if key.endswith((".wk", ".wv")):
            state[key] = _ref("24.1", "pool_kv_heads")(state[key], cfg.n_heads, G)
    pooled.load_state_dict(state)
    return pooled


def pool_kv_float32(model, G):
    return _ref("24.1", "pool_kv")(model, G).float()


def pool_kv_in_place(model, G):
    pooled = _ref("24.1", "pool_kv")(model, G)
    with torch.no_grad():
        model.layers[0].wq.mul_(1.0)
        model.layers[0].wo.add_(1.0)  # "tidies up" the original by mistake
    return pooled


# --- 24.2 ---


def batch_without_weights(cfg, memory_bytes, seq_len):
    return memory_bytes // kc.cache_bytes(cfg, seq_len)


def batch_fp32_weights(cfg, memory_bytes, seq_len):
    return max((memory_bytes - 4 * kc.param_count(cfg)) // kc.cache_bytes(cfg, seq_len), 0)


def batch_keys_only(cfg, memory_bytes, seq_len):
    free = memory_bytes - 2 * kc.param_count(cfg)
    return max(2 * free // kc.cache_bytes(cfg, seq_len), 0)


def batch_query_heads(cfg, memory_bytes, seq_len):
    free = memory_bytes - 2 * kc.param_count(cfg)
    return max(free // kc.kv_cache_bytes(cfg.n_layers, cfg.n_heads, cfg.head_dim, seq_len, 2), 0)


def batch_ignores_window(cfg, memory_bytes, seq_len):
    free = memory_bytes - 2 * kc.param_count(cfg)
    return max(free // kc.kv_cache_bytes(cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, seq_len, 2), 0)


def batch_negative(cfg, memory_bytes, seq_len):
    return (memory_bytes - 2 * kc.param_count(cfg)) // kc.cache_bytes(cfg, seq_len)


def batch_float(cfg, memory_bytes, seq_len):
    return (memory_bytes - 2 * kc.param_count(cfg)) / kc.cache_bytes(cfg, seq_len)


# --- 24.3 ---


def _band(model, tokens, lo, hi):
    t = torch.arange(tokens.shape[1])
    return (t >= lo) & (t <= hi)


def influenced_one_layer(model, tokens, s):
    return _band(model, tokens, s, s + model.cfg.window - 1)


def influenced_L_times_W(model, tokens, s):
    cfg = model.cfg
    return _band(model, tokens, s, s + cfg.n_layers * (cfg.window or tokens.shape[1]))


def influenced_after_s(model, tokens, s):
    return _ref("24.3", "influenced")(model, tokens, s) & (torch.arange(tokens.shape[1]) > s)


def influenced_before_s(model, tokens, s):
    cfg = model.cfg
    return _band(model, tokens, 0, s + cfg.n_layers * ((cfg.window or tokens.shape[1]) - 1))


def influenced_formula_without_sinks(model, tokens, s):
    cfg = model.cfg
    if cfg.window is None:
        return _band(model, tokens, s, tokens.shape[1])
    return _band(model, tokens, s, s + cfg.n_layers * (cfg.window - 1))


def influenced_positions_list(model, tokens, s):
    return _ref("24.3", "influenced")(model, tokens, s).nonzero().squeeze(1)


WRONG = {
    "24.1": [
        ((pool_interleaved, _ref("24.1", "pool_kv")), "interleaved"),
        ((pool_sum, _ref("24.1", "pool_kv")), "sum of the heads"),
        ((pool_first_head, _ref("24.1", "pool_kv")), "first head of each group"),
        ((_ref("24.1", "pool_kv_heads"), pool_kv_drops_window), "lost the sliding window"),
        ((_ref("24.1", "pool_kv_heads"), pool_kv_float32), "keep the original's dtype"),
        ((_ref("24.1", "pool_kv_heads"), pool_kv_in_place), "changed the original"),
    ],
    "24.2": [
        (batch_without_weights, "weights are not subtracted"),
        (batch_fp32_weights, "4 bytes per parameter"),
        (batch_keys_only, "keys only"),
        (batch_query_heads, "all H query heads"),
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
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
