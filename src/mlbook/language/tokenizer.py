"""Byte-level byte-pair encoding (BPE): UTF-8 bytes, training, encoding, decoding (chapter 17).

Text becomes a sequence of UTF-8 bytes (eq. 17.1), so the base vocabulary is the 256 byte values
and *every* string can be encoded: there is no unknown token. Training repeatedly merges the most
frequent adjacent pair of tokens into a new token (eq. 17.2); merge number ``r`` creates token id
``256 + r``. Before counting, the text is cut into chunks (words with their leading space, runs
of digits, runs of punctuation, runs of white space) and pairs are counted only inside a chunk,
so that no token ever spans a word boundary.

Every optimised function has its naive reference beside it:

- :func:`train_bpe` (unique chunks with frequencies, pair counts updated incrementally after each
  merge) and :func:`train_bpe_naive` (recount every pair of the whole text after every merge);
- :func:`encode` (per chunk, merge the pair of lowest rank first, with a cache of chunks) and
  :func:`encode_naive` (apply every merge, in training order, to the whole sequence).

Shape legend
    n      number of UTF-8 bytes of a text
    T      number of tokens of an encoded text
    M      number of merges; the vocabulary has V = 256 + M tokens
    ids    list[int] of token ids, each in [0, V)

Ties in the pair counts are broken towards the smallest pair ``(u, v)``, so training is
deterministic whatever the order of a dictionary or the hash seed.
"""

from __future__ import annotations

import numbers
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

__all__ = [
    "utf8_encode",
    "utf8_length",
    "pretokenize",
    "pair_counts",
    "most_frequent_pair",
    "merge_pair",
    "BPE",
    "train_bpe",
    "train_bpe_naive",
    "truncate",
    "token_bytes",
    "encode",
    "encode_naive",
    "decode",
    "bytes_per_token",
]

N_BYTES = 256  # the base vocabulary: one token per byte value

# Chunks: a word (letters, with one optional leading space), a number, a run of other symbols
# (punctuation, emoji, the underscore), or white space. Together the alternatives match every
# character: \w is letters [^\W\d_], digits \d and "_"; everything else is \s or [^\s\w].
_CHUNK_RE = re.compile(r" ?[^\W\d_]+| ?\d+| ?(?:_|[^\s\w])+|\s+(?!\S)|\s+")


def _check_text(text) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return text


# --- eq. 17.1: UTF-8 text -> bytes -----------------------------------------------------------


def utf8_length(code_point: int) -> int:
    """Number of UTF-8 bytes of one Unicode code point (1 to 4); part of eq. 17.1."""
    if isinstance(code_point, bool) or not isinstance(code_point, int):
        raise TypeError(f"code_point must be an int, got {type(code_point).__name__}")
    if not 0 <= code_point <= 0x10FFFF:
        raise ValueError(f"code point {code_point:#x} is outside [0, 0x10FFFF]")
    if 0xD800 <= code_point <= 0xDFFF:
        raise ValueError(f"code point {code_point:#x} is a surrogate; UTF-8 cannot encode it")
    if code_point < 0x80:
        return 1
    if code_point < 0x800:
        return 2
    if code_point < 0x10000:
        return 3
    return 4


def utf8_encode(text: str) -> list[int]:
    """UTF-8 bytes of a text, from the bit layout (a from-scratch version of ``str.encode``).

    A code point with k payload bits is written as: 0xxxxxxx (up to 7 bits), 110xxxxx 10xxxxxx
    (11 bits), 1110xxxx 10xxxxxx 10xxxxxx (16 bits) or 11110xxx and three 10xxxxxx (21 bits).
    Implements eq. 17.1.

    Args:
        text: any string without lone surrogates.

    Returns:
        (n,) list of ints b_i in [0, 255].
    """
    out: list[int] = []
    for ch in _check_text(text):
        cp = ord(ch)
        k = utf8_length(cp)
        if k == 1:
            out.append(cp)
            continue
        lead = (0xC0, 0xE0, 0xF0)[k - 2]  # 110..., 1110..., 11110...
        out.append(lead | (cp >> (6 * (k - 1))))  # the highest payload bits
        for j in range(k - 2, -1, -1):  # continuation bytes 10xxxxxx
            out.append(0x80 | ((cp >> (6 * j)) & 0x3F))
    return out


def pretokenize(text: str) -> list[str]:
    """Cut a text into chunks; their concatenation is the text. Merges never cross chunks."""
    return _CHUNK_RE.findall(_check_text(text))


# --- eq. 17.2: count pairs, merge the most frequent one --------------------------------------


