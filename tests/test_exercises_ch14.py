"""Typical wrong answers to the exercises of chapter 14 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import pytest
import torch
from exercise_support import cases, reference, rejected

from mlbook.nn import mlp

XOR_X = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
XOR_Y = torch.tensor([0, 1, 1, 0])


def _ref(eid, name):
    return reference(eid)[name]


# --- 14.1


def input_grad_no_mask(params, X, y):
    logits, cache = mlp.forward(params, X)
    H_bar = mlp.output_grad(logits, y) @ params["W2"].T
    return H_bar @ params["W1"].T


def input_grad_summed(params, X, y):
    return _ref("14.1", "input_grad")(params, X, y) * X.shape[0]


def input_grad_flipped(params, X, y):
    return -_ref("14.1", "input_grad")(params, X, y)


def input_grad_not_transposed(params, X, y):
    logits, cache = mlp.forward(params, X)
    H_bar = mlp.output_grad(logits, y) @ params["W2"].T
    return (H_bar * (cache["Z1"] > 0)) @ params["W1"]


# --- 14.2


def ref_train_xor(hidden, seed):
    return _ref("14.2", "train_xor")(hidden, seed)


def ref_solves_xor(params):
    return _ref("14.2", "solves_xor")(params)


def train_xor_untrained(hidden, seed):
    return mlp.init_mlp(2, hidden, 2, generator=torch.Generator().manual_seed(seed))


def train_xor_small_lr(hidden, seed):
    start = train_xor_untrained(hidden, seed)
    return mlp.train(start, XOR_X, XOR_Y, lr=0.1, epochs=300)[0]


def train_xor_299(hidden, seed):
    start = train_xor_untrained(hidden, seed)
    return mlp.train(start, XOR_X, XOR_Y, lr=1.0, epochs=299)[0]


def solves_xor_accuracy(params):
    return mlp.accuracy(params, XOR_X, XOR_Y)


def solves_xor_any(params):
    return bool((mlp.predict(params, XOR_X) == XOR_Y).any())


def solves_xor_majority(params):
    return mlp.accuracy(params, XOR_X, XOR_Y) > 0.5


def solves_xor_string(params):
    return "yes" if mlp.accuracy(params, XOR_X, XOR_Y) == 1.0 else "no"


# --- 14.3


def ref_predicted(widths, scheme):
    return _ref("14.3", "predicted_gain")(widths, scheme)


def ref_measured(widths, scheme, x, generator):
    return _ref("14.3", "measured_gain")(widths, scheme, x, generator)


def predicted_fan_out(widths, scheme):
    gain = 1.0
    for n_in, n_out in zip(widths[:-1], widths[1:], strict=True):
        gain *= n_out * mlp.init_std(n_in, n_out, scheme) ** 2
    return gain


def predicted_std(widths, scheme):
    gain = 1.0
    for n_in, n_out in zip(widths[:-1], widths[1:], strict=True):
        gain *= (n_in * mlp.init_std(n_in, n_out, scheme) ** 2) ** 0.5
    return gain


def predicted_first_layer(widths, scheme):
    return widths[0] * mlp.init_std(widths[0], widths[1], scheme) ** 2


def measured_with_relu(widths, scheme, x, generator):
    layers = mlp.init_layers(widths, scheme, generator=generator)
    out, _ = mlp.deep_forward(x, layers, activation="relu")
    return (out.pow(2).mean() / x.pow(2).mean()).item()


def measured_not_normalised(widths, scheme, x, generator):
    layers = mlp.init_layers(widths, scheme, generator=generator)
    out, _ = mlp.deep_forward(x, layers, activation="linear")
    return out.pow(2).mean().item()


def measured_std_ratio(widths, scheme, x, generator):
    layers = mlp.init_layers(widths, scheme, generator=generator)
    out, _ = mlp.deep_forward(x, layers, activation="linear")
    return (out.pow(2).mean().sqrt() / x.pow(2).mean().sqrt()).item()  # RMS ratio


# --- 14.4


def pieces_all_units(params, lo, hi):
    return params["W1"].shape[1] + 1


def pieces_kinks_only(params, lo, hi):
    return _ref("14.4", "predicted_pieces")(params, lo, hi) - 1


def pieces_sign_flipped(params, lo, hi):
    kinks = params["b1"] / params["W1"][0]
    return 1 + int(((kinks > lo) & (kinks < hi)).sum())


def pieces_counts_shared_twice(params, lo, hi):
    w, b, c = params["W1"][0], params["b1"], params["W2"][:, 0]
    keep = (w != 0) & (c != 0)
    kinks = -b[keep] / w[keep]
    return 1 + int(((kinks > lo) & (kinks < hi)).sum())


def pieces_ignores_output_weight(params, lo, hi):
    w, b = params["W1"][0], params["b1"]
    kinks = (-b[w != 0] / w[w != 0]).unique()
    return 1 + int(((kinks > lo) & (kinks < hi)).sum())


WRONG = {
    "14.1": [
        (input_grad_no_mask, "ReLU mask is missing"),
        (input_grad_summed, "summed loss"),
        (input_grad_flipped, "sign is flipped"),
        (input_grad_not_transposed, "raised RuntimeError"),
    ],
    "14.2": [
        ((train_xor_untrained, ref_solves_xor), "starting weights"),
        ((train_xor_small_lr, ref_solves_xor), "learning rate is 1.0"),
        ((train_xor_299, ref_solves_xor), "one step too few"),
        ((ref_train_xor, solves_xor_accuracy), "that is the accuracy"),
        ((ref_train_xor, solves_xor_any), "one right corner is not enough"),
        ((ref_train_xor, solves_xor_majority), "a majority of corners"),
        ((ref_train_xor, solves_xor_string), "should return True or False"),
    ],
    "14.3": [
        ((predicted_fan_out, ref_measured), "not n_out Var[w]"),
        ((predicted_std, ref_measured), "factor of the standard deviation"),
        ((predicted_first_layer, ref_measured), "first layer only"),
        ((ref_predicted, measured_with_relu), "no ReLU"),
        ((ref_predicted, measured_not_normalised), "divide by the mean of x²"),
        ((ref_predicted, measured_std_ratio), "ratio of standard deviations"),
    ],
    "14.4": [
        (pieces_all_units, "count only the kinks inside"),
        (pieces_kinks_only, "the pieces are one more"),
        (pieces_sign_flipped, "-b/w, not b/w"),
        (pieces_counts_shared_twice, "sharing the kink"),
        (pieces_ignores_output_weight, "output weight 0"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
