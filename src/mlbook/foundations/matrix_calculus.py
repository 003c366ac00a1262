"""The matrix calculus cookbook (Appendix C) and the linear layer's backward pass (Appendix A).

Reverse mode needs one rule per operation: from the adjoint ``y_bar = dL/dy`` of an output, the
adjoints of its inputs, each of the shape of its input (eq. A.1). Every rule is a
vector-Jacobian product (eq. C.1) written without forming the Jacobian. :data:`RULES` lists the
cookbook: each :class:`Rule` holds a function, its claimed adjoints, an example where the
function is smooth, and the usual slip (the wrong rule a derivation by hand tends to produce),
so that one loop checks every rule against autograd and shows every slip failing.

Rules derived elsewhere in the book are reused, not copied: the softmax backward
(:func:`mlbook.nn.softmax.softmax_vjp`), cross-entropy's gradient
(:func:`mlbook.nn.softmax.cross_entropy_grad`), attention's backward pass
(:func:`mlbook.attention.dot_product.attention_backward`), the activations' derivatives
(:mod:`mlbook.nn.activations`) and the norms' backward passes (:mod:`mlbook.nn.normalization`).

Shape legend
    x, y    a function's input and output, any shapes; J  y.shape + x.shape, its Jacobian
    X       (..., D_in) inputs of a linear layer;  W (D_in, D_out);  b (D_out,);  Y (..., D_out)
    A, B    (..., m, k), (..., k, n) the factors of a product Y = A B, (..., m, n)
    M       (n, n) a square matrix (inverse, determinant, solve);  v (n,) a vector
    Z       (B, K) logits of B examples over K classes;  t (B,) their class indices
    Q, K, V (T_q, d_k), (T_k, d_k), (T_k, d_v);  S, A (T_q, T_k);  O (T_q, d_v)
    s       () a scalar output;  s_bar its adjoint, a number
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..attention.dot_product import attention_backward, scaled_dot_product_attention
from ..nn.activations import (
    gelu,
    gelu_grad,
    normal_cdf,
    sigmoid,
    sigmoid_grad,
    softplus,
    tanh,
    tanh_grad,
)
from ..nn.normalization import layer_norm, layer_norm_backward, rms_norm, rms_norm_backward
from ..nn.softmax import (
    cross_entropy,
    cross_entropy_grad,
    log_softmax,
    logsumexp,
    softmax,
    softmax_vjp,
)
from ..validation import float_tensor, one_of, shape_is

__all__ = [
    "vjp_from_jacobian",
    "matmul_vjp",
    "linear",
    "linear_vjp",
    "linear_vjp_naive",
    "elementwise_vjp",
    "trace_vjp",
    "quadratic_form_vjp",
    "inverse_vjp",
    "logdet_vjp",
    "det_vjp",
    "solve_vjp",
    "frobenius_vjp",
    "norm_vjp",
    "normalize_vjp",
    "logsumexp_vjp",
    "log_softmax_vjp",
    "cross_entropy_vjp",
    "Rule",
    "RULES",
    "rule",
]


# --- eq. C.1 (and A.1): the adjoint is J^T y_bar ------------------------------------------------


def vjp_from_jacobian(jac: torch.Tensor, y_bar: torch.Tensor) -> torch.Tensor:
    """x_bar_i = sum_j y_bar_j dy_j/dx_i from the full Jacobian: the naive reference of every
    rule (O(size of y times size of x)). Implements eq. C.1.

    jac: y.shape + x.shape; y_bar: y.shape. Returns x_bar, of x's shape."""
    shape_is(jac, "jac", tuple(y_bar.shape) + (None,) * (jac.ndim - y_bar.ndim))
    return torch.tensordot(y_bar, jac, dims=y_bar.ndim)  # sum over every axis of y


# --- eq. C.2 and eq. A.2: products and the linear layer -----------------------------------------


