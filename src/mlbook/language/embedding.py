"""Token embeddings: lookup, its one-hot form, its gradient, and tied output weights (chapter 17).

An embedding matrix E holds one row per token. Looking up a token is multiplying its one-hot
row vector by E (eq. 17.3), so the gradient of E is the one-hot matrix transposed times the
upstream gradient: a scatter-add of the rows of the upstream gradient into the rows of their
token ids (eq. 17.4). A language model can reuse E as its output layer, z = h E^T (eq. 17.5);
then E receives gradient from both uses, and the two contributions add.

Shape legend
    V      vocabulary size (rows of E)
    d      embedding width (columns of E)
    ids    (...,) integer token ids in [0, V), any batch shape, e.g. (B, T)
    x      (..., d) embedded tokens, one row per id
    h      (..., d) hidden states fed to the tied output layer
    z      (..., V) logits over the vocabulary

Every optimised function has its naive reference beside it: :func:`embedding_lookup` (indexing)
and :func:`one_hot_lookup` (a matrix product); :func:`embedding_grad` (``index_add_``) and
:func:`embedding_grad_naive` (a Python loop over positions).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "embedding_lookup",
    "one_hot_lookup",
    "embedding_grad",
    "embedding_grad_naive",
    "ScatterAddEmbedding",
    "tied_logits",
    "tied_output_grad",
    "TiedEmbedding",
]


def _check_table(E: torch.Tensor, name: str = "E") -> None:
    if not isinstance(E, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(E).__name__}")
    if E.ndim != 2 or E.shape[0] == 0 or E.shape[1] == 0:
        raise ValueError(f"{name} must have shape (V, d) with V, d >= 1, got {tuple(E.shape)}")
    if not E.is_floating_point():
        raise TypeError(f"{name} must be floating point, got {E.dtype}")


def _check_ids(ids: torch.Tensor, vocab_size: int) -> None:
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"ids must be a torch.Tensor, got {type(ids).__name__}")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"ids must be an integer tensor, got {ids.dtype}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(
            f"ids must lie in [0, {vocab_size}), got range [{int(ids.min())}, {int(ids.max())}]"
        )


# --- eq. 17.3: lookup = one-hot row times E --------------------------------------------------


def embedding_lookup(E: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Embed token ids by selecting rows of E: x_i = E[id_i, :]. Implements eq. 17.3.

    Args:
        E: (V, d) embedding matrix.
        ids: (...,) integer ids in [0, V).

    Returns:
        (..., d) embeddings; differentiable with respect to E.
    """
    _check_table(E)
    _check_ids(ids, E.shape[0])
    return E[ids]  # (..., d)


