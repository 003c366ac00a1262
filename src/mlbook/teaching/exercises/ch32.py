"""Checks of the exercises of chapter 32 (vision-language models).

The references are independent of :mod:`mlbook.architectures.vlm`: the token count of a video
from the shapes of its patches, built with plain reshapes (32.1); CLIP's zero-shot probabilities
with prompt ensembling written in NumPy (32.2); the gradients of a gated cross-attention by
autograd through a forward pass written with ``torch.nn.functional.layer_norm`` and explicit
heads (32.3); and the best rank-Q reconstruction errors from the eigenvalues of Z^T Z, by
``numpy.linalg.eigvalsh`` (32.4).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from . import (
    Incorrect,
    as_number,
    attempt,
    exercise,
    expect,
    expect_answer,
)
from . import reference_answer as _ref

F64 = torch.float64


def _randn(gen: torch.Generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=F64)


# --- 32.1 ----------------------------------------------------------------------------------------

#: The clip of the exercise: 16 frames of 336 x 504 pixels; 14 x 14 patches spanning 2 frames.
FRAMES, HEIGHT, WIDTH, PATCH, PAIR = 16, 336, 504, 14, 2


def _video_tokens() -> tuple[int, int, int]:
    """Build the patches of the clip and merge them: (patches, frame pairs, LM tokens)."""
    video = torch.zeros(FRAMES, 1, HEIGHT, WIDTH)
    h, w = HEIGHT // PATCH, WIDTH // PATCH
    # (F, 1, H, W) -> (F/2, 2, h, P, w, P) -> (F/2, h, w, 2 P P): one row per space-time patch
    patches = video.reshape(FRAMES // PAIR, PAIR, h, PATCH, w, PATCH).permute(0, 2, 4, 1, 3, 5)
    patches = patches.reshape(FRAMES // PAIR, h, w, -1)
    # 2 x 2 neighbours -> one token: (F/2, h/2, 2, w/2, 2, D) -> (F/2, h/2, w/2, 4 D)
    merged = patches.reshape(FRAMES // PAIR, h // 2, 2, w // 2, 2, -1).permute(0, 1, 3, 2, 4, 5)
    merged = merged.reshape(FRAMES // PAIR, h // 2, w // 2, -1)
    n_patches = patches.shape[0] * patches.shape[1] * patches.shape[2]
    return n_patches, patches.shape[0], merged.shape[0] * merged.shape[1] * merged.shape[2]


def guess_patches():
    return 6912  # 8 x 24 x 36: the merge forgotten


def guess_per_frame():
    return 3456  # 16 x 24 x 36 / 4: every frame its own patch


def guess_one_pair():
    return 216  # 24 x 36 / 4: one frame pair


def guess_words():
    return "about two thousand"


@exercise("32.1", "predict_video_tokens")
def video_tokens(answer) -> str:
    """The number of LM tokens of the clip, counted by building its patches and merging them."""
    guess = as_number(attempt(answer), "predict_video_tokens()", " of tokens")
    n_patches, pairs, n_tokens = _video_tokens()
    seen = (
        f"the clip makes {pairs} frame pairs x 24 x 36 = {n_patches} patches, and the 2 x 2 "
        f"merge leaves {n_tokens} tokens ({n_tokens // (FRAMES // 2)} per second at 2 frames "
        "a second)"
    )
    if round(guess) != n_tokens:
        why = {
            n_patches: "that is the number of patches; the 2 x 2 merge concatenates four "
            "neighbours into one token, a quarter as many",
            FRAMES * (n_patches // pairs) // 4: "a patch spans two consecutive frames "
            "(temporal_patch_size = 2): the 16 frames give t = 8, not 16",
            FRAMES * (n_patches // pairs): "two merges are missing: a patch spans two consecutive "
            "frames (t = 8), and the 2 x 2 merge divides the patches by 4",
            n_tokens // pairs: "that is one frame pair; the 16 frames give t = 8 pairs",
        }.get(round(guess), "count t = F / 2, h = H / 14, w = W / 14, then divide t h w by 4")
        raise Incorrect(f"you predicted {guess:g} tokens; {seen}: {why}")
    return f"right: {seen}"


# --- 32.2 ----------------------------------------------------------------------------------------


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def _softmax_rows(logits: np.ndarray, axis: int = 1) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _zero_shot(
    i, P, s, *, norm_image=True, clip=True, unit_prompts=True, renorm=True, axis=1, exp=True
) -> torch.Tensor:
    """p(c | i) with prompt ensembling, in NumPy, with switches for the typical mistakes."""
    i, P = i.numpy(), P.numpy()
    i = _unit(i) if norm_image else i
    t = (_unit(P) if unit_prompts else P).mean(axis=1)  # (C, D)
    t = _unit(t) if renorm else t
    alpha = math.exp(s) if exp else s
    alpha = min(alpha, 100.0) if clip else alpha
    return torch.from_numpy(_softmax_rows(alpha * i @ t.T, axis))


def zero_shot_unnormalised_image(i, P, s):
    return _zero_shot(i, P, s, norm_image=False)


def zero_shot_unclipped(i, P, s):
    return _zero_shot(i, P, s, clip=False)


def zero_shot_raw_prompt_mean(i, P, s):
    return _zero_shot(i, P, s, unit_prompts=False)


def zero_shot_mean_not_renormalised(i, P, s):
    return _zero_shot(i, P, s, renorm=False)


def zero_shot_softmax_over_images(i, P, s):
    return _zero_shot(i, P, s, axis=0)


def zero_shot_log_scale_as_alpha(i, P, s):
    return _zero_shot(i, P, s, exp=False)


def zero_shot_average_probabilities(i, P, s):
    """Ensembling in probability space: one softmax per template, then their mean."""
    per_template = [_zero_shot(i, P[:, m : m + 1], s) for m in range(P.shape[1])]
    return torch.stack(per_template).mean(0)


WRONG_ZERO_SHOT = {
    "normalise the image embeddings too: i must be a unit vector, so that i^T t_c is a "
    "cosine": zero_shot_unnormalised_image,
    "clip the scale: alpha = min(exp(s), 100)": zero_shot_unclipped,
    "normalise each prompt embedding before averaging: a long prompt vector would otherwise "
    "outweigh the others": zero_shot_raw_prompt_mean,
    "normalise the mean of the unit prompt embeddings again: t_c is a unit "
    "vector": zero_shot_mean_not_renormalised,
    "the softmax runs over the classes of one image (each row sums to one), not over the "
    "images": zero_shot_softmax_over_images,
    "s is the log of the scale: alpha = exp(s)": zero_shot_log_scale_as_alpha,
    "CLIP averages the prompt embeddings, not the probabilities of the "
    "templates": zero_shot_average_probabilities,
}


@exercise("32.2", "zero_shot_predict")
def zero_shot(answer) -> str:
    """p(c | i) against NumPy, for prompts of uneven norms and a log-scale above the clip."""
    cases = (
        (321, 12, 5, 3, 8, math.log(1 / 0.07)),
        (322, 7, 10, 4, 16, 5.0),
        (323, 9, 3, 1, 4, 1.0),
    )
    for seed, N, C, M, D, s in cases:
        gen = torch.Generator().manual_seed(seed)
        i = _randn(gen, N, D) * (1 + torch.rand(N, 1, generator=gen, dtype=F64))
        P = _randn(gen, C, M, D) * (0.2 + 3 * torch.rand(C, M, 1, generator=gen, dtype=F64))
        want = _zero_shot(i, P, s)
        wrong = {fb: fn(i, P, s) for fb, fn in WRONG_ZERO_SHOT.items()}
        expect_answer(
            attempt(answer, i.clone(), P.clone(), s),
            want,
            f"zero_shot_predict(image_emb {tuple(i.shape)}, prompt_emb {tuple(P.shape)}, "
            f"log_scale={s:.3g})",
            wrong=wrong,
            atol=1e-10,
            rtol=1e-8,
        )
    return (
        "matches CLIP's zero-shot probabilities with prompt ensembling (unit prompts averaged, "
        "renormalised; alpha = min(e^s, 100)) for 3 cases, one above the clip"
    )


# --- 32.3 ----------------------------------------------------------------------------------------


def _cross_attention(x, z, attn, W_O=None):
    """O (the heads' outputs, before W_O) and C = O W_O of CrossAttn(LN(x), z), written out."""
    B, T, d = x.shape
    H = attn.num_heads
    x_hat = F.layer_norm(x, (d,), eps=1e-5)
    q = (x_hat @ attn.W_Q).view(B, T, H, -1).transpose(1, 2)  # (B, H, T, d_h)
    k = (z @ attn.W_K).view(B, z.shape[1], H, -1).transpose(1, 2)  # (B, H, T_v, d_h)
    v = (z @ attn.W_V).view(B, z.shape[1], H, -1).transpose(1, 2)
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)  # (B, H, T, T_v)
    O = (a @ v).transpose(1, 2).reshape(B, T, d)  # (B, T, d)
    return O, O @ (attn.W_O if W_O is None else W_O)


