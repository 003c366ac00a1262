"""Typical wrong answers to the exercises of chapter 17 are rejected with feedback that names
the mistake; the generic tests (reference passes, stub not attempted) are in test_exercises.py."""

import unicodedata

import pytest
import torch
from exercise_support import cases, reference, rejected

from mlbook.language import tokenizer as tok


def _ref(eid, name):
    return reference(eid)[name]


# 17.1 ---------------------------------------------------------------------------------------


def stream(vocab, ids):
    return _ref("17.1", "stream_decode")(vocab, ids)


def invalid(vocab):
    return _ref("17.1", "invalid_token_ids")(vocab)


def invalid_single_bytes_only(vocab):
    return list(range(128, 256))


def invalid_non_ascii(vocab):
    return [i for i, b in enumerate(vocab) if any(x >= 128 for x in b)]


def invalid_by_replacement_char(vocab):
    return [i for i, b in enumerate(vocab) if "\ufffd" in b.decode("utf-8", errors="replace")]


def invalid_count(vocab):
    return len(invalid(vocab))


def stream_replace(vocab, ids):
    return [vocab[i].decode("utf-8", errors="replace") for i in ids]


def stream_ignore(vocab, ids):
    return [vocab[i].decode("utf-8", errors="ignore") for i in ids]


def stream_hold_whole_buffer(vocab, ids):
    out, pending = [], b""
    for i in ids:
        pending += vocab[i]
        try:
            out.append(pending.decode("utf-8"))
            pending = b""
        except UnicodeDecodeError:
            out.append("")
    return out


def stream_joined(vocab, ids):
    return "".join(stream(vocab, ids))


WRONG_17_1 = [
    ((invalid_single_bytes_only, stream), "merged tokens can be invalid too"),
    ((invalid_non_ascii, stream), "is valid UTF-8"),
    ((invalid_by_replacement_char, stream), "U+FFFD is a valid character"),
    ((invalid_count, stream), "should return a list"),
    ((invalid, stream_replace), "hold them back until the character is complete"),
    ((invalid, stream_ignore), "disappear"),
    ((invalid, stream_hold_whole_buffer), "hold back only the incomplete one"),
    ((invalid, stream_joined), "should return a list"),
]


# 17.2 ---------------------------------------------------------------------------------------


def bpt_untruncated(bpe_a, bpe_b, texts):
    return torch.tensor(
        [[tok.bytes_per_token(b, t) for t in texts] for b in (bpe_a, bpe_b)], dtype=torch.float64
    )


def bpt_characters(bpe_a, bpe_b, texts):
    m = min(len(bpe_a.merges), len(bpe_b.merges))
    return torch.tensor(
        [[len(t) / len(tok.encode(tok.truncate(b, m), t)) for t in texts] for b in (bpe_a, bpe_b)],
        dtype=torch.float64,
    )


def bpt_tokens_per_byte(bpe_a, bpe_b, texts):
    return 1 / _ref("17.2", "equal_size_bytes_per_token")(bpe_a, bpe_b, texts)


def bpt_transposed(bpe_a, bpe_b, texts):
    return _ref("17.2", "equal_size_bytes_per_token")(bpe_a, bpe_b, texts).T


# 17.3 ---------------------------------------------------------------------------------------


def _normal(word, lower=True, strip=True):
    if lower:
        word = word.lower()
    if strip:
        word = "".join(
            c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn"
        )
    return word


def _greedy(word, vocab, prefix="##", shortest=False, partial_unk=False):
    out, start = [], 0
    while start < len(word):
        ends = range(start + 1, len(word) + 1) if shortest else range(len(word), start, -1)
        for end in ends:
            piece = word[start:end] if start == 0 else prefix + word[start:end]
            if piece in vocab:
                break
        else:
            return out + ["[UNK]"] if partial_unk else ["[UNK]"]
        out.append(piece)
        start = end
    return out


def wp_shortest(word, vocab):
    return _greedy(_normal(word), vocab, shortest=True)


def wp_no_prefix(word, vocab):
    return _greedy(_normal(word), vocab, prefix="")


def wp_no_lowercase(word, vocab):
    return _greedy(_normal(word, lower=False), vocab)


def wp_keeps_accents(word, vocab):
    return _greedy(_normal(word, strip=False), vocab)


def wp_partial_unk(word, vocab):
    return _greedy(_normal(word), vocab, partial_unk=True)


def wp_string(word, vocab):
    return " ".join(_greedy(_normal(word), vocab))


# 17.4 ---------------------------------------------------------------------------------------


def absent(inputs, targets, V):
    return _ref("17.4", "absent_tokens")(inputs, targets, V)


def absent_grad(h, E, j):
    return _ref("17.4", "absent_token_grad")(h, E, j)


def absent_inputs_only(inputs, targets, V):
    return torch.bincount(inputs, minlength=V) == 0


def absent_targets_only(inputs, targets, V):
    return torch.bincount(targets, minlength=V) == 0


def absent_either(inputs, targets, V):
    return absent_inputs_only(inputs, targets, V) | absent_targets_only(inputs, targets, V)


def absent_ids(inputs, targets, V):
    return torch.nonzero(absent(inputs, targets, V)).squeeze(1)


def grad_flipped(h, E, j):
    return -absent_grad(h, E, j)


def grad_summed(h, E, j):
    return h.shape[0] * absent_grad(h, E, j)


def grad_softmax_over_positions(h, E, j):
    return torch.softmax(h @ E.T, dim=0)[:, j] @ h / h.shape[0]


def grad_logits(h, E, j):
    return (h @ E.T)[:, j] @ h / h.shape[0]


def grad_as_target(h, E, j):
    return (torch.softmax(h @ E.T, dim=-1)[:, j] - 1) @ h / h.shape[0]


WRONG = {
    "17.1": WRONG_17_1,
    "17.2": [
        (bpt_untruncated, "compare at equal size"),
        (bpt_characters, "not characters"),
        (bpt_tokens_per_byte, "that is tokens per byte"),
        (bpt_transposed, "looks transposed"),
    ],
    "17.3": [
        (wp_shortest, "not the shortest"),
        (wp_no_prefix, "with the prefix '##'"),
        (wp_no_lowercase, "lowercase the word first"),
        (wp_keeps_accents, "strip the accents"),
        (wp_partial_unk, "the whole word is [UNK]"),
        (wp_string, "should return a list of pieces"),
    ],
    "17.4": [
        ((absent_inputs_only, absent_grad), "a target but never an input"),
        ((absent_targets_only, absent_grad), "an input but never a target"),
        ((absent_either, absent_grad), "missing from both"),
        ((absent_ids, absent_grad), "should have shape (40,)"),
        ((absent, grad_flipped), "the sign is flipped"),
        ((absent, grad_summed), "missing the factor 1/T"),
        ((absent, grad_softmax_over_positions), "runs over the vocabulary"),
        ((absent, grad_logits), "not the logits"),
        ((absent, grad_as_target), "j is never a target"),
    ],
}


@pytest.mark.parametrize(("eid", "answer", "feedback"), cases(WRONG))
def test_typical_wrong_answer_is_named(eid, answer, feedback):
    rejected(eid, answer, feedback)
