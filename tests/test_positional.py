"""mlbook.attention.positional against independent references (built-ins, closed forms)."""

import math

import pytest
import torch
import torch.nn.functional as F

from mlbook.attention import positional as P


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_attention_matches_sdpa_with_and_without_bias(gen, dtype, atol):
    q = torch.randn(2, 3, 7, 16, generator=gen, dtype=dtype)
    k = torch.randn(2, 3, 9, 16, generator=gen, dtype=dtype)
    v = torch.randn(2, 3, 9, 5, generator=gen, dtype=dtype)
    torch.testing.assert_close(
        P.biased_attention(q, k, v), F.scaled_dot_product_attention(q, k, v), atol=atol, rtol=0
    )
    bias = P.causal_bias(7, 9, dtype=dtype) + P.alibi_bias(P.alibi_slopes(3), 9)[:, 2:, :].to(dtype)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(P.biased_attention(q, k, v, bias), ref, atol=atol, rtol=0)


def test_attention_is_permutation_equivariant(gen):
    x = torch.randn(6, 8, generator=gen, dtype=torch.float64)
    perm = torch.randperm(6, generator=gen)
    out = P.biased_attention(x, x, x)
    torch.testing.assert_close(
        P.biased_attention(x[perm], x[perm], x[perm]), out[perm], atol=1e-14, rtol=0
    )


def test_causal_bias_matches_tril():
    b = P.causal_bias(4, 6)
    allowed = torch.ones(6, 6).tril().bool()[2:]  # last 4 query rows of a 6x6 mask
    assert torch.equal(b == 0, allowed) and bool(torch.isinf(b[~allowed]).all())


def test_inverse_frequencies_is_a_geometric_ladder():
    theta = P.inverse_frequencies(64, 10000.0)
    expected = torch.logspace(0, -62 / 64 * 4, 32, dtype=torch.float64)  # 10^(-4 * 2i/64)
    torch.testing.assert_close(theta, expected, atol=0, rtol=1e-13)


def test_sinusoidal_matches_naive_and_vaswani_formula():
    pe = P.sinusoidal_encoding(50, 16)
    torch.testing.assert_close(pe, P.sinusoidal_encoding_naive(50, 16), atol=1e-12, rtol=0)
    pos, i = 37, 3
    assert pe[pos, 2 * i].item() == pytest.approx(math.sin(pos / 10000 ** (2 * i / 16)), abs=1e-14)
    assert pe[pos, 2 * i + 1].item() == pytest.approx(
        math.cos(pos / 10000 ** (2 * i / 16)), abs=1e-14
    )
    frac = P.sinusoidal_encoding(torch.tensor([0.5, 2.25]), 8, base=100.0)
    torch.testing.assert_close(
        frac,
        P.sinusoidal_encoding_naive(torch.tensor([0.5, 2.25]), 8, base=100.0),
        atol=1e-14,
        rtol=0,
    )


def test_shift_matrix_moves_every_position_and_is_orthogonal():
    pe = P.sinusoidal_encoding(200, 32)
    for k in (1, 5, 37):
        m = P.sinusoidal_shift_matrix(k, 32)
        torch.testing.assert_close(pe[:-k] @ m.T, pe[k:], atol=1e-12, rtol=0)
        torch.testing.assert_close(m @ m.T, torch.eye(32, dtype=torch.float64), atol=1e-14, rtol=0)
    torch.testing.assert_close(
        P.sinusoidal_shift_matrix(3, 8) @ P.sinusoidal_shift_matrix(4, 8),
        P.sinusoidal_shift_matrix(7, 8),
        atol=1e-14,
        rtol=0,
    )


def test_learned_embedding_lookup_and_its_limit():
    torch.manual_seed(0)
    emb = P.LearnedPositionalEmbedding(10, 4)
    pos = torch.arange(10)
    torch.testing.assert_close(emb(pos), emb.table.weight, atol=0, rtol=0)
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        emb(torch.arange(11))
    with pytest.raises(TypeError, match="integer"):
        emb(torch.arange(3.0))
    with pytest.raises(TypeError, match="torch.Tensor"):
        emb([0, 1])
    with pytest.raises(ValueError, match="max_len"):
        P.LearnedPositionalEmbedding(0, 4)


