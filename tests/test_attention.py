"""Unit tests of mlbook.attention.dot_product against torch built-ins and float64 autograd."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from mlbook.attention import dot_product as at

# Tolerances per dtype: float64 agrees with torch's kernels to a few ulps; float32 to ~1e-6.
TOL = {torch.float64: 1e-12, torch.float32: 2e-6}
DTYPES = [torch.float64, torch.float32]


def randn(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def qkv(B=2, H=3, T_q=5, T_k=7, d_k=4, d_v=6, dtype=torch.float64, seed=0):
    return (
        randn(B, H, T_q, d_k, dtype=dtype, seed=seed),
        randn(B, H, T_k, d_k, dtype=dtype, seed=seed + 1),
        randn(B, H, T_k, d_v, dtype=dtype, seed=seed + 2),
    )


def random_mask(shape, seed=0, keep_rows=True):
    m = torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < 0.6
    if keep_rows:
        m[..., 0] = True  # every query keeps at least one key
    return m


# --- forward against torch ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_matches_torch_sdpa(dtype):
    q, k, v = qkv(dtype=dtype)
    tol = TOL[dtype]
    out, w = at.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=tol, rtol=0)
    ref_w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    torch.testing.assert_close(w, ref_w, atol=tol, rtol=0)
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)), atol=tol, rtol=0)
    # Custom scale and a boolean mask.
    mask = random_mask((2, 1, 5, 7))
    out, _ = at.scaled_dot_product_attention(q, k, v, mask=mask, scale=0.3)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
    torch.testing.assert_close(out, ref, atol=tol, rtol=0)


@pytest.mark.parametrize("T_q,T_k", [(6, 6), (3, 8), (1, 5)])
def test_causal_matches_torch_lower_right(T_q, T_k):
    q, k, v = qkv(T_q=T_q, T_k=T_k)
    out, w = at.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T_q, T_k))
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    assert (w[..., ~at.causal_mask(T_q, T_k)] == 0).all()
    if T_q == T_k:  # top-left and bottom-right agree for square masks
        torch.testing.assert_close(
            out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-12, rtol=0
        )


def test_causal_and_padding_masks():
    torch.testing.assert_close(at.causal_mask(4), torch.ones(4, 4).tril().bool())
    assert at.causal_mask(1, 6).all()
    assert torch.equal(at.causal_mask(3, 5), causal_lower_right(3, 5)._materialize("cpu"))
    m = at.causal_mask(5, 3)  # more queries than keys: the first two rows allow nothing
    assert not m[:2].any() and m[2:].any(-1).all()
    pm = at.padding_mask(torch.tensor([3, 1, 0]), 4)
    assert pm.shape == (3, 1, 4) and pm.dtype == torch.bool
    assert pm[:, 0].tolist() == [
        [True, True, True, False],
        [True, False, False, False],
        [False] * 4,
    ]
    assert torch.equal(at.padding_mask([3, 1, 0], 4), pm)


def test_padding_matches_torch_and_ignores_padded_values():
    q, k, v = qkv(B=3, H=2, T_q=5, T_k=5)
    mask = at.padding_mask([5, 3, 2], 5)[:, None]  # (B, 1, 1, T)
    out, _ = at.scaled_dot_product_attention(q, k, v, mask=mask, is_causal=True)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask & at.causal_mask(5))
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    v2 = v.clone()
    v2[1, :, 3:] = 1e6  # garbage in padded positions must not leak
    k2 = k.clone()
    k2[1, :, 3:] = -1e6
    out2, _ = at.scaled_dot_product_attention(q, k2, v2, mask=mask, is_causal=True)
    torch.testing.assert_close(out2, out, atol=1e-12, rtol=0)


# --- naive reference, broadcasting, fully masked rows ---------------------------------------------


def test_naive_matches_clean_with_broadcast_and_masks():
    q = randn(2, 3, 4, 5)
    k = randn(2, 1, 6, 5, seed=1)  # one key/value head shared by 3 query heads
    v = randn(2, 1, 6, 2, seed=2)
    mask = random_mask((2, 3, 4, 6), keep_rows=False)
    for kw in ({}, {"mask": mask}, {"is_causal": True}, {"mask": mask, "is_causal": True}):
        o1, w1 = at.attention_naive(q, k, v, **kw)
        o2, w2 = at.scaled_dot_product_attention(q, k, v, **kw)
        assert o1.shape == (2, 3, 4, 2) and w1.shape == (2, 3, 4, 6)
        torch.testing.assert_close(o1, o2, atol=1e-12, rtol=0)
        torch.testing.assert_close(w1, w2, atol=1e-12, rtol=0)


def test_fully_masked_rows_give_zeros_and_finite_gradients():
    q, k, v = (x.requires_grad_() for x in qkv(B=1, H=1, T_q=3, T_k=4))
    mask = torch.tensor([[True, False, True, False], [False] * 4, [True] * 4])
    out, w = at.scaled_dot_product_attention(q, k, v, mask=mask)
    assert (out[..., 1, :] == 0).all() and (w[..., 1, :] == 0).all()
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-12, rtol=0
    )
    # The textbook formula gives nan in that row.
    s = (q @ k.transpose(-2, -1) / 2).masked_fill(~mask, float("-inf"))
    assert torch.isnan(torch.softmax(s, -1)[..., 1, :]).all()
    out.square().sum().backward()
    for x in (q, k, v):
        assert torch.isfinite(x.grad).all()
    assert (q.grad[..., 1, :] == 0).all()
    o_naive, _ = at.attention_naive(q.detach(), k.detach(), v.detach(), mask=mask)
    torch.testing.assert_close(o_naive, out.detach(), atol=1e-12, rtol=0)


# --- backward (eqs. 19.3-19.5) --------------------------------------------------------------------


@pytest.mark.parametrize("kw", [{}, {"is_causal": True}, {"scale": 0.7}, {"mask": "random"}])
def test_backward_matches_autograd_float64(kw):
    q, k, v = (x.requires_grad_() for x in qkv(T_q=6, T_k=6))
    if kw.get("mask") == "random":
        kw = {"mask": random_mask((2, 3, 6, 6), keep_rows=False)}
    out, w = at.scaled_dot_product_attention(q, k, v, **kw)
    g = randn(*out.shape, seed=9)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), g)
    mine = at.attention_backward(q.detach(), k.detach(), v.detach(), w.detach(), g, kw.get("scale"))
    for a, b in zip(mine, (dq, dk, dv), strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_backward_sums_over_broadcast_heads():
    q = randn(2, 4, 3, 5).requires_grad_()
    k = randn(2, 1, 6, 5, seed=1).requires_grad_()
    v = randn(1, 6, 2, seed=2).requires_grad_()  # fewer leading axes
    out, w = at.scaled_dot_product_attention(q, k, v)
    g = randn(*out.shape, seed=3)
    ref = torch.autograd.grad(out, (q, k, v), g)
    mine = at.attention_backward(q.detach(), k.detach(), v.detach(), w.detach(), g)
    for a, b in zip(mine, ref, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_gradcheck():
    q, k, v = (x.requires_grad_() for x in qkv(B=1, H=2, T_q=3, T_k=4, d_k=3, d_v=2))
    mask = random_mask((1, 2, 3, 4), keep_rows=False)
    assert torch.autograd.gradcheck(
        lambda a, b, c: at.scaled_dot_product_attention(a, b, c, mask=mask)[0], (q, k, v)
    )
    assert torch.autograd.gradgradcheck(
        lambda a, b, c: at.scaled_dot_product_attention(a, b, c, is_causal=True)[0], (q, k, v)
    )


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [at.scaled_dot_product_attention, at.attention_naive])
def test_forward_rejects_bad_input(fn):
    q, k, v = qkv(B=1, H=1, T_q=2, T_k=3, d_k=4, d_v=2)
    with pytest.raises(ValueError, match="at least 2 axes"):
        fn(q[0, 0, 0], k, v)
    with pytest.raises(ValueError, match="q must not be empty"):  # would average nothing
        fn(q[..., :0, :], k, v)
    with pytest.raises(ValueError, match="k must not be empty"):
        fn(q, k[..., :0, :], v[..., :0, :])
    with pytest.raises(TypeError, match="floating"):
        fn(q.long(), k, v)
    with pytest.raises(TypeError, match="torch.Tensor"):
        fn(q.tolist(), k, v)
    with pytest.raises(TypeError, match="mask must be a bool"):
        fn(q, k, v, mask=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="does not broadcast"):
        fn(q, k, v, mask=torch.ones(3, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="does not broadcast"):  # would enlarge the output
        fn(q, k, v, mask=torch.ones(5, 1, 1, 2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="scale"):
        fn(q, k, v, scale=-1.0)
    with pytest.raises(TypeError, match="scale"):
        fn(q, k, v, scale="0.5")


def test_masks_and_backward_reject_bad_input():
    with pytest.raises(ValueError, match="T_q"):
        at.causal_mask(0)
    with pytest.raises(TypeError, match="T_k"):
        at.causal_mask(3, 2.0)
    with pytest.raises(ValueError, match=r"lengths must hold indices in \[0, 5\)"):
        at.padding_mask([5, 6], 4)
    with pytest.raises(ValueError, match="lengths must hold indices"):
        at.padding_mask(torch.tensor([-1]), 4)
    with pytest.raises(TypeError, match="integer"):
        at.padding_mask(torch.tensor([1.0, 2.0]), 4)
    with pytest.raises(TypeError, match="integer"):
        at.padding_mask([1.5], 4)
    with pytest.raises(ValueError, match="1 axes"):
        at.padding_mask(torch.ones(2, 2, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="lengths must not be empty"):
        at.padding_mask([], 4)
    with pytest.raises(ValueError, match="T must"):
        at.padding_mask([1], 0)
    q, k, v = qkv(B=1, H=1, T_q=2, T_k=3)
    _, w = at.scaled_dot_product_attention(q, k, v)
    g = torch.ones(1, 1, 2, 6, dtype=torch.float64)
    with pytest.raises(ValueError, match="weights"):
        at.attention_backward(q, k, v, w.transpose(-2, -1), g)
    with pytest.raises(ValueError, match="grad_out"):
        at.attention_backward(q, k, v, w, g[..., :3])


# --- the small-multiples helper of the chapter's figures (mlbook.viz.attention_grid) -------------


def test_attention_grid_draws_and_validates():
    import matplotlib.pyplot as plt

    from mlbook import viz

    maps = torch.softmax(randn(5, 4, 4), -1).numpy()
    fig, axes = viz.attention_grid(
        maps, labels=list("abcd"), ncols=3, highlight=1, highlight_row=2, title="heads"
    )
    assert axes.shape == (2, 3) and not axes[1, 2].get_visible()
    assert [t.get_text() for t in axes[0, 0].get_yticklabels()] == list("abcd")
    assert axes[0, 1].spines["top"].get_visible()  # the highlighted panel is framed
    plt.close(fig)
    with pytest.raises(ValueError, match="maps must have shape"):
        viz.attention_grid(maps[0])
    with pytest.raises(ValueError, match="labels"):
        viz.attention_grid(maps, labels=list("abc"))
    with pytest.raises(ValueError, match="highlight"):
        viz.attention_grid(maps, highlight=5)
    with pytest.raises(ValueError, match="highlight_row"):
        viz.attention_grid(maps, highlight_row=4)
    with pytest.raises(ValueError, match="titles"):
        viz.attention_grid(maps, titles=["x"])
    with pytest.raises(ValueError, match="ncols"):
        viz.attention_grid(maps, ncols=0)
