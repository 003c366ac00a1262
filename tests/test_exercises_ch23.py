"""Typical wrong answers to the exercises of chapter 23 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import math

import pytest
import torch
from exercise_support import cases, reference, rejected


def _ref(eid, name):
    return reference(eid)[name]


def greedy_uncropped(model, prompts, n_new):
    out = prompts.clone()
    with torch.no_grad():
        for _ in range(n_new):
            out = torch.cat([out, model(out)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return out


def greedy_first_position(model, prompts, n_new):
    out = prompts.clone()
    with torch.no_grad():
        for _ in range(n_new):
            z = model(out[:, -model.config.block_size :])[:, 0]
            out = torch.cat([out, z.argmax(-1, keepdim=True)], dim=1)
    return out


def greedy_new_tokens_only(model, prompts, n_new):
    return _ref("23.1", "greedy_by_hand")(model, prompts, n_new)[:, prompts.shape[1] :]


def greedy_short_window(model, prompts, n_new):
    out = prompts.clone()
    with torch.no_grad():
        for _ in range(n_new):
            z = model(out[:, -(model.config.block_size - 1) :])[:, -1]
            out = torch.cat([out, z.argmax(-1, keepdim=True)], dim=1)
    return out


def greedy_float(model, prompts, n_new):
    return _ref("23.1", "greedy_by_hand")(model, prompts, n_new).double()


def _split(*args):
    return _ref("23.2", "gpt_parameter_split")(*args)


def split_head_always_counted(V, T, d, L, tied=True):
    total, share = _split(V, T, d, L, False)
    return total, share


def split_head_never_counted(V, T, d, L, tied=True):
    total, _ = _split(V, T, d, L, True)
    return total, (V + T) * d / total


def split_without_positions(V, T, d, L, tied=True):
    total, share = _split(V, T, d, L, tied)
    return total, share - T * d / total


def split_percent(V, T, d, L, tied=True):
    total, share = _split(V, T, d, L, tied)
    return total, 100 * share


def split_blocks_without_biases(V, T, d, L, tied=True):
    total, _ = _split(V, T, d, L, tied)
    total -= L * 13 * d + 2 * d
    head = 0 if tied else V * d
    return total, ((V + T) * d + head) / total


def _unigram(train, val, V):
    return _ref("23.3", "unigram_cross_entropy")(train, val, V)


def _units(loss):
    return _ref("23.3", "bits_and_perplexity")(loss)


def units_times_ln2(loss):
    return loss * math.log(2), math.exp(loss)


def units_base_two(loss):
    return loss / math.log(2), 2.0**loss


def units_swapped(loss):
    return math.exp(loss), loss / math.log(2)


def units_bits_only(loss):
    return loss / math.log(2)


def unigram_train_entropy(train, val, V):
    freq = torch.bincount(train, minlength=V).double() / len(train)
    nz = freq[freq > 0]
    return -(nz * nz.log()).sum().item()


def unigram_val_frequencies(train, val, V):
    freq = torch.bincount(val, minlength=V).double() / len(val)
    return -freq[val].log().mean().item()


def unigram_log2(train, val, V):
    freq = torch.bincount(train, minlength=V).double() / len(train)
    return -freq[val].log2().mean().item()


def unigram_sum(train, val, V):
    freq = torch.bincount(train, minlength=V).double() / len(train)
    return -freq[val].log().sum().item()


WRONG = {
    "23.1": [
        (greedy_uncropped, "feed the model only the last block_size tokens"),
        (greedy_first_position, "logits of the last position"),
        (greedy_new_tokens_only, "followed by the new tokens"),
        (greedy_short_window, "not block_size - 1"),
        (greedy_float, "int64 tensor"),
    ],
    "23.2": [
        (split_head_always_counted, "count it once"),
        (split_head_never_counted, "is a second V × d matrix: add V·d"),
        (split_without_positions, "position table"),
        (split_percent, "not a percentage"),
        (split_blocks_without_biases, "13d biases"),
    ],
    "23.3": [
        ((units_times_ln2, _unigram), "not nats × ln 2"),
        ((units_base_two, _unigram), "perplexity is e^L"),
        ((units_swapped, _unigram), "in that order"),
        ((units_bits_only, _unigram), "should return a pair"),
        ((_units, unigram_train_entropy), "entropy of the training frequencies"),
        ((_units, unigram_val_frequencies), "count the frequencies on the training text"),
        ((_units, unigram_log2), "natural logarithm"),
        ((_units, unigram_sum), "not the sum"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
