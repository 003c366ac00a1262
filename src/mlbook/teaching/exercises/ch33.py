"""Checks of the exercises of chapter 33 (supervised fine-tuning and LoRA).

The references are independent of :mod:`mlbook.posttraining.sft` and
:mod:`mlbook.posttraining.lora`: the first gradient of a LoRA layer by float64 autograd through
``torch.nn.functional.linear`` (33.1, 33.2); per-sequence losses from ``F.cross_entropy`` with
``reduction="none"`` (33.3); best low-rank approximation errors of matrices built with known
singular values, and NumPy's SVD (33.4).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from . import Incorrect, attempt, exercise, expect, expect_answer, expect_tuple, paired_mistakes
from . import reference_answer as _ref

F64 = torch.float64


def _randn(gen: torch.Generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=F64)


def _autograd_lora(x, W, A, B, alpha, G):
    """y = F.linear(x, W) + (alpha/r) F.linear(F.linear(x, A), B) and the gradients of
    sum(y * G) with respect to A and B, by autograd."""
    A_, B_ = A.clone().requires_grad_(True), B.clone().requires_grad_(True)
    y = F.linear(x, W) + alpha / A.shape[0] * F.linear(F.linear(x, A_), B_)
    (y * G).sum().backward()
    return y.detach(), A_.grad, B_.grad


# --- 33.1 ----------------------------------------------------------------------------------------

FIRST_GRADIENT_OPTIONS = ("A", "B", "both", "neither")


def guess_both():
    return "both"


def guess_a():
    return "A"


def guess_neither():
    return "neither"


@exercise("33.1", "predict_first_gradient")
def first_gradient(answer) -> str:
    """One backward pass through a freshly initialised LoRA layer (B = 0), by autograd."""
    guess = attempt(answer)
    expect(
        isinstance(guess, str) and guess in FIRST_GRADIENT_OPTIONS,
        f"predict_first_gradient() should return one of {FIRST_GRADIENT_OPTIONS}, got {guess!r}",
    )
    gen = torch.Generator().manual_seed(331)
    d_in, d_out, r, N = 16, 12, 4, 32
    x, W, G = _randn(gen, N, d_in), _randn(gen, d_out, d_in), _randn(gen, N, d_out)
    A, B = _randn(gen, r, d_in) / 4, torch.zeros(d_out, r, dtype=F64)
    _, A_bar, B_bar = _autograd_lora(x, W, A, B, 8.0, G)
    a_norm, b_norm = A_bar.norm().item(), B_bar.norm().item()
    expect(a_norm == 0 and b_norm > 0, "internal: the experiment did not behave as derived")
    seen = f"at B = 0 autograd gives |Abar| = {a_norm:g} exactly and |Bbar| = {b_norm:.3g}"
    why = {
        "both": "Abar = (alpha/r) B^T Deltabar, and B^T = 0 at the start",
        "A": "it is the other way round: Abar = (alpha/r) B^T Deltabar vanishes with B, while "
        "Bbar = (alpha/r) Deltabar A^T does not, since A is random",
        "neither": "the update B A is zero, but its gradient is not: Bbar = (alpha/r) Deltabar "
        "A^T is non-zero because A is random",
    }
    if guess != "B":
        raise Incorrect(f"you predicted {guess!r}; {seen}: {why[guess]}")
    return (
        f"right: {seen}; A starts to move at the second step, once B is no longer zero "
        "(one factor must start at zero, the other must not)"
    )


# --- 33.2 ----------------------------------------------------------------------------------------


def forward_unscaled(x, W, A, B, alpha):
    return F.linear(x, W) + F.linear(F.linear(x, A), B)


def forward_alpha_only(x, W, A, B, alpha):
    return F.linear(x, W) + alpha * F.linear(F.linear(x, A), B)


def forward_bypass_only(x, W, A, B, alpha):
    return alpha / A.shape[0] * F.linear(F.linear(x, A), B)


def backward_unscaled(x, G, A, B, alpha):
    delta = G.T @ x  # (d_out, d_in)
    return B.T @ delta, delta @ A.T


def backward_alpha_only(x, G, A, B, alpha):
    delta = G.T @ x
    return alpha * (B.T @ delta), alpha * (delta @ A.T)


def backward_sign_flipped(x, G, A, B, alpha):
    delta = -alpha / A.shape[0] * (G.T @ x)
    return B.T @ delta, delta @ A.T


WRONG_FORWARD = [
    (forward_unscaled, "the bypass is scaled by alpha / r"),
    (forward_alpha_only, "the scale is alpha / r, not alpha"),
    (forward_bypass_only, "the frozen path x W^T is missing"),
]
WRONG_BACKWARD = [
    (backward_unscaled, "both gradients carry the scale alpha / r of the forward pass"),
    (backward_alpha_only, "the scale is alpha / r, not alpha"),
    (backward_sign_flipped, "the sign is flipped: Deltabar = G^T x, the gradient, not minus it"),
]


@exercise("33.2", "lora_forward", "lora_backward")
def lora_layer(forward, backward) -> str:
    """The bypass and the gradients of A and B against float64 autograd through F.linear."""
    for seed, (N, d_in, d_out, r, alpha) in (
        (332, (10, 8, 6, 2, 4.0)),
        (333, (5, 7, 7, 3, 1.5)),
        (334, (12, 9, 4, 1, 16.0)),
    ):
        gen = torch.Generator().manual_seed(seed)
        x, W, G = _randn(gen, N, d_in), _randn(gen, d_out, d_in), _randn(gen, N, d_out)
        A, B = _randn(gen, r, d_in), _randn(gen, d_out, r)  # B != 0, as during training
        y, A_bar, B_bar = _autograd_lora(x, W, A, B, alpha, G)
        args = (x.clone(), W.clone(), A.clone(), B.clone(), alpha)
        expect_answer(
            attempt(forward, *args, name="lora_forward"),
            y,
            f"lora_forward(...) with r = {r}, alpha = {alpha}",
            wrong={fb: fn(x, W, A, B, alpha) for fn, fb in WRONG_FORWARD},
            atol=1e-10,
        )
        out = attempt(backward, x.clone(), G.clone(), A.clone(), B.clone(), alpha)
        got = expect_tuple(out, "lora_backward(...)", ("A_bar", "B_bar"))
        wrong = [fn(x, G, A, B, alpha) for fn, _ in WRONG_BACKWARD]
        for i, (name, want) in enumerate((("A_bar", A_bar), ("B_bar", B_bar))):
            expect_answer(
                got[i],
                want,
                f"{name} of lora_backward(...) with r = {r}, alpha = {alpha}",
                wrong={fb: w[i] for (_, fb), w in zip(WRONG_BACKWARD, wrong, strict=True)},
                atol=1e-10,
            )
    return (
        "the bypass matches F.linear(x, W) + (alpha/r) F.linear(F.linear(x, A), B) and both "
        "gradients match float64 autograd, for r = 1, 2, 3 and square and rectangular W"
    )


# --- 33.3 ----------------------------------------------------------------------------------------


def _per_position(logits, targets):
    """(B, T) -log p of each target, from F.cross_entropy without reduction."""
    B, T, V = logits.shape
    return F.cross_entropy(logits.reshape(B * T, V), targets.reshape(-1), reduction="none").view(
        B, T
    )


def per_sequence_token_mean(logits, targets, mask):
    return (_per_position(logits, targets) * mask).sum() / mask.sum()


def per_sequence_sum(logits, targets, mask):
    return (_per_position(logits, targets) * mask).sum(1).mean()


def weights_uniform(mask):
    return torch.full((mask.shape[0],), 1 / mask.shape[0], dtype=F64)


def weights_counts(mask):
    return mask.sum(1)


def weights_inverse(mask):
    w = 1 / mask.sum(1)
    return w / w.sum()


WRONG_PER_SEQUENCE = [
    (per_sequence_token_mean, "that is the token mean of eq. 33.1: average each sequence first"),
    (per_sequence_sum, "divide each sequence's sum by its own M_b before averaging"),
]
WRONG_WEIGHTS = [
    (weights_uniform, "the token mean weights a sequence by its share of the tokens, M_b / M"),
    (weights_counts, "normalise the counts: the weights M_b / M sum to one"),
    (weights_inverse, "the longer sequence weighs more in the token mean, not less"),
]


@exercise("33.3", "per_sequence_nll", "token_mean_weights")
def per_sequence(per_seq, weights) -> str:
    """Per-sequence means from F.cross_entropy(reduction='none'); weights M_b / M."""
    gen = torch.Generator().manual_seed(335)
    B, T, V = 6, 7, 11
    logits = _randn(gen, B, T, V)
    targets = torch.randint(V, (B, T), generator=gen)
    mask = torch.zeros(B, T, dtype=F64)
    for b, (start, stop) in enumerate(((4, 6), (4, 7), (3, 7), (4, 5), (2, 7), (4, 6))):
        mask[b, start:stop] = 1.0  # completions of different lengths
    per_position = _per_position(logits, targets)
    want_seq = ((per_position * mask).sum(1) / mask.sum(1)).mean()
    want_w = mask.sum(1) / mask.sum()
    expect_answer(
        attempt(per_seq, logits.clone(), targets.clone(), mask.clone(), name="per_sequence_nll"),
        want_seq,
        "per_sequence_nll(logits, targets, mask)",
        wrong={fb: fn(logits, targets, mask) for fn, fb in WRONG_PER_SEQUENCE},
        atol=1e-10,
    )
    w = expect_answer(
        attempt(weights, mask.clone(), name="token_mean_weights"),
        want_w,
        "token_mean_weights(mask)",
        wrong={fb: fn(mask) for fn, fb in WRONG_WEIGHTS},
        atol=1e-12,
    )
    token_mean = (per_position * mask).sum() / mask.sum()
    seq_losses = (per_position * mask).sum(1) / mask.sum(1)
    expect(abs(float((w * seq_losses).sum() - token_mean)) < 1e-10, "internal: identity fails")
    return (
        "per_sequence_nll matches the mean of per-sequence means, and the token mean of eq. 33.1 "
        "equals sum_b (M_b / M) L_b with your weights, for completions of 1 to 5 tokens"
    )


# --- 33.4 ----------------------------------------------------------------------------------------


def _with_spectrum(gen: torch.Generator, m: int, n: int, s: torch.Tensor) -> torch.Tensor:
    """An (m, n) matrix U diag(s) V^T with random orthonormal U, V."""
    U, _ = torch.linalg.qr(_randn(gen, m, len(s)))
    V, _ = torch.linalg.qr(_randn(gen, n, len(s)))
    return U @ torch.diag(s) @ V.T


def _tail(s: np.ndarray, r: int, power: float = 2.0) -> float:
    """(sum_{i > r} s_i^p / sum_i s_i^p)^(1/p) for descending s."""
    return float((np.sum(s[r:] ** power) / np.sum(s**power)) ** (1 / power))


def errors_absolute(delta, ranks):
    s = np.linalg.svd(np.asarray(delta, dtype=np.float64), compute_uv=False)
    return [float(np.sqrt(np.sum(s[r:] ** 2))) for r in ranks]


def errors_unsquared(delta, ranks):
    s = np.linalg.svd(np.asarray(delta, dtype=np.float64), compute_uv=False)
    return [_tail(s, r, 1.0) for r in ranks]


def errors_off_by_one(delta, ranks):
    s = np.linalg.svd(np.asarray(delta, dtype=np.float64), compute_uv=False)
    return [_tail(s, r + 1) for r in ranks]


WRONG_ERRORS = [
    (errors_absolute, "the error is relative: divide by ||Delta||_F"),
    (errors_unsquared, "the Frobenius norm squares the singular values (Eckart-Young)"),
    (errors_off_by_one, "the best rank-r matrix keeps r singular values, s_1 .. s_r"),
]


@exercise("33.4", "low_rank_errors")
def low_rank_errors(answer) -> str:
    """Relative errors of the best rank-r approximations of matrices with known spectra."""
    gen = torch.Generator().manual_seed(336)
    ranks = [0, 1, 2, 4, 8, 16]
    spectra = {
        "a decaying spectrum 2^-i": 2.0 ** -torch.arange(24, dtype=F64),
        "rank 4 plus 1 % noise": torch.cat([torch.tensor([4.0, 3, 2, 1]), torch.full((20,), 0.01)]),
        "a flat spectrum": torch.ones(24, dtype=F64),
    }
    seen = []
    for name, s in spectra.items():
        delta = _with_spectrum(gen, 40, 32, s.to(F64))
        want = [_tail(s.numpy(), r) for r in ranks]
        got = attempt(answer, delta.clone(), list(ranks))
        expect(
            isinstance(got, (list, tuple)) and len(got) == len(ranks),
            f"low_rank_errors should return a list of {len(ranks)} numbers, one per rank",
        )
        expect_answer(
            torch.tensor([float(g) for g in got], dtype=F64),
            want,
            f"low_rank_errors(Delta, {ranks}) for {name}",
            wrong={fb: fn(delta, ranks) for fn, fb in WRONG_ERRORS},
            atol=1e-8,
        )
        k = next((r for r, e in zip(ranks, want, strict=True) if e < 0.1), None)
        seen.append((f"rank {k}" if k is not None else "no rank up to 16") + f" ({name})")
    return (
        "matches the tail sums of the known singular values for ranks 0 to 16; the relative "
        "error first falls below 10 % at " + ", ".join(seen)
    )


_forward_ref = _ref("33.2", "lora_forward")
_backward_ref = _ref("33.2", "lora_backward")
_per_seq_ref = _ref("33.3", "per_sequence_nll")
_weights_ref = _ref("33.3", "token_mean_weights")

MISTAKES = {
    "33.1": [
        (guess_both, "B^T = 0 at the start"),
        (guess_a, "the other way round"),
        (guess_neither, "its gradient is not"),
    ],
    "33.2": paired_mistakes(_forward_ref, _backward_ref, WRONG_FORWARD, WRONG_BACKWARD),
    "33.3": paired_mistakes(_per_seq_ref, _weights_ref, WRONG_PER_SEQUENCE, WRONG_WEIGHTS),
    "33.4": WRONG_ERRORS,
}
