"""Low-rank adaptation (LoRA): a frozen weight plus a trainable update of rank r (chapter 33).

A linear map keeps its pretrained weight W frozen and learns W' = W + (alpha / r) B A
(eq. 33.3), with B initialised to zero so that the adapted model starts as the base model; the
gradients of A and B are the gradient of W' projected onto them (eq. 33.4), and the adapter has
r (d_in + d_out) parameters instead of d_in d_out (eq. 33.5). :func:`lora_linear` adds the
update as a bypass, x A^T then B^T, without forming the (d_out, d_in) matrix;
:func:`lora_linear_naive` forms the merged weight. :class:`LoRALinear` is the layer for a weight
in ``nn.Linear``'s layout; :func:`add_lora` puts adapters on the projections of the book's
:class:`~mlbook.models.decoder.Decoder` by parametrising its weights (``torch.nn.utils.
parametrize``), and :func:`merge` / :func:`unmerge` fold the update into the weight and back.

Shape legend
    N input rows (tokens);  d_in, d_out the widths of the linear map;  r the rank
    W (d_out, d_in), the layout of ``nn.Linear``;  A (r, d_in);  B (d_out, r)
    x (..., d_in) -> y (..., d_out);  G = dL/dy (N, d_out);  Delta = dL/dW' (d_out, d_in)

The Decoder multiplies ``x @ W_dec`` with W_dec = W^T of shape (d_in, d_out); its adapted weight
is W_dec + (alpha / r) (B A)^T, with A and B in the layout above (the layout of ``peft``'s
``lora_A.weight`` and ``lora_B.weight``).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils import parametrize

from ..models.decoder import Decoder
from ..validation import float_tensor, integer, one_of, positive, positive_int, shape_is

__all__ = [
    "TARGETS",
    "init_lora",
    "lora_delta",
    "lora_linear",
    "lora_linear_naive",
    "lora_grads",
    "lora_grads_naive",
    "lora_parameters",
    "LoRALinear",
    "LoRAWeight",
    "add_lora",
    "adapters",
    "merge",
    "unmerge",
    "merge_and_unload",
    "trainable_parameters",
]

#: The projections that :func:`add_lora` can adapt: short name -> (sublayer, weight of it).
#: Llama's names: q, k, v, o = q_proj ... o_proj; gate, up, down = the SwiGLU matrices.
TARGETS = {
    "q": ("attn", "Wq"),
    "k": ("attn", "Wk"),
    "v": ("attn", "Wv"),
    "o": ("attn", "Wo"),
    "gate": ("ffn", "W"),
    "up": ("ffn", "V"),
    "down": ("ffn", "W2"),
}


def _rank_and_scale(A: torch.Tensor, B: torch.Tensor, alpha: float) -> tuple[int, float]:
    """r from A (r, d_in) and B (d_out, r), checked to agree; the scale alpha / r."""
    r = float_tensor(A, "A", ndim=2).shape[0]
    shape_is(float_tensor(B, "B", ndim=2), "B", (None, r))
    return r, positive(alpha, "alpha") / r


def init_lora(
    d_in: int,
    d_out: int,
    r: int,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The starting adapter: A (r, d_in) uniform on +-1/sqrt(d_in) (``nn.Linear``'s default, as
    in ``peft``), B (d_out, r) zero, so that B A = 0 (eq. 33.3)."""
    d_in, d_out, r = (positive_int(v, n) for v, n in ((d_in, "d_in"), (d_out, "d_out"), (r, "r")))
    bound = 1 / math.sqrt(d_in)
    A = (2 * torch.rand(r, d_in, generator=generator, dtype=dtype) - 1) * bound
    return A, torch.zeros(d_out, r, dtype=dtype)


def lora_delta(A: torch.Tensor, B: torch.Tensor, alpha: float) -> torch.Tensor:
    """The update (alpha / r) B A, (d_out, d_in), of rank at most r. Implements eq. 33.3."""
    _, scale = _rank_and_scale(A, B, alpha)
    return scale * (B @ A)


def lora_linear(x, W, A, B, alpha: float) -> torch.Tensor:
    """y = x W^T + (alpha / r) (x A^T) B^T: the frozen path plus the low-rank bypass, never
    forming a (d_out, d_in) update. Implements eq. 33.3.

    x: (..., d_in); W: (d_out, d_in); A: (r, d_in); B: (d_out, r). Returns (..., d_out).
    """
    _, scale = _rank_and_scale(A, B, alpha)
    shape_is(float_tensor(W, "W", ndim=2), "W", (B.shape[0], A.shape[1]))
    return x @ W.T + scale * ((x @ A.T) @ B.T)  # (..., r) -> (..., d_out)


