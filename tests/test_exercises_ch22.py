"""Typical wrong answers to the exercises of chapter 22 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import pytest
import torch
import torch.nn.functional as F
from exercise_support import cases, reference, rejected


def _ref(eid, name):
    return reference(eid)[name]


def params_without_biases(d, h):
    return 4 * d * d + 2 * d * h + 4 * d


def params_layernorm_gain_only(d, h):
    return 4 * d * d + 4 * d + 2 * d * h + h + d + 2 * d


def params_fixed_h(d, h):
    return 12 * d * d + 13 * d


def params_three_ffn_matrices(d, h):
    return 4 * d * d + 4 * d + 3 * d * h + h + d + 4 * d


def break_even_six_d(d, h):
    return 6.0 * d


def break_even_half_attention(d, h):
    return 2 * (4 * d * d + 3 * d * h) / (2 * d)


def break_even_one_flop_per_weight(d, h):
    return (4 * d * d + 3 * d * h) / (4 * d)


def break_even_attention_weights_only(d, h):
    return 2 * 4 * d * d / (4 * d)


def _post(x, g_attn, g_ffn, eps):
    return _ref("22.3", "zeroed_post_norm")(x, g_attn, g_ffn, eps)


def _zero(block):
    return _ref("22.3", "zero_output_projections")(block)


def zero_only_ffn(block):
    with torch.no_grad():
        block.ffn.W2.zero_()
    return block


def zero_only_attention(block):
    with torch.no_grad():
        block.attn.Wo.zero_()
    return block


def zero_values_and_gate(block):
    with torch.no_grad():
        block.attn.Wv.zero_()
        block.ffn.W.zero_()
    return block


def zero_without_return(block):
    _zero(block)


def post_identity(x, g_attn, g_ffn, eps):
    return x


def post_one_norm(x, g_attn, g_ffn, eps):
    return F.rms_norm(x, (x.shape[-1],), g_ffn, eps)


def post_swapped_gains(x, g_attn, g_ffn, eps):
    return _post(x, g_ffn, g_attn, eps)


def post_without_eps(x, g_attn, g_ffn, eps):
    return _post(x, g_attn, g_ffn, 0.0)


def post_layer_norm(x, g_attn, g_ffn, eps):
    d = x.shape[-1]
    return F.layer_norm(F.layer_norm(x, (d,), g_attn, None, eps), (d,), g_ffn, None, eps)


WRONG = {
    "22.1": [
        (params_without_biases, "the biases are missing"),
        (params_layernorm_gain_only, "a gain and a bias"),
        (params_fixed_h, "depends on h"),
        (params_three_ffn_matrices, "two matrices, not three"),
    ],
    "22.2": [
        (break_even_six_d, "T = 6d holds only for h = 8d/3"),
        (break_even_half_attention, "4Td for the pair"),
        (break_even_one_flop_per_weight, "2 FLOPs per token"),
        (break_even_attention_weights_only, "not only attention's 4d²"),
    ],
    "22.3": [
        ((zero_only_ffn, _post), "zero W_O (block.attn.Wo) too"),
        ((zero_only_attention, _post), "zero W_d (block.ffn.W2) too"),
        ((zero_values_and_gate, _post), "`attn.Wo` should be zero"),
        ((zero_without_return, _post), "should return the block"),
        ((_zero, post_identity), "not the identity"),
        ((_zero, post_one_norm), "two norms act in turn"),
        ((_zero, post_swapped_gains), "the gains are swapped"),
        ((_zero, post_without_eps), "eps is missing"),
        ((_zero, post_layer_norm), "subtracts no mean"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