def matmul_vjp(a: torch.Tensor, b: torch.Tensor, y_bar: torch.Tensor):
    """Y = A B: A_bar = Y_bar B^T, B_bar = A^T Y_bar. Implements eq. C.2.

    a: (..., m, k); b: (..., k, n) with the same leading axes; y_bar: (..., m, n).
    Returns (a_bar, b_bar) of the shapes of a and b."""
    shape_is(b, "b", tuple(a.shape[:-2]) + (a.shape[-1], None))
    shape_is(y_bar, "y_bar", tuple(a.shape[:-1]) + (b.shape[-1],))
    return y_bar @ b.mT, a.mT @ y_bar  # (..., m, n)(..., n, k), (..., k, m)(..., m, n)


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """Y = X W + b in the book's row layout (W of shape (D_in, D_out), like ``x @ W``).

    x: (..., D_in); w: (D_in, D_out); b: (D_out,) or None. Returns (..., D_out)."""
    return x @ w if b is None else x @ w + b


def linear_vjp(x: torch.Tensor, w: torch.Tensor, y_bar: torch.Tensor):
    """Y = X W + b: X_bar = Y_bar W^T, W_bar = X^T Y_bar, b_bar = sum of Y_bar's rows, with the
    rows of every leading axis stacked. Implements eq. A.2.

    x: (..., D_in); w: (D_in, D_out); y_bar: (..., D_out). Returns (x_bar, w_bar, b_bar) of
    shapes (..., D_in), (D_in, D_out), (D_out,)."""
    shape_is(y_bar, "y_bar", tuple(x.shape[:-1]) + (w.shape[1],))
    rows_x = x.reshape(-1, x.shape[-1])  # (..., D_in) -> (N, D_in), N rows
    rows_y = y_bar.reshape(-1, y_bar.shape[-1])  # (..., D_out) -> (N, D_out)
    return y_bar @ w.T, rows_x.T @ rows_y, rows_y.sum(0)


def linear_vjp_naive(x: torch.Tensor, w: torch.Tensor, y_bar: torch.Tensor):
    """The reference for :func:`linear_vjp`: one row at a time, W_bar as a sum of outer products
    x_n y_bar_n^T and b_bar as a sum of rows. Arguments and returns as :func:`linear_vjp`."""
    shape_is(y_bar, "y_bar", tuple(x.shape[:-1]) + (w.shape[1],))
    rows_x, rows_y = x.reshape(-1, x.shape[-1]), y_bar.reshape(-1, y_bar.shape[-1])
    x_bar = torch.zeros_like(rows_x)
    w_bar = torch.zeros_like(w)
    b_bar = torch.zeros_like(w[0])
    for n in range(rows_x.shape[0]):  # row n: y_n = x_n W + b
        x_bar[n] = w @ rows_y[n]  # sum_o W[i, o] y_bar[n, o]
        w_bar += torch.outer(rows_x[n], rows_y[n])
        b_bar += rows_y[n]
    return x_bar.reshape(x.shape), w_bar, b_bar


# --- elementwise functions ------------------------------------------------------------------------


def elementwise_vjp(y_bar: torch.Tensor, x: torch.Tensor, derivative: Callable) -> torch.Tensor:
    """y = f(x) elementwise: x_bar = y_bar * f'(x), a diagonal Jacobian.

    y_bar, x: the same shape; derivative: f' (elementwise). Returns x_bar."""
    shape_is(y_bar, "y_bar", tuple(x.shape))
    return y_bar * derivative(x)


# --- traces, quadratic forms, inverses, determinants ----------------------------------------------


def trace_vjp(a: torch.Tensor, x: torch.Tensor, s_bar):
    """s = tr(A X): A_bar = s_bar X^T, X_bar = s_bar A^T.

    a: (n, m); x: (m, n). Returns (a_bar, x_bar)."""
    return s_bar * x.T, s_bar * a.T


def quadratic_form_vjp(v: torch.Tensor, m: torch.Tensor, s_bar):
    """s = v^T M v: v_bar = s_bar (M + M^T) v, M_bar = s_bar v v^T.

    v: (n,); m: (n, n). Returns (v_bar, m_bar)."""
    return s_bar * (m + m.T) @ v, s_bar * torch.outer(v, v)


def inverse_vjp(m: torch.Tensor, y_bar: torch.Tensor) -> torch.Tensor:
    """Y = M^-1: M_bar = -Y^T Y_bar Y^T (from dY = -Y dM Y).

    m: (n, n) invertible; y_bar: (n, n). Returns m_bar (n, n)."""
    y_t = torch.linalg.inv(m).T  # (M^-1)^T = (M^T)^-1
    return -y_t @ y_bar @ y_t


