"""The capstone (chapter 44): the budget of a model in closed form, and the glue of the pipeline.

The budget formulas: the parameters of a Llama-form decoder from its shape (eq. 44.1), the
training compute C ~ 6ND with the compute-optimal rule of thumb D_opt ~ 20N, N_opt ~ sqrt(C/120)
(eq. 44.2), and the memory of training, ~16 bytes per parameter, and of a KV cache,
2 L H_kv d_h T bytes per element (eq. 44.3). :func:`parameter_gap` names what eq. 44.1 leaves
out, term by term, so that the formula plus the gap is the exact count.

The pipeline of the chapter calls the module that owns each stage (the task's character
vocabulary, the stored pretrained decoders, :mod:`~mlbook.posttraining.sft` and
:mod:`~mlbook.posttraining.lora`, :mod:`~mlbook.posttraining.dpo`,
:mod:`~mlbook.systems.quantization`, the KV cache of :mod:`mlbook.models.generate`,
:mod:`~mlbook.systems.decoding`, :mod:`~mlbook.systems.retrieval`'s pass@k); this module adds only
what joins them: held-out text and its perplexity, the measured bytes of a training state, the
timing of decoding with and without the cache, and pass@k over a set of problems.

Shape legend
    V vocabulary;  d = d_model;  L layers;  H query heads;  H_kv = G key/value heads;  d_h = d / H
    h = d_ff (feed-forward width);  N parameters;  D training tokens;  C FLOPs (2 per multiply-add)
    T tokens per sequence;  B sequences;  b bytes per element;  n samples per problem
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch

from ..attention.kv_cache import kv_cache_bytes
from ..models import counting, training
from ..models.config import DecoderConfig
from ..models.decoder import Decoder
from ..models.generate import generate
from ..posttraining import task
from ..validation import index_tensor, integer, positive, positive_int
from .distributed import adam_bytes_per_param, storage_bytes
from .retrieval import pass_at_k

__all__ = [
    "TOKENS_PER_PARAMETER",
    "approx_parameters",
    "parameter_gap",
    "chinchilla_tokens",
    "chinchilla_params",
    "training_memory",
    "kv_cache_memory",
    "budget",
    "measured_training_bytes",
    "heldout_tokens",
    "perplexity",
    "decode_seconds",
    "pass_at_k_curve",
    "pass_at_k_curve_naive",
]

#: D_opt / N of the compute-optimal rule of thumb (Hoffmann et al., 2022).
TOKENS_PER_PARAMETER = 20


# --- eq. 44.1: parameters from the shape -------------------------------------------------------


def approx_parameters(config: DecoderConfig) -> int:
    """N ~ L (2 d^2 + 2 d H_kv d_h + 8 d^2) + V d. Implements eq. 44.1.

    Per layer: W_q and W_o (d^2 each), W_k and W_v (d H_kv d_h each), a feed-forward block of
    8 d^2 (GELU with h = 4d, or SwiGLU with h = 8d/3); one embedding table.
    """
    c = counting._config(config)
    d, L, kv = c.d_model, c.n_layers, c.n_kv_heads * c.head_dim
    return L * (2 * d * d + 2 * d * kv + 8 * d * d) + c.vocab_size * d


def parameter_gap(config: DecoderConfig) -> dict[str, int]:
    """What eq. 44.1 leaves out, by term: the exact count is ``approx_parameters + sum(gap)``.

    "feed-forward width": L (ffn - 8 d^2), the block's real width (and its biases) against 8 d^2;
    "attention biases"; "norms": the norm gains (and LayerNorm biases); "untied head and
    positions": a second V d table and a learned position table. Attention-only models.
    """
    c = counting._config(config)
    if "ssm" in c.layer_kinds:
        raise ValueError("parameter_gap covers attention layers only (config has SSM layers)")
    d, L, kv = c.d_model, c.n_layers, c.n_kv_heads * c.head_dim
    body = counting.count_parameters(c, embeddings=False)
    mixer, ffn = counting.mixer_parameters(c), counting.ffn_parameters(c)
    return {
        "feed-forward width": L * (ffn - 8 * d * d),
        "attention biases": L * (mixer - 2 * d * d - 2 * d * kv),
        "norms": body - L * (mixer + ffn),
        "untied head and positions": counting.count_parameters(c) - body - c.vocab_size * d,
    }


# --- eq. 44.2: compute and the compute-optimal allocation ----------------------------------------


def chinchilla_tokens(n_params: float) -> float:
    """D_opt ~ 20 N training tokens for N parameters. Implements eq. 44.2."""
    return TOKENS_PER_PARAMETER * positive(n_params, "n_params")


def chinchilla_params(compute: float) -> float:
    """N_opt ~ sqrt(C / 120): C = 6 N D with D = 20 N gives C = 120 N^2. Implements eq. 44.2."""
    return math.sqrt(positive(compute, "compute") / (6 * TOKENS_PER_PARAMETER))


# --- eq. 44.3: memory ----------------------------------------------------------------------------


def training_memory(n_params: float, bytes_per_param: int | None = None) -> float:
    """M_train ~ 16 N bytes: weights, gradients, master copy and Adam's two moments.

    bytes_per_param: None takes mixed-precision Adam's 2 + 2 + 4 + 4 + 4 = 16 bytes (eq. 41.1,
    :func:`~mlbook.systems.distributed.adam_bytes_per_param`); activations are not counted.
    Implements eq. 44.3.
    """
    b = adam_bytes_per_param() if bytes_per_param is None else bytes_per_param
    return positive(n_params, "n_params") * positive_int(b, "bytes_per_param")


def kv_cache_memory(
    config: DecoderConfig, seq_len: int, batch: int = 1, bytes_per_element: int = 2
) -> int:
    """M_KV = 2 L H_kv d_h T b bytes per sequence (times the batch). Implements eq. 44.3.

    The same count as eq. 24.2 (:func:`~mlbook.attention.kv_cache.kv_cache_bytes`), read off the
    model's configuration.
    """
    c = counting._config(config)
    return kv_cache_bytes(c.n_layers, c.n_kv_heads, c.head_dim, seq_len, bytes_per_element, batch)


def budget(
    config: DecoderConfig, n_tokens: float | None = None, seq_len: int | None = None
) -> dict[str, float]:
    """The budget of eqs. 44.1-44.3 for a configuration, trained on ``n_tokens`` tokens
    (None: the compute-optimal 20 N) and serving sequences of ``seq_len`` tokens (None:
    max_seq_len) from a 2-byte cache. Returns N, D, C, N_opt for that C, M_train and M_KV."""
    c = counting._config(config)
    N = approx_parameters(c)
    D = chinchilla_tokens(N) if n_tokens is None else positive(n_tokens, "n_tokens")
    C = 6 * N * D
    T = c.max_seq_len if seq_len is None else seq_len
    return {
        "N": N,
        "D": D,
        "C": C,
        "N_opt": chinchilla_params(C),
        "M_train": training_memory(N),
        "M_KV": kv_cache_memory(c, T),
    }


def measured_training_bytes(model: torch.nn.Module, optimizer) -> dict[str, int]:
    """Bytes of a training state as allocated: weights, gradients and the optimiser's state.

    optimizer: the book's :class:`~mlbook.nn.optim.Optimizer` (its ``state``, one dict of
    tensors per parameter) or a ``torch.optim`` optimizer (its step counters count as state),
    after a backward pass and a step.
    """
    params = list(model.parameters())
    if any(p.grad is None for p in params):
        raise ValueError("model has parameters without .grad: run a backward pass and a step first")
    state = optimizer.state
    states = list(state) if isinstance(state, list) else list(state.values())
    tensors = [t for s in states for t in s.values() if isinstance(t, torch.Tensor)]
    return {
        "weights": storage_bytes(params),
        "gradients": storage_bytes(p.grad for p in params),
        "optimizer state": storage_bytes(tensors),
    }


# --- the glue of the pipeline --------------------------------------------------------------------


def heldout_tokens(n_sentences: int = 200, n_sums: int = 200, seed: int = 1) -> torch.Tensor:
    """(N,) ids of fresh text from the pretraining distribution (sentences and noisy sums), drawn
    with a seed other than the pretraining's (0)."""
    return task.encode(task.pretraining_text(n_sentences, n_sums, seed=seed))


