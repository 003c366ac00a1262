"""Token embeddings: lookup, its one-hot form, its gradient, and tied output weights (chapter 17).

Lookup (eq. 17.3), scatter-add gradient (eq. 17.4), tied output layer z = h E^T (eq. 17.5).

Shape legend
    V  vocabulary;  d  width;  E  (V, d);  ids  (...,) ids in [0, V);  x, h  (..., d);  z  (..., V)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..validation import float_tensor, index_tensor, positive_int, shape_is

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


# --- eq. 17.3: lookup = one-hot row times E --------------------------------------------------


def embedding_lookup(E: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Embed token ids by selecting rows of E: x_i = E[id_i, :]. Implements eq. 17.3.

    E: (V, d) embedding matrix;  ids: (...,) integer ids in [0, V).
    Returns (..., d) embeddings; differentiable with respect to E.
    """
    E = float_tensor(E, "E", ndim=2)
    return E[index_tensor(ids, "ids", E.shape[0])]  # (..., d); a negative id would wrap around


def one_hot_lookup(E: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Reference for :func:`embedding_lookup`: one-hot rows times E, x_i = e_{id_i} E (eq. 17.3)."""
    V = float_tensor(E, "E", ndim=2).shape[0]
    one_hot = F.one_hot(index_tensor(ids, "ids", V).reshape(-1), V).to(E.dtype)  # (N, V)
    return (one_hot @ E).reshape(*ids.shape, E.shape[1])  # (N, d) -> (..., d)


# --- eq. 17.4: the gradient of E is a scatter-add --------------------------------------------


def embedding_grad(grad_x: torch.Tensor, ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """dL/dE from dL/dx at x = E[ids], a scatter-add. Implements eq. 17.4.

    grad_x: (..., d);  ids: (...,). Returns (V, d).
    """
    ids = index_tensor(ids, "ids", positive_int(vocab_size, "vocab_size"))
    d = shape_is(grad_x, "grad_x", (*ids.shape, None)).shape[-1]
    flat = grad_x.reshape(-1, d)  # (..., d) -> (N, d)
    out = grad_x.new_zeros(vocab_size, d)
    return out.index_add_(0, ids.reshape(-1), flat)


def embedding_grad_naive(grad_x: torch.Tensor, ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Reference for :func:`embedding_grad`: loop over positions, add rows. Implements eq. 17.4."""
    ids = index_tensor(ids, "ids", positive_int(vocab_size, "vocab_size"))
    shape_is(grad_x, "grad_x", (*ids.shape, None))  # a reshape would hide a mismatch
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
        E = float_tensor(E, "E", ndim=2)
        ctx.save_for_backward(index_tensor(ids, "ids", E.shape[0]))
        ctx.vocab_size = E.shape[0]
        return E[ids]

    @staticmethod
    def backward(ctx, grad_x):
        (ids,) = ctx.saved_tensors
        return embedding_grad(grad_x, ids, ctx.vocab_size), None


# --- eq. 17.5: tied output weights -----------------------------------------------------------


def tied_logits(h: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
    """Logits from the embedding matrix itself: z = h E^T. Implements eq. 17.5.

    h: (..., d) hidden states;  E: (V, d) the embedding matrix.
    Returns (..., V) logits.
    """
    return h @ float_tensor(E, "E", ndim=2).T  # (..., d) @ (d, V)


def tied_output_grad(h: torch.Tensor, grad_z: torch.Tensor) -> torch.Tensor:
    """The output layer's share of the gradient of E: sum over positions of grad_z^T h (eq. 17.5).

    h: (..., d) hidden states;  grad_z: (..., V) gradient with respect to the logits.
    Returns (V, d); add :func:`embedding_grad` of the input side for tied weights.
    """
    h = float_tensor(h, "h", min_ndim=1)
    shape_is(grad_z, "grad_z", (*h.shape[:-1], None))  # a reshape would pair wrong positions
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
        positive_int(vocab_size, "vocab_size"), positive_int(dim, "dim")
        self.weight = nn.Parameter(
            torch.randn(vocab_size, dim, generator=generator, dtype=dtype) * dim**-0.5
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """(...,) ids -> (..., d) embeddings."""
        return embedding_lookup(self.weight, ids)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """(..., d) hidden states -> (..., V) logits with the same matrix."""
        return tied_logits(h, self.weight)
