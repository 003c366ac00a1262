"""A small GPT in the GPT-2 architecture, its training loop and its sampler (chapter 23).

The model is decoder-only: token embeddings plus *learned* position embeddings, L pre-LayerNorm
blocks (causal self-attention, then a GELU MLP of width 4d, each added to the residual stream),
a final LayerNorm and an output head *tied* to the token embedding, so the logits are
``Z = h E^T`` (eq. 23.2). Trained on next-token cross-entropy (eq. 23.3) with a linear warmup
(eq. 23.4), it defines p(x_1..x_T) = prod_t p(x_t | x_<t) (eq. 23.1); :func:`generate` draws
from it with temperature and top-k (eq. 23.5).

This is the GPT-2 variant of the decoder block (LayerNorm with biases, GELU, learned absolute
positions, biases everywhere), not the LLaMA variant of :mod:`mlbook.models.transformer` (RMSNorm,
SwiGLU, RoPE, no biases): it can therefore be compared weight for weight with Hugging Face's
``GPT2LMHeadModel`` (:func:`to_hf_state_dict`).

The pieces come from earlier chapters: :func:`mlbook.nn.normalization.layer_norm` (16),
:func:`mlbook.nn.activations.gelu_tanh` (11, GPT-2's "gelu_new"),
:func:`mlbook.attention.dot_product.scaled_dot_product_attention` (19), :func:`mlbook.nn.softmax.cross_entropy`
and :func:`mlbook.nn.softmax.softmax` (12), :func:`mlbook.nn.schedules.warmup_cosine` (15).

Shape legend
    B      batch size;  T  sequence length (<= config.block_size)
    d      model width, config.d_model;  H  number of heads;  d_h = d / H  head width
    L      number of blocks;  V  vocabulary size
    tokens (B, T) integer ids;  x, h  (B, T, d) residual stream / final hidden states
    Z      (B, T, V) logits: row (b, t) scores the token at position t + 1
    E      (V, d) token embedding = output head;  P  (block_size, d) position embedding

Weights are stored in the row-vector layout of the formula sheet: a projection computes
``x @ W + b`` with ``W`` of shape (in, out). GPT-2's ``Conv1D`` uses the same layout, so its
weights copy over without a transpose (``nn.Linear`` would need one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..attention.dot_product import scaled_dot_product_attention
from ..nn.activations import gelu_tanh
from ..nn.normalization import layer_norm
from ..nn.schedules import linear_warmup, warmup_cosine
from ..nn.softmax import cross_entropy, softmax
from ..validation import positive_int as _positive_int

__all__ = [
    "GPTConfig",
    "LayerNorm",
    "Projection",
    "GPTAttention",
    "GPTMLP",
    "GPTBlock",
    "GPT",
    "count_parameters",
    "lm_loss",
    "lm_loss_naive",
    "sequence_log_prob",
    "sequence_log_prob_naive",
    "warmup_lr",
    "get_batch",
    "evaluate",
    "train_gpt",
    "top_k_filter",
    "top_k_filter_naive",
    "sampling_probs",
    "generate",
    "to_hf_state_dict",
    "hf_config_kwargs",
]


def _positive_float(v, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(v).__name__}")
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be positive and finite, got {v!r}")
    return float(v)


# --- configuration ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GPTConfig:
    """Hyperparameters of a GPT-2-style model.

    Attributes:
        vocab_size: V.
        block_size: the context length, i.e. the number of learned positions.
        n_layer: number of blocks L.
        n_head: number of attention heads H; d_model must be divisible by it.
        d_model: width d of the residual stream (GPT-2's ``n_embd``).
        layer_norm_eps: the eps inside LayerNorm's square root (GPT-2: 1e-5).
        init_std: standard deviation of the N(0, init_std^2) initialisation of every weight
            matrix and both embeddings (GPT-2: 0.02); the two residual output projections of
            each block use init_std / sqrt(2 L).
    """

    vocab_size: int
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    layer_norm_eps: float = 1e-5
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "d_model"):
            _positive_int(getattr(self, name), name)
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")
        _positive_float(self.layer_norm_eps, "layer_norm_eps")
        _positive_float(self.init_std, "init_std")

    @property
    def head_dim(self) -> int:
        """The head width d_h = d_model / n_head."""
        return self.d_model // self.n_head


def _check_config(config) -> GPTConfig:
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
    return config


def _check_tokens(tokens, vocab_size: int, name: str = "tokens", ndim: int = 2) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer ids, got dtype {tokens.dtype}")
    if tokens.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes, got shape {tuple(tokens.shape)}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(
            f"{name} must lie in [0, {vocab_size}), got ids in "
            f"[{int(tokens.min())}, {int(tokens.max())}]"
        )
    return tokens.long()


# --- the layers --------------------------------------------------------------------------------


class LayerNorm(nn.Module):
    """LayerNorm with gain ``weight`` and bias ``bias`` (eq. 16.1), a holder for ``layer_norm``."""

    def __init__(self, d: int, eps: float = 1e-5, *, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        _positive_int(d, "d")
        self.eps = _positive_float(eps, "eps")
        self.weight = nn.Parameter(torch.ones(d, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(d, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        return layer_norm(x, self.weight, self.bias, self.eps)


class Projection(nn.Module):
    """An affine map ``x @ weight + bias`` with weight (d_in, d_out): GPT-2's ``Conv1D``.

    Args:
        d_in, d_out: widths.
        std: the N(0, std^2) initialisation of the weight; the bias starts at 0.
        generator: seeds the initialisation.
        dtype: parameter dtype.
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        std: float,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        _positive_int(d_in, "d_in")
        _positive_int(d_out, "d_out")
        std = _positive_float(std, "std")
        self.weight = nn.Parameter(torch.randn(d_in, d_out, generator=generator, dtype=dtype) * std)
        self.bias = nn.Parameter(torch.zeros(d_out, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d_in) -> (..., d_out)."""
        return x @ self.weight + self.bias


class GPTAttention(nn.Module):
    """Multi-head causal self-attention with one fused q|k|v projection, GPT-2 style.

    ``c_attn`` maps x (B, T, d) to [q | k | v] (B, T, 3d); each is split into H heads of width
    d_h, attended with scale 1/sqrt(d_h) and a causal mask, merged back and projected by
    ``c_proj``. Parameters: 4 d^2 + 4 d.
    """

    def __init__(
        self,
        config: GPTConfig,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.config = _check_config(config)
        d, std = config.d_model, config.init_std
        self.c_attn = Projection(d, 3 * d, std, generator=generator, dtype=dtype)
        self.c_proj = Projection(
            d, d, std / math.sqrt(2 * config.n_layer), generator=generator, dtype=dtype
        )

    def forward(self, x: torch.Tensor, causal: bool = True, return_weights: bool = False):
        """x: (B, T, d) -> (B, T, d); with ``return_weights`` also the (B, H, T, T) weights.

        ``causal=False`` lets every position see the whole sequence: no longer a language
        model (used as a negative control of eq. 23.1).
        """
        B, T, d = x.shape
        H, dh = self.config.n_head, self.config.head_dim
        q, k, v = self.c_attn(x).split(d, dim=-1)  # (B, T, 3d) -> 3 x (B, T, d)

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, T, H, dh).transpose(1, 2)  # (B, T, d) -> (B, H, T, d_h)

        out, weights = scaled_dot_product_attention(
            heads(q), heads(k), heads(v), is_causal=causal
        )  # (B, H, T, d_h)
        out = out.transpose(1, 2).reshape(B, T, d)  # (B, H, T, d_h) -> (B, T, d)
        out = self.c_proj(out)
        return (out, weights) if return_weights else out


class GPTMLP(nn.Module):
    """The feed-forward block ``c_proj(GELU_tanh(c_fc(x)))`` of width 4d (8 d^2 + 5 d params)."""

    def __init__(
        self,
        config: GPTConfig,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        d, std = _check_config(config).d_model, config.init_std
        self.c_fc = Projection(d, 4 * d, std, generator=generator, dtype=dtype)
        self.c_proj = Projection(
            4 * d, d, std / math.sqrt(2 * config.n_layer), generator=generator, dtype=dtype
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d) -> (..., d)."""
        return self.c_proj(gelu_tanh(self.c_fc(x)))


class GPTBlock(nn.Module):
    """A pre-LayerNorm block: ``u = x + Attn(LN_1(x))``, then ``x' = u + MLP(LN_2(u))``."""

    def __init__(
        self,
        config: GPTConfig,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        config = _check_config(config)
        self.ln_1 = LayerNorm(config.d_model, config.layer_norm_eps, dtype=dtype)
        self.attn = GPTAttention(config, generator=generator, dtype=dtype)
        self.ln_2 = LayerNorm(config.d_model, config.layer_norm_eps, dtype=dtype)
        self.mlp = GPTMLP(config, generator=generator, dtype=dtype)

    def forward(self, x: torch.Tensor, causal: bool = True) -> torch.Tensor:
        """x: (B, T, d) -> (B, T, d)."""
        u = x + self.attn(self.ln_1(x), causal=causal)
        return u + self.mlp(self.ln_2(u))


class GPT(nn.Module):
    """Decoder-only GPT-2: embeddings, L pre-LN blocks, final LayerNorm, tied head (eq. 23.2).

    Parameters: ``wte`` E (V, d), ``wpe`` P (block_size, d), ``blocks`` (L x
    :class:`GPTBlock`), ``ln_f``. There is no separate output matrix: the logits are
    ``h E^T``, so E receives gradient both as the input lookup table and as the output head.

    Args:
        config: a :class:`GPTConfig`.
        generator: seeds the initialisation (embeddings first, then block by block).
        dtype: parameter dtype.
    """

    def __init__(
        self,
        config: GPTConfig,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.config = _check_config(config)
        V, d, std = config.vocab_size, config.d_model, config.init_std
        self.wte = nn.Parameter(torch.randn(V, d, generator=generator, dtype=dtype) * std)
        self.wpe = nn.Parameter(
            torch.randn(config.block_size, d, generator=generator, dtype=dtype) * std
        )
        self.blocks = nn.ModuleList(
            GPTBlock(config, generator=generator, dtype=dtype) for _ in range(config.n_layer)
        )
        self.ln_f = LayerNorm(d, config.layer_norm_eps, dtype=dtype)

    def hidden(self, tokens: torch.Tensor, causal: bool = True) -> torch.Tensor:
        """tokens (B, T) -> the final normalised hidden states h (B, T, d)."""
        tokens = _check_tokens(tokens, self.config.vocab_size)
        T = tokens.shape[1]
        if not 1 <= T <= self.config.block_size:
            raise ValueError(
                f"sequence length T={T} must lie in [1, block_size={self.config.block_size}]"
            )
        x = self.wte[tokens] + self.wpe[:T]  # (B, T, d) + (T, d) -> (B, T, d)
        for block in self.blocks:
            x = block(x, causal=causal)
        return self.ln_f(x)

    def forward(self, tokens: torch.Tensor, causal: bool = True) -> torch.Tensor:
        """tokens (B, T) integer ids -> logits Z = h E^T (B, T, V). Implements eq. 23.2."""
        return self.hidden(tokens, causal) @ self.wte.T  # (B, T, d) @ (d, V) -> (B, T, V)


def count_parameters(config: GPTConfig) -> int:
    """The number of parameters of :class:`GPT` in closed form.

    Embeddings V d + block_size d, per block 12 d^2 + 13 d (attention 4 d^2 + 4 d, MLP
    8 d^2 + 5 d, two LayerNorms 4 d), final LayerNorm 2 d; the tied head adds nothing.
    """
    c = _check_config(config)
    d = c.d_model
    return (c.vocab_size + c.block_size) * d + c.n_layer * (12 * d * d + 13 * d) + 2 * d


# --- eqs. 23.1 and 23.3: the objective ---------------------------------------------------------


def _check_logits_targets(logits, targets) -> torch.Tensor:
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise TypeError("logits must be a floating-point torch.Tensor")
    if logits.ndim != 3:
        raise ValueError(f"logits must have shape (B, T, V), got {tuple(logits.shape)}")
    targets = _check_tokens(targets, logits.shape[-1], "targets")
    if targets.shape != logits.shape[:2]:
        raise ValueError(
            f"targets {tuple(targets.shape)} must have logits' shape without V, "
            f"{tuple(logits.shape[:2])}"
        )
    return targets


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over all B T positions, in nats. Implements eq. 23.3.

    Args:
        logits: (B, T, V), row (b, t) computed from tokens up to position t.
        targets: (B, T) the tokens at positions t + 1 (the inputs shifted left by one).
    """
    targets = _check_logits_targets(logits, targets)
    return cross_entropy(logits, targets, dim=-1)


def lm_loss_naive(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Eq. 23.3 term by term: -1/(BT) sum_{b,t} log softmax(Z_{b,t})_{y_{b,t}} (slow loops)."""
    targets = _check_logits_targets(logits, targets)
    B, T, _ = logits.shape
    total = logits.new_zeros(())
    for b in range(B):
        for t in range(T):
            p = softmax(logits[b, t])  # (V,)
            total = total - torch.log(p[targets[b, t]])
    return total / (B * T)


def sequence_log_prob(model: GPT, tokens: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """log p(x_2..x_T | x_1) = sum_t log p(x_t | x_<t) from ONE forward pass (eq. 23.1).

    Args:
        model: a :class:`GPT`.
        tokens: (B, T) sequences, T >= 2; the first token is the given start.
        causal: passed to the model (``False`` only as a negative control).

    Returns:
        (B,) log-probabilities in nats.
    """
    tokens = _check_tokens(tokens, model.config.vocab_size)
    if tokens.shape[1] < 2:
        raise ValueError(f"need T >= 2 tokens, got shape {tuple(tokens.shape)}")
    logp = torch.log_softmax(model(tokens[:, :-1], causal=causal), dim=-1)  # (B, T-1, V)
    return logp.gather(-1, tokens[:, 1:, None])[..., 0].sum(-1)  # (B, T-1, 1) -> (B,)


def sequence_log_prob_naive(model: GPT, tokens: torch.Tensor) -> torch.Tensor:
    """Eq. 23.1 as written: one forward pass per prefix x_<t, so no position can see ahead."""
    tokens = _check_tokens(tokens, model.config.vocab_size)
    if tokens.shape[1] < 2:
        raise ValueError(f"need T >= 2 tokens, got shape {tuple(tokens.shape)}")
    total = torch.zeros(tokens.shape[0], dtype=model.wte.dtype)
    for t in range(1, tokens.shape[1]):
        z = model(tokens[:, :t])[:, -1]  # (B, V): the prediction after the prefix x_<t
        total = total + torch.log_softmax(z, dim=-1).gather(-1, tokens[:, t, None])[:, 0]
    return total


# --- eq. 23.4 and the training loop ------------------------------------------------------------


def warmup_lr(step: int, *, peak_lr: float, warmup_steps: int) -> float:
    """eta_s = eta_max min(1, s / S_warmup) for the 1-based update number s (eq. 23.4).

    Step s = 1 is the first update, so it already gets eta_max / S_warmup (never a wasted
    update at rate 0); from s = S_warmup on the rate is eta_max. Built on
    :func:`mlbook.nn.schedules.linear_warmup`, whose step index starts at 0.
    """
    s = _positive_int(step, "step")
    return linear_warmup(s, peak_lr=peak_lr, warmup_steps=warmup_steps)


def get_batch(
    data: torch.Tensor, batch_size: int, block_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of a token stream: inputs x and targets y = x shifted left by one.

    Args:
        data: (N,) token ids, N > block_size.
        batch_size: B; block_size: T.
        generator: draws the B window starts uniformly from [0, N - T - 1].

    Returns:
        x, y: (B, T) each, with y[b, t] = data[start_b + t + 1] = x[b, t + 1].
    """
    B, T = _positive_int(batch_size, "batch_size"), _positive_int(block_size, "block_size")
    if not isinstance(data, torch.Tensor) or data.ndim != 1:
        raise ValueError("data must be a 1-D tensor of token ids")
    if data.numel() <= T:
        raise ValueError(f"data has {data.numel()} tokens; need more than block_size={T}")
    starts = torch.randint(0, data.numel() - T, (B,), generator=generator)  # (B,)
    idx = starts[:, None] + torch.arange(T)  # (B, T) positions of the inputs
    return data[idx], data[idx + 1]


@torch.no_grad()
def evaluate(
    model: GPT, data: torch.Tensor, batch_size: int = 32, max_batches: int | None = None
) -> float:
    """Mean next-token loss (nats) over consecutive non-overlapping windows of ``data``.

    Deterministic: window i covers data[i T : (i + 1) T + 1]. Every window has the full
    context length T = block_size, and each of its T predictions is scored.

    Args:
        model: a :class:`GPT`.
        data: (N,) token ids with N > block_size.
        batch_size: windows per forward pass.
        max_batches: stop after this many batches (None: all windows).
    """
    T = model.config.block_size
    _positive_int(batch_size, "batch_size")
    if not isinstance(data, torch.Tensor) or data.ndim != 1 or data.numel() <= T:
        raise ValueError(f"data must be a 1-D tensor with more than block_size={T} tokens")
    n = (data.numel() - 1) // T
    windows = data[: n * T + 1]
    x = windows[:-1].view(n, T)  # (N_windows, T)
    y = windows[1:].view(n, T)
    total, count = 0.0, 0
    for i, start in enumerate(range(0, n, batch_size)):
        if max_batches is not None and i >= max_batches:
            break
        xb, yb = x[start : start + batch_size], y[start : start + batch_size]
        total += lm_loss(model(xb), yb).item() * xb.numel()
        count += xb.numel()
    return total / count


def train_gpt(
    model: GPT,
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
    """Train with AdamW, linear warmup (eq. 23.4) then cosine decay, and gradient clipping.

    Weight decay applies to the matrices only (embeddings and projection weights), not to
    biases and LayerNorm parameters, as in GPT-3 and nanoGPT. Every update uses a fresh
    :func:`get_batch` draw and the rate ``warmup_cosine(s)`` for update s = 1..steps: eta_max
    min(1, s / W) during warmup (eq. 23.4), then a cosine decay that reaches ``min_lr`` at the
    last update.

    Args:
        model: a :class:`GPT` (trained in place).
        train_data: (N,) token ids.
        steps, batch_size: number of updates and windows per update.
        peak_lr, warmup_steps: eta_max and S_warmup; min_lr: end of the cosine decay
            (default peak_lr / 10).
        generator: draws the batches (training is reproducible given it and the init).
        weight_decay: AdamW's decoupled decay on matrices; clip: max global gradient norm.
        val_data, eval_every, eval_batches: every ``eval_every`` updates (and after the last)
            record :func:`evaluate` on ``val_data`` and on ``train_data``.

    Returns:
        dict with ``loss`` and ``lr`` (one entry per update: the batch loss before it and the
        rate it used) and, with evaluation, ``eval_step``, ``train_eval``, ``val_eval``.
    """
    _positive_int(steps, "steps")
    _positive_int(batch_size, "batch_size")
    peak_lr = _positive_float(peak_lr, "peak_lr")
    min_lr = peak_lr / 10 if min_lr is None else min_lr
    if warmup_steps >= steps:
        raise ValueError(f"warmup_steps={warmup_steps} must be < steps={steps}")
    if eval_every and val_data is None:
        raise ValueError("eval_every > 0 needs val_data")
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=peak_lr,
        betas=(0.9, 0.95),
    )
    T = model.config.block_size
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
        x, y = get_batch(train_data, batch_size, T, generator)
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


# --- eq. 23.5: sampling ------------------------------------------------------------------------


def _check_k(top_k, V: int) -> int | None:
    if top_k is None:
        return None
    k = _positive_int(top_k, "top_k")
    if k > V:
        raise ValueError(f"top_k={k} exceeds the vocabulary size V={V}")
    return k


def top_k_filter(logits: torch.Tensor, top_k: int | None) -> torch.Tensor:
    """Keep the k largest logits of each row, set the others to -inf (``None``: keep all).

    Ties at the k-th value are all kept (the threshold is the k-th largest value), as in
    Hugging Face's ``TopKLogitsWarper``.

    Args:
        logits: (..., V).
        top_k: k in [1, V] or None.
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise TypeError("logits must be a floating-point torch.Tensor")
    k = _check_k(top_k, logits.shape[-1])
    if k is None:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1) the k-th largest
    return logits.masked_fill(logits < kth, float("-inf"))


def top_k_filter_naive(logits: torch.Tensor, top_k: int | None) -> torch.Tensor:
    """:func:`top_k_filter` by sorting each row in Python (the slow reference)."""
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise TypeError("logits must be a floating-point torch.Tensor")
    k = _check_k(top_k, logits.shape[-1])
    if k is None:
        return logits
    rows = logits.reshape(-1, logits.shape[-1])  # (R, V)
    out = rows.clone()
    for r in range(rows.shape[0]):
        kth = sorted(rows[r].tolist(), reverse=True)[k - 1]
        for i in range(rows.shape[1]):
            if rows[r, i].item() < kth:
                out[r, i] = float("-inf")
    return out.reshape(logits.shape)


def sampling_probs(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None
) -> torch.Tensor:
    """p = softmax(z / tau) after optional top-k masking (eq. 23.5).

    Masking then dividing equals dividing then masking (tau > 0 keeps the order of the logits).

    Args:
        logits: (..., V).
        temperature: tau > 0 (for greedy decoding use :func:`generate` with temperature 0).
        top_k: k in [1, V] or None.

    Returns:
        (..., V) probabilities, exactly 0 outside the top k.
    """
    tau = _positive_float(temperature, "temperature")
    return softmax(top_k_filter(logits, top_k), dim=-1, temperature=tau)


@torch.no_grad()
def generate(
    model: GPT,
    prompt: torch.Tensor,
    n_new: int,
    generator: torch.Generator,
    temperature: float = 1.0,
    top_k: int | None = None,
) -> torch.Tensor:
    """Continue ``prompt`` by ``n_new`` tokens, each drawn from eq. 23.5 (ancestral sampling).

    Each step runs the model on the last ``block_size`` tokens (a longer context has no
    position embedding), takes the logits of the last position and samples with
    ``torch.multinomial``; temperature 0 takes the argmax (greedy decoding).

    Args:
        model: a :class:`GPT`.
        prompt: (B, P) ids, P >= 1.
        n_new: number of tokens to add (>= 0).
        generator: the sampler's random source.
        temperature: tau >= 0; top_k: k in [1, V] or None.

    Returns:
        (B, P + n_new) the prompts followed by the drawn ids.
    """
    out = _check_tokens(prompt, model.config.vocab_size, "prompt")
    if out.shape[1] < 1:
        raise ValueError("prompt must hold at least one token per row")
    if isinstance(n_new, bool) or not isinstance(n_new, int) or n_new < 0:
        raise ValueError(f"n_new must be an int >= 0, got {n_new!r}")
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not (math.isfinite(temperature) and temperature >= 0)
    ):
        raise ValueError(f"temperature must be finite and >= 0, got {temperature!r}")
    _check_k(top_k, model.config.vocab_size)
    was_training = model.training
    model.eval()
    for _ in range(n_new):
        z = model(out[:, -model.config.block_size :])[:, -1]  # (B, V) next-token logits
        if temperature == 0:
            nxt = z.argmax(-1, keepdim=True)  # (B, 1)
        else:
            p = sampling_probs(z.double(), temperature, top_k)  # (B, V)
            nxt = torch.multinomial(p, 1, generator=generator)  # (B, 1)
        out = torch.cat([out, nxt], dim=1)
    model.train(was_training)
    return out


# --- the bridge to Hugging Face's GPT-2 --------------------------------------------------------


def hf_config_kwargs(config: GPTConfig) -> dict:
    """Keyword arguments for ``transformers.GPT2Config`` describing the same model.

    Dropout off everywhere (this model has none); "gelu_new" is the tanh GELU. GPT-2's special
    token id 50256 does not exist in a small vocabulary, so ``bos/eos_token_id`` are unset.
    """
    c = _check_config(config)
    return dict(
        vocab_size=c.vocab_size,
        n_positions=c.block_size,
        n_embd=c.d_model,
        n_layer=c.n_layer,
        n_head=c.n_head,
        n_inner=4 * c.d_model,
        activation_function="gelu_new",
        layer_norm_epsilon=c.layer_norm_eps,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
    )


def to_hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """The model's weights under ``GPT2LMHeadModel``'s names (``transformer.h.0.attn...``).

    GPT-2's ``Conv1D`` stores weights as (in, out) like :class:`Projection`, and its fused
    ``c_attn`` orders the output columns [q | k | v] like :class:`GPTAttention`, so no tensor
    needs a transpose or a split. ``lm_head.weight`` is the (tied) token embedding.
    """
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a GPT, got {type(model).__name__}")
    sd = {
        "transformer.wte.weight": model.wte,
        "transformer.wpe.weight": model.wpe,
        "transformer.ln_f.weight": model.ln_f.weight,
        "transformer.ln_f.bias": model.ln_f.bias,
        "lm_head.weight": model.wte,
    }
    for i, block in enumerate(model.blocks):
        for name, p in block.named_parameters():  # e.g. "attn.c_attn.weight"
            sd[f"transformer.h.{i}.{name}"] = p
    return {k: v.detach().clone() for k, v in sd.items()}
