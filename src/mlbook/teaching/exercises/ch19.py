"""Checks of the exercises of chapter 19 (scaled dot-product attention).

The references are independent of the reader's answer and of :mod:`mlbook.attention.dot_product`:
autograd through a softmax written with explicit exponentials (19.1),
``F.scaled_dot_product_attention`` run on the permuted tokens (19.2), the closed form of eq. 19.2
and ``scipy.stats.entropy`` (19.3), and explicit loops over the layers, heads and word pieces
(19.4).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.stats
import torch
import torch.nn.functional as F

from . import as_tensor, attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


def _masked_softmax(s: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Row softmax over the allowed keys; a row with no allowed key is all zeros."""
    e = torch.exp(s - s.detach().amax(-1, keepdim=True)) * mask
    return e / e.sum(-1, keepdim=True).clamp_min(1e-300)


def _backward_cases():
    gen = torch.Generator().manual_seed(19)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    random = torch.rand(5, 7, generator=gen) < 0.6
    random[1] = False  # a fully masked row
    random[:, 0] |= torch.arange(5) != 1  # every other row sees a key
    return [
        ("causal attention, (2, 3) heads of 6 x 6", (2, 3), causal, 5),
        ("unmasked 3 x 7 scores", (), torch.ones(3, 7, dtype=torch.bool), 4),
        ("a random 5 x 7 mask with a fully masked row", (2,), random, 3),
    ], gen


@exercise("19.1", "rowsum_from_outputs", "score_grad")
def flash_rowsum(rowsum_from_outputs, score_grad) -> str:
    """rowsum(O_bar * O) = rowsum(A_bar * A), and S_bar of eq. 19.4 against autograd."""
    cases, gen = _backward_cases()
    for label, batch, mask, d_v in cases:
        T_q, T_k = mask.shape
        s = torch.randn(*batch, T_q, T_k, generator=gen, dtype=F64).requires_grad_()
        v = torch.randn(*batch, T_k, d_v, generator=gen, dtype=F64)
        g = torch.randn(*batch, T_q, d_v, generator=gen, dtype=F64)
        a = _masked_softmax(s, mask)
        out = a @ v
        (grad_s,) = torch.autograd.grad(out, s, g)  # autograd's S_bar
        a, out = a.detach(), out.detach()
        grad_a = g @ v.transpose(-2, -1)  # A_bar, eq. 19.3
        row = (grad_a * a).sum(-1)  # rowsum(A_bar * A): the left side

        got = attempt(rowsum_from_outputs, out.clone(), g.clone())
        expect_answer(
            got,
            row,
            f"rowsum_from_outputs(out, grad_out) for {label}",
            wrong={
                "that sums over the queries (axis -2); the rowsum has one number per query row, "
                "summed over the d_v features": (g * out).sum(-2),
                "return shape (..., T_q), without the trailing axis of size 1": (g * out).sum(
                    -1, keepdim=True
                ),
                "that is the mean over the d_v features; eq. 19.4 sums them": (g * out).mean(-1),
            },
            atol=1e-12,
            rtol=1e-10,
        )

        wrong = {
            "the rowsum term is missing: the softmax backward subtracts rowsum(A_bar * A) "
            "from every entry of the row": a * grad_a,
            "the rowsum is added instead of subtracted (S_bar = A * (A_bar - rowsum))": a
            * (grad_a + row[..., None]),
            "the factor A is missing: S_bar = A * (A_bar - rowsum), so masked keys get 0": grad_a
            - row[..., None],
        }
        if T_q == T_k:
            wrong["A_bar is transposed: A_bar = O_bar V^T (eq. 19.3), of shape (T_q, T_k)"] = a * (
                grad_a.transpose(-2, -1) - row[..., None]
            )
        got = attempt(score_grad, a.clone(), v.clone(), out.clone(), g.clone())
        expect_answer(
            got,
            grad_s,
            f"score_grad(weights, v, out, grad_out) for {label}",
            wrong=wrong,
            atol=1e-12,
            rtol=1e-10,
        )
    return (
        "rowsum(O_bar * O) equals rowsum(A_bar * A), and S_bar matches autograd for causal, "
        "rectangular and partly masked attention (float64)"
    )


def _permutations():
    return [
        torch.tensor([2, 0, 3, 1, 5, 4]),
        torch.tensor([1, 2, 3, 4, 5, 0]),
        torch.tensor([3, 5, 0, 4, 1, 2]),
    ]