def _autograd(x, z, g, attn, grad_out):
    """dL/dg and dL/dW_O of L = sum(grad_out * X'), by autograd."""
    gate = torch.tensor(float(g), dtype=F64, requires_grad=True)
    W_O = attn.W_O.detach().clone().requires_grad_(True)
    _, C = _cross_attention(x, z, attn, W_O)
    out = x + torch.tanh(gate) * C
    dg, dW = torch.autograd.grad((grad_out * out).sum(), (gate, W_O))
    return dg, dW


def _no_grad_parts(x, z, attn):
    with torch.no_grad():
        return _cross_attention(x, z, attn)


def gate_grad_without_tanh_derivative(x, z, g, attn, grad_out):
    return (grad_out * _no_grad_parts(x, z, attn)[1]).sum()


def gate_grad_ignoring_upstream(x, z, g, attn, grad_out):
    return (1 - math.tanh(g) ** 2) * _no_grad_parts(x, z, attn)[1].sum()


def weight_grad_without_gate(x, z, g, attn, grad_out):
    O = _no_grad_parts(x, z, attn)[0]
    return torch.einsum("btd,bte->de", O, grad_out)


def weight_grad_transposed(x, z, g, attn, grad_out):
    O = _no_grad_parts(x, z, attn)[0]
    return math.tanh(g) * torch.einsum("btd,bte->ed", O, grad_out)


