"""Multi-head latent attention (MLA): a compressed KV cache and its absorbed form (chapter 25).

Latents ``c = x W_DKV`` (eq. 25.1), per-head keys and values ``c W_UK,h``, ``c W_UV,h`` (eq.
25.2), W_UK absorbed into the query (eq. 25.3), cache bytes (eq. 25.4); a decoupled RoPE key.

Shape legend
    B, T, T_k  batch, new and cached tokens;  D  model width;  H  heads;  d_h  head width
    d_R  RoPE width;  d_c, d_cq  KV and query latent widths;  x  (B, T, D);  c  (B, T_k, d_c)
    k_rope  (B, T_k, d_R);  q_nope  (B, H, T, d_h);  q_rope  (B, H, T, d_R)
    W_UK, W_UV  (H, d_c, d_h);  W_O  (H, d_h, D)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..validation import even_int, float_tensor, integer, number, one_of, positive_int, shape_is
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


@dataclass(frozen=True)
class MLAConfig:
    """Shapes of one MLA layer: D, H, d_h, d_c, d_R (even), d_cq and RoPE's base."""

    d_model: int
    n_heads: int
    d_head: int
    d_latent: int
    d_rope: int
    d_q_latent: int
    rope_base: float = 10000.0

    def __post_init__(self):
        for name in ("d_model", "n_heads", "d_head", "d_latent", "d_q_latent"):
            positive_int(getattr(self, name), name)
        even_int(self.d_rope, "d_rope")
        number(self.rope_base, "rope_base", 1.0, open_low=True)

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
    """The KV latent ``c_s = x_s W_DKV`` of every token. Implements eq. 25.1.

    x: (B, T, D) hidden states;  w_dkv: (D, d_c) down-projection.
    Returns (B, T, d_c) latents: what the MLA cache stores.
    """
    return float_tensor(x, "x", ndim=3) @ w_dkv  # (B, T, D) @ (D, d_c) -> (B, T, d_c)


def up_project(c: torch.Tensor, w_uk: torch.Tensor, w_uv: torch.Tensor):
    """Per-head keys ``k_{s,h} = c_s W_UK,h`` and values ``v = c_s W_UV,h``. Implements eq. 25.2.

    c: (B, T_k, d_c) latents;  w_uk, w_uv: (H, d_c, d_h) up-projections.
    Returns k, v: (B, H, T_k, d_h) each.
    """
    shape_is(w_uk, "w_uk", (None, float_tensor(c, "c", ndim=3).shape[-1], None))
    shape_is(w_uv, "w_uv", w_uk.shape)
    # (B, T_k, d_c) x (H, d_c, d_h) -> (B, H, T_k, d_h)
    k = torch.einsum("bsc,hcd->bhsd", c, w_uk)
    v = torch.einsum("bsc,hcd->bhsd", c, w_uv)
    return k, v


def absorb_query(q_nope: torch.Tensor, w_uk: torch.Tensor) -> torch.Tensor:
    """Move W_UK,h onto the query: ``q~ = q W_UK,h^T``, so ``q . k_s = q~ . c_s`` (eq. 25.3).

    q_nope: (B, H, T, d_h);  w_uk: (H, d_c, d_h).
    Returns (B, H, T, d_c) queries that score directly against the latents.
    """
    B, H, T, d_h = float_tensor(q_nope, "q_nope", ndim=4).shape
    shape_is(w_uk, "w_uk", (H, None, d_h))  # einsum would broadcast a single head
    return torch.einsum("bhtd,hcd->bhtc", q_nope, w_uk)  # (B,H,T,d_h) x (H,d_c,d_h) -> (B,H,T,d_c)


def absorb_output(w_uv: torch.Tensor, w_o: torch.Tensor) -> torch.Tensor:
    """Merge W_UV,h into the output projection: ``W_UV,h W_O,h`` (eq. 25.2 absorbed).

    w_uv: (H, d_c, d_h);  w_o: (H, d_h, D).
    Returns (H, d_c, D) merged matrices.
    """
    H, _, d_h = float_tensor(w_uv, "w_uv", ndim=3).shape
    shape_is(w_o, "w_o", (H, d_h, None))  # matmul would broadcast a single head
    return w_uv @ w_o  # (H, d_c, d_h) @ (H, d_h, D) -> (H, d_c, D)


def _attention_inputs(q_nope, q_rope, c, k_rope, w_uk, w_uv) -> None:
    """Shapes must agree exactly: attention would broadcast a batch or head of size 1."""
    B, H, T, d_h = float_tensor(q_nope, "q_nope", ndim=4).shape
    B, T_k, d_c = shape_is(float_tensor(c, "c", ndim=3), "c", (B, None, None)).shape
    shape_is(q_rope, "q_rope", (B, H, T, None))
    shape_is(k_rope, "k_rope", (B, T_k, q_rope.shape[-1]))
    shape_is(w_uk, "w_uk", (H, d_c, d_h))
    shape_is(w_uv, "w_uv", (H, d_c, None))


def mla_attention_naive(
    q_nope, q_rope, c, k_rope, w_uk, w_uv, *, scale: float, is_causal: bool = True
):
    """Reference MLA attention: materialise every head's K and V, then attend (eq. 25.2).

    q_nope: (B, H, T, d_h);  q_rope: (B, H, T, d_R);  c: (B, T_k, d_c);  k_rope: (B, T_k, d_R);
    w_uk, w_uv: (H, d_c, d_h);  scale: 1/sqrt(d_h + d_R) in MLA.
    Returns out (B, H, T, d_h) and weights (B, H, T, T_k).
    """
    _attention_inputs(q_nope, q_rope, c, k_rope, w_uk, w_uv)
    H = q_nope.shape[1]
    k_nope, v = up_project(c, w_uk, w_uv)  # (B, H, T_k, d_h) each
    k_r = k_rope[:, None].expand(-1, H, -1, -1)  # (B, T_k, d_R) -> (B,H,T_k,d_R)
    q = torch.cat([q_nope, q_rope], dim=-1)  # (B, H, T, d_h + d_R)
    k = torch.cat([k_nope, k_r], dim=-1)  # (B, H, T_k, d_h + d_R)
    return scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)


