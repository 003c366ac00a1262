"""Multi-head latent attention (MLA): a compressed KV cache and its absorbed form (chapter 25).

MLA (DeepSeek-V2, DeepSeek-V3) caches one small latent vector per token instead of H keys and
H values. Every token's latent is a down-projection of its hidden state, ``c_s = x_s W_DKV``
(eq. 25.1); the keys and values of head h are up-projections of it,
``k_{s,h} = c_s W_UK,h`` and ``v_{s,h} = c_s W_UV,h`` (eq. 25.2). Because the up-projections are
linear and position-free, W_UK,h can be moved onto the query, ``q_t . k_s = (q_t W_UK^T) . c_s``
(eq. 25.3), and W_UV,h onto the output projection, so attention runs directly against the cached
latents and the keys and values are never built. The cache then holds L T d_c b bytes per
sequence (eq. 25.4), plus the small shared RoPE key of the decoupled design:

    each head's query and key = [position-free part of width d_h ; RoPE part of width d_R]
    position-free key  k^C_{s,h} = c_s W_UK,h            (absorbable, eq. 25.3)
    RoPE key           k^R_s     = RoPE_s(x_s W_KR)       (one per token, shared by all heads)
    RoPE query         q^R_{t,h} = RoPE_t(c^Q_t W_QR,h)   (per head)
    score              (q^C_{t,h} . k^C_{s,h} + q^R_{t,h} . k^R_s) / sqrt(d_h + d_R)

RoPE cannot act on the up-projected key: ``RoPE_s(c_s W_UK,h)`` puts a position-dependent
rotation between W_UK,h and the query, and no fixed matrix can be absorbed (chapter 25 shows
it numerically). Queries are low-rank too: ``c^Q_t = x_t W_DQ``, ``q^C_{t,h} = c^Q_t W_UQ,h``.
(DeepSeek also RMS-normalises c and c^Q; the cache then stores the normalised latent and none of
the algebra here changes, so this module leaves the norms out.)

Shape legend
    B      batch size;  T  tokens in the call;  T_k  cached (or visible) tokens;  L  layers
    D      model width;  H  heads;  d_h  per-head width of the position-free query/key part and
           of the value;  d_R  RoPE width (even);  d_c  KV latent width;  d_cq  query latent width
    x      (B, T, D) hidden states            c       (B, T_k, d_c) KV latents (the cache)
    k_rope (B, T_k, d_R) rotated RoPE keys    q_nope  (B, H, T, d_h)    q_rope (B, H, T, d_R)
    W_DKV  (D, d_c)     W_UK, W_UV (H, d_c, d_h)     W_KR (D, d_R)
    W_DQ   (D, d_cq)    W_UQ (H, d_cq, d_h)          W_QR (H, d_cq, d_R)     W_O (H, d_h, D)

Weights act from the right (row vectors), as in the equations. Naive references beside the
optimised versions: :func:`mla_attention_naive` (materialise K and V for every head, then
ordinary attention) beside :func:`mla_attention_absorbed` (attention in latent space, which is
multi-query attention of width d_c + d_R with one shared key/value head); recomputing the whole
prefix beside cached decoding with :class:`LatentCache`. Attention is
:func:`mlbook.attention.dot_product.scaled_dot_product_attention`, RoPE is :func:`mlbook.attention.rope.apply_rope`.
FLOPs count matrix products only, 2 m n p for (m, n) @ (n, p), as torch's FlopCounterMode does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from .dot_product import scaled_dot_product_attention
from .rope import apply_rope, rope_frequencies

__all__ = [
    "MLAConfig",
    "DEEPSEEK_V3",
    "DEEPSEEK_V3_LAYERS",
    "latent",
    "up_project",
    "absorb_query",
    "absorb_output",
    "mla_attention_naive",
    "mla_attention_absorbed",
    "LatentCache",
    "MultiHeadLatentAttention",
    "mla_cache_bytes",
    "gqa_cache_bytes",
    "mla_decode_flops",
]

_FORMS = ("naive", "absorbed")


def _check_int(value, name: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value


def _check_tensor(x, name: str, ndim: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")


@dataclass(frozen=True)
class MLAConfig:
    """Shapes of one MLA layer.

    Attributes:
        d_model: D, the model width.
        n_heads: H, the number of query heads (each has its own W_UK,h and W_UV,h).
        d_head: d_h, width of the position-free query/key part and of the value
            (DeepSeek's ``qk_nope_head_dim = v_head_dim``).
        d_latent: d_c, the KV latent width (``kv_lora_rank``), what the cache stores.
        d_rope: d_R, width of the decoupled RoPE query/key part (``qk_rope_head_dim``), even.
        d_q_latent: d_cq, the query latent width (``q_lora_rank``).
        rope_base: RoPE's base b.
    """

    d_model: int
    n_heads: int
    d_head: int
    d_latent: int
    d_rope: int
    d_q_latent: int
    rope_base: float = 10000.0

    def __post_init__(self):
        for name in ("d_model", "n_heads", "d_head", "d_latent", "d_rope", "d_q_latent"):
            _check_int(getattr(self, name), name)
        if self.d_rope % 2:
            raise ValueError(f"d_rope must be even (RoPE rotates pairs), got {self.d_rope}")
        if (
            isinstance(self.rope_base, bool)
            or not isinstance(self.rope_base, (int, float))
            or not self.rope_base > 1
        ):
            raise ValueError(f"rope_base must be a number > 1, got {self.rope_base!r}")

    @property
    def scale(self) -> float:
        """Softmax scale 1/sqrt(d_h + d_R): the query/key width of the naive form."""
        return 1.0 / math.sqrt(self.d_head + self.d_rope)


#: DeepSeek-V3's attention shapes (its published config.json): hidden_size 7168, 128 heads,
#: qk_nope_head_dim = v_head_dim = 128, kv_lora_rank 512, qk_rope_head_dim 64, q_lora_rank 1536.
DEEPSEEK_V3 = MLAConfig(
    d_model=7168, n_heads=128, d_head=128, d_latent=512, d_rope=64, d_q_latent=1536
)
#: DeepSeek-V3's number of layers (num_hidden_layers), every one of them MLA.
DEEPSEEK_V3_LAYERS = 61


# --- eqs. 25.1-25.3 -------------------------------------------------------------------------------


def latent(x: torch.Tensor, w_dkv: torch.Tensor) -> torch.Tensor:
    """The KV latent ``c_s = x_s W_DKV`` of every token (eq. 25.1).

    Args:
        x: (B, T, D) hidden states.
        w_dkv: (D, d_c) down-projection.

    Returns:
        (B, T, d_c) latents: what the MLA cache stores.
    """
    _check_tensor(x, "x", 3)
    _check_tensor(w_dkv, "w_dkv", 2)
    if x.shape[-1] != w_dkv.shape[0]:
        raise ValueError(
            f"x (B, T, D) = {tuple(x.shape)} and w_dkv (D, d_c) = "
            f"{tuple(w_dkv.shape)} disagree on D"
        )
    return x @ w_dkv  # (B, T, D) @ (D, d_c) -> (B, T, d_c)


def _check_up(c: torch.Tensor, w: torch.Tensor, name: str) -> None:
    _check_tensor(w, name, 3)
    if w.shape[1] != c.shape[-1]:
        raise ValueError(
            f"{name} (H, d_c, d_h) = {tuple(w.shape)} does not match latents "
            f"(B, T, d_c) = {tuple(c.shape)}"
        )


def up_project(c: torch.Tensor, w_uk: torch.Tensor, w_uv: torch.Tensor):
    """Per-head keys and values from the latents, ``k_{s,h} = c_s W_UK,h``, ``v = c_s W_UV,h``.

    Implements eq. 25.2 (the position-free key part; the naive form materialises these).

    Args:
        c: (B, T_k, d_c) latents.
        w_uk, w_uv: (H, d_c, d_h) per-head up-projections.

    Returns:
        k, v: (B, H, T_k, d_h) each.
    """
    _check_tensor(c, "c", 3)
    _check_up(c, w_uk, "w_uk")
    _check_up(c, w_uv, "w_uv")
    # (B, T_k, d_c) x (H, d_c, d_h) -> (B, H, T_k, d_h)
    k = torch.einsum("bsc,hcd->bhsd", c, w_uk)
    v = torch.einsum("bsc,hcd->bhsd", c, w_uv)
    return k, v


def absorb_query(q_nope: torch.Tensor, w_uk: torch.Tensor) -> torch.Tensor:
    """Move W_UK,h onto the query: ``q~_{t,h} = q_{t,h} W_UK,h^T``, so ``q . k_s = q~ . c_s``.

    Implements eq. 25.3.

    Args:
        q_nope: (B, H, T, d_h) position-free query parts.
        w_uk: (H, d_c, d_h) key up-projections.

    Returns:
        (B, H, T, d_c) queries that score directly against the latents.
    """
    _check_tensor(q_nope, "q_nope", 4)
    _check_tensor(w_uk, "w_uk", 3)
    if q_nope.shape[1] != w_uk.shape[0] or q_nope.shape[-1] != w_uk.shape[-1]:
        raise ValueError(
            f"q_nope (B, H, T, d_h) = {tuple(q_nope.shape)} and w_uk (H, d_c, d_h) "
            f"= {tuple(w_uk.shape)} disagree on H or d_h"
        )
    return torch.einsum("bhtd,hcd->bhtc", q_nope, w_uk)  # (B,H,T,d_h) x (H,d_c,d_h) -> (B,H,T,d_c)


def absorb_output(w_uv: torch.Tensor, w_o: torch.Tensor) -> torch.Tensor:
    """Merge W_UV,h into the output projection: ``W_UV,h W_O,h``, one (d_c, D) map per head.

    With attention weights a_{t,s,h}, the layer output is
    ``sum_h (sum_s a c_s W_UV,h) W_O,h = sum_h (sum_s a c_s) (W_UV,h W_O,h)``:
    the weighted sum of latents is taken first, the values are never built (eq. 25.2 absorbed).

    Args:
        w_uv: (H, d_c, d_h) value up-projections.
        w_o: (H, d_h, D) output projection, split by head.

    Returns:
        (H, d_c, D) merged matrices.
    """
    _check_tensor(w_uv, "w_uv", 3)
    _check_tensor(w_o, "w_o", 3)
    if w_uv.shape[0] != w_o.shape[0] or w_uv.shape[2] != w_o.shape[1]:
        raise ValueError(
            f"w_uv (H, d_c, d_h) = {tuple(w_uv.shape)} and w_o (H, d_h, D) = "
            f"{tuple(w_o.shape)} disagree on H or d_h"
        )
    return w_uv @ w_o  # (H, d_c, d_h) @ (H, d_h, D) -> (H, d_c, D)


def _check_attention_inputs(q_nope, q_rope, c, k_rope, w_uk, w_uv) -> None:
    _check_tensor(q_nope, "q_nope", 4)
    _check_tensor(q_rope, "q_rope", 4)
    _check_tensor(c, "c", 3)
    _check_tensor(k_rope, "k_rope", 3)
    _check_up(c, w_uk, "w_uk")
    _check_up(c, w_uv, "w_uv")
    B, H, T, d_h = q_nope.shape
    if q_rope.shape[:3] != (B, H, T):
        raise ValueError(
            f"q_nope {tuple(q_nope.shape)} and q_rope {tuple(q_rope.shape)} must share (B, H, T)"
        )
    if w_uk.shape != (H, c.shape[-1], d_h) or w_uv.shape[:2] != (H, c.shape[-1]):
        raise ValueError(
            f"w_uk {tuple(w_uk.shape)} / w_uv {tuple(w_uv.shape)} do not match "
            f"H = {H}, d_c = {c.shape[-1]}, d_h = {d_h}"
        )
    if c.shape[0] != B or k_rope.shape[:2] != c.shape[:2] or k_rope.shape[-1] != q_rope.shape[-1]:
        raise ValueError(
            f"latents {tuple(c.shape)}, RoPE keys {tuple(k_rope.shape)} and "
            f"queries {tuple(q_rope.shape)} disagree on B, T_k or d_R"
        )


def mla_attention_naive(
    q_nope, q_rope, c, k_rope, w_uk, w_uv, *, scale: float, is_causal: bool = True
):
    """Reference MLA attention: materialise every head's keys and values, then attend.

    Keys are ``[c_s W_UK,h ; k^R_s]`` (the shared RoPE key repeated for every head), values
    ``c_s W_UV,h`` (eq. 25.2); ordinary scaled dot-product attention per head.

    Args:
        q_nope: (B, H, T, d_h) and q_rope: (B, H, T, d_R) queries (q_rope already rotated).
        c: (B, T_k, d_c) latents;  k_rope: (B, T_k, d_R) rotated RoPE keys.
        w_uk, w_uv: (H, d_c, d_h) up-projections.
        scale: softmax scale, 1/sqrt(d_h + d_R) in MLA.
        is_causal: bottom-right aligned causal mask (the T queries are the last T of T_k).

    Returns:
        out: (B, H, T, d_h) per-head outputs;  weights: (B, H, T, T_k).
    """
    _check_attention_inputs(q_nope, q_rope, c, k_rope, w_uk, w_uv)
    H = q_nope.shape[1]
    k_nope, v = up_project(c, w_uk, w_uv)  # (B, H, T_k, d_h) each
    k_r = k_rope[:, None].expand(-1, H, -1, -1)  # (B, T_k, d_R) -> (B,H,T_k,d_R)
    q = torch.cat([q_nope, q_rope], dim=-1)  # (B, H, T, d_h + d_R)
    k = torch.cat([k_nope, k_r], dim=-1)  # (B, H, T_k, d_h + d_R)
    return scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)


def mla_attention_absorbed(
    q_nope, q_rope, c, k_rope, w_uk, w_uv, *, scale: float, is_causal: bool = True
):
    """MLA attention in latent space: W_UK absorbed into the query, W_UV applied after the sum.

    Scores ``(q~_{t,h} . c_s + q^R_{t,h} . k^R_s) * scale`` with ``q~ = q W_UK,h^T`` (eq. 25.3);
    outputs ``(sum_s a_{t,s,h} c_s) W_UV,h``. This is multi-query attention with one key/value
    head of width d_c + d_R (values: the latents), so keys and values are never materialised.

    Args and returns as :func:`mla_attention_naive` (same result up to rounding).
    """
    _check_attention_inputs(q_nope, q_rope, c, k_rope, w_uk, w_uv)
    q = torch.cat([absorb_query(q_nope, w_uk), q_rope], dim=-1)  # (B, H, T, d_c + d_R)
    k = torch.cat([c, k_rope], dim=-1)[:, None]  # (B, 1, T_k, d_c + d_R)
    o_latent, weights = scaled_dot_product_attention(
        q, k, c[:, None], is_causal=is_causal, scale=scale
    )  # (B, H, T, d_c)
    # (B, H, T, d_c) x (H, d_c, d_h) -> (B, H, T, d_h)
    out = torch.einsum("bhtc,hcd->bhtd", o_latent, w_uv)
    return out, weights


# --- the cache and the layer ----------------------------------------------------------------------


class LatentCache:
    """MLA's KV cache for one layer: the latents c_s and the rotated RoPE keys k^R_s, nothing else.

    Both buffers are allocated once for ``max_len`` positions; :attr:`nbytes` counts exactly
    them, ``B max_len (d_c + d_R)`` elements (eq. 25.4 for one layer, plus the RoPE part).

    Args:
        batch: B;  max_len: positions to allocate;  config: the layer's :class:`MLAConfig`.
        dtype, device: of the buffers.
    """

    def __init__(
        self,
        batch: int,
        max_len: int,
        config: MLAConfig,
        *,
        dtype: torch.dtype = torch.float32,
        device=None,
    ):
        _check_int(batch, "batch")
        _check_int(max_len, "max_len")
        if not isinstance(config, MLAConfig):
            raise TypeError(f"config must be an MLAConfig, got {type(config).__name__}")
        self.c = torch.zeros(batch, max_len, config.d_latent, dtype=dtype, device=device)
        self.k_rope = torch.zeros(batch, max_len, config.d_rope, dtype=dtype, device=device)
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the two buffers (element size x number of elements)."""
        return sum(t.element_size() * t.numel() for t in (self.c, self.k_rope))

    def append(self, c_new: torch.Tensor, k_rope_new: torch.Tensor):
        """Store the latents and RoPE keys of new tokens; return views of everything cached.

        Args:
            c_new: (B, T, d_c);  k_rope_new: (B, T, d_R), already rotated at their positions.

        Returns:
            c: (B, length, d_c) and k_rope: (B, length, d_R), views into the buffers.
        """
        _check_tensor(c_new, "c_new", 3)
        _check_tensor(k_rope_new, "k_rope_new", 3)
        B, T_max, d_c = self.c.shape
        T = c_new.shape[1]
        if c_new.shape != (B, T, d_c) or k_rope_new.shape != (B, T, self.k_rope.shape[-1]):
            raise ValueError(
                f"new entries c {tuple(c_new.shape)}, k_rope "
                f"{tuple(k_rope_new.shape)} do not fit a cache of "
                f"(B, d_c, d_R) = ({B}, {d_c}, {self.k_rope.shape[-1]})"
            )
        if self.length + T > T_max:
            raise ValueError(f"cache overflow: {self.length} + {T} tokens > max_len {T_max}")
        self.c[:, self.length : self.length + T] = c_new
        self.k_rope[:, self.length : self.length + T] = k_rope_new
        self.length += T
        return self.c[:, : self.length], self.k_rope[:, : self.length]


class MultiHeadLatentAttention(nn.Module):
    """One MLA layer (DeepSeek-V2/V3 attention) with a naive and an absorbed forward pass.

    Args:
        config: the layer's shapes.
        generator: seeds the initial weights (normal, std 1/sqrt(fan_in)).
        dtype: of the parameters.
    """

    def __init__(
        self,
        config: MLAConfig,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        if not isinstance(config, MLAConfig):
            raise TypeError(f"config must be an MLAConfig, got {type(config).__name__}")
        self.config = cfg = config
        H, D, d_h, d_c, d_R, d_cq = (
            cfg.n_heads,
            cfg.d_model,
            cfg.d_head,
            cfg.d_latent,
            cfg.d_rope,
            cfg.d_q_latent,
        )

        def init(*shape, fan_in):
            w = torch.randn(*shape, generator=generator, dtype=torch.float64) / math.sqrt(fan_in)
            return nn.Parameter(w.to(dtype))

        self.w_dq = init(D, d_cq, fan_in=D)
        self.w_uq = init(H, d_cq, d_h, fan_in=d_cq)
        self.w_qr = init(H, d_cq, d_R, fan_in=d_cq)
        self.w_dkv = init(D, d_c, fan_in=D)
        self.w_uk = init(H, d_c, d_h, fan_in=d_c)
        self.w_uv = init(H, d_c, d_h, fan_in=d_c)
        self.w_kr = init(D, d_R, fan_in=D)
        self.w_o = init(H, d_h, D, fan_in=H * d_h)
        self.register_buffer("freqs", rope_frequencies(d_R, cfg.rope_base), persistent=False)

    def queries(self, x: torch.Tensor, positions: torch.Tensor):
        """Position-free and rotated RoPE query parts of every head.

        Args:
            x: (B, T, D);  positions: (T,) absolute positions.

        Returns:
            q_nope: (B, H, T, d_h);  q_rope: (B, H, T, d_R), rotated.
        """
        c_q = x @ self.w_dq  # (B, T, D) @ (D, d_cq)
        q_nope = torch.einsum("btc,hcd->bhtd", c_q, self.w_uq)  # (B, H, T, d_h)
        q_rope = torch.einsum("btc,hcr->bhtr", c_q, self.w_qr)  # (B, H, T, d_R)
        return q_nope, apply_rope(q_rope, positions, self.freqs)

    def keys(self, x: torch.Tensor, positions: torch.Tensor):
        """What a token contributes to the cache: its latent and its rotated RoPE key.

        Args:
            x: (B, T, D);  positions: (T,).

        Returns:
            c: (B, T, d_c) (eq. 25.1);  k_rope: (B, T, d_R) = RoPE_s(x_s W_KR), shared by heads.
        """
        return latent(x, self.w_dkv), apply_rope(x @ self.w_kr, positions, self.freqs)

    def forward(
        self, x: torch.Tensor, cache: LatentCache | None = None, form: str = "absorbed"
    ) -> torch.Tensor:
        """Causal MLA over x, or over x appended to ``cache`` (incremental decoding).

        Args:
            x: (B, T, D) new tokens; their positions continue after what ``cache`` holds.
            cache: optional :class:`LatentCache`; updated in place.
            form: ``"absorbed"`` (attention in latent space) or ``"naive"`` (materialised K, V).

        Returns:
            (B, T, D) layer output ``sum_h o_{t,h} W_O,h``.
        """
        _check_tensor(x, "x", 3)
        if x.shape[-1] != self.config.d_model:
            raise ValueError(
                f"x must have shape (B, T, D={self.config.d_model}), got {tuple(x.shape)}"
            )
        if form not in _FORMS:
            raise ValueError(f"form must be one of {_FORMS}, got {form!r}")
        start = 0 if cache is None else cache.length
        positions = torch.arange(start, start + x.shape[1], device=x.device)
        q_nope, q_rope = self.queries(x, positions)
        c, k_rope = self.keys(x, positions)
        if cache is not None:
            c, k_rope = cache.append(c, k_rope)  # (B, T_k, d_c), (B, T_k, d_R)
        attend = mla_attention_absorbed if form == "absorbed" else mla_attention_naive
        out, _ = attend(
            q_nope, q_rope, c, k_rope, self.w_uk, self.w_uv, scale=self.config.scale, is_causal=True
        )  # (B, H, T, d_h)
        B, H, T, d_h = out.shape
        out = out.transpose(1, 2).reshape(B, T, H * d_h)  # (B, H, T, d_h) -> (B, T, H d_h)
        return out @ self.w_o.reshape(H * d_h, -1)  # (B, T, H d_h) @ (H d_h, D)


# --- memory and FLOPs -----------------------------------------------------------------------------


def mla_cache_bytes(
    n_layers: int,
    d_latent: int,
    seq_len: int,
    *,
    d_rope: int = 0,
    batch: int = 1,
    bytes_per_element: int = 2,
) -> int:
    """Bytes of an MLA cache: ``L T (d_c + d_R) b`` per sequence, times the batch.

    Implements eq. 25.4 (``M_MLA = L T d_c b``, b = bytes per element) for ``d_rope = 0``;
    with ``d_rope = d_R`` it adds the rotated RoPE key that the decoupled design caches per token.
    """
    for v, name in (
        (n_layers, "n_layers"),
        (d_latent, "d_latent"),
        (seq_len, "seq_len"),
        (batch, "batch"),
        (bytes_per_element, "bytes_per_element"),
    ):
        _check_int(v, name)
    _check_int(d_rope, "d_rope", low=0)
    return n_layers * seq_len * (d_latent + d_rope) * bytes_per_element * batch


def gqa_cache_bytes(
    n_layers: int,
    n_kv_heads: int,
    d_head: int,
    seq_len: int,
    *,
    batch: int = 1,
    bytes_per_element: int = 2,
) -> int:
    """Bytes of an MHA/GQA/MQA KV cache: ``2 L G d_h T b`` per sequence, times the batch.

    The formula of eq. 24.2 (G = H is MHA, G = 1 MQA), written out here for comparison with MLA.
    """
    for v, name in (
        (n_layers, "n_layers"),
        (n_kv_heads, "n_kv_heads"),
        (d_head, "d_head"),
        (seq_len, "seq_len"),
        (batch, "batch"),
        (bytes_per_element, "bytes_per_element"),
    ):
        _check_int(v, name)
    return 2 * n_layers * n_kv_heads * d_head * seq_len * bytes_per_element * batch


def mla_decode_flops(config: MLAConfig, n_keys: int, form: str, batch: int = 1) -> dict:
    """Matrix-product FLOPs of one decoding step (one new token per sequence) of one MLA layer.

    The new token attends to ``n_keys`` cached positions (itself included). Terms, per sequence:
    projections ``2 D d_cq + 2 d_cq H (d_h + d_R) + 2 D (d_c + d_R) + 2 H d_h D`` in both forms;
    naive: up-project all keys and values ``4 T_k d_c H d_h``, scores ``2 H T_k (d_h + d_R)``,
    weighted sum ``2 H T_k d_h``; absorbed: absorb the query ``2 H d_h d_c``, scores
    ``2 H T_k (d_c + d_R)``, weighted sum of latents ``2 H T_k d_c``, then ``2 H d_c d_h`` for
    W_UV. Counts exactly the products :class:`MultiHeadLatentAttention` performs.

    Returns:
        dict of named terms (ints) plus ``"total"``.
    """
    if not isinstance(config, MLAConfig):
        raise TypeError(f"config must be an MLAConfig, got {type(config).__name__}")
    _check_int(n_keys, "n_keys")
    _check_int(batch, "batch")
    if form not in _FORMS:
        raise ValueError(f"form must be one of {_FORMS}, got {form!r}")
    D, H, d_h, d_c, d_R, d_cq = (
        config.d_model,
        config.n_heads,
        config.d_head,
        config.d_latent,
        config.d_rope,
        config.d_q_latent,
    )
    T = n_keys
    terms = {
        "query projections": 2 * D * d_cq + 2 * d_cq * H * (d_h + d_R),
        "latent + RoPE key of the new token": 2 * D * (d_c + d_R),
        "output projection": 2 * H * d_h * D,
    }
    if form == "naive":
        terms["up-project cached K and V"] = 4 * T * d_c * H * d_h
        terms["scores"] = 2 * H * T * (d_h + d_R)
        terms["weighted sum of values"] = 2 * H * T * d_h
    else:
        terms["absorb W_UK into the query"] = 2 * H * d_h * d_c
        terms["scores"] = 2 * H * T * (d_c + d_R)
        terms["weighted sum of latents"] = 2 * H * T * d_c
        terms["apply W_UV after the sum"] = 2 * H * d_c * d_h
    terms = {k: v * batch for k, v in terms.items()}
    terms["total"] = sum(terms.values())
    return terms