def perplexity(model: Decoder, tokens: torch.Tensor) -> float:
    """exp(mean next-token loss) over consecutive windows of max_seq_len tokens of ``tokens``."""
    return math.exp(training.evaluate(model, tokens))


def decode_seconds(
    model: Decoder, prompt: torch.Tensor, n_new: int, use_cache: bool, reps: int = 1
) -> float:
    """Wall-clock seconds to continue ``prompt`` (B, P) greedily by ``n_new`` tokens (the best
    of ``reps`` runs), with or without the KV cache."""
    best = math.inf
    for _ in range(positive_int(reps, "reps")):
        t0 = time.perf_counter()
        generate(model, prompt, n_new, use_cache=use_cache)
        best = min(best, time.perf_counter() - t0)
    return best


def _correct_counts(model, pairs, n, generator) -> torch.Tensor:
    tokens, _ = task.sample(model, pairs, n, 1.0, generator)  # (len(pairs) n, 8)
    return task.rewards(tokens).view(len(pairs), n).sum(1).long()  # (problems,)


@torch.no_grad()
def pass_at_k_curve(
    model: Decoder,
    pairs: Sequence[tuple[int, int]],
    n: int,
    ks: Sequence[int],
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """pass@k (eq. 43.3) of ``model`` at temperature 1, averaged over ``pairs``, for each k.

    Samples n completions per problem once and counts the right ones, c. Returns the (len(ks),)
    float64 pass@k values and the (problems,) counts c.
    """
    n = positive_int(n, "n")
    ks = [integer(k, "k", low=1, high=n) for k in ks]
    c = _correct_counts(model, pairs, n, generator)
    full = torch.full_like(c, n)
    return torch.stack([pass_at_k(full, c, k).mean() for k in ks]), c


def pass_at_k_curve_naive(c: torch.Tensor, n: int, ks: Sequence[int]) -> torch.Tensor:
    """Reference for :func:`pass_at_k_curve` from the counts c (problems,): for each k, one minus
    the fraction of k-subsets of the n samples with no right one, C(n - c, k) / C(n, k), in
    exact integers (``math.comb``), averaged over problems in Python."""
    c = index_tensor(c, "c", n + 1, ndim=1)
    out = []
    for k in ks:
        fails = [math.comb(n - int(ci), k) / math.comb(n, k) for ci in c]  # all k samples wrong
        out.append(1 - sum(fails) / len(fails))
    return torch.tensor(out, dtype=torch.float64)
