"""mlbook.language.tokenizer vs independent references: Python's UTF-8 codec, the naive trainer and
encoder, and property-based round trips on arbitrary Unicode text (hypothesis)."""

from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlbook.language import corpora as datasets
from mlbook.language import tokenizer as tok

CORPUS_TEXT = datasets.read_text("corpus_en_tr.txt")
SMALL = (
    "the cat sat on the mat; the cats sat on the mats.\n"
    "Evlerimizden geldik, evlerimize gidiyoruz: ağaçlar, çiçekler, şehirler! 🙂🙂 __x__ 42"
)
BPE_SMALL = tok.train_bpe(SMALL * 3, 60)
BPE_CORPUS = tok.train_bpe(CORPUS_TEXT, 300)

FAST = settings(deadline=None, max_examples=60)
texts = st.text(max_size=40)


def test_utf8_byte_counts_of_ascii_turkish_and_emoji():
    assert tok.utf8_encode("a") == [0x61]
    for ch in "çğıöşüÇĞİÖŞÜ":
        assert tok.utf8_length(ord(ch)) == 2 and len(tok.utf8_encode(ch)) == 2
    assert tok.utf8_encode("€") == [0xE2, 0x82, 0xAC]
    assert tok.utf8_encode("🙂") == list("🙂".encode())
    assert len(tok.utf8_encode("🙂")) == 4


def test_utf8_boundaries_match_codec():
    for cp in [0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF]:
        assert tok.utf8_encode(chr(cp)) == list(chr(cp).encode("utf-8")), hex(cp)


@FAST
@given(texts)
def test_utf8_encode_matches_codec(text):
    assert tok.utf8_encode(text) == list(text.encode("utf-8"))


@FAST
@given(texts)
def test_pretokenize_covers_the_text(text):
    assert "".join(tok.pretokenize(text)) == text


def test_pretokenize_chunks_words_with_leading_space():
    assert tok.pretokenize("Evler, 12 ev.") == ["Evler", ",", " 12", " ev", "."]


def test_most_frequent_pair_breaks_ties_towards_smallest():
    assert tok.most_frequent_pair({(5, 1): 3, (2, 9): 3, (7, 7): 1}) == (2, 9)
    counts = tok.pair_counts([[1, 2, 1, 2], [1, 2]], weights=[1, 5])
    assert counts == {(1, 2): 7, (2, 1): 1}


def test_merge_pair_is_left_to_right_and_non_overlapping():
    assert tok.merge_pair([1, 1, 1], (1, 1), 9) == [9, 1]
    assert tok.merge_pair([1, 1, 1, 1], (1, 1), 9) == [9, 9]
    assert tok.merge_pair([3, 1, 2, 1, 2], (1, 2), 7) == [3, 7, 7]


def test_merge_pair_refuses_a_new_id_that_collides_with_an_existing_one():
    # Regression: [97, 98, 256] merged with (97, 98) -> 256 gave [256, 256], which no decoder
    # can tell apart; a new id must be fresh.
    with pytest.raises(ValueError, match="new_id=256 collides"):
        tok.merge_pair([97, 98, 256], (97, 98), 256)
    with pytest.raises(ValueError, match="new_id=98 collides"):
        tok.merge_pair([97, 98], (97, 98), 98)
    with pytest.raises(ValueError, match="new_id=300 collides"):  # in the pair, not the ids
        tok.merge_pair([5, 6], (7, 300), 300)
    with pytest.raises(TypeError, match="new_id"):
        tok.merge_pair([1, 2], (1, 2), 256.0)
    with pytest.raises(ValueError, match="new_id"):
        tok.merge_pair([1, 2], (1, 2), -1)
    assert tok.merge_pair([97, 98, 255], (97, 98), 256) == [256, 255]


