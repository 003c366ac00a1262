"""Training the decoder: the next-token loss, batches, evaluation and the training loop (ch. 23).

A model defines p(x_1..x_T) = prod_t p(x_t | x_<t) (eq. 23.1), all factors from one causal
pass; it is trained on the mean next-token cross-entropy (eq. 23.3) with AdamW, the linear
warmup of eq. 23.4 and a cosine decay (:func:`mlbook.nn.schedules.warmup_cosine`). Naive
references: :func:`lm_loss_naive` (term by term) and :func:`sequence_log_prob_naive` (one pass
per prefix).

Shape legend
    B batch;  T window (context) length;  V vocabulary;  N tokens in a stream
    tokens, targets (B, T) int;  logits (B, T, V);  data (N,) int
"""

from __future__ import annotations

import torch

from ..nn.schedules import warmup_cosine
from ..nn.softmax import cross_entropy, softmax
from ..validation import float_tensor, index_tensor, positive, positive_int, shape_is
from .decoder import Decoder

__all__ = [
    "lm_loss",
    "lm_loss_naive",
    "sequence_log_prob",
    "sequence_log_prob_naive",
    "get_batch",
    "evaluate",
    "train",
]


def _logits_targets(logits, targets) -> torch.Tensor:
    """Checked (B, T, V) logits and (B, T) targets in [0, V); returns the targets as int64."""
    float_tensor(logits, "logits", ndim=3)
    index_tensor(targets, "targets", logits.shape[-1])
    return shape_is(targets, "targets", logits.shape[:2]).long()


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over all B T positions, in nats. Implements eq. 23.3.

    logits: (B, T, V), row (b, t) computed from the tokens up to t; targets: (B, T), the tokens
    at t + 1 (the inputs shifted left by one).
    """
    return cross_entropy(logits, _logits_targets(logits, targets), dim=-1)


def lm_loss_naive(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Eq. 23.3 term by term: -1/(BT) sum_{b,t} log softmax(Z_{b,t})_{y_{b,t}} (slow loops)."""
    targets = _logits_targets(logits, targets)
    B, T, _ = logits.shape
    total = logits.new_zeros(())
    for b in range(B):
        for t in range(T):
            total = total - torch.log(softmax(logits[b, t])[targets[b, t]])
    return total / (B * T)


def _sequences(model, tokens) -> torch.Tensor:
    """(B, T) ids of the model's vocabulary with T >= 2."""
    if not isinstance(model, Decoder):
        raise TypeError(f"model must be a Decoder, got {type(model).__name__}")
    index_tensor(tokens, "tokens", model.config.vocab_size, ndim=2)
    if tokens.shape[1] < 2:
        raise ValueError(f"tokens must hold T >= 2 tokens per row, got shape {tuple(tokens.shape)}")
    return tokens.long()


