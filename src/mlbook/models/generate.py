"""Decoding: the one ``generate`` (greedy, temperature, top-k, top-p; with or without a KV cache).

Each step turns the last position's logits z into p = softmax(z / tau) after optional top-k and
top-p masking (eq. 23.5) and draws the next token (ancestral sampling from eq. 23.1); tau = 0 is
greedy decoding. With the cache, the prompt is run once (prefill) and each later step feeds only
the newest token (eq. 24.1); without it, each step recomputes the whole context. Both give the
same tokens. Naive references: :func:`top_k_filter_naive`, :func:`top_p_filter_naive`.

Shape legend
    B batch;  P prompt length;  V vocabulary;  logits (..., V);  prompt (B, P) int
"""

from __future__ import annotations

import statistics
import time

import torch

from ..nn.softmax import softmax
from ..validation import float_tensor, index_tensor, integer, nonempty, number, positive
from .decoder import Decoder

__all__ = [
    "top_k_filter",
    "top_k_filter_naive",
    "top_p_filter",
    "top_p_filter_naive",
    "sampling_probs",
    "generate",
    "decode_step_seconds",
]


def top_k_filter(logits: torch.Tensor, top_k: int | None) -> torch.Tensor:
    """Keep the k largest logits of each row, set the others to -inf (``None``: keep all).

    Ties at the k-th value are all kept (the threshold is the k-th largest value), as in
    Hugging Face's ``TopKLogitsWarper``. logits: (..., V); top_k in [1, V] or None.
    """
    float_tensor(logits, "logits", min_ndim=1)
    if top_k is None:
        return logits
    k = integer(top_k, "top_k", low=1, high=logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1) the k-th largest
    return logits.masked_fill(logits < kth, float("-inf"))


def top_k_filter_naive(logits: torch.Tensor, top_k: int | None) -> torch.Tensor:
    """:func:`top_k_filter` by sorting each row in Python (the slow reference)."""
    float_tensor(logits, "logits", min_ndim=1)
    if top_k is None:
        return logits
    k = integer(top_k, "top_k", low=1, high=logits.shape[-1])
    rows = logits.reshape(-1, logits.shape[-1])  # (R, V)
    out = rows.clone()
    for r in range(rows.shape[0]):
        kth = sorted(rows[r].tolist(), reverse=True)[k - 1]
        for i in range(rows.shape[1]):
            if rows[r, i].item() < kth:
                out[r, i] = float("-inf")
    return out.reshape(logits.shape)


def top_p_filter(logits: torch.Tensor, top_p: float | None) -> torch.Tensor:
    """Nucleus filter: keep the most probable tokens until their mass reaches p, mask the rest.

    A token survives when the probability of the tokens ranked above it is < p, so the kept set
    is the smallest whose mass is >= p (at least one token), as ``TopPLogitsWarper``.
    logits: (..., V); top_p in (0, 1] or None.
    """
    float_tensor(logits, "logits", min_ndim=1)
    if top_p is None:
        return logits
    p = number(top_p, "top_p", 0.0, 1.0, open_low=True)
    sorted_z, order = logits.sort(dim=-1, descending=True)  # (..., V)
    probs = torch.softmax(sorted_z.double(), dim=-1)
    before = probs.cumsum(-1) - probs  # (..., V) mass of the tokens ranked higher
    ranked_drop = before >= p
    drop = ranked_drop.scatter(-1, order, ranked_drop)  # every entry rewritten: vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def top_p_filter_naive(logits: torch.Tensor, top_p: float | None) -> torch.Tensor:
    """:func:`top_p_filter` row by row: add tokens in order of probability until mass >= p."""
    float_tensor(logits, "logits", min_ndim=1)
    if top_p is None:
        return logits
    p = number(top_p, "top_p", 0.0, 1.0, open_low=True)
    rows = logits.reshape(-1, logits.shape[-1])  # (R, V)
    out = torch.full_like(rows, float("-inf"))
    for r in range(rows.shape[0]):
        probs = torch.softmax(rows[r].double(), dim=-1).tolist()
        mass = 0.0
        for i in sorted(range(len(probs)), key=lambda j: -probs[j]):
            if mass >= p:
                break
            out[r, i] = rows[r, i]
            mass += probs[i]
    return out.reshape(logits.shape)


