"""Checks of the exercises of chapter 44 (the capstone: a model's budget, the pipeline).

The references are independent of :mod:`mlbook.systems.capstone`: the KV cache of 44.1 is
allocated on PyTorch's ``meta`` device and its bytes read off the buffers; the budget of 44.2
lists every weight matrix of a Llama-form block by its shape; the perplexities of 44.3 come from
an absmax rounding and a cross-entropy written here, not from chapter 40's quantiser or the
package's evaluation loop.

Each typical wrong answer is written once, as a function below; ``MISTAKES`` lists them (the
tests feed each to its check).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

from . import (
    Incorrect,
    as_number,
    attempt,
    exercise,
    expect,
    expect_answer,
    expect_guess,
    expect_tuple,
    is_close,
)

GIB = 2**30

# --- 44.1 ----------------------------------------------------------------------------------------


def guess_all_heads():
    return 10.0


def guess_keys_only():
    return 0.625


def guess_float32():
    return 2.5


@exercise("44.1", "predict_kv_cache_gib")
def kv_cache_gib(answer) -> str:
    """A 16-bit cache of Llama-2-70B's shape on the meta device; its bytes in GiB."""
    from ...attention.kv_cache import KVCache

    guess = as_number(attempt(answer), "predict_kv_cache_gib()", " of GiB")
    cache = KVCache(80, 1, 8, 128, 4096, dtype=torch.float16, device="meta")
    want = cache.nbytes / GIB
    expect_guess(
        guess,
        want,
        "predict_kv_cache_gib()",
        {
            8 * want: "that counts all 64 query heads; the cache keeps the 8 key/value heads only "
            "(grouped-query attention)",
            want / 2: "that is the keys alone; the cache holds keys and values (the factor 2)",
            2 * want: "that is a float32 cache; 16-bit numbers take 2 bytes",
        },
    )
    return (
        f"the cache PyTorch allocates, (80 layers, 8 heads, 4096 tokens, 128) for keys and for "
        f"values in float16, holds {want:.3g} GiB; with all 64 heads it would be {8 * want:.3g} GiB"
    )


# --- 44.2 ----------------------------------------------------------------------------------------


def _matrices(V, d, L, H, H_kv) -> list[tuple[int, int]]:
    """Every weight matrix of a Llama-form decoder (SwiGLU of width 8d/3 counted as 8 d^2, as two
    (d, 4d) matrices would be), by shape."""
    dh = d // H
    block = [(d, d), (d, H_kv * dh), (d, H_kv * dh), (d, d), (d, 4 * d), (4 * d, d)]
    return [(V, d)] + block * L