def sequence_log_prob(model: Decoder, tokens: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """log p(x_2..x_T | x_1) = sum_t log p(x_t | x_<t) from ONE forward pass (eq. 23.1).

    tokens: (B, T), T >= 2, the first token given; causal=False (a negative control) lets every
    position see the whole window. Returns (B,) log-probabilities in nats.
    """
    tokens = _sequences(model, tokens)
    logp = torch.log_softmax(model(tokens[:, :-1], causal=causal), dim=-1)  # (B, T-1, V)
    return logp.gather(-1, tokens[:, 1:, None])[..., 0].sum(-1)  # (B, T-1, 1) -> (B,)


def sequence_log_prob_naive(model: Decoder, tokens: torch.Tensor) -> torch.Tensor:
    """Eq. 23.1 as written: one forward pass per prefix x_<t, so no position can see ahead."""
    tokens = _sequences(model, tokens)
    total = torch.zeros(tokens.shape[0], dtype=model.embedding.dtype)
    for t in range(1, tokens.shape[1]):
        z = model(tokens[:, :t])[:, -1]  # (B, V): the prediction after the prefix x_<t
        total = total + torch.log_softmax(z, dim=-1).gather(-1, tokens[:, t, None])[:, 0]
    return total


def get_batch(
    data: torch.Tensor, batch_size: int, block_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """B random windows of a token stream: inputs x and targets y = x shifted left by one.

    data: (N,) ids, N > block_size; the window starts are uniform on [0, N - T - 1].
    Returns x, y: (B, T) each, with y[b, t] = x[b, t + 1].
    """
    B, T = positive_int(batch_size, "batch_size"), positive_int(block_size, "block_size")
    index_tensor(data, "data", ndim=1)
    if data.numel() <= T:
        raise ValueError(f"data has {data.numel()} tokens; need more than block_size={T}")
    starts = torch.randint(0, data.numel() - T, (B,), generator=generator)  # (B,)
    idx = starts[:, None] + torch.arange(T)  # (B, T) positions of the inputs
    return data[idx], data[idx + 1]


def evaluate(
    model: Decoder, data: torch.Tensor, batch_size: int = 32, max_batches: int | None = None
) -> float:
    """Mean next-token loss (nats) over consecutive windows of T = max_seq_len tokens of ``data``.

    Deterministic: window i covers data[i T : (i + 1) T + 1] and all T of its predictions are
    scored. data: (N,) ids, N > T; max_batches: stop after this many batches (None: all).
    """
    T = model.config.max_seq_len
    positive_int(batch_size, "batch_size")
    index_tensor(data, "data", ndim=1)
    if data.numel() <= T:
        raise ValueError(f"data has {data.numel()} tokens; need more than max_seq_len={T}")
    n = (data.numel() - 1) // T
    x = data[: n * T].view(n, T)  # (n, T) windows
    y = data[1 : n * T + 1].view(n, T)
    total, count = 0.0, 0
    with torch.no_grad():
        for i, start in enumerate(range(0, n, batch_size)):
            if max_batches is not None and i >= max_batches:
                break
            xb, yb = x[start : start + batch_size], y[start : start + batch_size]
            total += lm_loss(model(xb), yb).item() * xb.numel()
            count += xb.numel()
    return total / count


def train(
    model: Decoder,
    train_data: torch.Tensor,
    *,
    steps: int,
    batch_size: int,
    peak_lr: float,
    warmup_steps: int,
    generator: torch.Generator,
    min_lr: float | None = None,
    weight_decay: float = 0.1,
    clip: float = 1.0,
    val_data: torch.Tensor | None = None,
    eval_every: int = 0,
    eval_batches: int | None = None,
) -> dict[str, list[float]]:
    """Train on windows of max_seq_len tokens: AdamW, warmup (eq. 23.4), cosine decay, clipping.

    Update s = 1..steps draws a fresh :func:`get_batch` and uses the rate ``warmup_cosine(s)``:
    eta_max min(1, s / W) during warmup, then a cosine to ``min_lr`` (default peak_lr / 10) at
    the last update. Weight decay applies to matrices only (not to biases and norm gains), as in
    GPT-3; betas (0.9, 0.95); the global gradient norm is clipped at ``clip``. Every
    ``eval_every`` updates (and after the last) :func:`evaluate` runs on val_data and
    train_data (``eval_batches`` batches each).

    Returns: ``loss`` and ``lr`` per update (the batch loss before it, the rate it used) and,
    with evaluation, ``eval_step``, ``train_eval``, ``val_eval``.
    """
    steps, B = positive_int(steps, "steps"), positive_int(batch_size, "batch_size")
    peak_lr = positive(peak_lr, "peak_lr")
    min_lr = peak_lr / 10 if min_lr is None else min_lr
    if warmup_steps >= steps:
        raise ValueError(f"warmup_steps={warmup_steps} must be < steps={steps}")
    if eval_every and val_data is None:
        raise ValueError("eval_every > 0 needs val_data")
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=peak_lr, betas=(0.9, 0.95), foreach=True)
    T = model.config.max_seq_len
    hist: dict[str, list[float]] = {"loss": [], "lr": []}
    if eval_every:
        hist.update(eval_step=[], train_eval=[], val_eval=[])
    model.train()
    for s in range(1, steps + 1):
        lr = warmup_cosine(
            s, peak_lr=peak_lr, warmup_steps=warmup_steps, total_steps=steps, min_lr=min_lr
        )  # = eta_max min(1, s / W) while s <= W (eq. 23.4)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = get_batch(train_data, B, T, generator)
        loss = lm_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        hist["loss"].append(loss.item())
        hist["lr"].append(lr)
        if eval_every and (s % eval_every == 0 or s == steps):
            hist["eval_step"].append(s)
            hist["train_eval"].append(evaluate(model, train_data, max_batches=eval_batches))
            hist["val_eval"].append(evaluate(model, val_data, max_batches=eval_batches))
    return hist