def test_first_merge_is_the_argmax_of_independent_pair_counts():
    text = CORPUS_TEXT
    counts = np.zeros(256 * 256, dtype=np.int64)
    for chunk in tok.pretokenize(text):
        b = np.frombuffer(chunk.encode("utf-8"), dtype=np.uint8).astype(np.int64)
        np.add.at(counts, b[:-1] * 256 + b[1:], 1)
    best = int(np.argmax(counts))  # first maximum: the smallest pair on ties
    assert BPE_CORPUS.merges[0] == (best // 256, best % 256)
    assert BPE_CORPUS.counts[0] == counts[best]


def test_fast_training_equals_naive_training_on_the_corpus():
    text = CORPUS_TEXT[:2500]
    fast = tok.train_bpe(text, 150)
    assert fast == tok.train_bpe_naive(text, 150)
    assert len(fast.merges) > 50
    assert min(fast.counts) >= 2


@settings(deadline=None, max_examples=30)
@given(st.text(alphabet="abcç ğ.\n", max_size=60), st.integers(0, 25))
def test_fast_training_equals_naive_training_property(text, m):
    assert tok.train_bpe(text, m, min_count=1) == tok.train_bpe_naive(text, m, min_count=1)


def test_merge_counts_never_increase():
    c = BPE_CORPUS.counts
    assert all(a >= b for a, b in pairwise(c))


@FAST
@given(texts)
def test_round_trip_arbitrary_unicode(text):
    for bpe in (BPE_SMALL, BPE_CORPUS):
        ids = tok.encode(bpe, text)
        assert tok.decode(bpe, ids) == text
        assert all(0 <= i < bpe.vocab_size for i in ids)


@FAST
@given(texts)
def test_fast_encoder_equals_naive_encoder(text):
    assert tok.encode(BPE_CORPUS, text) == tok.encode_naive(BPE_CORPUS, text)


def test_encode_round_trip_and_compression_on_corpus():
    text = CORPUS_TEXT
    ids = tok.encode(BPE_CORPUS, text)
    assert tok.decode(BPE_CORPUS, ids) == text
    assert ids == tok.encode_naive(BPE_CORPUS, text)
    assert tok.bytes_per_token(BPE_CORPUS, text) > 2.0
    assert tok.bytes_per_token(tok.truncate(BPE_CORPUS, 0), text) == 1.0


def test_token_bytes_concatenate_and_vocab_size():
    vocab = tok.token_bytes(BPE_CORPUS)
    assert len(vocab) == BPE_CORPUS.vocab_size == 256 + len(BPE_CORPUS.merges)
    for r, (a, b) in enumerate(BPE_CORPUS.merges):
        assert vocab[256 + r] == vocab[a] + vocab[b]


def test_decode_partial_character_needs_errors_replace():
    bpe = tok.truncate(BPE_CORPUS, 0)
    lead = list("ş".encode())[:1]
    with pytest.raises(UnicodeDecodeError, match="utf-8"):
        tok.decode(bpe, lead)
    assert tok.decode(bpe, lead, errors="replace") == "\ufffd"
    assert tok.decode(bpe, np.array(list("ş".encode()))) == "ş"


def test_bad_input_raises():
    with pytest.raises(ValueError, match="surrogate"):
        tok.utf8_length(0xD800)
    with pytest.raises(ValueError, match="code_point"):
        tok.utf8_length(0x110000)
    with pytest.raises(TypeError, match="code_point"):
        tok.utf8_length(1.5)
    with pytest.raises(ValueError, match="surrogate"):
        tok.utf8_encode("\ud800")
    with pytest.raises(ValueError, match=r"merge 0 = \(1, 256\)"):
        tok.BPE(((1, 256),))
    with pytest.raises(ValueError, match="2 counts for 1 merges"):
        tok.BPE(((1, 2),), counts=(3, 4))
    with pytest.raises(ValueError, match="num_merges"):
        tok.train_bpe("abc", -1)
    with pytest.raises(ValueError, match="min_count"):
        tok.train_bpe_naive("abc", 3, min_count=0)
    with pytest.raises(ValueError, match="num_merges"):
        tok.truncate(BPE_SMALL, len(BPE_SMALL.merges) + 1)
    with pytest.raises(ValueError, match="token ids"):
        tok.decode(BPE_SMALL, [BPE_SMALL.vocab_size])
    with pytest.raises(ValueError, match="token ids"):  # would wrap around
        tok.decode(BPE_SMALL, [-1])
    with pytest.raises(ValueError, match="token ids"):
        tok.decode(BPE_SMALL, [1.0])
    with pytest.raises(ValueError, match="empty"):
        tok.bytes_per_token(BPE_SMALL, "")
