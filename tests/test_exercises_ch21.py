"""Typical wrong answers to the exercises of chapter 21 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import pytest
import torch
from exercise_support import cases, reference, rejected

from mlbook.attention import positional as pos_enc
from mlbook.attention import rope


def _ref(eid, name):
    return reference(eid)[name]


def kernel_rotated_part_only(distances, d_c, d_r, base=10000.0):
    return rope.rope_score_kernel(distances, rope.rope_frequencies(d_r, base))


def kernel_over_d_r(distances, d_c, d_r, base=10000.0):
    k_r = rope.rope_score_kernel(distances, rope.rope_frequencies(d_r, base))
    return (d_c + d_r * k_r) / d_r


def kernel_whole_head(distances, d_c, d_r, base=10000.0):
    return rope.rope_score_kernel(distances, rope.rope_frequencies(d_c + d_r, base))


def kernel_full_width_ladder(distances, d_c, d_r, base=10000.0):
    freqs = rope.rope_frequencies(d_c + d_r, base)[: d_r // 2]
    return (d_c + d_r * rope.rope_score_kernel(distances, freqs)) / (d_c + d_r)


def lookback_transposed(k, d, base=10000.0):
    return _ref("21.2", "lookback_matrix")(k, d, base).T


def lookback_identity(k, d, base=10000.0):
    return torch.eye(d, dtype=torch.float64)


def lookback_half_split(k, d, base=10000.0):
    return rope.rope_rotation_matrix(-k, rope.rope_frequencies(d, base))


def _gap(slopes, T):
    return _ref("21.3", "alibi_form_gap")(slopes, T)


def symmetric_masked(slopes, T):
    return pos_enc.alibi_bias(slopes, T)


def symmetric_signed(slopes, T):
    pos = torch.arange(T, dtype=torch.float64)
    return -slopes[:, None, None] * (pos[:, None] - pos[None, :])


def symmetric_key_form(slopes, T):
    return pos_enc.alibi_bias(slopes, T, form="key", causal=False)


def symmetric_ok(slopes, T):
    return _ref("21.3", "symmetric_alibi_bias")(slopes, T)


def gap_row_constant(slopes, T):
    t = torch.arange(T, dtype=torch.float64)[:, None].expand(T, T)
    return slopes[:, None, None] * t


def gap_reversed(slopes, T):
    return -_gap(slopes, T)


def gap_transposed(slopes, T):
    return _gap(slopes, T).transpose(1, 2)


def half_split_unchanged(W_q, W_k):
    return W_q, W_k


def half_split_inverse(W_q, W_k):
    inverse = torch.argsort(rope.interleave_permutation(W_q.shape[1]))
    return W_q[:, inverse], W_k[:, inverse]


def half_split_only_query(W_q, W_k):
    return W_q[:, rope.interleave_permutation(W_q.shape[1])], W_k


def half_split_single(W_q, W_k):
    return W_q[:, rope.interleave_permutation(W_q.shape[1])]


WRONG = {
    "21.1": [
        (kernel_rotated_part_only, "position-free part is missing"),
        (kernel_over_d_r, "normalise by E|q|² = d_c + d_r"),
        (kernel_whole_head, "rotates the whole head"),
        (kernel_full_width_ladder, "its own ladder"),
    ],
    "21.2": [
        (lookback_transposed, "looks k tokens ahead"),
        (lookback_identity, "plain similarity"),
        (lookback_half_split, "half-split planes"),
    ],
    "21.3": [
        ((symmetric_masked, _gap), "no -inf mask"),
        ((symmetric_signed, _gap), "use the distance |t - s|"),
        ((symmetric_key_form, _gap), "that is the key form"),
        ((symmetric_ok, gap_row_constant), "break the argument"),
        ((symmetric_ok, gap_reversed), "symmetric form minus the key form"),
        ((symmetric_ok, gap_transposed), "this is the transpose"),
    ],
    "21.4": [
        (half_split_unchanged, "without permuting the columns"),
        (half_split_inverse, "inverse permutation"),
        (half_split_only_query, "both W_q and W_k"),
        (half_split_single, "should return a pair"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
