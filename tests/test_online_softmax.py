"""Unit tests of mlbook.attention.online_softmax against torch softmax, logsumexp and SDPA."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from mlbook.attention import online_softmax as osm

TOL = {torch.float64: 1e-12, torch.float32: 2e-6}
DTYPES = [torch.float64, torch.float32]
NEG_INF = float("-inf")


def randn(*shape, dtype=torch.float64, seed=0, scale=1.0):
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_stats_match_max_and_logsumexp(dtype):
    s = randn(3, 4, 29, dtype=dtype, scale=5.0)
    m, l = osm.softmax_stats(s)
    torch.testing.assert_close(m, s.amax(-1), atol=0, rtol=0)
    torch.testing.assert_close(m + l.log(), torch.logsumexp(s, -1), atol=TOL[dtype], rtol=0)
    assert bool(((l >= 1) & (l <= 29)).all())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, block", [(1, 1), (29, 1), (29, 4), (29, 29), (29, 100), (64, 16)])
def test_streaming_stats_and_softmax(dtype, n, block):
    s = randn(5, n, dtype=dtype, scale=8.0, seed=n)
    m, l = osm.streaming_stats(s, block)
    torch.testing.assert_close(m, s.amax(-1), atol=0, rtol=0)
    torch.testing.assert_close(m + l.log(), torch.logsumexp(s, -1), atol=TOL[dtype] * 10, rtol=0)
    torch.testing.assert_close(
        osm.streaming_softmax(s, block), torch.softmax(s, -1), atol=TOL[dtype], rtol=0
    )
    _, _, steps = osm.streaming_stats(s, block, history=True)
    assert len(steps) == -(-n // block)
    for b, (m_t, _) in enumerate(steps):  # the running max is the max of the prefix read so far
        torch.testing.assert_close(m_t, s[:, : (b + 1) * block].amax(-1), atol=0, rtol=0)


def test_large_scores_do_not_overflow():
    s = torch.tensor([[1000.0, 999.0, -1000.0, 998.0]])
    p = osm.streaming_softmax(s, 2)
    assert torch.isfinite(p).all()
    torch.testing.assert_close(p, torch.softmax(s, -1), atol=1e-7, rtol=0)


def test_masked_entries_and_all_masked_rows():
    s = randn(3, 10)
    s[0, 3:] = NEG_INF  # partly masked row
    s[1] = NEG_INF  # fully masked row: m = -inf, l = 0, probabilities 0
    m, l = osm.streaming_stats(s, 4)
    assert m[1] == NEG_INF and l[1] == 0
    p = osm.streaming_softmax(s, 4)
    torch.testing.assert_close(p[[0, 2]], torch.softmax(s[[0, 2]], -1), atol=1e-12, rtol=0)
    assert bool((p[1] == 0).all()) and bool((p[0, 3:] == 0).all())


def test_merge_is_associative_commutative_with_identity():
    s = randn(4, 30, scale=6.0)
    parts = [osm.softmax_stats(s[:, a:b]) for a, b in ((0, 7), (7, 20), (20, 30))]
    ref = osm.softmax_stats(s)
    a, b, c = parts
    left = osm.merge_stats(*osm.merge_stats(*a, *b), *c)
    right = osm.merge_stats(*a, *osm.merge_stats(*b, *c))
    swapped = osm.merge_stats(*c, *osm.merge_stats(*b, *a))
    for got in (left, right, swapped):
        torch.testing.assert_close(got[0], ref[0], atol=0, rtol=0)
        torch.testing.assert_close(got[1], ref[1], atol=1e-12, rtol=0)
    empty = (torch.full((4,), NEG_INF, dtype=torch.float64), torch.zeros(4, dtype=torch.float64))
    ident = osm.merge_stats(*empty, *a)
    torch.testing.assert_close(ident[1], a[1], atol=0, rtol=0)
    both_empty = osm.merge_stats(*empty, *empty)
    assert bool((both_empty[0] == NEG_INF).all()) and bool((both_empty[1] == 0).all())


@pytest.mark.parametrize("dtype", DTYPES)
def test_merge_states_in_any_order_gives_attention(dtype):
    q, k, v = (
        randn(3, 8, dtype=dtype),
        randn(23, 8, dtype=dtype, seed=1),
        randn(23, 5, dtype=dtype, seed=2),
    )
    s = q @ k.T / 8**0.5
    ref = F.scaled_dot_product_attention(q, k, v)
    cuts = [(0, 5), (5, 6), (6, 17), (17, 23)]
    states = [osm.block_state(s[:, a:b], v[a:b]) for a, b in cuts]
    for order in itertools.islice(itertools.permutations(range(4)), 0, 24, 5):
        st = states[order[0]]
        for i in order[1:]:
            st = osm.merge_states(st, states[i])
        torch.testing.assert_close(osm.finalize(st[2], st[1]), ref, atol=TOL[dtype] * 10, rtol=0)
    # a tree: (0 1) (2 3)
    tree = osm.merge_states(
        osm.merge_states(states[0], states[1]), osm.merge_states(states[2], states[3])
    )
    torch.testing.assert_close(osm.finalize(tree[2], tree[1]), ref, atol=TOL[dtype] * 10, rtol=0)


@pytest.mark.parametrize("block", [1, 3, 8, 50])
def test_streaming_attention_matches_sdpa(block):
    q, k, v = randn(2, 6, 16), randn(37, 16, seed=1), randn(37, 9, seed=2)
    torch.testing.assert_close(
        osm.streaming_attention(q, k, v, block),
        F.scaled_dot_product_attention(q, k, v),
        atol=1e-12,
        rtol=0,
    )
    torch.testing.assert_close(
        osm.streaming_attention(q[0, 0], k, v, block, scale=0.3),
        F.scaled_dot_product_attention(q[0, :1], k, v, scale=0.3)[0],
        atol=1e-12,
        rtol=0,
    )


def test_negative_control_without_rescaling_is_wrong():
    # Summing block sums without the factor e^(m_old - m_new) of eq. 26.2 gives a wrong l.
    s = randn(2, 20, scale=4.0)
    wrong = sum(osm.softmax_stats(s[:, a : a + 5])[1] for a in range(0, 20, 5))
    assert (wrong - osm.softmax_stats(s)[1]).abs().max() > 0.1


def test_bad_input_raises():
    s = randn(3, 5)
    with pytest.raises(TypeError, match="s must be a torch.Tensor"):
        osm.softmax_stats([1.0, 2.0])
    with pytest.raises(TypeError, match="floating-point"):
        osm.softmax_stats(torch.arange(5))
    with pytest.raises(ValueError, match="s must not be empty"):
        osm.softmax_stats(torch.zeros(3, 0))
    with pytest.raises(ValueError, match="NaN"):
        osm.softmax_stats(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match=r"\+inf"):
        osm.softmax_stats(torch.tensor([1.0, float("inf")]))
    with pytest.raises(ValueError, match="block_size"):
        osm.streaming_stats(s, 0)
    with pytest.raises(TypeError, match="block_size"):
        osm.streaming_softmax(s, 2.5)
    m, l = osm.softmax_stats(s)
    with pytest.raises(ValueError, match="same shape"):  # (3,) with (1,) would broadcast
        osm.merge_stats(m, l, m[:1], l[:1])
    with pytest.raises(ValueError, match="same shape"):
        osm.merge_stats(m, l[:2], m, l)
    st = osm.block_state(s, randn(5, 2))
    with pytest.raises(ValueError, match="acc_a and acc_b"):
        osm.merge_states(st, (st[0], st[1], st[2][:1]))
    with pytest.raises(ValueError, match="same shape"):
        osm.finalize(st[2], st[1][:1])
    with pytest.raises(ValueError, match="v must have shape"):  # extra values would be ignored
        osm.streaming_attention(randn(3), randn(5, 3), randn(6, 2), 2)
    with pytest.raises(ValueError, match="k must not be empty"):
        osm.streaming_attention(randn(3), randn(0, 3), randn(0, 2), 2)
    with pytest.raises(ValueError, match="block_size"):
        osm.streaming_attention(randn(3), randn(5, 3), randn(5, 2), -1)


def test_finalize_of_an_empty_state_is_zero():
    # l = 0: no key seen, or every key masked; 0/0 would be nan, the book's convention is 0.
    acc = torch.tensor([[2.0, 4.0], [0.0, 0.0], [5.0, -5.0]])
    out = osm.finalize(acc, torch.tensor([2.0, 0.0, 5.0]))
    torch.testing.assert_close(out, torch.tensor([[1.0, 2.0], [0.0, 0.0], [1.0, -1.0]]))
    m, l, acc = osm.block_state(torch.full((2, 5), NEG_INF, dtype=torch.float64), randn(5, 3))
    assert bool((m == NEG_INF).all()) and bool((l == 0).all()) and bool((acc == 0).all())
    assert bool((osm.finalize(acc, l) == 0).all())


# Low precision: l lies between 1 and n. Float16's largest finite value is 65504, so a float16 sum
# of 70,000 equal terms overflows; bfloat16's 8 significant bits round it to 69,632 (and a running
# bfloat16 sum of blocks drifts further). The state is float32, as in FlashAttention.
LOW = [torch.float16, torch.bfloat16]
N_LONG = 70_000


@pytest.mark.parametrize("dtype", LOW)
def test_low_precision_statistics_accumulate_in_float32(dtype):
    s = torch.zeros(2, N_LONG, dtype=dtype)  # equal scores: l = n exactly
    m, l = osm.softmax_stats(s)
    assert m.dtype == l.dtype == torch.float32 and bool((l == N_LONG).all())
    m, l = osm.streaming_stats(s, 1000)
    assert l.dtype == torch.float32 and bool((l == N_LONG).all())
    p = osm.streaming_softmax(s, 1000)
    assert p.dtype == dtype and bool(torch.isfinite(p).all())
    assert (p.double().sum(-1) - 1).abs().max() < 1e-2


@pytest.mark.parametrize("dtype", LOW)
def test_low_precision_streaming_attention_does_not_overflow(dtype):
    q = randn(3, 8).to(dtype)
    k = torch.zeros(N_LONG, 8, dtype=dtype)  # every score 0: the output is the mean value
    v = randn(N_LONG, 4, seed=1).to(dtype)
    out = osm.streaming_attention(q, k, v, 4096)
    assert out.dtype == dtype
    want = v.double().mean(0).expand(3, 4)
    assert (out.double() - want).abs().max() < 2e-3