def sampling_probs(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """p = softmax(z / tau) after top-k, then top-p masking of z / tau (eq. 23.5).

    Top-k does not care whether it comes before or after dividing by tau > 0 (the order of the
    logits stays); top-p does, and sees the tempered distribution, as in Hugging Face.
    Returns (..., V) probabilities, exactly 0 where masked.
    """
    tau = positive(temperature, "temperature")
    return softmax(top_p_filter(top_k_filter(logits / tau, top_k), top_p), dim=-1)


def generate(
    model: Decoder,
    prompt: torch.Tensor,
    n_new: int,
    generator: torch.Generator | None = None,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    use_cache: bool = True,
) -> torch.Tensor:
    """Continue ``prompt`` (B, P) by ``n_new`` tokens; returns (B, P + n_new).

    temperature 0 takes the argmax (greedy); tau > 0 samples from :func:`sampling_probs` with
    ``generator`` (None: torch's global generator). With ``use_cache`` the prompt fills a KV cache
    (prefill) and each step feeds the newest token only (eq. 24.1); without it each step runs
    the model over the whole context. A context longer than ``max_seq_len`` is cropped to its
    last max_seq_len tokens and recomputed at every step, with or without the cache.
    """
    if not isinstance(model, Decoder):
        raise TypeError(f"model must be a Decoder, got {type(model).__name__}")
    out = nonempty(index_tensor(prompt, "prompt", model.config.vocab_size, ndim=2), "prompt")
    n_new = integer(n_new, "n_new", low=0)
    tau = number(temperature, "temperature", 0.0)
    V = model.config.vocab_size
    if top_k is not None:
        integer(top_k, "top_k", low=1, high=V)
    if top_p is not None:
        number(top_p, "top_p", 0.0, 1.0, open_low=True)
    T_max = model.config.max_seq_len
    use_cache = use_cache and n_new > 1  # one new token: the prefill is the only pass
    cache = model.new_cache(out.shape[0], min(out.shape[1] + n_new, T_max)) if use_cache else None
    fed = 0  # tokens of `out` that the cache holds
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for _ in range(n_new):
            if cache is not None and out.shape[1] <= T_max:
                h = model.hidden(out[:, fed:], cache)  # prefill, then one token per step
                fed = out.shape[1]
            else:
                h = model.hidden(out[:, -T_max:])  # the whole (cropped) context
            z = model.logits(h[:, -1])  # (B, V) next-token logits
            if tau == 0:
                nxt = z.argmax(-1, keepdim=True)  # (B, 1)
            else:
                p = sampling_probs(z.double(), tau, top_k, top_p)  # (B, V)
                nxt = torch.multinomial(p, 1, generator=generator)  # (B, 1)
            out = torch.cat([out, nxt], dim=1)
    model.train(was_training)
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def decode_step_seconds(
    model: Decoder,
    context_len: int,
    use_cache: bool,
    reps: int = 3,
    generator: torch.Generator | None = None,
) -> float:
    """Wall-clock seconds of one decoding step at a context length (median of ``reps``).

    With the cache: one token against context_len - 1 cached positions (the prefill is not
    timed); without: a pass over all context_len tokens, the head on the last. CUDA is
    synchronised before the clock is read.
    """
    integer(context_len, "context_len", low=2, high=model.config.max_seq_len)
    integer(reps, "reps", low=1)
    dev = model.embedding.device
    tokens = torch.randint(0, model.config.vocab_size, (1, context_len), generator=generator)
    tokens = tokens.to(dev)
    times = []
    with torch.no_grad():
        for _ in range(reps + 1):  # the first run warms up and is discarded
            if use_cache:
                cache = model.new_cache(1, context_len)
                model.hidden(tokens[:, :-1], cache)
                _sync(dev)
                t0 = time.perf_counter()
                model.logits(model.hidden(tokens[:, -1:], cache)[:, -1])
            else:
                _sync(dev)
                t0 = time.perf_counter()
                model.logits(model.hidden(tokens)[:, -1])
            _sync(dev)
            times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])