def weight_grad_from_output(x, z, g, attn, grad_out):
    C = _no_grad_parts(x, z, attn)[1]
    return math.tanh(g) * torch.einsum("btd,bte->de", C, grad_out)


WRONG_GATE = {
    "the gate enters as tanh(g): the chain rule adds the factor 1 - tanh(g)^2 (it is 1 only "
    "at g = 0)": gate_grad_without_tanh_derivative,
    "weigh the branch C by the upstream gradient: dL/dg = (1 - tanh^2 g) sum(G * C)": (
        gate_grad_ignoring_upstream
    ),
}
WRONG_WEIGHT = {
    "the branch is scaled by tanh(g), and so is every gradient inside it: at g = 0 W_O gets "
    "no gradient at all": weight_grad_without_gate,
    "dL/dW_O = tanh(g) O^T G sums over the tokens; this is its transpose": weight_grad_transposed,
    "W_O multiplies the heads' output O (before the projection), not the branch's output "
    "C = O W_O": weight_grad_from_output,
}


def _gated_case(seed: int, B: int, T: int, T_v: int, d: int, d_v: int, H: int):
    from ...attention.multihead import MultiHeadAttention  # the module a reader is given

    gen = torch.Generator().manual_seed(seed)
    attn = MultiHeadAttention(d, H, bias=False, d_kv=d_v).to(F64)
    with torch.no_grad():
        for w in (attn.W_Q, attn.W_K, attn.W_V, attn.W_O):
            w.copy_(_randn(gen, *w.shape) / math.sqrt(w.shape[0]))
    x, z, grad_out = _randn(gen, B, T, d), _randn(gen, B, T_v, d_v), _randn(gen, B, T, d)
    return x, z, attn, grad_out