def lora_linear_naive(x, W, A, B, alpha: float) -> torch.Tensor:
    """The reference of :func:`lora_linear`: y = x (W + (alpha / r) B A)^T, the merged weight."""
    shape_is(float_tensor(W, "W", ndim=2), "W", (B.shape[0], A.shape[1]))
    return x @ (W + lora_delta(A, B, alpha)).T


def lora_grads(x, grad_out, A, B, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients (Abar, Bbar) of A and B from x (N, d_in) and G = dL/dy (N, d_out), without
    forming Delta = G^T x: Bbar = s G^T (x A^T), Abar = s (G B)^T x. Implements eq. 33.4."""
    _, scale = _rank_and_scale(A, B, alpha)
    x = float_tensor(x, "x", ndim=2)
    shape_is(float_tensor(grad_out, "grad_out", ndim=2), "grad_out", (x.shape[0], B.shape[0]))
    B_bar = scale * (grad_out.T @ (x @ A.T))  # (d_out, N) @ (N, r)
    A_bar = scale * ((grad_out @ B).T @ x)  # (r, N) @ (N, d_in)
    return A_bar, B_bar


def lora_grads_naive(x, grad_out, A, B, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 33.4 as written: Delta = G^T x (d_out, d_in), Bbar = s Delta A^T, Abar = s B^T Delta."""
    _, scale = _rank_and_scale(A, B, alpha)
    delta = grad_out.T @ x  # (d_out, d_in): the gradient of the merged weight W'
    return scale * (B.T @ delta), scale * (delta @ A.T)


def lora_parameters(d_in: int, d_out: int, r: int) -> int:
    """The adapter's parameter count r (d_in + d_out) (A and B). Implements eq. 33.5."""
    d_in, d_out = positive_int(d_in, "d_in"), positive_int(d_out, "d_out")
    return integer(r, "r", low=1, high=min(d_in, d_out)) * (d_in + d_out)


class LoRALinear(nn.Module):
    """A frozen linear map with a trainable low-rank bypass: y = x W^T (+ b) + (alpha/r) x A^T B^T.

    Args:
        weight: W (d_out, d_in), copied and frozen; bias: (d_out,) or None, frozen.
        r: the rank, 1 <= r <= min(d_in, d_out); alpha: the scale numerator (eq. 33.3).
        generator: seeds A (:func:`init_lora`); B starts at zero.
    """

    def __init__(self, weight, r: int, alpha: float, *, bias=None, generator=None) -> None:
        super().__init__()
        d_out, d_in = float_tensor(weight, "weight", ndim=2).shape
        self.r = integer(r, "r", low=1, high=min(d_in, d_out))
        self.alpha = positive(alpha, "alpha")
        self.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), False)
        A, B = init_lora(d_in, d_out, self.r, generator=generator, dtype=weight.dtype)
        self.A, self.B = nn.Parameter(A), nn.Parameter(B)
        self.merged = False

    def delta(self) -> torch.Tensor:
        """The update (alpha / r) B A, (d_out, d_in)."""
        return lora_delta(self.A, self.B, self.alpha)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d_in) -> (..., d_out); after :meth:`merge`, the merged weight alone."""
        if self.merged:
            y = x @ self.weight.T
        else:
            y = lora_linear(x, self.weight, self.A, self.B, self.alpha)
        return y if self.bias is None else y + self.bias

    @torch.no_grad()
    def merge(self) -> None:
        """W <- W + (alpha / r) B A, then the bypass is skipped (no extra cost at inference)."""
        _toggle(self, merged=True)
        self.weight += self.delta()

    @torch.no_grad()
    def unmerge(self) -> None:
        """W <- W - (alpha / r) B A: the frozen weight again, up to rounding."""
        _toggle(self, merged=False)
        self.weight -= self.delta()


def _toggle(adapter, merged: bool) -> None:
    """Flip ``adapter.merged``; merging twice would add the update twice (a silent error)."""
    if adapter.merged == merged:
        state = "merged" if merged else "unmerged"
        raise ValueError(f"the adapter is already {state}")
    adapter.merged = merged


class LoRAWeight(nn.Module):
    """The parametrisation of a Decoder weight W_dec = W^T (d_in, d_out): W_dec + (alpha/r) (B A)^T.

    Holds A (r, d_in) and B (d_out, r) like :class:`LoRALinear`; registered by :func:`add_lora`.
    After :func:`merge` it returns the (merged) stored weight unchanged.
    """

    def __init__(self, d_in: int, d_out: int, r: int, alpha: float, *, generator=None, dtype=None):
        super().__init__()
        self.r, self.alpha = integer(r, "r", low=1, high=min(d_in, d_out)), positive(alpha, "alpha")
        A, B = init_lora(d_in, d_out, self.r, generator=generator, dtype=dtype or torch.float32)
        self.A, self.B = nn.Parameter(A), nn.Parameter(B)
        self.merged = False

    def delta(self) -> torch.Tensor:
        """The update in the Decoder's layout, ((alpha / r) B A)^T, (d_in, d_out)."""
        return lora_delta(self.A, self.B, self.alpha).T

    def forward(self, W: torch.Tensor) -> torch.Tensor:
        """The stored weight W_dec (d_in, d_out) -> the adapted weight (d_in, d_out)."""
        return W if self.merged else W + self.delta()