def logdet_vjp(m: torch.Tensor, s_bar) -> torch.Tensor:
    """s = log |det M|: M_bar = s_bar M^-T (from d log|det M| = tr(M^-1 dM)).

    m: (n, n) invertible. Returns m_bar (n, n)."""
    return s_bar * torch.linalg.inv(m).T


def det_vjp(m: torch.Tensor, s_bar) -> torch.Tensor:
    """s = det M: M_bar = s_bar det(M) M^-T (Jacobi's formula).

    m: (n, n) invertible. Returns m_bar (n, n)."""
    return s_bar * torch.linalg.det(m) * torch.linalg.inv(m).T


def solve_vjp(m: torch.Tensor, v: torch.Tensor, x_bar: torch.Tensor):
    """x = M^-1 v: v_bar = M^-T x_bar, M_bar = -v_bar x^T (no inverse is formed).

    m: (n, n) invertible; v, x_bar: (n,). Returns (m_bar, v_bar)."""
    x = torch.linalg.solve(m, v)  # (n,)
    v_bar = torch.linalg.solve(m.T, x_bar)  # (n,)
    return -torch.outer(v_bar, x), v_bar


# --- norms ----------------------------------------------------------------------------------------


def frobenius_vjp(x: torch.Tensor, s_bar) -> torch.Tensor:
    """s = ||X||_F^2 = sum_ij X_ij^2: X_bar = 2 s_bar X. x: any shape."""
    return 2 * s_bar * x


def norm_vjp(x: torch.Tensor, s_bar) -> torch.Tensor:
    """s = ||x||_2: x_bar = s_bar x / ||x|| (undefined at x = 0). x: (n,)."""
    return s_bar * x / torch.linalg.vector_norm(x)


def normalize_vjp(x: torch.Tensor, y_bar: torch.Tensor) -> torch.Tensor:
    """y = x / ||x||: x_bar = (y_bar - y (y^T y_bar)) / ||x||, the part of y_bar orthogonal
    to y, scaled. x, y_bar: (n,). Returns x_bar (n,)."""
    r = torch.linalg.vector_norm(x)
    y = x / r
    return (y_bar - y * (y @ y_bar)) / r


# --- eqs. C.3 and C.4: log-sum-exp, softmax, cross-entropy ----------------------------------------


def logsumexp_vjp(z: torch.Tensor, s_bar: torch.Tensor) -> torch.Tensor:
    """s = logsumexp(z) along the last axis: z_bar = s_bar softmax(z).

    z: (..., K); s_bar: (...). Returns z_bar (..., K)."""
    return s_bar[..., None] * softmax(z, dim=-1)


def log_softmax_vjp(z: torch.Tensor, y_bar: torch.Tensor) -> torch.Tensor:
    """y = log softmax(z) along the last axis: z_bar = y_bar - softmax(z) sum_k y_bar_k.

    z, y_bar: (..., K). Returns z_bar (..., K)."""
    return y_bar - softmax(z, dim=-1) * y_bar.sum(-1, keepdim=True)


def cross_entropy_vjp(z: torch.Tensor, t: torch.Tensor, l_bar=1.0) -> torch.Tensor:
    """L = mean over the batch of -log softmax(z)_t: Z_bar = l_bar (softmax(Z) - onehot(t)) / B.
    Implements eq. C.4.

    z: (B, K) logits; t: (B,) class indices; l_bar: the adjoint of L. Returns Z_bar (B, K)."""
    float_tensor(z, "z", ndim=2, not_empty=True)
    return l_bar * cross_entropy_grad(z, t) / z.shape[0]  # per row p - onehot(t), eq. 12.4


