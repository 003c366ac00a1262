"""Counting the matrix products a piece of torch code performs (chapter 26).

:class:`CountMatmuls` intercepts torch calls inside a ``with`` block, independently of the code's
own loop bounds: it counts the matrix products (``a @ b``, ``torch.matmul``, ``torch.mm``,
``torch.bmm``) in ``n`` and their FLOPs in ``flops``, with the book's one convention: a
multiply-add is 2 FLOPs, so a product of an (m, k) and a (k, n) matrix costs 2 m k n, as
``torch.utils.flop_counter.FlopCounterMode`` counts it. Chapter 26 counts with it the tiles that
tiled attention computes (two products a tile, Q K^T and P V). Other operations (``F.linear``,
``einsum``, elementwise ones) are not counted.

Shape legend
    a  (..., m, k) or (k,)   b  (..., k, n) or (k,)   a @ b  (..., m, n): 2 k FLOPs an entry
"""

from __future__ import annotations

from torch.overrides import TorchFunctionMode

__all__ = ["CountMatmuls"]

_MATMULS = frozenset({"matmul", "__matmul__", "mm", "bmm"})


class CountMatmuls(TorchFunctionMode):
    """Count the matrix products run inside ``with CountMatmuls() as counter:``.

    Attributes:
        n: the number of products.
        flops: their FLOPs, 2 per multiply-add: 2 k times the entries of each result, with k the
            last axis of the left operand.
    """

    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.flops = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") in _MATMULS:
            self.n += 1
            self.flops += 2 * args[0].shape[-1] * result.numel()  # (..., m, k) @ (..., k, n)
        return result
