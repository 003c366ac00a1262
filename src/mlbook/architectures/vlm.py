"""Vision-language models (chapter 32): zero-shot scores with a learned temperature, projectors
into the language model's embedding space, splicing image tokens into the decoder's input,
learned-query resampling, gated cross-attention, visual token counts, and a toy CLIP trained on
the digits.

Shape legend
    N images;  C classes;  M prompt templates;  D width of the joint image-text space
    i (N, D) image embeddings;  t (C, D) class embeddings;  p (N, C) = p(c | i)
    B batch;  T_v visual tokens;  d_v their width;  d the language model's width;  Q queries
    Z (B, T_v, d_v) vision features;  H (B, T_v, d) or (B, Q, d) image tokens for the LM
    T text tokens;  X (B, T, d) the LM's residual stream;  V vocabulary
    F frames of H x W pixels;  P patch side;  t, h, w the token grid (time, height, width)
    L caption length in words (with the end-of-text token)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..attention.multihead import MultiHeadAttention, mha_flops, multihead_attention_naive
from ..nn.activations import gelu
from ..nn.normalization import layer_norm
from ..nn.optim import Optimizer, OptimizerConfig
from ..validation import (
    divides,
    float_tensor,
    index_tensor,
    integer,
    nonempty,
    number,
    one_of,
    positive,
    positive_int,
    shape_is,
)
from .contrastive import info_nce, info_nce_similarity_grad, normalize, similarity_matrix
from .vit import ViT, ViTConfig

__all__ = [
    "CLIP_INIT_LOG_SCALE",
    "CLIP_MAX_SCALE",
    "logit_scale",
    "zero_shot_logits",
    "zero_shot_probs",
    "zero_shot_probs_naive",
    "prompt_ensemble",
    "project",
    "Projector",
    "projector_parameters",
    "splice_image_tokens",
    "splice_image_tokens_naive",
    "resample",
    "resample_naive",
    "Resampler",
    "resampler_flops",
    "gated_cross_attention",
    "gated_cross_attention_naive",
    "GatedCrossAttentionBlock",
    "merge_2x2",
    "merge_2x2_naive",
    "TokenGrid",
    "token_grid",
    "DIGIT_NAMES",
    "TRAIN_TEMPLATES",
    "NEW_TEMPLATES",
    "EOT",
    "IMAGE",
    "CAPTION_LEN",
    "caption_vocab",
    "encode_captions",
    "ToyClip",
    "log_scale_grad",
    "train_toy_clip",
]

#: CLIP starts its learned log-scale at log(1 / 0.07), a temperature of 0.07 ...
CLIP_INIT_LOG_SCALE = math.log(1 / 0.07)
#: ... and clips the scale alpha = exp(log-scale) at 100.
CLIP_MAX_SCALE = 100.0


# --- eq. 32.1: zero-shot classification -----------------------------------------------------------


def logit_scale(log_scale, max_scale: float = CLIP_MAX_SCALE) -> torch.Tensor:
    """alpha = exp(min(s, log max_scale)): the learned scale of CLIP's logits, clipped.

    log_scale: s, a float or a 0-d tensor (a parameter); max_scale: the clip (CLIP: 100).
    Returns a 0-d tensor; its gradient with respect to s is alpha below the clip and 0 above.
    """
    positive(max_scale, "max_scale")
    s = log_scale
    if not isinstance(s, torch.Tensor):
        s = torch.tensor(number(s, "log_scale"), dtype=torch.float64)
    return torch.clamp(s, max=math.log(max_scale)).exp()


def _embeddings(image_emb, class_emb):
    image_emb = float_tensor(image_emb, "image_emb", ndim=2, not_empty=True)
    class_emb = float_tensor(class_emb, "class_emb", ndim=2, not_empty=True)
    shape_is(class_emb, "class_emb", (None, image_emb.shape[1]))  # the same width D
    return image_emb, class_emb


def zero_shot_logits(image_emb, class_emb, log_scale, max_scale: float = CLIP_MAX_SCALE):
    """alpha i^T t_c for L2-normalised i and t_c: the logits of eq. 32.1.

    image_emb: (N, D); class_emb: (C, D), one (prompt) embedding per class; log_scale: s.
    Returns (N, C).
    """
    image_emb, class_emb = _embeddings(image_emb, class_emb)
    cos = similarity_matrix(image_emb, class_emb)  # (N, C) cosines of the unit rows
    return logit_scale(log_scale, max_scale).to(cos.dtype) * cos


def zero_shot_probs(image_emb, class_emb, log_scale, max_scale: float = CLIP_MAX_SCALE):
    """p(c | i) = softmax_c(alpha i^T t_c). Implements eq. 32.1.

    Arguments as :func:`zero_shot_logits`. Returns (N, C), rows summing to one.
    """
    return torch.softmax(zero_shot_logits(image_emb, class_emb, log_scale, max_scale), dim=-1)


def zero_shot_probs_naive(image_emb, class_emb, log_scale, max_scale: float = CLIP_MAX_SCALE):
    """Reference for :func:`zero_shot_probs`: cosines one pair at a time, a max-shifted softmax."""
    image_emb, class_emb = _embeddings(image_emb, class_emb)
    alpha = math.exp(min(float(log_scale), math.log(max_scale)))
    rows = []
    for i in image_emb:
        cos = [torch.dot(i, t) / (i.norm() * t.norm()) for t in class_emb]
        top = max(cos)
        e = [torch.exp(alpha * (c - top)) for c in cos]
        z = sum(e)
        rows.append(torch.stack([x / z for x in e]))
    return torch.stack(rows)  # (N, C)


def prompt_ensemble(prompt_emb) -> torch.Tensor:
    """Class embeddings from M prompts per class: the mean of the unit prompt embeddings,
    normalised again (CLIP's prompt ensembling).

    prompt_emb: (C, M, D). Returns (C, D) unit rows.
    """
    prompt_emb = float_tensor(prompt_emb, "prompt_emb", ndim=3, not_empty=True)
    return normalize(normalize(prompt_emb).mean(dim=1))  # (C, M, D) -> (C, D)


# --- eq. 32.2: the projector and the spliced input sequence ---------------------------------------


def project(z, W1, b1, W2=None, b2=None) -> torch.Tensor:
    """H_img = Z W_1 + b_1 (linear), or GELU(Z W_1 + b_1) W_2 + b_2 (a 2-layer MLP).

    Implements eq. 32.2. z: (..., T_v, d_v); W1: (d_v, d_h) or (d_v, d); b1: (d_h,);
    W2: (d_h, d); b2: (d,). Returns (..., T_v, d).
    """
    z = float_tensor(z, "z", min_ndim=2)
    shape_is(W1, "W1", (z.shape[-1], None))
    h = z @ W1 + b1  # (..., T_v, d_v) @ (d_v, d_h) -> (..., T_v, d_h)
    return h if W2 is None else gelu(h) @ W2 + b2  # (..., T_v, d)


class Projector(nn.Module):
    """The map from the vision encoder's features into the LM's embedding space (eq. 32.2).

    kind ``"linear"`` (LLaVA) holds W1 (d_v, d), b1 (d,); ``"mlp"`` (LLaVA-1.5) holds W1
    (d_v, d), b1, W2 (d, d), b2: a hidden width equal to d. Weights are drawn N(0, 1/fan_in).
    """

    def __init__(
        self,
        d_vision: int,
        d_model: int,
        kind: str = "mlp",
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        d_v, d = positive_int(d_vision, "d_vision"), positive_int(d_model, "d_model")
        self.kind = one_of(kind, "kind", ("linear", "mlp"))

        def weight(rows: int, cols: int) -> nn.Parameter:
            w = torch.randn(rows, cols, generator=generator, dtype=dtype)
            return nn.Parameter(w / math.sqrt(rows))

        self.W1, self.b1 = weight(d_v, d), nn.Parameter(torch.zeros(d, dtype=dtype))
        self.W2 = weight(d, d) if kind == "mlp" else None
        self.b2 = nn.Parameter(torch.zeros(d, dtype=dtype)) if kind == "mlp" else None

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """z: (..., T_v, d_v) -> (..., T_v, d)."""
        return project(z, self.W1, self.b1, self.W2, self.b2)


def projector_parameters(d_vision: int, d_model: int, kind: str = "mlp") -> int:
    """Parameters of a :class:`Projector`: d_v d + d (linear), + d^2 + d (MLP of width d)."""
    d_v, d = positive_int(d_vision, "d_vision"), positive_int(d_model, "d_model")
    linear = d_v * d + d
    return linear + (d * d + d if one_of(kind, "kind", ("linear", "mlp")) == "mlp" else 0)


def _placeholders(tokens, image_token_id: int) -> torch.Tensor:
    """The position of the one image placeholder in every sequence, (B,)."""
    tokens = index_tensor(tokens, "tokens", ndim=2)
    found = tokens == integer(image_token_id, "image_token_id", low=0)  # (B, T)
    per_row = found.sum(dim=1)
    if not bool((per_row == 1).all()):
        raise ValueError(
            f"tokens must hold the image placeholder {image_token_id} exactly once per sequence, "
            f"got counts {per_row.tolist()}"
        )
    return found.int().argmax(dim=1)  # (B,)


def _splice_inputs(tokens, text_emb, image_emb):
    text_emb = float_tensor(text_emb, "text_emb", ndim=3)
    image_emb = float_tensor(image_emb, "image_emb", ndim=3, not_empty=True)
    shape_is(text_emb, "text_emb", (*tokens.shape, None))
    shape_is(image_emb, "image_emb", (tokens.shape[0], None, text_emb.shape[2]))
    return text_emb, image_emb


def splice_image_tokens(tokens, text_emb, image_emb, image_token_id: int):
    """Replace each sequence's image placeholder by its T_v image tokens (LLaVA's input).

    tokens: (B, T) ids, each row holding ``image_token_id`` once; text_emb: (B, T, d) their
    embeddings; image_emb: (B, T_v, d) projected image tokens (eq. 32.2).
    Returns x (B, T - 1 + T_v, d) and is_image (B, T - 1 + T_v) bool, True at image tokens.
    """
    where = _placeholders(tokens, image_token_id)  # (B,)
    text_emb, image_emb = _splice_inputs(tokens, text_emb, image_emb)
    B, T = tokens.shape
    T_v = image_emb.shape[1]
    j = torch.arange(T - 1 + T_v, device=tokens.device)[None, :]  # (1, T') output positions
    rel = j - where[:, None]  # (B, T') position relative to the placeholder
    is_image = (rel >= 0) & (rel < T_v)
    src_text = torch.where(rel < 0, j, j - T_v + 1).clamp(0, T - 1)  # (B, T') text source
    src_image = rel.clamp(0, T_v - 1)  # (B, T') image source
    d = text_emb.shape[-1]
    from_text = text_emb.gather(1, src_text[..., None].expand(B, -1, d))  # (B, T', d)
    from_image = image_emb.gather(1, src_image[..., None].expand(B, -1, d))  # (B, T', d)
    return torch.where(is_image[..., None], from_image, from_text), is_image


def splice_image_tokens_naive(tokens, text_emb, image_emb, image_token_id: int):
    """Reference for :func:`splice_image_tokens`: one ``torch.cat`` per sequence."""
    where = _placeholders(tokens, image_token_id)
    text_emb, image_emb = _splice_inputs(tokens, text_emb, image_emb)
    xs, masks = [], []
    for b, p in enumerate(where.tolist()):
        xs.append(torch.cat([text_emb[b, :p], image_emb[b], text_emb[b, p + 1 :]]))
        flags = [False] * p + [True] * image_emb.shape[1] + [False] * (tokens.shape[1] - p - 1)
        masks.append(torch.tensor(flags))
    return torch.stack(xs), torch.stack(masks)


# --- eq. 32.3: learned queries attend to the visual tokens ----------------------------------------


def _resample_inputs(latents, z, attn):
    if not isinstance(attn, MultiHeadAttention):
        raise TypeError(f"attn must be a MultiHeadAttention, got {type(attn).__name__}")
    latents = shape_is(float_tensor(latents, "latents", ndim=2), "latents", (None, attn.d_model))
    z = shape_is(float_tensor(z, "z", ndim=3, not_empty=True), "z", (None, None, attn.d_kv))
    return latents, z


def resample(latents, z, attn: MultiHeadAttention) -> torch.Tensor:
    """Q learned queries attend to T_v visual tokens: (B, T_v, d_v) -> (B, Q, d).

    Implements eq. 32.3. latents: (Q, d) the learned queries; z: (B, T_v, d_v); attn: a
    cross-attention :class:`~mlbook.attention.multihead.MultiHeadAttention` with d_model = d and
    d_kv = d_v.
    """
    latents, z = _resample_inputs(latents, z, attn)
    q = latents.expand(z.shape[0], -1, -1)  # (Q, d) -> (B, Q, d): the same queries for every image
    return attn(q, z)[0]  # (B, Q, d)


def resample_naive(latents, z, attn: MultiHeadAttention) -> torch.Tensor:
    """Reference for :func:`resample`: one image and one query at a time, heads summed."""
    latents, z = _resample_inputs(latents, z, attn)
    out = []
    for zb in z:
        rows = []
        for q in latents:
            y, _ = multihead_attention_naive(attn, q[None, None], zb[None])  # (1, 1, d)
            rows.append(y[0, 0])
        out.append(torch.stack(rows))
    return torch.stack(out)  # (B, Q, d)


class Resampler(nn.Module):
    """A one-layer perceiver resampler: Q learned queries read the visual tokens by
    cross-attention, then a GELU MLP; both with a residual and a LayerNorm before.

    ``latents`` (Q, d); ``attn`` (d_model = d, d_kv = d_v, no biases); ``W1`` (d, 4d), ``W2``
    (4d, d). Returns Q tokens of width d whatever T_v.
    """

    def __init__(
        self,
        n_queries: int,
        d_vision: int,
        d_model: int,
        n_heads: int = 1,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        Q, d_v = positive_int(n_queries, "n_queries"), positive_int(d_vision, "d_vision")
        d = positive_int(d_model, "d_model")
        self.latents = nn.Parameter(torch.randn(Q, d, generator=generator, dtype=dtype))
        self.attn = MultiHeadAttention(d, n_heads, bias=False, d_kv=d_v).to(dtype)
        with torch.no_grad():  # seeded like the rest, not torch's global generator
            for w in (self.attn.W_Q, self.attn.W_K, self.attn.W_V, self.attn.W_O):
                w.copy_(torch.randn(w.shape, generator=generator, dtype=dtype) / w.shape[0] ** 0.5)
        self.W1 = nn.Parameter(torch.randn(d, 4 * d, generator=generator, dtype=dtype) / d**0.5)
        self.W2 = nn.Parameter(torch.randn(4 * d, d, generator=generator, dtype=dtype) / (2 * d))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """z: (B, T_v, d_v) -> (B, Q, d)."""
        x = self.latents + resample(layer_norm(self.latents), layer_norm(z), self.attn)
        return x + gelu(layer_norm(x) @ self.W1) @ self.W2  # (B, Q, d)


def resampler_flops(n_queries: int, n_visual: int, d_vision: int, d_model: int) -> int:
    """Matrix-product FLOPs (2 per multiply-add) of one cross-attention of Q queries over T_v
    visual tokens: Q d^2 + 2 T_v d_v d + 2 Q T_v d + Q d^2 multiply-adds (eq. 20.4)."""
    return mha_flops(1, n_queries, d_model, T_k=n_visual, d_kv=d_vision)["total"]


# --- eq. 32.4: gated cross-attention (Flamingo) -------------------------------------------------


def _gated_inputs(x, z, gate, attn):
    if not isinstance(attn, MultiHeadAttention):
        raise TypeError(f"attn must be a MultiHeadAttention, got {type(attn).__name__}")
    x = shape_is(float_tensor(x, "x", ndim=3), "x", (None, None, attn.d_model))
    z = shape_is(float_tensor(z, "z", ndim=3, not_empty=True), "z", (x.shape[0], None, attn.d_kv))
    if not isinstance(gate, torch.Tensor):
        gate = torch.tensor(number(gate, "gate"), dtype=x.dtype)
    return x, z, gate


def gated_cross_attention(x, z, gate, attn: MultiHeadAttention) -> torch.Tensor:
    """X' = X + tanh(g) CrossAttn(LN(X), Z): text reads the image through a gate.

    Implements eq. 32.4. x: (B, T, d) the LM's residual stream; z: (B, T_v, d_v) visual tokens;
    gate: g, a float or a 0-d tensor (a parameter, 0 at the start); attn: cross-attention,
    d_model = d, d_kv = d_v. At g = 0 the result is x exactly. Returns (B, T, d).
    """
    x, z, gate = _gated_inputs(x, z, gate, attn)
    return x + torch.tanh(gate) * attn(layer_norm(x), z)[0]  # (B, T, d)


def gated_cross_attention_naive(x, z, gate, attn: MultiHeadAttention) -> torch.Tensor:
    """Reference for :func:`gated_cross_attention`: one head at a time, the normalisation
    written out, the gate by ``math.tanh``."""
    x, z, gate = _gated_inputs(x, z, gate, attn)
    mu = x.mean(-1, keepdim=True)
    x_hat = (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + 1e-5)
    y, _ = multihead_attention_naive(attn, x_hat, z)
    return x + math.tanh(float(gate)) * y


class GatedCrossAttentionBlock(nn.Module):
    """Flamingo's GATED XATTN-DENSE block, inserted before a frozen LM layer:
    X' = X + tanh(g_attn) CrossAttn(LN(X), Z), then X'' = X' + tanh(g_ffn) FFN(LN(X')).

    ``attn`` (d_model = d, d_kv = d_v, no biases), ``W1`` (d, 4d), ``W2`` (4d, d), and the two
    gates ``attn_gate``, ``ffn_gate``, both 0 at initialisation: the block starts as the identity.
    """

    def __init__(
        self,
        d_model: int,
        d_vision: int,
        n_heads: int = 1,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        d, d_v = positive_int(d_model, "d_model"), positive_int(d_vision, "d_vision")
        self.attn = MultiHeadAttention(d, n_heads, bias=False, d_kv=d_v).to(dtype)
        with torch.no_grad():
            for w in (self.attn.W_Q, self.attn.W_K, self.attn.W_V, self.attn.W_O):
                w.copy_(torch.randn(w.shape, generator=generator, dtype=dtype) / w.shape[0] ** 0.5)
        self.W1 = nn.Parameter(torch.randn(d, 4 * d, generator=generator, dtype=dtype) / d**0.5)
        self.W2 = nn.Parameter(torch.randn(4 * d, d, generator=generator, dtype=dtype) / (2 * d))
        self.attn_gate = nn.Parameter(torch.zeros((), dtype=dtype))
        self.ffn_gate = nn.Parameter(torch.zeros((), dtype=dtype))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """x: (B, T, d), z: (B, T_v, d_v) -> (B, T, d)."""
        x = gated_cross_attention(x, z, self.attn_gate, self.attn)
        return x + torch.tanh(self.ffn_gate) * (gelu(layer_norm(x) @ self.W1) @ self.W2)


# --- eq. 32.5: visual token counts ----------------------------------------------------------------


def _grid_tokens(tokens, h: int, w: int):
    tokens = float_tensor(tokens, "tokens", ndim=3)
    h, w = positive_int(h, "h"), positive_int(w, "w")
    divides(2, "2 (the merge)", h, "h")
    divides(2, "2 (the merge)", w, "w")
    return shape_is(tokens, "tokens", (None, h * w, None))


def merge_2x2(tokens, h: int, w: int) -> torch.Tensor:
    """Concatenate each 2 x 2 block of neighbouring tokens: HW tokens -> HW/4.

    Implements eq. 32.5. tokens: (B, h w, d), a row-major h x w grid (token r w + c at row r,
    column c); h, w even. Returns (B, (h/2)(w/2), 4d); output token (R, C) holds the tokens
    (2R, 2C), (2R, 2C + 1), (2R + 1, 2C), (2R + 1, 2C + 1), in that order.
    """
    tokens = _grid_tokens(tokens, h, w)
    B, _, d = tokens.shape
    grid = tokens.reshape(B, h // 2, 2, w // 2, 2, d)  # (B, h/2, i, w/2, j, d)
    grid = grid.permute(0, 1, 3, 2, 4, 5)  # (B, h/2, w/2, i, j, d)
    return grid.reshape(B, (h // 2) * (w // 2), 4 * d)  # (B, hw/4, 4d)


def merge_2x2_naive(tokens, h: int, w: int) -> torch.Tensor:
    """Reference for :func:`merge_2x2`: every 2 x 2 block gathered by its row and column."""
    tokens = _grid_tokens(tokens, h, w)
    out = []
    for R in range(h // 2):
        for C in range(w // 2):
            block = [tokens[:, (2 * R + i) * w + 2 * C + j] for i in (0, 1) for j in (0, 1)]
            out.append(torch.cat(block, dim=-1))  # (B, 4d)
    return torch.stack(out, dim=1)


@dataclass(frozen=True)
class TokenGrid:
    """The token grid of a video or an image: t x h x w patches, n_tokens after merging."""

    t: int
    h: int
    w: int
    n_tokens: int


def token_grid(
    frames: int,
    height: int,
    width: int,
    *,
    patch: int = 14,
    temporal_patch: int = 2,
    merge: int = 2,
) -> TokenGrid:
    """(F, H, W) -> (t, h, w) patches and the number of LM tokens after a merge x merge merge
    (Qwen2-VL: P = 14, two frames per patch, 2 x 2 merge). Implements eq. 32.5.

    frames: F >= 1 (an image is one frame, repeated to fill its temporal patch, so t = 1);
    height, width: multiples of patch * merge. Returns a :class:`TokenGrid` with
    t = ceil(F / temporal_patch), h = H / P, w = W / P, n_tokens = t h w / merge^2.
    """
    F_, H, W = (
        positive_int(v, n) for v, n in ((frames, "frames"), (height, "height"), (width, "width"))
    )
    P, tp, m = (
        positive_int(v, n)
        for v, n in ((patch, "patch"), (temporal_patch, "temporal_patch"), (merge, "merge"))
    )
    divides(P * m, "patch * merge", H, "height")
    divides(P * m, "patch * merge", W, "width")
    t, h, w = -(-F_ // tp), H // P, W // P
    return TokenGrid(t, h, w, t * h * w // (m * m))


# --- a toy CLIP on the digits, and a projector into a frozen language model -----------------------

#: The class names, in label order.
DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
#: The caption templates of training; ``{}`` stands for the class name.
TRAIN_TEMPLATES = (
    "a photo of the digit {}",
    "a handwritten {}",
    "the number {}",
    "a scan of a {}",
    "a small image of a {}",
    "a blurry {}",
)
#: Phrasings never seen in training, made of words that were.
NEW_TEMPLATES = ("a blurry photo of the digit {}", "a scan of the number {}")
EOT, IMAGE = "<eot>", "<image>"
#: Words of the longest caption, plus its <eot>: the text tower's context.
CAPTION_LEN = 1 + max(len(t.split()) for t in TRAIN_TEMPLATES + NEW_TEMPLATES)


def caption_vocab(templates=TRAIN_TEMPLATES + NEW_TEMPLATES, names=DIGIT_NAMES) -> list[str]:
    """The word vocabulary: end-of-text, the image placeholder, then the sorted words."""
    words = {w for t in templates for w in t.split() if w != "{}"} | set(names)
    return [EOT, IMAGE, *sorted(words)]


def encode_captions(templates, vocab, names=DIGIT_NAMES, length: int | None = None):
    """Every class's caption under every template, as word ids ending in <eot>.

    Returns ids (C, M, L) int64, padded with <eot> to L = ``length`` (default: the longest
    caption plus one), and last (C, M), the position of the first <eot>: with a causal text
    encoder the state there has read the whole caption and no padding.
    """
    index = {w: k for k, w in enumerate(vocab)}
    rows = [[t.format(n).split() for t in templates] for n in names]
    longest = max(len(c) for row in rows for c in row) + 1
    L = longest if length is None else integer(length, "length", low=longest)
    ids = torch.full((len(names), len(templates), L), index[EOT], dtype=torch.long)
    last = torch.zeros(len(names), len(templates), dtype=torch.long)
    for c, row in enumerate(rows):
        for m, words in enumerate(row):
            unknown = [w for w in words if w not in index]
            if unknown:
                raise ValueError(f"template {templates[m]!r} uses words not in vocab: {unknown}")
            ids[c, m, : len(words)] = torch.tensor([index[w] for w in words])
            last[c, m] = len(words)
    return ids, last


class ToyClip(nn.Module):
    """CLIP in miniature: a ViT image tower and a bag-of-words text tower, each followed by a
    linear map into a shared D-dimensional space, and a learned log-scale.

    ``image`` a :class:`~mlbook.architectures.vit.ViT` (P x P patches, one block of width d,
    MLP width 2d, mean pooling, no head), ``W_image`` (d, D); ``words`` (V, d) word embeddings,
    averaged over a caption's words, ``W_text`` (d, D); ``log_scale`` s = log(1 / 0.07).
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        d_embed: int = 32,
        width: int = 32,
        patch: int = 2,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        V, D = positive_int(vocab_size, "vocab_size"), positive_int(d_embed, "d_embed")
        d, P = positive_int(width, "width"), positive_int(patch, "patch")
        config = ViTConfig(8, P, 1, d, n_layers=1, n_heads=2, d_ff=2 * d, n_classes=0, pool="mean")
        self.image = ViT(config, generator=generator)
        self.words = nn.Parameter(torch.randn(V, d, generator=generator) / math.sqrt(d))
        self.W_image = nn.Parameter(torch.randn(d, D, generator=generator) / math.sqrt(d))
        self.W_text = nn.Parameter(torch.randn(d, D, generator=generator) / math.sqrt(d))
        self.log_scale = nn.Parameter(torch.tensor(CLIP_INIT_LOG_SCALE))

    def image_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """The ViT's final token states Z_vision: x (N, 1, 8, 8) -> (N, T_v, d), T_v = 64 / P^2."""
        return self.image.tokens(x)

    def encode_image(self, x: torch.Tensor) -> torch.Tensor:
        """Image embeddings i (unnormalised): x (N, 1, 8, 8) -> (N, D)."""
        return self.image(x) @ self.W_image

    def encode_text(self, ids: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """Text embeddings t (unnormalised): the mean embedding of the words before <eot>.

        ids: (N, L) word ids; last: (N,) the position of <eot> (= the number of words).
        Returns (N, D).
        """
        ids = index_tensor(ids, "ids", self.words.shape[0], ndim=2)
        last = shape_is(index_tensor(last, "last", ids.shape[1], ndim=1), "last", (len(ids),))
        if bool((last == 0).any()):
            raise ValueError("last must be >= 1: every caption needs a word before <eot>")
        inside = torch.arange(ids.shape[1]) < last[:, None]  # (N, L) the caption's words
        w = inside.to(self.words.dtype)[..., None]  # (N, L, 1)
        mean = (self.words[ids] * w).sum(1) / w.sum(1)  # (N, d) bag of words
        return mean @ self.W_text


def log_scale_grad(image_emb, text_emb, log_scale, max_scale: float = CLIP_MAX_SCALE):
    """dL/ds of the symmetric InfoNCE at temperature 1 / alpha, alpha = exp(s) clipped.

    The loss depends on alpha and the cosines S only through alpha S, so
    dL/ds = sum_ij (dL/dS_ij) S_ij (0 above the clip, where alpha no longer depends on s).
    image_emb, text_emb: (N, D), row i of each a positive pair. Returns a 0-d tensor.
    """
    S = similarity_matrix(image_emb, text_emb)  # (N, N)
    alpha = logit_scale(log_scale, max_scale)
    if float(log_scale) >= math.log(max_scale):
        return S.new_zeros(())
    tau = 1.0 / float(alpha)
    G = 0.5 * (info_nce_similarity_grad(S, tau) + info_nce_similarity_grad(S.T, tau).T)
    return (G * S).sum()


def train_toy_clip(
    x,
    y,
    *,
    steps: int = 200,
    batch_size: int = 64,
    lr: float = 4e-3,
    seed: int = 0,
    templates=TRAIN_TEMPLATES,
) -> tuple[ToyClip, dict[str, list[float]]]:
    """Train a :class:`ToyClip` on images x (N, 1, 8, 8) with labels y (N,): each image is paired
    with the caption of its class under a random template, and the symmetric InfoNCE
    (``contrastive.info_nce``) at temperature 1 / alpha is minimised with the AdamW of
    :mod:`mlbook.nn.optim`. The log-scale gets the gradient of :func:`log_scale_grad` and is
    clipped at log 100 after every step.

    Returns the model and its history: ``loss`` and ``alpha`` per step.
    """
    x = nonempty(float_tensor(x, "x", ndim=4), "x")
    y = shape_is(index_tensor(y, "y", len(DIGIT_NAMES), ndim=1), "y", (len(x),))
    steps, B = positive_int(steps, "steps"), positive_int(batch_size, "batch_size")
    g = torch.Generator().manual_seed(integer(seed, "seed", low=0))
    vocab = caption_vocab()
    ids, last = encode_captions(templates, vocab, length=CAPTION_LEN)  # (C, M, L), (C, M)
    M, L = ids.shape[1], ids.shape[2]
    model = ToyClip(len(vocab), generator=g)
    opt = Optimizer(  # the AdamW of chapter 15, with CLIP's beta2
        model.parameters(), OptimizerConfig("adamw", lr=positive(lr, "lr"), beta2=0.98)
    )
    hist: dict[str, list[float]] = {"loss": [], "alpha": []}
    for _ in range(steps):
        idx = torch.randint(len(x), (B,), generator=g)  # (B,) images
        m = torch.randint(M, (B,), generator=g)  # (B,) a template for each
        texts = model.encode_text(ids.view(-1, L), last.view(-1))  # (C M, D): every caption
        z_t = texts[y[idx] * M + m]  # (B, D) the caption of each image
        z_i = model.encode_image(x[idx])  # (B, D)
        alpha = float(logit_scale(model.log_scale.detach()))
        loss = info_nce(z_i, z_t, 1.0 / alpha)
        opt.zero_grad()
        loss.backward()
        model.log_scale.grad = log_scale_grad(z_i.detach(), z_t.detach(), model.log_scale.detach())
        opt.step()
        with torch.no_grad():  # CLIP clips the parameter itself
            model.log_scale.clamp_(max=math.log(CLIP_MAX_SCALE))
        hist["loss"].append(loss.item())
        hist["alpha"].append(alpha)
    model.eval()
    return model, hist