@exercise("32.3", "gate_grad", "output_weight_grad")
def gated_gradients(gate_grad, output_weight_grad) -> str:
    """dL/dg and dL/dW_O of a gated cross-attention against autograd, at g = 0 and away."""
    for seed, shape, g in (
        (331, (2, 5, 7, 8, 6, 2), 0.0),
        (332, (3, 4, 9, 12, 5, 3), 0.8),
        (333, (1, 6, 3, 4, 4, 1), -1.5),
    ):
        x, z, attn, grad_out = _gated_case(seed, *shape)
        dg, dW = _autograd(x, z, g, attn, grad_out)
        args = (x.clone(), z.clone(), g, attn, grad_out.clone())
        label = f"for g = {g:g}"
        expect_answer(
            attempt(gate_grad, *args),
            dg,
            f"gate_grad(...) {label}",
            wrong={fb: fn(x, z, g, attn, grad_out) for fb, fn in WRONG_GATE.items()},
            atol=1e-10,
            rtol=1e-8,
        )
        expect_answer(
            attempt(output_weight_grad, *args),
            dW,
            f"output_weight_grad(...) {label}",
            wrong={fb: fn(x, z, g, attn, grad_out) for fb, fn in WRONG_WEIGHT.items()},
            atol=1e-10,
            rtol=1e-8,
        )
    return (
        "dL/dg = (1 - tanh^2 g) sum(G * C) and dL/dW_O = tanh(g) O^T G match autograd at "
        "g = 0, 0.8 and -1.5; at g = 0 the weight gradient is exactly zero"
    )


# --- 32.4 ----------------------------------------------------------------------------------------


def _energies(z: torch.Tensor) -> np.ndarray:
    """Eigenvalues of Z_b^T Z_b per image, largest first: (B, min(T_v, d_v))."""
    Z = z.numpy()
    k = min(Z.shape[1], Z.shape[2])
    ev = np.linalg.eigvalsh(np.einsum("btd,bte->bde", Z, Z))[:, ::-1][:, :k]
    return np.clip(ev, 0.0, None)


def _rank_errors(z, qs, *, relative=True, squared=False, smallest=False, pooled=False):
    """Mean over images of ||Z - Z_Q|| / ||Z|| for the best rank-Q Z_Q, with switches for the
    typical mistakes (smallest: keep the Q smallest singular values instead)."""
    if pooled:
        z = z.reshape(1, -1, z.shape[-1])  # all tokens of all images in one matrix
    ev = _energies(z)  # (B, k), largest first
    total = ev.sum(1)
    out = []
    for Q in qs:
        kept = ev[:, ev.shape[1] - Q :].sum(1) if smallest else ev[:, :Q].sum(1)
        lost = np.clip(total - kept, 0.0, None)  # the energy of the dropped directions
        err = lost / total if relative else lost
        out.append(float(np.mean(err if squared else np.sqrt(err))))
    return out


def rank_errors_absolute(z, qs):
    return _rank_errors(z, qs, relative=False)


def rank_errors_squared(z, qs):
    return _rank_errors(z, qs, squared=True)


def rank_errors_smallest(z, qs):
    return _rank_errors(z, qs, smallest=True)


def rank_errors_pooled(z, qs):
    return _rank_errors(z, qs, pooled=True)