def test_alibi_slopes_power_of_two_and_paper_recipe():
    torch.testing.assert_close(
        P.alibi_slopes(8), 2.0 ** -torch.arange(1, 9, dtype=torch.float64), atol=0, rtol=1e-15
    )
    expected12 = [2.0**-k for k in range(1, 9)] + [2.0 ** -(k + 0.5) for k in range(4)]
    torch.testing.assert_close(
        P.alibi_slopes(12), torch.tensor(expected12, dtype=torch.float64), atol=0, rtol=1e-15
    )
    assert len(P.alibi_slopes(1)) == 1 and P.alibi_slopes(1).item() == pytest.approx(2.0**-8)


@pytest.mark.parametrize("H", [2, 4, 8, 16, 32])
def test_alibi_slopes_are_the_papers_geometric_sequence(H):
    """2^(-8/H), 2^(-16/H), ..., 2^(-8): start 2^(-8/H), ratio 2^(-8/H), decreasing."""
    start = 2.0 ** (-8.0 / H)
    expected = torch.tensor([start ** (h + 1) for h in range(H)], dtype=torch.float64)
    slopes = P.alibi_slopes(H)
    torch.testing.assert_close(slopes, expected, atol=0, rtol=1e-14)
    assert bool((slopes[1:] < slopes[:-1]).all())


def test_alibi_slopes_other_head_counts_follow_the_papers_code():
    """H = 6: the 4 slopes of 4 heads, then every other slope of 8 heads: not sorted."""
    slopes = P.alibi_slopes(6).tolist()
    assert slopes == pytest.approx([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3])
    assert slopes != sorted(slopes, reverse=True)


def test_alibi_bias_forms(gen):
    s = P.alibi_slopes(4)
    torch.testing.assert_close(P.alibi_bias(s, 6), P.alibi_bias_naive(s, 6), atol=0, rtol=0)
    scores = torch.randn(4, 6, 6, generator=gen, dtype=torch.float64)
    a = torch.softmax(scores + P.alibi_bias(s, 6), -1)
    b = torch.softmax(scores + P.alibi_bias(s, 6, form="key"), -1)
    torch.testing.assert_close(a, b, atol=1e-14, rtol=0)
    sym = P.alibi_bias(s, 6, causal=False)
    torch.testing.assert_close(sym, sym.transpose(-1, -2), atol=0, rtol=0)
    c = torch.softmax(scores + P.alibi_bias(s, 6, form="key", causal=False), -1)
    assert (torch.softmax(scores + sym, -1) - c).abs().max() > 1e-2  # not equivalent unmasked


def test_bad_input_raises():
    x = torch.zeros(3, 4)
    with pytest.raises(ValueError, match="bias .* does not broadcast"):
        P.biased_attention(x, x, x, bias=torch.zeros(2, 2))
    with pytest.raises(ValueError, match="bias .* does not broadcast"):  # would enlarge the output
        P.biased_attention(x, x, x, bias=torch.zeros(2, 3, 3))
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        P.biased_attention(x.numpy(), x, x)
    with pytest.raises(TypeError, match="floating-point"):
        P.biased_attention(x.long(), x, x)
    with pytest.raises(ValueError, match="t_k >= t_q"):
        P.causal_bias(5, 3)
    with pytest.raises(ValueError, match="even"):
        P.inverse_frequencies(7)
    with pytest.raises(TypeError, match="d must be an int"):
        P.inverse_frequencies(8.0)
    with pytest.raises(ValueError, match="base"):
        P.inverse_frequencies(8, base=1.0)
    with pytest.raises(ValueError, match="positions"):
        P.sinusoidal_encoding(0, 8)
    with pytest.raises(ValueError, match="positions must have shape"):
        P.sinusoidal_encoding(torch.zeros(2, 2), 8)
    with pytest.raises(ValueError, match="positions must not be empty"):
        P.sinusoidal_encoding(torch.zeros(0), 8)
    with pytest.raises(TypeError, match="positions"):
        P.sinusoidal_encoding([1, 2], 8)
    with pytest.raises(ValueError, match="even"):
        P.sinusoidal_encoding_naive(3, 5)
    with pytest.raises(TypeError, match="k must be a real number"):
        P.sinusoidal_shift_matrix("1", 8)
    with pytest.raises(ValueError, match="n_heads"):
        P.alibi_slopes(0)
    with pytest.raises(ValueError, match="slopes must be positive"):
        P.alibi_bias(torch.tensor([-1.0]), 4)
    with pytest.raises(ValueError, match="form"):
        P.alibi_bias(P.alibi_slopes(2), 4, form="absolute")
    with pytest.raises(ValueError, match="slopes must have shape"):
        P.alibi_bias(torch.ones(2, 2), 4)
    with pytest.raises(ValueError, match="t must be a positive int"):
        P.alibi_bias_naive(P.alibi_slopes(2), 0)