def pair_counts(seqs: Iterable[Sequence[int]], weights: Iterable[int] | None = None) -> Counter:
    """Count adjacent pairs ``(u, v)`` over sequences (each sequence weighted, default 1).

    Args:
        seqs: token sequences (one per chunk).
        weights: how often each sequence occurs (same length as ``seqs``), or ``None``.

    Returns:
        Counter mapping (u, v) to its number of adjacent occurrences.
    """
    seqs = list(seqs)
    weights = [1] * len(seqs) if weights is None else list(weights)
    if len(weights) != len(seqs):
        raise ValueError(f"{len(weights)} weights for {len(seqs)} sequences")
    counts: Counter = Counter()
    for seq, w in zip(seqs, weights, strict=True):
        for pair in pairwise(seq):
            counts[pair] += w
    return counts


def most_frequent_pair(counts: dict) -> tuple[int, int]:
    """The pair with the largest count; ties go to the smallest pair. Implements eq. 17.2."""
    if not counts:
        raise ValueError("no pairs to choose from (every chunk is a single token)")
    return max(counts, key=lambda p: (counts[p], -p[0], -p[1]))


def merge_pair(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids``, scanning left to right, by ``new_id``.

    Occurrences do not overlap: ``a a a`` with the pair ``(a, a)`` becomes ``aa a``.
    """
    if len(pair) != 2:
        raise ValueError(f"pair must have two ids, got {pair!r}")
    a, b = pair
    out: list[int] = []
    i, n = 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == a and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


@dataclass(frozen=True)
class BPE:
    """A trained byte-level BPE: the list of merges; merge ``r`` creates token ``256 + r``.

    Attributes:
        merges: (M,) pairs (u, v) of token ids, in training order.
        counts: (M,) how often each pair occurred when it was merged (empty if unknown).
    """

    merges: tuple[tuple[int, int], ...]
    counts: tuple[int, ...] = ()

    def __post_init__(self):
        merges = tuple(tuple(int(x) for x in m) for m in self.merges)
        for r, m in enumerate(merges):
            if len(m) != 2 or not all(0 <= x < N_BYTES + r for x in m):
                raise ValueError(f"merge {r} = {m!r} must be a pair of ids in [0, {N_BYTES + r})")
        if self.counts and len(self.counts) != len(merges):
            raise ValueError(f"{len(self.counts)} counts for {len(merges)} merges")
        object.__setattr__(self, "merges", merges)
        object.__setattr__(self, "counts", tuple(int(c) for c in self.counts))

    @property
    def vocab_size(self) -> int:
        """V = 256 + M."""
        return N_BYTES + len(self.merges)


def _chunk_bytes(text: str) -> list[list[int]]:
    return [list(c.encode("utf-8")) for c in pretokenize(text)]


def _check_merges(num_merges: int, min_count: int) -> None:
    if isinstance(num_merges, bool) or not isinstance(num_merges, int) or num_merges < 0:
        raise ValueError(f"num_merges must be a non-negative int, got {num_merges!r}")
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise ValueError(f"min_count must be a positive int, got {min_count!r}")


def train_bpe_naive(text: str, num_merges: int, min_count: int = 2) -> BPE:
    """Train a byte-level BPE the slow, obvious way (the reference for :func:`train_bpe`).

    Each step recounts all adjacent pairs of every chunk of the text, merges the most frequent
    pair everywhere, and stops early when no pair occurs ``min_count`` times. Implements eq. 17.2.
    Cost: O(M n) pair visits.
    """
    _check_merges(num_merges, min_count)
    seqs = _chunk_bytes(_check_text(text))
    merges, counts = [], []
    for r in range(num_merges):
        c = pair_counts(seqs)
        if not c:
            break
        pair = most_frequent_pair(c)
        if c[pair] < min_count:
            break
        seqs = [merge_pair(s, pair, N_BYTES + r) for s in seqs]
        merges.append(pair)
        counts.append(c[pair])
    return BPE(tuple(merges), tuple(counts))


def train_bpe(text: str, num_merges: int, min_count: int = 2) -> BPE:
    """Train a byte-level BPE with incremental pair counts; same merges as the naive version.

    Chunks are stored once with their frequency. An index maps each pair to the chunks that
    contain it, so a merge touches only those chunks: their old pairs are subtracted from the
    counts and their new pairs added. Implements eq. 17.2.

    Args:
        text: the training corpus.
        num_merges: the largest number of merges M (training stops earlier when no pair occurs
            ``min_count`` times).
        min_count: the smallest count worth a merge.

    Returns:
        the trained :class:`BPE`.
    """
    _check_merges(num_merges, min_count)
    freq = Counter(pretokenize(_check_text(text)))
    words = [list(chunk.encode("utf-8")) for chunk in freq]  # unique chunks
    weights = list(freq.values())
    counts = pair_counts(words, weights)
    where: dict[tuple[int, int], set[int]] = defaultdict(set)  # pair -> chunks holding it
    for i, w in enumerate(words):
        for pair in pairwise(w):
            where[pair].add(i)
    merges, merged_counts = [], []
    for r in range(num_merges):
        if not counts:
            break
        pair = most_frequent_pair(counts)
        if counts[pair] < min_count:
            break
        merges.append(pair)
        merged_counts.append(counts[pair])
        new_id = N_BYTES + r
        for i in sorted(where.pop(pair)):
            old = words[i]
            new = merge_pair(old, pair, new_id)
            if len(new) == len(old):  # stale index entry: the pair left this chunk earlier
                continue
            f = weights[i]
            for p in pairwise(old):
                counts[p] -= f
            for p in pairwise(new):
                counts[p] += f
                where[p].add(i)
            for p in pairwise(old):
                if counts.get(p, 0) == 0:
                    counts.pop(p, None)
            words[i] = new
    return BPE(tuple(merges), tuple(merged_counts))


def truncate(bpe: BPE, num_merges: int) -> BPE:
    """The tokenizer after only the first ``num_merges`` merges of ``bpe``."""
    if not isinstance(bpe, BPE):
        raise TypeError(f"bpe must be a BPE, got {type(bpe).__name__}")
    if (
        isinstance(num_merges, bool)
        or not isinstance(num_merges, int)
        or not (0 <= num_merges <= len(bpe.merges))
    ):
        raise ValueError(f"num_merges must be an int in [0, {len(bpe.merges)}], got {num_merges!r}")
    return BPE(bpe.merges[:num_merges], bpe.counts[:num_merges])


def token_bytes(bpe: BPE) -> list[bytes]:
    """(V,) the byte string of every token: bytes([i]) for i < 256, then concatenated pairs."""
    if not isinstance(bpe, BPE):
        raise TypeError(f"bpe must be a BPE, got {type(bpe).__name__}")
    vocab = [bytes([i]) for i in range(N_BYTES)]
    for a, b in bpe.merges:
        vocab.append(vocab[a] + vocab[b])
    return vocab


# --- encoding and decoding --------------------------------------------------------------------


def encode_naive(bpe: BPE, text: str) -> list[int]:
    """Encode by applying every merge, in training order, to each chunk (reference; O(M n))."""
    if not isinstance(bpe, BPE):
        raise TypeError(f"bpe must be a BPE, got {type(bpe).__name__}")
    ids: list[int] = []
    for seq in _chunk_bytes(_check_text(text)):
        for r, pair in enumerate(bpe.merges):
            if len(seq) < 2:
                break
            seq = merge_pair(seq, pair, N_BYTES + r)
        ids.extend(seq)
    return ids


def encode(bpe: BPE, text: str) -> list[int]:
    """Encode a text into token ids: per chunk, repeatedly merge the present pair of lowest rank.

    This equals applying the merges in training order (:func:`encode_naive`): merging the pair
    of rank r only creates pairs that contain token 256 + r, and those have ranks above r, so no
    pair of lower rank can appear later. Repeated chunks are encoded once (a cache per call).

    Returns:
        (T,) list of token ids in [0, V).
    """
    if not isinstance(bpe, BPE):
        raise TypeError(f"bpe must be a BPE, got {type(bpe).__name__}")
    ranks = {pair: r for r, pair in enumerate(bpe.merges)}
    cache: dict[str, list[int]] = {}
    ids: list[int] = []
    for chunk in pretokenize(_check_text(text)):
        if chunk not in cache:
            seq = list(chunk.encode("utf-8"))
            while len(seq) >= 2:
                pair = min(pairwise(seq), key=lambda p: ranks.get(p, len(ranks)))
                if pair not in ranks:
                    break
                seq = merge_pair(seq, pair, N_BYTES + ranks[pair])
            cache[chunk] = seq
        ids.extend(cache[chunk])
    return ids


def decode(bpe: BPE, ids: Sequence[int], errors: str = "strict") -> str:
    """Token ids back to text: concatenate the tokens' bytes, then decode them as UTF-8.

    A single token may hold part of a character (a lone lead byte), so bytes are joined
    *before* decoding. ``errors`` is passed to ``bytes.decode`` ("strict" raises on invalid
    UTF-8, "replace" shows U+FFFD).
    """
    if not isinstance(bpe, BPE):
        raise TypeError(f"bpe must be a BPE, got {type(bpe).__name__}")
    vocab = token_bytes(bpe)
    bad = [
        i
        for i in ids
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= i < len(vocab)
    ]
    if bad:
        raise ValueError(f"token ids must be ints in [0, {len(vocab)}), got {bad[:5]!r}")
    return b"".join(vocab[int(i)] for i in ids).decode("utf-8", errors=errors)


def bytes_per_token(bpe: BPE, text: str) -> float:
    """Compression ratio n / T: UTF-8 bytes of ``text`` per token (1 with no merges)."""
    n = len(_check_text(text).encode("utf-8"))
    if n == 0:
        raise ValueError("text is empty: bytes per token is undefined")
    return n / len(encode(bpe, text))