def _budget(V, d, L, H, H_kv, T):
    N = sum(r * c for r, c in _matrices(V, d, L, H, H_kv))
    D = 20 * N
    cache = 2 * L * H_kv * (d // H) * T * 2  # keys and values, 2 bytes each
    return N, D, 6 * N * D, 16 * N, cache


def budget_without_embedding(V, d, L, H, H_kv, T):
    N, *_ = _budget(V, d, L, H, H_kv, T)
    N -= V * d
    return N, 20 * N, 120 * N * N, 16 * N, 2 * L * H_kv * (d // H) * T * 2


def budget_all_heads(V, d, L, H, H_kv, T):
    return _budget(V, d, L, H, H, T)


def budget_forward_only(V, d, L, H, H_kv, T):
    N, D, C, M, K = _budget(V, d, L, H, H_kv, T)
    return N, D, C / 3, M, K


def budget_cache_without_two(V, d, L, H, H_kv, T):
    N, D, C, M, K = _budget(V, d, L, H, H_kv, T)
    return N, D, C, M, K / 2


_WRONG_BUDGET = {
    "the embedding table V d is part of N (eq. 44.1)": budget_without_embedding,
    "W_k and W_v have H_kv d_h columns, not d: only the key/value heads count": budget_all_heads,
    "C = 6 N D counts the backward pass too (2 FLOPs forward, 4 backward per parameter and "
    "token)": budget_forward_only,
    "the cache holds keys and values: the factor 2 of eq. 44.3 is missing": (
        budget_cache_without_two
    ),
}

_SHAPES = [(32000, 4096, 32, 32, 32, 4096), (32000, 8192, 80, 64, 8, 4096), (41, 64, 2, 4, 1, 64)]


@exercise("44.2", "model_budget")
def model_budget(fn) -> str:
    names = ("N", "D_opt", "C", "M_train", "M_KV")
    for shape in _SHAPES:
        what = f"model_budget{shape}"
        got = expect_tuple(attempt(fn, *shape, name="model_budget"), what, names)
        for i, name in enumerate(names):
            wrong = {fb: w(*shape)[i] for fb, w in _WRONG_BUDGET.items()}
            wrong = {fb: v for fb, v in wrong.items() if v != _budget(*shape)[i]}
            expect_answer(
                as_number(got[i], f"{what}[{i}] ({name})"),
                float(_budget(*shape)[i]),
                f"{what}: {name}",
                wrong=wrong,
                atol=0,
                rtol=1e-9,
            )
    n7 = _budget(*_SHAPES[0])[0]
    return (
        f"N, D_opt, C, M_train and M_KV agree with a matrix-by-matrix count for Llama-2-7B "
        f"(N = {n7 / 1e9:.3g}B), Llama-2-70B (GQA) and the book's decoder with one key/value head"
    )


# --- 44.3 ----------------------------------------------------------------------------------------


def _round_absmax(W: torch.Tensor, bits: int, per_channel: bool) -> torch.Tensor:
    levels = 2 ** (bits - 1) - 1
    m = W.abs().amax(dim=0, keepdim=True) if per_channel else W.abs().max()  # (1, d_out) or ()
    s = torch.where(m > 0, m, torch.ones_like(m)) / levels
    return torch.clamp(torch.round(W / s), -levels, levels) * s


def _perplexity(model, tokens) -> float:
    T = model.config.max_seq_len
    n = (tokens.numel() - 1) // T
    x, y = tokens[: n * T].view(n, T), tokens[1 : n * T + 1].view(n, T)  # (n, T)
    with torch.no_grad():
        logits = model(x).double()  # (n, T, V)
    return math.exp(F.cross_entropy(logits.flatten(0, 1), y.flatten()).item())


def _quantised(model, bits, per_channel):
    out = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in out.named_parameters():
            if name.startswith("blocks.") and p.dim() == 2:
                p.copy_(_round_absmax(p, bits, per_channel))
    return out


def _sweep(model, tokens, bits, granularity):
    return [_perplexity(_quantised(model, b, granularity == "channel"), tokens) for b in bits]


def sweep_every_matrix(model, tokens, bits, granularity):
    out = []
    for b in bits:
        q = copy.deepcopy(model)
        with torch.no_grad():
            for p in q.parameters():
                if p.dim() == 2:
                    p.copy_(_round_absmax(p, b, granularity == "channel"))
        out.append(_perplexity(q, tokens))
    return out


def sweep_granularity_swapped(model, tokens, bits, granularity):
    return _sweep(model, tokens, bits, "tensor" if granularity == "channel" else "channel")


def sweep_log_perplexity(model, tokens, bits, granularity):
    return [math.log(p) for p in _sweep(model, tokens, bits, granularity)]


def sweep_in_place(model, tokens, bits, granularity):
    from ...systems import quantization

    out = []
    for b in bits:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.startswith("blocks.") and p.dim() == 2:
                    p.copy_(quantization.fake_quantize(p, b, granularity))
        out.append(_perplexity(model, tokens))
    return out


def _agrees(got, want) -> bool:
    try:
        return is_close(got, torch.tensor(want, dtype=torch.float64), atol=1e-8, rtol=1e-4)
    except Incorrect:
        return False


@exercise("44.3", "perplexity_by_bits")
def perplexity_by_bits(fn) -> str:
    from ...models import checkpoints
    from ...posttraining import task

    model = checkpoints.load("base")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tokens = task.encode(task.pretraining_text(20, 20, seed=5))
    bits = [8, 4, 3, 2]
    measured = {}
    for granularity in ("channel", "tensor"):
        what = f'perplexity_by_bits(model, tokens, {bits}, "{granularity}")'
        got = attempt(fn, model, tokens, bits, granularity, name="perplexity_by_bits")
        expect(
            all(torch.equal(v, model.state_dict()[k]) for k, v in before.items()),
            f"{what} changed the model's weights: quantise a copy (quantize_decoder returns one)",
        )
        want = _sweep(model, tokens, bits, granularity)
        measured[granularity] = want
        if _agrees(got, want):  # right: the typical mistakes need not be computed
            continue
        wrong = {
            "quantise the blocks' matrices only; the embedding and the head stay in full "
            "precision": sweep_every_matrix(model, tokens, bits, granularity),
            "per channel and per tensor are swapped": sweep_granularity_swapped(
                model, tokens, bits, granularity
            ),
            "return the perplexity, exp of the mean loss, not the loss": sweep_log_perplexity(
                model, tokens, bits, granularity
            ),
        }
        expect_answer(got, torch.tensor(want, dtype=torch.float64), what, wrong=wrong, rtol=1e-4)
    return (
        "perplexity of the stored base model at 8/4/3/2 bits, one scale per channel: "
        + "/".join(f"{p:.3g}" for p in measured["channel"])
        + "; one scale per tensor: "
        + "/".join(f"{p:.3g}" for p in measured["tensor"])
    )


MISTAKES = {
    "44.1": [
        (guess_all_heads, "all 64 query heads"),
        (guess_keys_only, "keys and values"),
        (guess_float32, "float32"),
    ],
    "44.2": [
        (budget_without_embedding, "embedding table"),
        (budget_all_heads, "H_kv d_h columns"),
        (budget_forward_only, "backward pass"),
        (budget_cache_without_two, "factor 2"),
    ],
    "44.3": [
        (sweep_every_matrix, "blocks' matrices only"),
        (sweep_granularity_swapped, "swapped"),
        (sweep_log_perplexity, "not the loss"),
        (sweep_in_place, "changed the model's weights"),
    ],
}
