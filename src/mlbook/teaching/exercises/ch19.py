"""Checks of the exercises of chapter 19 (scaled dot-product attention).

The references are independent of the reader's answer and of :mod:`mlbook.attention.dot_product`:
autograd through a softmax written with explicit exponentials (19.1),
``F.scaled_dot_product_attention`` run on the permuted tokens (19.2), the closed form of eq. 19.2
and ``scipy.stats.entropy`` (19.3), explicit loops over the layers, heads and word pieces (19.4),
the experiment itself (19.5), and ``F.scaled_dot_product_attention`` beside a loop over the query
rows (19.6).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.stats
import torch
import torch.nn.functional as F

from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


def _masked_softmax(s: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Row softmax over the allowed keys; a row with no allowed key is all zeros."""
    e = torch.exp(s - s.detach().amax(-1, keepdim=True)) * mask
    return e / e.sum(-1, keepdim=True).clamp_min(1e-300)


# --------------------------------------------------------------------------- 19.1


def rowsum_over_queries(out, grad_out):
    return (grad_out * out).sum(-2)


def rowsum_keepdim(out, grad_out):
    return (grad_out * out).sum(-1, keepdim=True)


def rowsum_mean(out, grad_out):
    return (grad_out * out).mean(-1)


def _rowsum(out, grad_out):
    return (grad_out * out).sum(-1, keepdim=True)


def score_grad_without_rowsum(weights, v, out, grad_out):
    return weights * (grad_out @ v.transpose(-2, -1))


def score_grad_plus_rowsum(weights, v, out, grad_out):
    return weights * (grad_out @ v.transpose(-2, -1) + _rowsum(out, grad_out))


def score_grad_without_weights(weights, v, out, grad_out):
    return grad_out @ v.transpose(-2, -1) - _rowsum(out, grad_out)


def score_grad_transposed(weights, v, out, grad_out):
    grad_a = grad_out @ v.transpose(-2, -1)  # (..., T_q, T_k)
    if grad_a.shape[-1] != grad_a.shape[-2]:
        return None  # the mistake is only possible for a square score matrix
    return weights * (grad_a.transpose(-2, -1) - _rowsum(out, grad_out))


WRONG_ROWSUM = {
    "that sums over the queries (axis -2); the rowsum has one number per query row, summed "
    "over the d_v features": rowsum_over_queries,
    "return shape (..., T_q), without the trailing axis of size 1": rowsum_keepdim,
    "that is the mean over the d_v features; eq. 19.4 sums them": rowsum_mean,
}
WRONG_SCORE_GRAD = {
    "the rowsum term is missing: the softmax backward subtracts rowsum(A_bar * A) from every "
    "entry of the row": score_grad_without_rowsum,
    "the rowsum is added instead of subtracted (S_bar = A * (A_bar - rowsum))": (
        score_grad_plus_rowsum
    ),
    "the factor A is missing: S_bar = A * (A_bar - rowsum), so masked keys get 0": (
        score_grad_without_weights
    ),
    "A_bar is transposed: A_bar = O_bar V^T (eq. 19.3), of shape (T_q, T_k)": (
        score_grad_transposed
    ),
}


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
        row = ((g @ v.transpose(-2, -1)) * a).sum(-1)  # rowsum(A_bar * A): the left side

        expect_answer(
            attempt(rowsum_from_outputs, out.clone(), g.clone()),
            row,
            f"rowsum_from_outputs(out, grad_out) for {label}",
            wrong={fb: f(out, g) for fb, f in WRONG_ROWSUM.items()},
            atol=1e-12,
            rtol=1e-10,
        )
        expect_answer(
            attempt(score_grad, a.clone(), v.clone(), out.clone(), g.clone()),
            grad_s,
            f"score_grad(weights, v, out, grad_out) for {label}",
            wrong={fb: f(a, v, out, g) for fb, f in WRONG_SCORE_GRAD.items()},
            atol=1e-12,
            rtol=1e-10,
        )
    return (
        "rowsum(O_bar * O) equals rowsum(A_bar * A), and S_bar matches autograd for causal, "
        "rectangular and partly masked attention (float64)"
    )


# --------------------------------------------------------------------------- 19.2


def unpermute_again(x, perm):
    return x[..., perm, :]


def unpermute_nothing(x, perm):
    return x


def unpermute_features(x, perm):
    if x.shape[-1] != len(perm):
        return None  # only possible when the feature axis has the length of the permutation
    return x[..., torch.argsort(perm)]


def mask_fixed(mask, perm):
    return mask


