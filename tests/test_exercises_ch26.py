"""Typical wrong answers to the exercises of chapter 26 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import math

import pytest
import torch
from exercise_support import cases, reference, rejected


def _ref(eid, name):
    return reference(eid)[name]


# --- 26.1 ---


def states_unscaled(q, K, V, sizes):
    return _ref("26.1", "worker_states")(q * math.sqrt(q.shape[0]), K, V, sizes)


def states_normalised(q, K, V, sizes):
    return [(m, l, acc / l) for m, l, acc in _ref("26.1", "worker_states")(q, K, V, sizes)]


def states_unshifted(q, K, V, sizes):
    return [
        (m, l * torch.exp(m), acc) for m, l, acc in _ref("26.1", "worker_states")(q, K, V, sizes)
    ]


def states_with_probabilities(q, K, V, sizes):
    out, lo = [], 0
    for n in sizes:  # sends the whole softmax row as well
        s = K[lo : lo + n] @ q / math.sqrt(q.shape[0])
        out.append(
            (
                s.amax(),
                torch.exp(s - s.amax()).sum(),
                torch.exp(s - s.amax()) @ V[lo : lo + n],
                torch.softmax(s, 0),
            )
        )
        lo += n
    return out


def tree_no_rescale(states):
    return sum(a for _, _, a in states) / sum(l for _, l, _ in states)


def tree_average(states):
    return torch.stack([a / l for _, l, a in states]).mean(0)


def tree_unnormalised(states):
    m = torch.stack([m for m, _, _ in states]).max()
    return sum(torch.exp(mi - m) * a for mi, _, a in states)


_STATES, _TREE = _ref("26.1", "worker_states"), _ref("26.1", "merge_tree")

# --- 26.2 ---


def lse_add(o_a, L_a, o_b, L_b):
    return _ref("26.2", "merge_lse")(o_a, L_a, o_b, L_b)[0], L_a + L_b


def lse_max(o_a, L_a, o_b, L_b):
    return _ref("26.2", "merge_lse")(o_a, L_a, o_b, L_b)[0], torch.maximum(L_a, L_b)


def lse_naive(o_a, L_a, o_b, L_b):
    L = torch.log(torch.exp(L_a) + torch.exp(L_b))  # overflows for L > 709
    w_a, w_b = torch.exp(L_a - L)[..., None], torch.exp(L_b - L)[..., None]
    return w_a * o_a + w_b * o_b, L


def lse_average(o_a, L_a, o_b, L_b):
    return (o_a + o_b) / 2, torch.logaddexp(L_a, L_b)


def lse_swapped(o_a, L_a, o_b, L_b):
    L = torch.logaddexp(L_a, L_b)
    return torch.exp(L_b - L)[..., None] * o_a + torch.exp(L_a - L)[..., None] * o_b, L


def lse_undivided(o_a, L_a, o_b, L_b):
    L = torch.logaddexp(L_a, L_b)
    return torch.exp(L_a)[..., None] * o_a + torch.exp(L_b)[..., None] * o_b, L


def lse_output_only(o_a, L_a, o_b, L_b):
    return _ref("26.2", "merge_lse")(o_a, L_a, o_b, L_b)[0]


# --- 26.3 ---


def tiles_all(T, b_q, b_k):
    return -(-T // b_q) * -(-T // b_k)


def tiles_floor(T, b_q, b_k):
    return sum(-(-min(b_q * (r + 1), T) // b_k) for r in range(T // b_q))


def tiles_without_diagonal(T, b_q, b_k):
    R = -(-T // b_q)
    return R * (R - 1) // 2


def tiles_square_formula(T, b_q, b_k):
    R = -(-T // b_k)
    return R * (R + 1) // 2


def tiles_not_cut(T, b_q, b_k):
    return sum(-(-b_q * (r + 1) // b_k) for r in range(-(-T // b_q)))


# --- 26.4 ---


def threshold_log2(dtype):
    return math.log2(torch.finfo(dtype).max)


def threshold_fp32(dtype):
    return math.log(torch.finfo(torch.float32).max)


def threshold_max(dtype):
    return torch.finfo(dtype).max


def softmax_raw(s):
    return torch.exp(s) / torch.exp(s).sum(-1, keepdim=True)


def softmax_mean_shift(s):
    e = torch.exp(s - s.float().mean(-1, keepdim=True).half())
    return e / e.sum(-1, keepdim=True)


def softmax_unnormalised(s):
    return torch.exp(s - s.amax(-1, keepdim=True))


def softmax_first_axis(s):
    return torch.softmax(s.float(), dim=0).half()


def softmax_float64(s):
    return torch.softmax(s.double(), dim=-1)


_THRESHOLD, _SOFTMAX = _ref("26.4", "overflow_threshold"), _ref("26.4", "stable_softmax")

WRONG = {
    "26.1": [
        ((states_unscaled, _TREE), "not divided by sqrt(d)"),
        ((states_normalised, _TREE), "acc is normalised"),
        ((states_unshifted, _TREE), "plain sum of e^s"),
        ((states_with_probabilities, _TREE), "should be a triple"),
        ((_STATES, tree_no_rescale), "without rescaling"),
        ((_STATES, tree_average), "equal weights"),
        ((_STATES, tree_unnormalised), "unnormalised numerator"),
    ],
    "26.2": [
        (lse_add, "multiplies the two sums"),
        (lse_max, "drops the smaller set's mass"),
        (lse_naive, "nan or inf"),
        (lse_average, "equal weights"),
        (lse_swapped, "weights are swapped"),
        (lse_undivided, "not divided by e^L"),
        (lse_output_only, "should return a pair"),
    ],
    "26.3": [
        (tiles_all, "that is every tile"),
        (tiles_floor, "the last, shorter"),
        (tiles_without_diagonal, "the diagonal tile too"),
        (tiles_square_formula, "square-block count"),
        (tiles_not_cut, "not cut at T"),
    ],
    "26.4": [
        ((threshold_log2, _SOFTMAX), "log2"),
        ((threshold_fp32, _SOFTMAX), "float32's threshold"),
        ((threshold_max, _SOFTMAX), "largest finite value itself"),
        ((_THRESHOLD, softmax_raw), "subtract the row maximum"),
        ((_THRESHOLD, softmax_mean_shift), "subtract the row maximum"),
        ((_THRESHOLD, softmax_unnormalised), "not normalised"),
        ((_THRESHOLD, softmax_first_axis), "first axis"),
        ((_THRESHOLD, softmax_float64), "should be a float16 tensor"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