def _decoder(model) -> Decoder:
    if not isinstance(model, Decoder):
        raise TypeError(f"model must be a Decoder, got {type(model).__name__}")
    return model


def add_lora(
    model: Decoder,
    r: int,
    alpha: float,
    targets=("q", "v"),
    generator: torch.Generator | None = None,
) -> dict[str, LoRAWeight]:
    """Freeze every weight of ``model`` and put a rank-r adapter on the named projections of
    every attention layer (names of :data:`TARGETS`; Hu et al.'s choice is ("q", "v")).

    The model is changed in place; its trainable parameters are then the adapters' A and B.
    Returns the adapters by weight name, e.g. ``"blocks.0.attn.Wq"``.
    """
    model = _decoder(model)
    targets = tuple(one_of(t, "targets", TARGETS) for t in targets)
    if not targets:
        raise ValueError("targets must name at least one projection")
    if adapters(model):
        raise ValueError("model already has LoRA adapters")
    for p in model.parameters():
        p.requires_grad_(False)
    out = {}
    for i, block in enumerate(model.blocks):
        for t in targets:
            sub, name = TARGETS[t]
            module = getattr(block, sub, None)
            if module is None or not hasattr(module, name):
                continue  # an SSM layer has no attention projections
            W = getattr(module, name)  # (d_in, d_out), x @ W
            adapter = LoRAWeight(*W.shape, r, alpha, generator=generator, dtype=W.dtype)
            parametrize.register_parametrization(module, name, adapter)
            out[f"blocks.{i}.{sub}.{name}"] = adapter
    return out


def adapters(model: Decoder) -> dict[str, LoRAWeight]:
    """The LoRA adapters of ``model`` by weight name (empty if it has none)."""
    out = {}
    for i, block in enumerate(_decoder(model).blocks):
        for sub, name in TARGETS.values():
            module = getattr(block, sub, None)
            if module is not None and parametrize.is_parametrized(module, name):
                for p in module.parametrizations[name]:
                    if isinstance(p, LoRAWeight):
                        out[f"blocks.{i}.{sub}.{name}"] = p
    return out


def _stored(model: Decoder):
    """(stored weight, adapter) pairs: the frozen ``original`` under each parametrisation."""
    found = adapters(model)
    if not found:
        raise ValueError("model has no LoRA adapters (call add_lora first)")
    for key, adapter in found.items():
        block, sub, name = key.split(".")[1:]
        yield getattr(model.blocks[int(block)], sub).parametrizations[name].original, adapter


@torch.no_grad()
def merge(model: Decoder) -> None:
    """Fold every adapter into its weight, W_dec <- W_dec + (alpha/r)(B A)^T; forward passes then
    cost what the base model's cost."""
    for W, adapter in _stored(model):
        _toggle(adapter, merged=True)
        W += adapter.delta()


@torch.no_grad()
def unmerge(model: Decoder) -> None:
    """Undo :func:`merge`: W_dec <- W_dec - (alpha/r)(B A)^T (exact up to rounding)."""
    for W, adapter in _stored(model):
        _toggle(adapter, merged=False)
        W -= adapter.delta()


def merge_and_unload(model: Decoder) -> Decoder:
    """Merge the adapters and remove them: a plain Decoder with the merged weights (in place,
    returned), whose state dict has the base model's names."""
    if not any(a.merged for a in adapters(model).values()):
        merge(model)
    for key in list(adapters(model)):
        block, sub, name = key.split(".")[1:]
        module = getattr(model.blocks[int(block)], sub)
        parametrize.remove_parametrizations(module, name, leave_parametrized=True)
    return model


def trainable_parameters(model: nn.Module) -> int:
    """The number of parameters with ``requires_grad``: what an optimiser updates."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