def mask_rows_only(mask, perm):
    return mask[perm]


def mask_columns_only(mask, perm):
    return mask[:, perm]


WRONG_UNPERMUTE = {
    "that applies perm a second time; undo it with the inverse permutation (argsort(perm))": (
        unpermute_again
    ),
    "that returns x unchanged; the rows must be put back in their order": unpermute_nothing,
    "the inverse permutation is right, but it permutes the last axis (the features), not the "
    "rows (axis -2)": unpermute_features,
}
WRONG_PERMUTED_MASK = {
    "the mask must move with the tokens; a fixed mask (such as the causal one) breaks the "
    "equivariance": mask_fixed,
    "only the rows (queries) are permuted; the keys moved too, so permute the columns as "
    "well": mask_rows_only,
    "only the columns (keys) are permuted; the queries moved too, so permute the rows as "
    "well": mask_columns_only,
}


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
            expect(torch.equal(x[..., inverse, :], y), "internal: the inverse is broken")
            expect_answer(
                attempt(unpermute_rows, x.clone(), perm.clone()),
                y,
                f"unpermute_rows(x, perm) for x of shape {shape}, perm {perm.tolist()}",
                wrong={fb: f(x, perm) for fb, f in WRONG_UNPERMUTE.items()},
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
            want = torch.zeros(6, 6, dtype=torch.bool)  # P M P^T, entry by entry
            for i in range(6):
                for j in range(6):
                    want[i, j] = mask[perm[i], perm[j]]
            got = attempt(permuted_mask, mask.clone(), perm.clone())
            what = f"permuted_mask(mask, perm) for {name}, perm {perm.tolist()}"
            expect_answer(
                got,
                want,
                what,
                wrong={fb: f(mask, perm) for fb, f in WRONG_PERMUTED_MASK.items()},
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


# --------------------------------------------------------------------------- 19.3


def variance_scale_not_squared(d_k, scale):
    return scale * d_k


def variance_std(d_k, scale):
    return scale * math.sqrt(d_k)


def variance_without_scale(d_k, scale):
    return d_k


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


def entropy_summed(scores):
    return _entropy(scores).sum() / math.log(scores.shape[-1])


def entropy_bits(scores):
    return _entropy(scores).mean() / math.log(2) / math.log(scores.shape[-1])


def entropy_over_columns(scores):
    return _entropy(scores, dim=0).mean() / math.log(scores.shape[0])


WRONG_VARIANCE = {
    "the scale must be squared: Var(c X) = c² Var(X)": variance_scale_not_squared,
    "that is the standard deviation, not the variance": variance_std,
    "the scale is missing: the raw score has variance d_k, the scaled one c² d_k": (
        variance_without_scale
    ),
    "d_k is missing: the d_k products q_l k_l add their variances (eq. 19.2)": (
        variance_without_d_k
    ),
}
WRONG_ENTROPY = {
    "divide by the maximum entropy log T_k: the ratio lies in [0, 1]": entropy_not_normalised,
    "the maximum entropy is log T_k, the log of the number of keys, not of the number of "
    "rows": entropy_log_rows,
    "that is the sum over the rows; take the mean": entropy_summed,
    "the entropy is in bits but log T_k in nats; use the same base for both": entropy_bits,
    "the softmax must run over the keys (each row), not down the columns": entropy_over_columns,
}


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
        expect_answer(
            attempt(score_variance, d_k, c),
            c**2 * d_k,
            f"score_variance(d_k={d_k}, scale={c_name})",
            wrong={fb: f(d_k, c) for fb, f in WRONG_VARIANCE.items()},
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
        T = s.shape[1]
        h = scipy.stats.entropy(torch.softmax(s, dim=-1).numpy(), axis=-1)  # (N,), nats
        want = float(np.mean(h)) / math.log(T)
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
            wrong={fb: f(s) for fb, f in WRONG_ENTROPY.items()},
            atol=1e-10,
            rtol=1e-8,
        )
    return (
        "Var(c q.k) = c² d_k for 5 widths and scales, and the entropy ratio matches "
        "scipy.stats.entropy, including 400 rows of 32 keys at d_k = 1024 and rows with "
        "exact zeros"
    )


# --------------------------------------------------------------------------- 19.4


def mass_summed_queries(maps, query, key):
    return maps[:, :, query][..., key].sum((-1, -2))


def mass_mean_keys(maps, query, key):
    return maps[:, :, query][..., key].mean(-2).mean(-1)


def mass_reversed(maps, query, key):
    return maps[:, :, key][..., query].mean(-2).sum(-1)


def mass_first_pieces(maps, query, key):
    return maps[:, :, query[0], key[0]]


def top_swapped(scores):
    layer, head = divmod(int(scores.argmax()), scores.shape[1])
    return head, layer


def top_flat(scores):
    return int(scores.argmax())


def top_divmod_layers(scores):
    return divmod(int(scores.argmax()), scores.shape[0])


def top_last_tie(scores):
    flat = scores.reshape(-1)
    last = max(i for i in range(flat.numel()) if flat[i] == flat.max())
    return divmod(last, scores.shape[1])


WRONG_MASS = {
    "average the query word's rows over its pieces (a mass in [0, 1]), do not sum them": (
        mass_summed_queries
    ),
    "sum the key word's columns over its pieces: a word receives the attention of all its "
    "pieces": mass_mean_keys,
    "that is the attention from the key word to the query word; rows are queries, columns "
    "keys": mass_reversed,
    "use all the pieces of both words, not only the first": mass_first_pieces,
}
WRONG_TOP = {
    "the pair is (layer, head), in that order": top_swapped,
    "that is the flat index; split it into (layer, head) with divmod(flat, H)": top_flat,
    "divide the flat index by the number of heads H (the row length), not by the number of "
    "layers": top_divmod_layers,
    "on a tie take the first maximum in row-major order (as torch.argmax does)": top_last_tie,
}


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
            wrong={fb: f(m, query, key) for fb, f in WRONG_MASS.items()},
            atol=1e-6,
            rtol=1e-5,
        )

    scores = torch.rand(3, 5, generator=gen, dtype=F64)
    tied = scores.clone()
    tied[2, 1] = tied[0, 3] = tied.max() + 0.5  # a tie: (0, 3) comes first
    for label, s in (("random (3, 5) scores", scores), ("(3, 5) scores with a tie", tied)):
        best = max(s.reshape(-1).tolist())
        flat = next(i for i, x in enumerate(s.reshape(-1).tolist()) if x == best)
        want = torch.tensor(divmod(flat, s.shape[1]), dtype=F64)
        got = attempt(top_head, s.clone())
        what = f"top_head(scores) for {label}"
        expect_answer(
            got,
            want,
            what,
            wrong={fb: f(s) for fb, f in WRONG_TOP.items()},
            atol=0.0,
            rtol=0.0,
        )
        expect(all(float(x) == int(x) for x in got), f"{what} should return two ints")
    return (
        "word-to-word mass matches loops over 3 x 4 heads for words of 1 to 3 pieces, and "
        "top_head finds (layer, head), the first on a tie"
    )


# --------------------------------------------------------------------------- 19.5

SHIFT_OPTIONS = ("unchanged", "shifted by c", "changed otherwise")
WRONG_KEY_SHIFT = {  # the wrong guesses for keys + c, and why
    "shifted by c": "the keys only decide the weights, and the outputs are averages of the "
    "values, which did not move. Adding c to every key adds q_i·c/√d_k, the same number for "
    "all keys of row i, to every score of the row, and a softmax ignores a shift of its whole "
    "row",
    "changed otherwise": "the scores do change, but adding c to every key adds q_i·c/√d_k, the "
    "same number for all keys of row i, to every score of the row, and a softmax ignores a "
    "shift of its whole row: the differences within a row are what count",
}
WRONG_VALUE_SHIFT = {  # the wrong guesses for values + c, and why
    "unchanged": "the weights do not depend on the values, but the outputs are weighted "
    "averages of them with weights that sum to one: sum_j a_ij (v_j + c) = o_i + c",
    "changed otherwise": "the weights do not move (they depend on queries and keys only), and "
    "they sum to one, so sum_j a_ij (v_j + c) = o_i + c exactly",
}


def _effect(out: torch.Tensor, shifted: torch.Tensor, c: torch.Tensor) -> str:
    """Which of SHIFT_OPTIONS the experiment shows."""
    if torch.allclose(shifted, out, atol=1e-10):
        return "unchanged"
    if torch.allclose(shifted, out + c, atol=1e-10):
        return "shifted by c"
    return "changed otherwise"


def _guess(fn, name: str) -> str:
    got = attempt(fn, name=name)
    if not isinstance(got, str) or got.strip().lower() not in SHIFT_OPTIONS:
        options = ", ".join(repr(o) for o in SHIFT_OPTIONS)
        raise Incorrect(f"{name}() should return one of {options}, got {got!r}")
    return got.strip().lower()


@exercise("19.5", "predict_key_shift", "predict_value_shift")
def shift_prediction(predict_key_shift, predict_value_shift) -> str:
    """Run the two experiments (keys + c, values + c) and compare with the reader's guesses."""
    gen = torch.Generator().manual_seed(195)
    q, k, v = (torch.randn(n, 8, generator=gen, dtype=F64) for n in (6, 9, 9))
    c = 3 * torch.randn(8, generator=gen, dtype=F64)

    def attention(q, k, v):
        s = q @ k.T / math.sqrt(q.shape[-1])
        e = torch.exp(s - s.amax(-1, keepdim=True))
        return (e / e.sum(-1, keepdim=True)) @ v

    out = attention(q, k, v)
    seen = {
        "key": _effect(out, attention(q, k + c, v), c),
        "value": _effect(out, attention(q, k, v + c), c),
    }
    expect(
        seen == {"key": "unchanged", "value": "shifted by c"},
        "internal: the experiment is broken",
    )
    for part, fn, wrong in (
        ("key", predict_key_shift, WRONG_KEY_SHIFT),
        ("value", predict_value_shift, WRONG_VALUE_SHIFT),
    ):
        guess = _guess(fn, f"predict_{part}_shift")
        if guess != seen[part]:
            raise Incorrect(
                f"you predicted {guess!r} for adding c to every {part}; the experiment shows "
                f"{seen[part]!r}: {wrong[guess]}"
            )
    return (
        "the experiment agrees with both predictions: adding c to every key leaves O unchanged "
        "(one shift per row of scores), adding c to every value shifts every output by c "
        "(the weights sum to one)"
    )


def guess_unchanged():
    return "unchanged"


def guess_shifted():
    return "shifted by c"


def guess_changed():
    return "changed otherwise"


# --------------------------------------------------------------------------- 19.6


def attention_unscaled(q, k, v, mask):
    w = _masked_softmax(q @ k.transpose(-2, -1), mask)
    return w @ v, w


def attention_scaled_by_d_k(q, k, v, mask):
    w = _masked_softmax(q @ k.transpose(-2, -1) / q.shape[-1], mask)
    return w @ v, w


def attention_masked_after_softmax(q, k, v, mask):
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) * mask
    return w @ v, w