@exercise("19.2", "unpermute_rows", "permuted_mask")
def permutation(unpermute_rows, permuted_mask) -> str:
    """Undo a row permutation; the mask that makes attention of permuted tokens equivariant."""
    gen = torch.Generator().manual_seed(192)
    for perm in _permutations():
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(len(perm))
        for shape in ((2, 6, 6), (6, 3)):
            y = torch.randn(*shape, generator=gen, dtype=F64)
            x = y[..., perm, :]
            wrong = {
                "that applies perm a second time; undo it with the inverse permutation "
                "(argsort(perm))": x[..., perm, :],
                "that returns x unchanged; the rows must be put back in their order": x,
            }
            if shape[-1] == shape[-2]:
                wrong[
                    "the inverse permutation is right, but it permutes the last axis (the "
                    "features), not the rows (axis -2)"
                ] = x[..., inverse]
            expect_answer(
                attempt(unpermute_rows, x.clone(), perm.clone()),
                y,
                f"unpermute_rows(x, perm) for x of shape {shape}, perm {perm.tolist()}",
                wrong=wrong,
                atol=0.0,
                rtol=0.0,
            )

    random = torch.rand(6, 6, generator=gen) < 0.5
    random[:, 0] = True  # every query sees a key
    masks = [
        ("the causal mask", torch.ones(6, 6, dtype=torch.bool).tril()),
        ("a random mask", random),
    ]
    q, k, v = (torch.randn(6, n, generator=gen, dtype=F64) for n in (8, 8, 4))
    for name, mask in masks:
        for perm in _permutations():
            want = mask[perm][:, perm]
            got = attempt(permuted_mask, mask.clone(), perm.clone())
            what = f"permuted_mask(mask, perm) for {name}, perm {perm.tolist()}"
            expect_answer(
                got,
                want,
                what,
                wrong={
                    "the mask must move with the tokens; a fixed mask (such as the causal one) "
                    "breaks the equivariance": mask,
                    "only the rows (queries) are permuted; the keys moved too, so permute the "
                    "columns as well": mask[perm],
                    "only the columns (keys) are permuted; the queries moved too, so permute "
                    "the rows as well": mask[:, perm],
                },
                atol=0.0,
                rtol=0.0,
            )
            got = as_tensor(got, what, (6, 6)) > 0.5
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            out_p = F.scaled_dot_product_attention(q[perm], k[perm], v[perm], attn_mask=got)
            expect(
                torch.allclose(out_p, out[perm], atol=1e-12),
                f"{what}: attention of the permuted tokens with this mask is not out[perm]",
            )
    return (
        "undoes 6 row permutations, and the permuted mask makes attention of permuted "
        "tokens equal the permuted outputs for a causal and a random mask"
    )


@exercise("19.3", "score_variance", "mean_entropy_ratio")
def score_scale(score_variance, mean_entropy_ratio) -> str:
    """Var(c q.k) = c^2 d_k (eq. 19.2), and the mean normalised row entropy of a softmax."""
    for d_k, c, c_name in (
        (64, 1 / 8, "1/8"),
        (1024, 1 / 1024, "1/1024"),
        (4, 1.0, "1"),
        (128, 0.3, "0.3"),
        (16, 2.0, "2"),
    ):
        want = c**2 * d_k
        expect_answer(
            attempt(score_variance, d_k, c),
            want,
            f"score_variance(d_k={d_k}, scale={c_name})",
            wrong={
                "the scale must be squared: Var(c X) = c² Var(X)": c * d_k,
                "that is the standard deviation, not the variance": c * math.sqrt(d_k),
                "the scale is missing: the raw score has variance d_k, the scaled one c² d_k": d_k,
                "d_k is missing: the d_k products q_l k_l add their variances (eq. 19.2)": c**2,
            },
            atol=1e-12,
            rtol=1e-9,
        )

    gen = torch.Generator().manual_seed(193)
    d = 1024
    q = torch.randn(400, d, generator=gen, dtype=F64)
    k = torch.randn(32, d, generator=gen, dtype=F64)
    cases = [
        ("400 rows of 32 keys at d_k = 1024, scale 1/d_k", q @ k.T / d),
        ("50 rows of 32 raw scores at d_k = 64", 8 * torch.randn(50, 32, generator=gen, dtype=F64)),
        (
            "rows whose softmax has exact zeros",
            torch.tensor(
                [
                    [1000.0, 0.0, 0.0, 0.0],
                    [0.0, 0.0, 0.0, 0.0],
                    [5.0, 1.0, -3.0, 2.0],
                    [-900.0, 0.0, 3.0, 0.5],
                ],
                dtype=F64,
            ),
        ),
    ]
    for label, s in cases:
        N, T = s.shape
        p = torch.softmax(s, dim=-1).numpy()
        h = scipy.stats.entropy(p, axis=-1)  # (N,) natural-log entropies
        want = float(np.mean(h)) / math.log(T)
        h_cols = scipy.stats.entropy(torch.softmax(s, dim=0).numpy(), axis=0)
        what = f"mean_entropy_ratio(scores) for {label}"
        got = attempt(mean_entropy_ratio, s.clone())
        expect(
            bool(torch.isfinite(as_tensor(got, what)).all()),
            f"{what} is nan or inf: an exact zero weight contributes 0 log 0 = 0 to the "
            "entropy, but p * log(p) gives nan there (torch.special.entr or xlogy handle it)",
        )
        expect_answer(
            got,
            want,
            what,
            wrong={
                "divide by the maximum entropy log T_k: the ratio lies in [0, 1]": float(
                    np.mean(h)
                ),
                "the maximum entropy is log T_k, the log of the number of keys, not of the "
                "number of rows": float(np.mean(h)) / math.log(N),
                "that is the sum over the rows; take the mean": float(np.sum(h)) / math.log(T),
                "the entropy is in bits but log T_k in nats; use the same base for both": float(
                    np.mean(h)
                )
                / math.log(2)
                / math.log(T),
                "the softmax must run over the keys (each row), not down the columns": float(
                    np.mean(h_cols)
                )
                / math.log(N),
            },
            atol=1e-10,
            rtol=1e-8,
        )
    return (
        "Var(c q.k) = c² d_k for 5 widths and scales, and the entropy ratio matches "
        "scipy.stats.entropy, including 400 rows of 32 keys at d_k = 1024 and rows with "
        "exact zeros"
    )