def mla_attention_absorbed(
    q_nope, q_rope, c, k_rope, w_uk, w_uv, *, scale: float, is_causal: bool = True
):
    """MLA attention in latent space: W_UK absorbed into the query (eq. 25.3), W_UV after the sum.

    Args and returns as :func:`mla_attention_naive` (same result up to rounding).
    """
    _attention_inputs(q_nope, q_rope, c, k_rope, w_uk, w_uv)
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
    """MLA's KV cache for one layer: latents c_s and rotated RoPE keys k^R_s (eq. 25.4).

    batch: B;  max_len: positions to allocate;  config: the layer's :class:`MLAConfig`;  dtype,
    device: of the buffers.
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
        positive_int(batch, "batch")
        positive_int(max_len, "max_len")
        self.c = torch.zeros(batch, max_len, config.d_latent, dtype=dtype, device=device)
        self.k_rope = torch.zeros(batch, max_len, config.d_rope, dtype=dtype, device=device)
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the two buffers (element size x number of elements)."""
        return sum(t.element_size() * t.numel() for t in (self.c, self.k_rope))

    def append(self, c_new: torch.Tensor, k_rope_new: torch.Tensor):
        """Store the latents and RoPE keys of new tokens; return views of everything cached.

        c_new: (B, T, d_c);  k_rope_new: (B, T, d_R), already rotated at their positions.
        Returns c: (B, length, d_c) and k_rope: (B, length, d_R), views into the buffers.
        """
        B, T_max, d_c = self.c.shape
        T = shape_is(float_tensor(c_new, "c_new", ndim=3), "c_new", (B, None, d_c)).shape[1]
        shape_is(k_rope_new, "k_rope_new", (B, T, self.k_rope.shape[-1]))
        if self.length + T > T_max:
            raise ValueError(f"cache overflow: {self.length} + {T} tokens > max_len {T_max}")
        self.c[:, self.length : self.length + T] = c_new
        self.k_rope[:, self.length : self.length + T] = k_rope_new
        self.length += T
        return self.c[:, : self.length], self.k_rope[:, : self.length]


class MultiHeadLatentAttention(nn.Module):
    """One MLA layer (DeepSeek-V2/V3 attention) with a naive and an absorbed forward pass.

    config: the layer's shapes;  generator: seeds the initial weights (normal, std 1/sqrt(fan_in));
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

        x: (B, T, D);  positions: (T,) absolute positions.
        Returns q_nope: (B, H, T, d_h);  q_rope: (B, H, T, d_R), rotated.
        """
        c_q = x @ self.w_dq  # (B, T, D) @ (D, d_cq)
        q_nope = torch.einsum("btc,hcd->bhtd", c_q, self.w_uq)  # (B, H, T, d_h)
        q_rope = torch.einsum("btc,hcr->bhtr", c_q, self.w_qr)  # (B, H, T, d_R)
        return q_nope, apply_rope(q_rope, positions, self.freqs)

    def keys(self, x: torch.Tensor, positions: torch.Tensor):
        """What a token contributes to the cache: its latent and its rotated RoPE key.

        x: (B, T, D);  positions: (T,).
        Returns c: (B, T, d_c) (eq. 25.1);  k_rope: (B, T, d_R) = RoPE_s(x_s W_KR), shared by heads.
        """
        return latent(x, self.w_dkv), apply_rope(x @ self.w_kr, positions, self.freqs)

    def forward(
        self, x: torch.Tensor, cache: LatentCache | None = None, form: str = "absorbed"
    ) -> torch.Tensor:
        """Causal MLA over x (B, T, D), appended to ``cache`` if given (eq. 25.3 when absorbed).

        form: ``"absorbed"`` or ``"naive"``. Returns (B, T, D), ``sum_h o_{t,h} W_O,h``.
        """
        float_tensor(x, "x", ndim=3)
        one_of(form, "form", _FORMS)
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
    """Bytes of an MLA cache, ``L T (d_c + d_R) b`` times the batch. Implements eq. 25.4."""
    for v, name in zip(
        (n_layers, d_latent, seq_len, batch, bytes_per_element),
        ("n_layers", "d_latent", "seq_len", "batch", "bytes_per_element"),
        strict=True,
    ):
        positive_int(v, name)
    integer(d_rope, "d_rope", low=0)
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
    """Bytes of an MHA/GQA/MQA KV cache, ``2 L G d_h T b`` times the batch (eq. 24.2)."""
    for v, name in zip(
        (n_layers, n_kv_heads, d_head, seq_len, batch, bytes_per_element),
        ("n_layers", "n_kv_heads", "d_head", "seq_len", "batch", "bytes_per_element"),
        strict=True,
    ):
        positive_int(v, name)
    return 2 * n_layers * n_kv_heads * d_head * seq_len * bytes_per_element * batch


def mla_decode_flops(config: MLAConfig, n_keys: int, form: str, batch: int = 1) -> dict:
    """Matrix-product FLOPs of one decoding step (one new token per sequence) of one MLA layer.

    Returns dict of named terms (ints) plus ``"total"``.
    """
    positive_int(n_keys, "n_keys")
    positive_int(batch, "batch")
    one_of(form, "form", _FORMS)
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