def one_hot_lookup(E: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Embed token ids as one-hot rows times E: x_i = e_{id_i} E (naive reference, eq. 17.3).

    Costs O(N V d) multiply-adds instead of O(N d) copies, and builds an (N, V) matrix.
    """
    _check_table(E)
    _check_ids(ids, E.shape[0])
    one_hot = F.one_hot(ids.reshape(-1), E.shape[0]).to(E.dtype)  # (N, V), N = ids.numel()
    return (one_hot @ E).reshape(*ids.shape, E.shape[1])  # (N, d) -> (..., d)


# --- eq. 17.4: the gradient of E is a scatter-add --------------------------------------------


def _check_grad_args(grad_x, ids, vocab_size) -> None:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"vocab_size must be a positive int, got {vocab_size!r}")
    if not isinstance(grad_x, torch.Tensor) or not grad_x.is_floating_point():
        raise TypeError("grad_x must be a floating-point torch.Tensor")
    _check_ids(ids, vocab_size)
    if grad_x.ndim < 1 or tuple(grad_x.shape[:-1]) != tuple(ids.shape):
        raise ValueError(
            f"grad_x must have shape ids.shape + (d,) = {tuple(ids.shape)} + (d,), "
            f"got {tuple(grad_x.shape)}"
        )


def embedding_grad(grad_x: torch.Tensor, ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Gradient of a loss with respect to E, given its gradient with respect to x = E[ids].

    Row j collects the upstream gradients of all positions holding token j; repeated ids add
    up (``index_add_``, a scatter-*add*: plain indexed assignment would keep only one of them).
    Implements eq. 17.4.

    Args:
        grad_x: (..., d) gradient of the loss with respect to the embeddings.
        ids: (...,) the token ids that were looked up, same batch shape as ``grad_x``.
        vocab_size: V.

    Returns:
        (V, d) gradient with respect to E; rows of tokens absent from ``ids`` are zero.
    """
    _check_grad_args(grad_x, ids, vocab_size)
    d = grad_x.shape[-1]
    flat = grad_x.reshape(-1, d)  # (..., d) -> (N, d)
    out = grad_x.new_zeros(vocab_size, d)
    return out.index_add_(0, ids.reshape(-1), flat)


def embedding_grad_naive(grad_x: torch.Tensor, ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Reference for :func:`embedding_grad`: loop over positions, add rows. Implements eq. 17.4."""
    _check_grad_args(grad_x, ids, vocab_size)
    flat_ids = ids.reshape(-1).tolist()
    flat = grad_x.reshape(len(flat_ids), -1)  # (..., d) -> (N, d)
    out = grad_x.new_zeros(vocab_size, flat.shape[1])
    for i, j in enumerate(flat_ids):
        out[j] += flat[i]
    return out


class ScatterAddEmbedding(torch.autograd.Function):
    """Embedding lookup whose backward pass is :func:`embedding_grad` (to test it by gradcheck).

    ``ScatterAddEmbedding.apply(E, ids)`` returns E[ids]; its backward returns the scatter-add.
    """

    @staticmethod
    def forward(ctx, E, ids):
        _check_table(E)
        _check_ids(ids, E.shape[0])
        ctx.save_for_backward(ids)
        ctx.vocab_size = E.shape[0]
        return E[ids]

    @staticmethod
    def backward(ctx, grad_x):
        (ids,) = ctx.saved_tensors
        return embedding_grad(grad_x, ids, ctx.vocab_size), None


# --- eq. 17.5: tied output weights -----------------------------------------------------------


def tied_logits(h: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
    """Logits over the vocabulary from the embedding matrix itself: z = h E^T. Implements eq. 17.5.

    Args:
        h: (..., d) hidden states.
        E: (V, d) the embedding matrix, used as the output layer's weight.

    Returns:
        (..., V) logits; z_j = h . E_j scores token j by how well h matches its embedding.
    """
    _check_table(E)
    if not isinstance(h, torch.Tensor) or h.ndim < 1 or h.shape[-1] != E.shape[1]:
        raise ValueError(
            f"h must have shape (..., {E.shape[1]}) to match E {tuple(E.shape)}, "
            f"got {tuple(h.shape) if isinstance(h, torch.Tensor) else type(h)}"
        )
    return h @ E.T  # (..., d) @ (d, V)


def tied_output_grad(h: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
    """The output layer's share of the gradient of E: sum over positions of grad_z^T h.

    From z_tj = h_t . E_j: dL/dE_j = sum_t (dL/dz_tj) h_t, a dense (V, d) matrix (every token
    gets gradient through the softmax). With tied weights the full gradient of E is this plus
    :func:`embedding_grad` of the input side (eq. 17.5 together with eq. 17.4).

    Args:
        h: (..., d) hidden states that produced the logits.
        grad_z: (..., V) gradient of the loss with respect to the logits.

    Returns:
        (V, d)
    """
    if not isinstance(h, torch.Tensor) or not isinstance(grad_z, torch.Tensor):
        raise TypeError("h and grad_z must be torch.Tensors")
    if h.ndim < 1 or grad_z.ndim < 1 or tuple(h.shape[:-1]) != tuple(grad_z.shape[:-1]):
        raise ValueError(
            f"h (..., d) and grad_z (..., V) need the same batch shape, got "
            f"{tuple(h.shape)} and {tuple(grad_z.shape)}"
        )
    hs = h.reshape(-1, h.shape[-1])  # (..., d) -> (N, d)
    gz = grad_z.reshape(-1, grad_z.shape[-1])  # (..., V) -> (N, V)
    return gz.T @ hs  # (V, N) @ (N, d)


class TiedEmbedding(nn.Module):
    """One parameter E (V, d) used twice: to embed ids (eq. 17.3) and to score tokens (eq. 17.5).

    Tying saves V * d parameters and makes a token's input and output vectors the same.
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        if vocab_size < 1 or dim < 1:
            raise ValueError(f"vocab_size and dim must be >= 1, got {vocab_size}, {dim}")
        self.weight = nn.Parameter(
            torch.randn(vocab_size, dim, generator=generator, dtype=dtype) * dim**-0.5
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """(...,) ids -> (..., d) embeddings."""
        return embedding_lookup(self.weight, ids)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """(..., d) hidden states -> (..., V) logits with the same matrix."""
        return tied_logits(h, self.weight)