@exercise("19.4", "word_mass", "top_head")
def word_attention(word_mass, top_head) -> str:
    """(L, H) word-to-word attention mass against loops, and the (layer, head) of the maximum."""
    gen = torch.Generator().manual_seed(194)
    L, H, T = 3, 4, 10
    maps = torch.softmax(2 * torch.randn(L, H, T, T, generator=gen), dim=-1)  # float32
    for query, key in (([6, 7], [2, 3, 4]), ([5], [1]), ([2, 3], [8])):
        want = torch.zeros(L, H, dtype=F64)
        for layer in range(L):
            for h in range(H):
                for j in key:
                    want[layer, h] += sum(float(maps[layer, h, i, j]) for i in query) / len(query)
        m = maps.double()
        expect_answer(
            attempt(word_mass, maps.clone(), list(query), list(key)),
            want,
            f"word_mass(maps, query={query}, key={key})",
            wrong={
                "average the query word's rows over its pieces (a mass in [0, 1]), do not "
                "sum them": m[:, :, query][..., key].sum((-1, -2)),
                "sum the key word's columns over its pieces: a word receives the attention of "
                "all its pieces": m[:, :, query][..., key].mean(-2).mean(-1),
                "that is the attention from the key word to the query word; rows are queries, "
                "columns keys": m[:, :, key][..., query].mean(-2).sum(-1),
                "use all the pieces of both words, not only the first": m[:, :, query[0], key[0]],
            },
            atol=1e-6,
            rtol=1e-5,
        )

    scores = torch.rand(3, 5, generator=gen, dtype=F64)
    tied = scores.clone()
    tied[2, 1] = tied[0, 3] = tied.max() + 0.5  # a tie: (0, 3) comes first
    for label, s in (("random (3, 5) scores", scores), ("(3, 5) scores with a tie", tied)):
        flat = int(torch.argmax(s))
        last = max(i for i in range(s.numel()) if s.reshape(-1)[i] == s.max())
        want = torch.tensor(divmod(flat, s.shape[1]), dtype=F64)
        got = attempt(top_head, s.clone())
        what = f"top_head(scores) for {label}"
        expect_answer(
            got,
            want,
            what,
            wrong={
                "the pair is (layer, head), in that order": want.flip(0),
                "that is the flat index; split it into (layer, head) with divmod(flat, H)": flat,
                "divide the flat index by the number of heads H (the row length), not by the "
                "number of layers": torch.tensor(divmod(flat, s.shape[0]), dtype=F64),
                "on a tie take the first maximum in row-major order (as torch.argmax "
                "does)": torch.tensor(divmod(last, s.shape[1]), dtype=F64),
            },
            atol=0.0,
            rtol=0.0,
        )
        expect(all(float(x) == int(x) for x in got), f"{what} should return two ints")
    return (
        "word-to-word mass matches loops over 3 x 4 heads for words of 1 to 3 pieces, and "
        "top_head finds (layer, head), the first on a tie"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


_rowsum = _ref("19.1", "rowsum_from_outputs")
_score_grad = _ref("19.1", "score_grad")


def rowsum_over_queries(out, grad_out):
    return (grad_out * out).sum(-2)


def rowsum_keepdim(out, grad_out):
    return (grad_out * out).sum(-1, keepdim=True)


def rowsum_mean(out, grad_out):
    return (grad_out * out).mean(-1)


def score_grad_without_rowsum(weights, v, out, grad_out):
    return weights * (grad_out @ v.transpose(-2, -1))


def score_grad_plus_rowsum(weights, v, out, grad_out):
    return weights * (grad_out @ v.transpose(-2, -1) + (grad_out * out).sum(-1, keepdim=True))


def score_grad_without_weights(weights, v, out, grad_out):
    return grad_out @ v.transpose(-2, -1) - (grad_out * out).sum(-1, keepdim=True)


def unpermute_again(x, perm):
    return x[..., perm, :]


def unpermute_features(x, perm):
    return x[..., torch.argsort(perm)]


def unpermute_nothing(x, perm):
    return x


def mask_fixed(mask, perm):
    return mask


def mask_rows_only(mask, perm):
    return mask[perm]


def mask_columns_only(mask, perm):
    return mask[:, perm]


def variance_scale_not_squared(d_k, scale):
    return scale * d_k


def variance_std(d_k, scale):
    return scale * math.sqrt(d_k)


def variance_without_d_k(d_k, scale):
    return scale**2


def _entropy(scores, dim=-1):
    return torch.special.entr(torch.softmax(scores, dim=dim)).sum(dim)


def entropy_naive(scores):
    p = torch.softmax(scores, dim=-1)
    return -(p * torch.log(p)).sum(-1).mean() / math.log(scores.shape[-1])


def entropy_not_normalised(scores):
    return _entropy(scores).mean()


def entropy_log_rows(scores):
    return _entropy(scores).mean() / math.log(scores.shape[0])


def entropy_bits(scores):
    return _entropy(scores).mean() / math.log(2) / math.log(scores.shape[-1])


def entropy_over_columns(scores):
    return _entropy(scores, dim=0).mean() / math.log(scores.shape[0])


def mass_summed_queries(maps, query, key):
    return maps[:, :, query][..., key].sum((-1, -2))


def mass_mean_keys(maps, query, key):
    return maps[:, :, query][..., key].mean(-2).mean(-1)


def mass_reversed(maps, query, key):
    return _ref("19.4", "word_mass")(maps, key, query)


def mass_first_pieces(maps, query, key):
    return maps[:, :, query[0], key[0]]


_top = _ref("19.4", "top_head")


def top_swapped(scores):
    layer, head = _top(scores)
    return head, layer


def top_flat(scores):
    return int(scores.argmax())


def top_divmod_layers(scores):
    return divmod(int(scores.argmax()), scores.shape[0])


def top_last_tie(scores):
    flat = scores.reshape(-1)
    last = max(i for i in range(flat.numel()) if flat[i] == flat.max())
    return divmod(last, scores.shape[1])


MISTAKES = {
    "19.1": [
        ((rowsum_over_queries, _score_grad), "sums over the queries"),
        ((rowsum_keepdim, _score_grad), "without the trailing axis"),
        ((rowsum_mean, _score_grad), "mean over the d_v features"),
        ((_rowsum, score_grad_without_rowsum), "rowsum term is missing"),
        ((_rowsum, score_grad_plus_rowsum), "added instead of subtracted"),
        ((_rowsum, score_grad_without_weights), "factor A is missing"),
    ],
    "19.2": [
        ((unpermute_again, mask_rows_only), "applies perm a second time"),
        ((unpermute_features, mask_rows_only), "permutes the last axis"),
        ((unpermute_nothing, mask_rows_only), "returns x unchanged"),
        ((_ref("19.2", "unpermute_rows"), mask_fixed), "must move with the tokens"),
        ((_ref("19.2", "unpermute_rows"), mask_rows_only), "only the rows"),
        ((_ref("19.2", "unpermute_rows"), mask_columns_only), "only the columns"),
    ],
    "19.3": [
        ((variance_scale_not_squared, entropy_naive), "must be squared"),
        ((variance_std, entropy_naive), "standard deviation"),
        ((variance_without_d_k, entropy_naive), "d_k is missing"),
        ((_ref("19.3", "score_variance"), entropy_naive), "0 log 0 = 0"),
        ((_ref("19.3", "score_variance"), entropy_not_normalised), "maximum entropy log"),
        ((_ref("19.3", "score_variance"), entropy_log_rows), "not of the number of rows"),
        ((_ref("19.3", "score_variance"), entropy_bits), "in bits"),
        ((_ref("19.3", "score_variance"), entropy_over_columns), "over the keys"),
    ],
    "19.4": [
        ((mass_summed_queries, _top), "do not sum them"),
        ((mass_mean_keys, _top), "sum the key word's columns"),
        ((mass_reversed, _top), "from the key word to the query word"),
        ((mass_first_pieces, _top), "not only the first"),
        ((_ref("19.4", "word_mass"), top_swapped), "(layer, head), in that order"),
        ((_ref("19.4", "word_mass"), top_flat), "flat index"),
        ((_ref("19.4", "word_mass"), top_divmod_layers), "not by the number of layers"),
        ((_ref("19.4", "word_mass"), top_last_tie), "first maximum"),
    ],
}