# --- the cookbook ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One cookbook entry: ``y = f(*inputs)`` and the claimed adjoints of its inputs.

    Attributes:
        name: the function, e.g. ``"Y = A B"``.
        adjoints: the claimed rule in words, e.g. ``"A_bar = Y_bar B^T, B_bar = A^T Y_bar"``.
        where: where the book derives it (``"eq. C.2"``, ``"chapter 16"``).
        f: the function of the inputs (float64 tensors), returning y.
        vjp: ``vjp(y_bar, *inputs)`` returns the tuple of the inputs' adjoints.
        example: ``example(generator)`` returns inputs where f is smooth (well conditioned).
        slip: the usual wrong rule, same signature as ``vjp`` (the negative control).
        slip_text: what the slip gets wrong.
    """

    name: str
    adjoints: str
    where: str
    f: Callable[..., torch.Tensor]
    vjp: Callable[..., tuple]
    example: Callable[[torch.Generator], tuple]
    slip: Callable[..., tuple]
    slip_text: str


def _randn(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def _square(gen: torch.Generator, n: int = 4) -> torch.Tensor:
    """A non-symmetric (n, n) matrix with positive determinant and singular values near 2."""
    return 2 * torch.eye(n, dtype=torch.float64) + 0.5 * _randn(gen, n, n)


def _labels(gen: torch.Generator, b: int, k: int) -> torch.Tensor:
    return torch.randint(0, k, (b,), generator=gen)


_T = (5, 3)  # (B, K) of the cross-entropy example; its labels are drawn once, below
_LABELS = _labels(torch.Generator().manual_seed(0), *_T)


def _attention(q, k, v):
    return scaled_dot_product_attention(q, k, v)[0]


def _attention_vjp(o_bar, q, k, v):
    return attention_backward(q, k, v, scaled_dot_product_attention(q, k, v)[1], o_bar)


def _attention_no_scale(o_bar, q, k, v):
    dq, dk, dv = _attention_vjp(o_bar, q, k, v)
    c = math.sqrt(q.shape[-1])  # the slip: the 1/sqrt(d_k) of the scores is not passed back
    return dq * c, dk * c, dv


def _norm_slip_ln(y_bar, x, g, b):  # mean and variance treated as constants
    var = x.var(-1, unbiased=False, keepdim=True)
    x_hat = (x - x.mean(-1, keepdim=True)) / torch.sqrt(var + 1e-5)
    return y_bar * g / torch.sqrt(var + 1e-5), (y_bar * x_hat).sum(0), y_bar.sum(0)


def _norm_slip_rms(y_bar, x, g):  # the mean square treated as a constant
    r = torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6)
    return y_bar * g / r, (y_bar * x / r).sum(0)


RULES: tuple[Rule, ...] = (
    Rule(
        "Y = A B",
        "A_bar = Y_bar B^T, B_bar = A^T Y_bar",
        "eq. C.2",
        lambda a, b: a @ b,
        lambda y_bar, a, b: matmul_vjp(a, b, y_bar),
        lambda g: (_randn(g, 3, 4), _randn(g, 4, 4)),
        lambda y_bar, a, b: (y_bar @ b.T, y_bar.T @ a),
        "B_bar = Y_bar^T A, the transpose of A^T Y_bar",
    ),
    Rule(
        "Y = X W + b",
        "X_bar = Y_bar W^T, W_bar = X^T Y_bar, b_bar = sum of rows",
        "eq. A.2",
        linear,
        lambda y_bar, x, w, b: linear_vjp(x, w, y_bar),
        lambda g: (_randn(g, 2, 5, 3), _randn(g, 3, 4), _randn(g, 4)),
        lambda y_bar, x, w, b: (lambda t: (t[0], t[1], y_bar.mean((0, 1))))(
            linear_vjp(x, w, y_bar)
        ),
        "b_bar = mean of the rows instead of their sum",
    ),
    Rule(
        "y = tanh(x)",
        "x_bar = y_bar (1 - y^2)",
        "chapter 11",
        tanh,
        lambda y_bar, x: (elementwise_vjp(y_bar, x, tanh_grad),),
        lambda g: (_randn(g, 6),),
        lambda y_bar, x: (y_bar * (1 - x * x),),
        "1 - x^2: the derivative written with the input instead of the output",
    ),
    Rule(
        "y = sigmoid(x)",
        "x_bar = y_bar y (1 - y)",
        "chapter 11",
        sigmoid,
        lambda y_bar, x: (elementwise_vjp(y_bar, x, sigmoid_grad),),
        lambda g: (_randn(g, 6),),
        lambda y_bar, x: (y_bar * sigmoid(x),),
        "sigma(x): the function instead of its derivative",
    ),
    Rule(
        "y = softplus(x)",
        "x_bar = y_bar sigmoid(x)",
        "eq. B.3",
        softplus,
        lambda y_bar, x: (elementwise_vjp(y_bar, x, sigmoid),),
        lambda g: (_randn(g, 6),),
        lambda y_bar, x: (y_bar * sigmoid(-x),),
        "sigma(-x): the sign of the exponent flipped",
    ),
    Rule(
        "y = GELU(x)",
        "x_bar = y_bar (Phi(x) + x phi(x))",
        "chapter 11",
        gelu,
        lambda y_bar, x: (elementwise_vjp(y_bar, x, gelu_grad),),
        lambda g: (_randn(g, 6),),
        lambda y_bar, x: (y_bar * normal_cdf(x),),
        "Phi(x): the product rule's second term x phi(x) is missing",
    ),
    Rule(
        "s = tr(A X)",
        "A_bar = s_bar X^T, X_bar = s_bar A^T",
        "§C.2",
        lambda a, x: torch.trace(a @ x),
        lambda s_bar, a, x: trace_vjp(a, x, s_bar),
        lambda g: (_randn(g, 4, 4), _randn(g, 4, 4)),
        lambda s_bar, a, x: (s_bar * x, s_bar * a),
        "X_bar = s_bar A: the transpose is missing",
    ),
    Rule(
        "s = v^T M v",
        "v_bar = s_bar (M + M^T) v, M_bar = s_bar v v^T",
        "§C.2",
        lambda v, m: v @ m @ v,
        lambda s_bar, v, m: quadratic_form_vjp(v, m, s_bar),
        lambda g: (_randn(g, 4), _randn(g, 4, 4)),
        lambda s_bar, v, m: (2 * s_bar * m @ v, s_bar * torch.outer(v, v)),
        "v_bar = 2 M v, true only for a symmetric M",
    ),
    Rule(
        "Y = M^-1",
        "M_bar = -M^-T Y_bar M^-T",
        "§C.3",
        torch.linalg.inv,
        lambda y_bar, m: (inverse_vjp(m, y_bar),),
        lambda g: (_square(g),),
        lambda y_bar, m: (-torch.linalg.inv(m) @ y_bar @ torch.linalg.inv(m),),
        "-M^-1 Y_bar M^-1: the transposes are missing",
    ),
    Rule(
        "s = log|det M|",
        "M_bar = s_bar M^-T",
        "§C.3",
        lambda m: torch.linalg.slogdet(m)[1],
        lambda s_bar, m: (logdet_vjp(m, s_bar),),
        lambda g: (_square(g),),
        lambda s_bar, m: (s_bar * torch.linalg.inv(m),),
        "M^-1: right only for a symmetric M",
    ),
    Rule(
        "s = det M",
        "M_bar = s_bar det(M) M^-T",
        "§C.3",
        torch.linalg.det,
        lambda s_bar, m: (det_vjp(m, s_bar),),
        lambda g: (_square(g),),
        lambda s_bar, m: (s_bar * torch.linalg.inv(m).T,),
        "M^-T alone: that is the gradient of log det M",
    ),
    Rule(
        "x = M^-1 v",
        "v_bar = M^-T x_bar, M_bar = -v_bar x^T",
        "§C.3",
        torch.linalg.solve,
        lambda x_bar, m, v: solve_vjp(m, v, x_bar),
        lambda g: (_square(g), _randn(g, 4)),
        lambda x_bar, m, v: (lambda t: (-t[0].T, t[1]))(solve_vjp(m, v, x_bar)),
        "M_bar = -x v_bar^T: the outer product in the wrong order",
    ),
    Rule(
        "s = ||X||_F^2",
        "X_bar = 2 s_bar X",
        "§C.3",
        lambda x: (x * x).sum(),
        lambda s_bar, x: (frobenius_vjp(x, s_bar),),
        lambda g: (_randn(g, 3, 4),),
        lambda s_bar, x: (s_bar * x,),
        "s_bar X: the factor 2 is missing",
    ),
    Rule(
        "s = ||v||_2",
        "v_bar = s_bar v / ||v||",
        "§C.3",
        torch.linalg.vector_norm,
        lambda s_bar, v: (norm_vjp(v, s_bar),),
        lambda g: (3 * _randn(g, 5),),
        lambda s_bar, v: (s_bar * v,),
        "s_bar v: the gradient of ||v||^2 / 2, not of ||v||",
    ),
    Rule(
        "y = v / ||v||",
        "v_bar = (y_bar - y (y^T y_bar)) / ||v||",
        "§C.3",
        lambda v: v / torch.linalg.vector_norm(v),
        lambda y_bar, v: (normalize_vjp(v, y_bar),),
        lambda g: (_randn(g, 5),),
        lambda y_bar, v: (y_bar / torch.linalg.vector_norm(v),),
        "y_bar / ||v||: the norm's own dependence on v is ignored",
    ),
    Rule(
        "s = logsumexp(z)",
        "z_bar = s_bar softmax(z)",
        "eq. B.1",
        lambda z: logsumexp(z, dim=-1),
        lambda s_bar, z: (logsumexp_vjp(z, s_bar),),
        lambda g: (_randn(g, 3, 5),),
        lambda s_bar, z: (s_bar[..., None] * torch.exp(z),),
        "s_bar exp(z): the normalisation is missing",
    ),
    Rule(
        "y = softmax(z)",
        "z_bar = y (y_bar - (y_bar^T y) 1)",
        "eq. C.3",
        lambda z: softmax(z, dim=-1),
        lambda y_bar, z: (softmax_vjp(softmax(z, dim=-1), y_bar),),
        lambda g: (_randn(g, 3, 5),),
        lambda y_bar, z: (softmax(z, dim=-1) * y_bar,),
        "y * y_bar: the row sum (y_bar^T y) is not subtracted",
    ),
    Rule(
        "y = log softmax(z)",
        "z_bar = y_bar - softmax(z) sum(y_bar)",
        "§C.4",
        lambda z: log_softmax(z, dim=-1),
        lambda y_bar, z: (log_softmax_vjp(z, y_bar),),
        lambda g: (_randn(g, 3, 5),),
        lambda y_bar, z: (y_bar - softmax(z, dim=-1),),
        "y_bar - softmax(z): the sum of y_bar is missing (right only if it is 1)",
    ),
    Rule(
        "L = mean CE(Z, t)",
        "Z_bar = L_bar (softmax(Z) - onehot(t)) / B",
        "eq. C.4",
        lambda z: cross_entropy(z, _LABELS),
        lambda l_bar, z: (cross_entropy_vjp(z, _LABELS, l_bar),),
        lambda g: (_randn(g, *_T),),
        lambda l_bar, z: (l_bar * cross_entropy_grad(z, _LABELS),),
        "softmax(Z) - onehot(t) without the 1/B of the mean",
    ),
    Rule(
        "O = softmax(Q K^T / sqrt d) V",
        "V_bar = A^T O_bar, S_bar = A (A_bar - rowsum), Q_bar = S_bar K / sqrt d, ...",
        "eq. C.5",
        _attention,
        _attention_vjp,
        lambda g: (_randn(g, 4, 3), _randn(g, 5, 3), _randn(g, 5, 2)),
        _attention_no_scale,
        "Q_bar = S_bar K, K_bar = S_bar^T Q: the 1/sqrt d of the scores is dropped",
    ),
    Rule(
        "y = LayerNorm(x; gamma, beta)",
        "x_bar = (g - mean(g) - x_hat mean(g x_hat)) / sigma, g = gamma y_bar, ...",
        "chapter 16",
        layer_norm,
        lambda y_bar, x, g, b: layer_norm_backward(y_bar, x, g),
        lambda g: (_randn(g, 3, 6), 1 + 0.1 * _randn(g, 6), _randn(g, 6)),
        _norm_slip_ln,
        "gamma y_bar / sigma: the mean and the variance are treated as constants",
    ),
    Rule(
        "y = RMSNorm(x; gamma)",
        "x_bar = (g - x_hat mean(g x_hat)) / rms, g = gamma y_bar, ...",
        "chapter 16",
        rms_norm,
        lambda y_bar, x, g: rms_norm_backward(y_bar, x, g),
        lambda g: (_randn(g, 3, 6), 1 + 0.1 * _randn(g, 6)),
        _norm_slip_rms,
        "gamma y_bar / rms: the root mean square is treated as a constant",
    ),
)


def rule(name: str) -> Rule:
    """The rule of :data:`RULES` called ``name`` (e.g. ``"Y = A B"``)."""
    one_of(name, "name", [r.name for r in RULES])
    return next(r for r in RULES if r.name == name)
