"""Byte-level byte-pair encoding (BPE): UTF-8 bytes, training, encoding, decoding (chapter 17).

UTF-8 bytes (eq. 17.1) are merged pair by pair (eq. 17.2); merge r creates id 256 + r; pairs
never cross chunks (words, digits, punctuation, spaces); ties go to the smallest pair.

Shape legend
    n  UTF-8 bytes;  T  tokens;  M  merges, V = 256 + M;  ids  list[int] in [0, V)
"""

from __future__ import annotations

import numbers
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from ..validation import fresh_id, integer, positive_int

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


# --- eq. 17.1: UTF-8 text -> bytes -----------------------------------------------------------


def utf8_length(code_point: int) -> int:
    """Number of UTF-8 bytes of one Unicode code point (1 to 4); part of eq. 17.1."""
    integer(code_point, "code_point", 0, 0x10FFFF)
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
    """UTF-8 bytes of a text from the bit layout (``str.encode`` from scratch). Implements eq. 17.1.

    text: any string without lone surrogates.
    Returns (n,) list of ints b_i in [0, 255].
    """
    out: list[int] = []
    for ch in text:
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
    return _CHUNK_RE.findall(text)


# --- eq. 17.2: count pairs, merge the most frequent one --------------------------------------


def pair_counts(seqs: Iterable[Sequence[int]], weights: Iterable[int] | None = None) -> Counter:
    """Count adjacent pairs ``(u, v)`` over sequences, each weighted (default 1)."""
    seqs = list(seqs)
    weights = [1] * len(seqs) if weights is None else list(weights)
    counts: Counter = Counter()
    for seq, w in zip(seqs, weights, strict=True):
        for pair in pairwise(seq):
            counts[pair] += w
    return counts


def most_frequent_pair(counts: dict) -> tuple[int, int]:
    """The pair with the largest count; ties go to the smallest pair. Implements eq. 17.2."""
    return max(counts, key=lambda p: (counts[p], -p[0], -p[1]))


def merge_pair(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids``, scanning left to right, by ``new_id``.

    Occurrences do not overlap: ``a a a`` with the pair ``(a, a)`` becomes ``aa a``.
    ``new_id`` must occur neither in ``ids`` nor in ``pair`` (decoding would be ambiguous).
    """
    fresh_id(new_id, "new_id", ids, pair)
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

    merges: (M,) pairs (u, v) of token ids, in training order;  counts: (M,) how often each pair
    occurred when it was merged (empty if unknown).
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


def train_bpe_naive(text: str, num_merges: int, min_count: int = 2) -> BPE:
    """Reference for :func:`train_bpe`: recount every pair after every merge (eq. 17.2, O(M n))."""
    integer(num_merges, "num_merges", low=0), positive_int(min_count, "min_count")
    seqs = _chunk_bytes(text)
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
    """Train a byte-level BPE with incrementally updated pair counts. Implements eq. 17.2."""
    integer(num_merges, "num_merges", low=0), positive_int(min_count, "min_count")
    freq = Counter(pretokenize(text))
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
    integer(num_merges, "num_merges", 0, len(bpe.merges))
    return BPE(bpe.merges[:num_merges], bpe.counts[:num_merges])


def token_bytes(bpe: BPE) -> list[bytes]:
    """(V,) the byte string of every token: bytes([i]) for i < 256, then concatenated pairs."""
    vocab = [bytes([i]) for i in range(N_BYTES)]
    for a, b in bpe.merges:
        vocab.append(vocab[a] + vocab[b])
    return vocab


# --- encoding and decoding --------------------------------------------------------------------


def encode_naive(bpe: BPE, text: str) -> list[int]:
    """Encode by applying every merge, in training order, to each chunk (reference; O(M n))."""
    ids: list[int] = []
    for seq in _chunk_bytes(text):
        for r, pair in enumerate(bpe.merges):
            if len(seq) < 2:
                break
            seq = merge_pair(seq, pair, N_BYTES + r)
        ids.extend(seq)
    return ids


def encode(bpe: BPE, text: str) -> list[int]:
    """Encode a text: per chunk, repeatedly merge the present pair of lowest rank (cached).

    Returns (T,) list of token ids in [0, V).
    """
    ranks = {pair: r for r, pair in enumerate(bpe.merges)}
    cache: dict[str, list[int]] = {}
    ids: list[int] = []
    for chunk in pretokenize(text):
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
    """Token ids back to text: join the tokens' bytes, then decode as UTF-8."""
    vocab = token_bytes(bpe)
    bad = [
        i
        for i in ids
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= i < len(vocab)
    ]
    if bad:  # a negative id would silently wrap around
        raise ValueError(f"token ids must be ints in [0, {len(vocab)}), got {bad[:5]!r}")
    return b"".join(vocab[int(i)] for i in ids).decode("utf-8", errors=errors)


def bytes_per_token(bpe: BPE, text: str) -> float:
    """Compression ratio n / T: UTF-8 bytes of ``text`` per token (1 with no merges)."""
    n = len(text.encode("utf-8"))
    if n == 0:
        raise ValueError("text is empty: bytes per token is undefined")
    return n / len(encode(bpe, text))