def attention_over_queries(q, k, v, mask):
    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
    w = torch.nan_to_num(torch.softmax(s, dim=-2))
    return w @ v, w


def attention_mask_inverted(q, k, v, mask):
    w = _masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), ~mask)
    return w @ v, w


def attention_nan_rows(q, k, v, mask):
    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    return w @ v, w


WRONG_MASKED_ATTENTION = {
    "the scores are divided by √d_k (eq. 19.1); without it the softmax saturates": (
        attention_unscaled
    ),
    "divide the scores by √d_k, not by d_k": attention_scaled_by_d_k,
    "mask before the softmax (a score of -inf): zeroing weights after it leaves rows that no "
    "longer sum to one": attention_masked_after_softmax,
    "the softmax runs over the keys, the last axis, not over the queries": attention_over_queries,
    "the mask is True where a query may attend; that answer hides exactly those keys": (
        attention_mask_inverted
    ),
}


def _attention_cases():
    gen = torch.Generator().manual_seed(196)
    padding = torch.arange(6)[None, :] < torch.tensor([6, 4, 1])[:, None]  # (B, T_k)
    random = torch.rand(5, 7, generator=gen) < 0.5
    random[2] = False  # a fully masked row
    random[:, 3] |= torch.arange(5) != 2  # every other row sees a key
    shapes = [
        ("a causal mask, (2, 3) heads of 5 x 5", (2, 3), 5, 5, torch.ones(5, 5).tril().bool()),
        ("a padding mask of (3, 1, 1, 6), lengths 6, 4, 1", (3, 2), 6, 6, padding[:, None, None]),
        ("a random 5 x 7 mask with a fully masked row", (2,), 5, 7, random),
    ]
    cases = []
    for label, batch, T_q, T_k, mask in shapes:
        q = torch.randn(*batch, T_q, 8, generator=gen, dtype=F64)
        k = torch.randn(*batch, T_k, 8, generator=gen, dtype=F64)
        v = torch.randn(*batch, T_k, 3, generator=gen, dtype=F64)
        cases.append((label, q, k, v, mask))
    return cases