WRONG_RANK = {
    "the error is relative: divide ||Z - Z_Q|| by ||Z||": rank_errors_absolute,
    "report the norm ratio ||Z - Z_Q|| / ||Z||, not its square (the fraction of the energy "
    "lost)": rank_errors_squared,
    "keep the Q LARGEST singular values (Eckart-Young): dropping the largest ones is the "
    "worst reconstruction, not the best": rank_errors_smallest,
    "one SVD per image: each image's tokens are reconstructed from its own Q "
    "tokens": rank_errors_pooled,
}


def _token_case(seed: int, B: int, T_v: int, d_v: int) -> torch.Tensor:
    """Tokens with a power-law spectrum: Z_b = U diag(k^-1) V^T + a little noise."""
    gen = torch.Generator().manual_seed(seed)
    k = min(T_v, d_v)
    U = torch.linalg.qr(_randn(gen, B, T_v, k))[0]
    V = torch.linalg.qr(_randn(gen, B, d_v, k))[0]
    s = torch.arange(1, k + 1, dtype=F64) ** -1.0
    noise = 0.01 * _randn(gen, B, T_v, d_v)
    return U @ torch.diag_embed(s.expand(B, k)) @ V.transpose(1, 2) + noise


@exercise("32.4", "rank_q_errors")
def rank_q(answer) -> str:
    """The best rank-Q relative errors against the eigenvalues of Z^T Z."""
    z = _token_case(341, 6, 48, 32)
    qs = [1, 2, 4, 8, 16, 32]
    want = _rank_errors(z, qs)
    got = attempt(answer, z.clone(), list(qs))
    expect(
        isinstance(got, (list, tuple)) and len(got) == len(qs),
        f"rank_q_errors(z, qs) should return a list of {len(qs)} numbers, one per Q, got "
        f"{type(got).__name__}",
    )
    expect_answer(
        torch.tensor([float(v) for v in got], dtype=F64),
        torch.tensor(want, dtype=F64),
        f"rank_q_errors(z, {qs}) for 6 images of 48 tokens of width 32",
        wrong={fb: torch.tensor(fn(z, qs), dtype=F64) for fb, fn in WRONG_RANK.items()},
        atol=1e-8,
        rtol=1e-6,
    )
    shown = ", ".join(f"Q = {q}: {e:.3f}" for q, e in zip(qs, want, strict=True))
    return f"matches the eigenvalues of Z^T Z; tokens with singular values 1/k give {shown}"


MISTAKES = {
    "32.1": [
        (guess_patches, "2 x 2 merge"),
        (guess_per_frame, "two consecutive frames"),
        (guess_one_pair, "one frame pair"),
        (guess_words, "should return a number"),
    ],
    "32.2": [
        (zero_shot_unnormalised_image, "normalise the image embeddings"),
        (zero_shot_unclipped, "clip the scale"),
        (zero_shot_raw_prompt_mean, "before averaging"),
        (zero_shot_mean_not_renormalised, "normalise the mean"),
        (zero_shot_softmax_over_images, "not over the images"),
        (zero_shot_log_scale_as_alpha, "alpha = exp(s)"),
        (zero_shot_average_probabilities, "not the probabilities"),
    ],
    "32.3": [
        ((gate_grad_without_tanh_derivative, _ref("32.3", "output_weight_grad")), "1 - tanh"),
        ((gate_grad_ignoring_upstream, _ref("32.3", "output_weight_grad")), "upstream gradient"),
        ((_ref("32.3", "gate_grad"), weight_grad_without_gate), "no gradient at all"),
        ((_ref("32.3", "gate_grad"), weight_grad_transposed), "its transpose"),
        ((_ref("32.3", "gate_grad"), weight_grad_from_output), "before the projection"),
    ],
    "32.4": [
        (rank_errors_absolute, "the error is relative"),
        (rank_errors_squared, "not its square"),
        (rank_errors_smallest, "LARGEST"),
        (rank_errors_pooled, "one SVD per image"),
    ],
}