def _loop_weights(q, k, mask):
    """The weights row by row: softmax over the allowed keys of each query, zeros if none."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], mask.shape[:-2])
    qf = q.expand(*batch, T_q, q.shape[-1]).reshape(-1, T_q, q.shape[-1])
    kf = k.expand(*batch, T_k, k.shape[-1]).reshape(-1, T_k, k.shape[-1])
    mf = mask.expand(*batch, T_q, T_k).reshape(-1, T_q, T_k)
    w = torch.zeros(qf.shape[0], T_q, T_k, dtype=F64)
    for n in range(qf.shape[0]):
        for i in range(T_q):
            keys = [j for j in range(T_k) if mf[n, i, j]]
            if keys:
                s = torch.stack([qf[n, i] @ kf[n, j] for j in keys]) / math.sqrt(q.shape[-1])
                w[n, i, keys] = torch.softmax(s, dim=0)
    return w.reshape(*batch, T_q, T_k)


@exercise("19.6", "masked_attention")
def masked_attention_check(masked_attention) -> str:
    """Outputs against F.scaled_dot_product_attention, weights against a loop over the rows."""
    for label, q, k, v, mask in _attention_cases():
        what = f"masked_attention(q, k, v, mask) with {label}"
        got = attempt(masked_attention, q.clone(), k.clone(), v.clone(), mask.clone())
        if not isinstance(got, tuple | list) or len(got) != 2:
            raise Incorrect(f"{what} should return the pair (out, weights)")
        out, weights = got
        weights_want = _loop_weights(q, k, mask)
        out_want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        for name, value in (("weights", weights), ("out", out)):
            t = as_tensor(value, f"{what}: {name}")
            if not bool(torch.isfinite(t).all()):
                raise Incorrect(
                    f"{what}: {name} contains nan: a query whose keys are all masked has only "
                    "-inf scores, and their softmax is 0/0; give such rows weights 0 and output 0"
                )
        wrong = {fb: f(q, k, v, mask) for fb, f in WRONG_MASKED_ATTENTION.items()}
        expect_answer(
            weights,
            weights_want,
            f"{what}: weights",
            wrong={fb: w for fb, (_, w) in wrong.items()},
            atol=1e-12,
            rtol=1e-10,
        )
        expect_answer(out, out_want, f"{what}: out", atol=1e-12, rtol=1e-10)
    return (
        "matches F.scaled_dot_product_attention and a loop over the rows for a causal, a "
        "padding and a random mask; fully masked rows give weights 0 and output 0, no nan"
    )


# Typical wrong answers: the functions above, each with (a part of) its feedback; the tests build
# each one and check that it is rejected with that feedback --------------------------------------

_rowsum_ref = _ref("19.1", "rowsum_from_outputs")
_score_grad_ref = _ref("19.1", "score_grad")
_unpermute_ref = _ref("19.2", "unpermute_rows")
_mask_ref = _ref("19.2", "permuted_mask")
_variance_ref = _ref("19.3", "score_variance")
_entropy_ref = _ref("19.3", "mean_entropy_ratio")
_mass_ref = _ref("19.4", "word_mass")
_top_ref = _ref("19.4", "top_head")

MISTAKES = {
    "19.1": [((f, _score_grad_ref), fb) for fb, f in WRONG_ROWSUM.items()]
    + [((_rowsum_ref, f), fb) for fb, f in WRONG_SCORE_GRAD.items()],
    "19.2": [((f, _mask_ref), fb) for fb, f in WRONG_UNPERMUTE.items()]
    + [((_unpermute_ref, f), fb) for fb, f in WRONG_PERMUTED_MASK.items()],
    "19.3": [((f, _entropy_ref), fb) for fb, f in WRONG_VARIANCE.items()]
    + [((_variance_ref, entropy_naive), "0 log 0 = 0")]
    + [((_variance_ref, f), fb) for fb, f in WRONG_ENTROPY.items()],
    "19.4": [((f, _top_ref), fb) for fb, f in WRONG_MASS.items()]
    + [((_mass_ref, f), fb) for fb, f in WRONG_TOP.items()],
    "19.5": [
        ((guess_changed, guess_shifted), "a softmax ignores a shift of its whole row"),
        ((guess_shifted, guess_shifted), "the keys only decide the weights"),
        ((guess_unchanged, guess_unchanged), "weights that sum to one"),
        ((guess_unchanged, guess_changed), "the weights do not move"),
        ((lambda: "same", guess_shifted), "should return one of"),
    ],
    "19.6": [(f, fb) for fb, f in WRONG_MASKED_ATTENTION.items()]
    + [(attention_nan_rows, "give such rows weights 0 and output 0")],
}
