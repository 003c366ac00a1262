"""Automatic differentiation from scratch: forward mode (JVPs) and reverse mode (VJPs).

Two small engines and the tools to test them (chapter 10):

- :class:`Dual` pushes a *tangent* forward next to every value: one pass computes the
  Jacobian-vector product ``J u_dot`` (eq. 10.1).
- :class:`Scalar` and :class:`Tensor` record a graph while computing values; :func:`backward`
  then pulls an *adjoint* back through it in reverse topological order: one pass computes the
  vector-Jacobian product ``v_bar J`` (eq. 10.2). Every rule adds into the adjoint of its inputs
  (``+=``), so a value used several times receives the sum of its contributions (eqs. 10.3-10.5).

Shape legend
    n      number of inputs of a function f: R^n -> R^m
    m      number of outputs
    J      (m, n) the Jacobian of f, J[i, j] = d f_i / d u_j
    u_dot  (n,) a tangent (a direction in input space); v_dot = J u_dot is (m,)
    v_bar  (m,) an adjoint (a weighting of the outputs); u_bar = v_bar J is (n,)
    A, W   (B, K), (K, N) the operands of a matrix product Y = A W, Y is (B, N)

Values are Python floats (:class:`Scalar`) or float64 NumPy arrays (:class:`Tensor`, and
:class:`Dual`, whose value and tangent may be either). Operation counts (:func:`count_ops`) make
the cost of the two modes measurable without a clock. Bad input raises ``ValueError`` or
``TypeError`` naming the offending shape or value.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ..validation import float_array, same_shape

__all__ = [
    "OpCount",
    "count_ops",
    "Dual",
    "jvp",
    "jacobian_forward",
    "Scalar",
    "Tensor",
    "topological_order",
    "topological_order_recursive",
    "backward",
    "gradient",
    "vjp",
    "jacobian_reverse",
    "unbroadcast",
    "vjp_add",
    "vjp_mul",
    "vjp_matmul",
    "vjp_unary",
    "vjp_sum",
    "UNARY_OPS",
    "BINARY_OPS",
    "apply_op",
    "Program",
    "random_program",
    "run_program",
]

#: The elementwise unary primitives every engine implements, with their derivatives below.
UNARY_OPS = ("tanh", "exp", "log", "relu")
#: The binary primitives of random programs.
BINARY_OPS = ("add", "sub", "mul")

_NUMPY_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "exp": np.exp,
    "log": np.log,
    "relu": lambda x: np.maximum(x, 0.0),
}


# --- operation counting ------------------------------------------------------------------------


@dataclass(eq=False)  # counters compare by identity: two with equal counts are still different
class OpCount:
    """How many primitive operations ran, by kind (one per primitive call, whatever its size)."""

    primal: int = 0
    tangent: int = 0
    adjoint: int = 0

    @property
    def total(self) -> int:
        return self.primal + self.tangent + self.adjoint


_COUNTERS: list[OpCount] = []


@contextlib.contextmanager
def count_ops() -> Iterator[OpCount]:
    """Count the primitive operations run inside the ``with`` block (nesting allowed)."""
    counter = OpCount()
    _COUNTERS.append(counter)
    try:
        yield counter
    finally:
        del _COUNTERS[next(i for i, c in enumerate(_COUNTERS) if c is counter)]


def _tick(kind: str, k: int = 1) -> None:
    for c in _COUNTERS:
        setattr(c, kind, getattr(c, kind) + k)


def _float(x, name: str) -> np.ndarray | float:
    """A Python float for numbers, a float64 array otherwise."""
    if type(x) is float:  # the common case, fast
        return x
    return float(x) if isinstance(x, numbers.Real) else float_array(x, name)


# --- forward mode: dual numbers (eq. 10.1) -------------------------------------------------------


class _UnaryMethods:
    """``x.tanh()``, ``x.exp()``, ``x.log()``, ``x.relu()`` for every node type; each node class
    implements ``_unary(name)`` in its own mode (tangent, local derivative or VJP closure)."""

    def tanh(self):
        return self._unary("tanh")

    def exp(self):
        return self._unary("exp")

    def log(self):
        return self._unary("log")

    def relu(self):
        return self._unary("relu")


class Dual(_UnaryMethods):
    """A value with a tangent, ``value + tangent * eps`` with ``eps**2 = 0`` (eq. 10.1)."""

    __slots__ = ("value", "tangent")
    __array_ufunc__ = None  # make NumPy defer to our reflected operators (W @ dual)

    def __init__(self, value, tangent=0.0):
        if type(value) is float and type(tangent) is float:  # fast path for scalar duals
            self.value, self.tangent = value, tangent
            return
        self.value = _float(value, "value")
        tangent = _float(tangent, "tangent")
        if np.shape(tangent) != np.shape(self.value):
            if np.ndim(tangent) == 0 and float(tangent) == 0.0:
                tangent = np.zeros_like(self.value) if np.ndim(self.value) else 0.0
            else:
                raise ValueError(
                    f"tangent shape {np.shape(tangent)} differs from value shape "
                    f"{np.shape(self.value)}"
                )
        self.tangent = tangent

    def __repr__(self) -> str:
        return f"Dual(value={self.value!r}, tangent={self.tangent!r})"

    @staticmethod
    def _split(x):
        """(value, tangent or None) of a Dual or a constant."""
        if isinstance(x, Dual):
            return x.value, x.tangent
        if isinstance(x, (Scalar, Tensor)):
            raise TypeError(f"cannot mix Dual with {type(x).__name__}")
        return _float(x, "operand"), None

    def _binary(self, other, f, df_dx, df_dy, swap=False):
        """z = f(x, y) with tangent ``df_dx(x, y, x_dot) + df_dy(x, y, y_dot)``; a constant operand
        (tangent None) contributes no term."""
        (xv, xt), (yv, yt) = self._split(self), self._split(other)
        if swap:
            (xv, xt), (yv, yt) = (yv, yt), (xv, xt)
        value = f(xv, yv)
        terms = [df_dx(xv, yv, xt)] if xt is not None else []
        terms += [df_dy(xv, yv, yt)] if yt is not None else []
        _tick("primal")
        _tick("tangent", len(terms))
        tangent = terms[0] if len(terms) == 1 else terms[0] + terms[1]
        if type(value) is float:
            return Dual(value, float(tangent))
        return Dual(
            value,
            np.broadcast_to(tangent, np.shape(value)).copy() if np.ndim(value) else float(tangent),
        )

    def __add__(self, other):
        """z = x + y: ``z_dot = x_dot + y_dot``. Implements eq. 10.3."""
        return self._binary(other, operator.add, lambda x, y, t: t, lambda x, y, t: t)

    def __radd__(self, other):
        return self._binary(other, operator.add, lambda x, y, t: t, lambda x, y, t: t, swap=True)

    def __sub__(self, other):
        return self._binary(other, operator.sub, lambda x, y, t: t, lambda x, y, t: -t)

    def __rsub__(self, other):
        return self._binary(other, operator.sub, lambda x, y, t: t, lambda x, y, t: -t, swap=True)

    def __mul__(self, other):
        """z = x y: ``z_dot = x_dot y + x y_dot`` (the product rule). Implements eq. 10.4."""
        return self._binary(other, operator.mul, lambda x, y, t: t * y, lambda x, y, t: x * t)

    def __rmul__(self, other):
        return self._binary(
            other, operator.mul, lambda x, y, t: t * y, lambda x, y, t: x * t, swap=True
        )

    def __matmul__(self, other):
        """Y = A W: ``Y_dot = A_dot W + A W_dot``. Implements eq. 10.5."""
        return self._binary(other, operator.matmul, lambda a, w, t: t @ w, lambda a, w, t: a @ t)

    def __rmatmul__(self, other):
        return self._binary(
            other, operator.matmul, lambda a, w, t: t @ w, lambda a, w, t: a @ t, swap=True
        )

    def __neg__(self):
        return self * -1.0

    def __getitem__(self, index):
        _tick("primal")
        _tick("tangent")
        return Dual(self.value[index], self.tangent[index])

    def __pow__(self, p):
        """``x ** p`` for a constant real exponent: tangent ``p x**(p-1) x_dot``."""
        if not isinstance(p, numbers.Real) or isinstance(p, bool):
            raise TypeError(f"only constant real exponents are supported, got {type(p).__name__}")
        _tick("primal")
        _tick("tangent")
        return Dual(self.value**p, p * self.value ** (p - 1) * self.tangent)

    def __truediv__(self, other):
        return self * (other**-1.0 if isinstance(other, Dual) else 1.0 / _nonzero(other))

    def __rtruediv__(self, other):
        return other * self**-1.0

    def _unary(self, name):
        """y = f(x) elementwise: ``y_dot = f'(x) x_dot``."""
        x, t = self.value, self.tangent
        if name == "log" and np.any(np.asarray(x) <= 0):
            raise ValueError(f"log of non-positive values (min {np.min(x)!r})")
        y = _NUMPY_UNARY[name](x)
        _tick("primal")
        _tick("tangent")
        return Dual(y, _unary_derivative(name, x, y) * t)

    def sum(self):
        """Sum of all entries; the tangent is summed the same way (summation is linear)."""
        _tick("primal")
        _tick("tangent")
        return Dual(float(np.sum(self.value)), float(np.sum(self.tangent)))


def _nonzero(c):
    c = _float(c, "divisor")
    if np.any(np.asarray(c) == 0):
        raise ValueError("division by a constant zero")
    return c


def _unary_derivative(name: str, x, y):
    """f'(x) of an elementwise primitive, from its input x and output y = f(x)."""
    if name == "tanh":
        return 1.0 - y * y  # tanh' = 1 - tanh^2
    if name == "exp":
        return y  # exp' = exp
    if name == "log":
        return 1.0 / x
    if name == "relu":
        return (np.asarray(x) > 0).astype(np.float64) if np.ndim(x) else float(x > 0)
    raise ValueError(f"unknown unary op {name!r}; expected one of {UNARY_OPS}")


def jvp(f: Callable, u, u_dot) -> tuple[np.ndarray, np.ndarray]:
    """Forward mode: ``(f(u), J_f(u) u_dot)`` in one pass with dual numbers (eq. 10.1).

    f: maps a :class:`Dual` holding an (n,) vector to a Dual holding a scalar or an (m,) vector,
    using only operations that Dual implements. u: (n,) the point. u_dot: (n,) the input tangent.
    Returns ``v`` of shape () or (m,), and ``v_dot = J u_dot`` of the same shape."""
    u = float_array(np.atleast_1d(u), "u", ndim=1, not_empty=True)
    u_dot = float_array(np.atleast_1d(u_dot), "u_dot")
    same_shape(u, u_dot, ("u", "u_dot"))
    out = f(Dual(u, u_dot))
    if not isinstance(out, Dual):
        raise TypeError(f"f must return a Dual, got {type(out).__name__}")
    return np.asarray(out.value), np.asarray(out.tangent)


def jacobian_forward(f: Callable, u) -> np.ndarray:
    """The (m, n) Jacobian by n forward passes, column j = J e_j (eq. 10.1 with u_dot = e_j)."""
    u = float_array(np.atleast_1d(u), "u", ndim=1, not_empty=True)
    eye = np.eye(u.size)
    columns = [np.atleast_1d(jvp(f, u, eye[j])[1]) for j in range(u.size)]  # n x (m,)
    return np.stack(columns, axis=1)  # (m, n)


# --- reverse mode: the graph, the topological order and the backward sweep (eq. 10.2) --------


def topological_order_recursive(root) -> list:
    """Naive reference: every node after its parents, by recursive depth-first search."""
    if not hasattr(root, "parents"):
        raise TypeError(f"root must be a graph node (Scalar or Tensor), got {type(root).__name__}")
    order, seen = [], set()

    def visit(node):
        if id(node) in seen:
            return
        seen.add(id(node))
        for parent in node.parents:
            visit(parent)
        order.append(node)

    visit(root)
    return order


def topological_order(root) -> list:
    """Every node reachable from ``root``, each after all of its parents (inputs first)."""
    if not hasattr(root, "parents"):
        raise TypeError(f"root must be a graph node (Scalar or Tensor), got {type(root).__name__}")
    order, seen = [], {id(root)}
    stack = [(root, iter(root.parents))]
    while stack:
        node, parents = stack[-1]
        for parent in parents:  # resume where this node's loop stopped
            if id(parent) not in seen:
                seen.add(id(parent))
                stack.append((parent, iter(parent.parents)))
                break  # visit the parent first (the recursive call)
        else:  # all parents done: the node is finished
            stack.pop()
            order.append(node)
    return order


def backward(root, grad=None) -> list:
    """Reverse mode: set ``node.grad = v_bar J_node`` for every node of root's graph (eq. 10.2).

    root: a :class:`Scalar` or :class:`Tensor`, the output v. grad: the seed adjoint v_bar, same
    shape as ``root.value``; default 1 (for a scalar output this makes ``leaf.grad`` the gradient
    of the output). Returns the topological order that was used (inputs first)."""
    order = topological_order(root)
    if grad is None:
        if np.ndim(root.value) != 0:
            raise ValueError(
                f"backward of a non-scalar output of shape {np.shape(root.value)} needs an "
                "explicit grad (the seed v_bar) of the same shape"
            )
        grad = 1.0
    grad = _float(grad, "grad")
    if isinstance(root, Scalar) and np.ndim(grad) == 0:
        grad = float(grad)  # a Scalar graph carries Python floats throughout
    if np.shape(grad) != np.shape(root.value):
        raise ValueError(f"grad has shape {np.shape(grad)}, root.value has {np.shape(root.value)}")
    for node in order:
        node.grad = node._zero()
    root.grad = root._zero() + grad
    for node in reversed(order):
        if not node.parents:
            continue
        shares = node._vjp(node.grad)  # one adjoint contribution per parent
        _tick("adjoint", len(shares))
        for parent, share in zip(node.parents, shares, strict=True):
            if type(share) is not float and np.shape(share) != np.shape(parent.grad):
                # a wrong tensor rule must fail loudly, not broadcast into the adjoint
                raise RuntimeError(
                    f"{node.op}: adjoint of shape {np.shape(share)} for an "
                    f"input of shape {np.shape(parent.grad)}"
                )
            parent.grad += share  # accumulate: a parent used twice receives both shares
    return order


def gradient(root, wrt: Sequence, grad=None) -> list:
    """The derivatives of ``root`` with respect to the nodes in ``wrt``, by one reverse pass.

    root: the output node; ``grad`` is its seed v_bar (default 1 for a scalar output). wrt: the
    nodes (usually the inputs) to differentiate with respect to."""
    reached = {id(node) for node in backward(root, grad)}
    return [w.grad if id(w) in reached else w._zero() for w in wrt]


class Scalar(_UnaryMethods):
    """A float in a computation graph: value, parents, and local partial derivatives (eq. 10.3)."""

    __slots__ = ("value", "parents", "local_grads", "op", "grad")
    __array_ufunc__ = None

    def __init__(self, value, parents: tuple = (), local_grads: tuple = (), op: str = "leaf"):
        if type(value) is not float and (
            isinstance(value, bool) or not isinstance(value, numbers.Real)
        ):
            raise TypeError(f"Scalar holds a real number, got {type(value).__name__}")
        if len(parents) != len(local_grads):
            raise ValueError(f"{len(parents)} parents but {len(local_grads)} local gradients")
        self.value = float(value)
        self.parents = tuple(parents)
        self.local_grads = tuple(float(g) for g in local_grads)
        self.op = op
        self.grad = 0.0
        if parents:
            _tick("primal")

    def __repr__(self) -> str:
        return f"Scalar({self.value:.6g}, op={self.op!r}, grad={self.grad:.6g})"

    def _zero(self):
        return 0.0

    def _vjp(self, grad):
        """The shares of the parents: ``z_bar * dz/dparent`` for each parent (the chain rule)."""
        return tuple(grad * d for d in self.local_grads)

    @staticmethod
    def _lift(x) -> Scalar:
        if isinstance(x, Scalar):
            return x
        if isinstance(x, (Dual, Tensor)):
            raise TypeError(f"cannot mix Scalar with {type(x).__name__}")
        return Scalar(x)  # a constant: a leaf whose gradient nobody reads

    def __add__(self, other):
        """z = x + y: local derivatives dz/dx = dz/dy = 1 (eq. 10.3)."""
        other = self._lift(other)
        return Scalar(self.value + other.value, (self, other), (1.0, 1.0), "add")

    def __mul__(self, other):
        """z = x y: local derivatives dz/dx = y, dz/dy = x (eq. 10.4)."""
        other = self._lift(other)
        return Scalar(self.value * other.value, (self, other), (other.value, self.value), "mul")

    def __radd__(self, other):
        return self._lift(other) + self

    def __rmul__(self, other):
        return self._lift(other) * self

    def __neg__(self):
        return self * -1.0

    def __sub__(self, other):
        other = self._lift(other)
        return Scalar(self.value - other.value, (self, other), (1.0, -1.0), "sub")

    def __rsub__(self, other):
        return self._lift(other) - self

    def __pow__(self, p):
        """``x ** p`` for a constant real exponent p; local derivative ``p x**(p-1)``."""
        if not isinstance(p, numbers.Real) or isinstance(p, bool):
            raise TypeError(f"only constant real exponents are supported, got {type(p).__name__}")
        return Scalar(self.value**p, (self,), (p * self.value ** (p - 1),), "pow")

    def __truediv__(self, other):
        return self * self._lift(other) ** -1.0

    def __rtruediv__(self, other):
        return self._lift(other) * self**-1.0

    def _unary(self, name):
        if name == "log" and self.value <= 0:
            raise ValueError(f"log of a non-positive value {self.value!r}")
        y = float(_NUMPY_UNARY[name](self.value))
        return Scalar(y, (self,), (_unary_derivative(name, self.value, y),), name)

    def backward(self, grad=None) -> list:
        """Fill ``.grad`` of every node of this graph with d(self)/d(node); see :func:`backward`."""
        return backward(self, grad)


# --- tensor rules (eqs. 10.3-10.5 for arrays) -------------------------------------------------


def unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the axes that broadcasting added or stretched, so it has ``shape``.

    grad: the adjoint of a broadcast result, e.g. (B, N). shape: the operand's shape before
    broadcasting, e.g. (N,) or (1, N). Implements eq. 10.3."""
    grad = np.asarray(grad, dtype=np.float64)
    shape = tuple(shape)
    extra = grad.ndim - len(shape)
    if extra < 0:
        raise ValueError(f"cannot unbroadcast a gradient of shape {grad.shape} to {shape}")
    g = grad.sum(axis=tuple(range(extra))) if extra else grad  # drop the leading added axes
    stretched = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    if stretched:
        g = g.sum(axis=stretched, keepdims=True)  # collapse the axes stretched from size 1
    if g.shape != shape:
        raise ValueError(f"gradient of shape {grad.shape} does not broadcast from {shape}")
    return g


def vjp_add(z_bar: np.ndarray, x_shape, y_shape) -> tuple[np.ndarray, np.ndarray]:
    """z = x + y: ``x_bar += z_bar``, ``y_bar += z_bar`` (eq. 10.3), summed over broadcasting."""
    return unbroadcast(z_bar, x_shape), unbroadcast(z_bar, y_shape)


def vjp_mul(z_bar: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """z = x * y elementwise: ``x_bar += z_bar y``, ``y_bar += z_bar x`` (eq. 10.4)."""
    return unbroadcast(z_bar * y, np.shape(x)), unbroadcast(z_bar * x, np.shape(y))


def vjp_matmul(y_bar: np.ndarray, a: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Y = A W: ``A_bar = Y_bar W^T`` and ``W_bar = A^T Y_bar`` (eq. 10.5).

    y_bar: (B, N) adjoint of Y. a: (B, K) left operand. w: (K, N) right operand. Returns
    ``A_bar`` (B, K) and ``W_bar`` (K, N): each adjoint has its operand's shape."""
    y_bar, a, w = np.asarray(y_bar), np.asarray(a), np.asarray(w)
    if a.ndim != 2 or w.ndim != 2 or a.shape[1] != w.shape[0]:
        raise ValueError(f"vjp_matmul needs A (B, K) and W (K, N), got {a.shape} and {w.shape}")
    if y_bar.shape != (a.shape[0], w.shape[1]):
        raise ValueError(f"y_bar must have shape {(a.shape[0], w.shape[1])}, got {y_bar.shape}")
    return y_bar @ w.T, a.T @ y_bar  # (B, N)(N, K) = (B, K) and (K, B)(B, N) = (K, N)


def vjp_unary(name: str, y_bar: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y = f(x) elementwise: ``x_bar += y_bar * f'(x)`` (a diagonal Jacobian)."""
    if name not in UNARY_OPS:
        raise ValueError(f"unknown unary op {name!r}; expected one of {UNARY_OPS}")
    return y_bar * _unary_derivative(name, x, y)


def vjp_sum(y_bar, x_shape, axis: int | None = None) -> np.ndarray:
    """y = x.sum(axis): every entry of x gets the adjoint of the sum it went into.

    y_bar: () for ``axis=None``, otherwise x's shape without ``axis``. x_shape: shape of x."""
    y_bar = np.asarray(y_bar, dtype=np.float64)
    if axis is not None:
        y_bar = np.expand_dims(y_bar, axis)  # put the summed axis back, size 1
    return np.broadcast_to(y_bar, x_shape).copy()  # copy: every adjoint owns its memory


class Tensor(_UnaryMethods):
    """A float64 NumPy array in a computation graph, with the VJP rules of eqs. 10.3-10.5."""

    __slots__ = ("value", "parents", "_vjp_fn", "op", "grad")
    __array_ufunc__ = None

    def __init__(
        self, value, parents: tuple = (), vjp_fn: Callable | None = None, op: str = "leaf"
    ):
        value = _float(value, "value")
        self.value = np.array(value, dtype=np.float64)
        if not np.all(np.isfinite(self.value)):
            raise ValueError(f"{op} produced non-finite values (shape {self.value.shape})")
        if bool(parents) != (vjp_fn is not None):
            raise ValueError("a Tensor with parents needs a vjp_fn, and a leaf must not have one")
        self.parents = tuple(parents)
        self._vjp_fn = vjp_fn
        self.op = op
        self.grad = np.zeros_like(self.value)
        if parents:
            _tick("primal")

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape

    def __repr__(self) -> str:
        return f"Tensor(shape={self.shape}, op={self.op!r})"

    def _zero(self):
        return np.zeros_like(self.value)

    def _vjp(self, grad):
        return self._vjp_fn(grad)

    @staticmethod
    def _lift(x) -> Tensor:
        if isinstance(x, Tensor):
            return x
        if isinstance(x, (Dual, Scalar)):
            raise TypeError(f"cannot mix Tensor with {type(x).__name__}")
        return Tensor(x)

    def _broadcast_shape(self, other, opname):
        try:
            return np.broadcast_shapes(self.shape, other.shape)
        except ValueError:
            raise ValueError(
                f"{opname}: shapes {self.shape} and {other.shape} do not broadcast"
            ) from None

    def __add__(self, other):
        other = self._lift(other)
        self._broadcast_shape(other, "add")
        xs, ys = self.shape, other.shape
        return Tensor(self.value + other.value, (self, other), lambda g: vjp_add(g, xs, ys), "add")

    def __sub__(self, other):
        other = self._lift(other)
        self._broadcast_shape(other, "sub")
        xs, ys = self.shape, other.shape
        return Tensor(
            self.value - other.value,
            (self, other),
            lambda g: (unbroadcast(g, xs), -unbroadcast(g, ys)),
            "sub",
        )

    def __mul__(self, other):
        other = self._lift(other)
        self._broadcast_shape(other, "mul")
        x, y = self.value, other.value
        return Tensor(x * y, (self, other), lambda g: vjp_mul(g, x, y), "mul")

    def __matmul__(self, other):
        """Matrix product with the VJP of eq. 10.5; a vector operand acts as a (1, K) row (left) or
        a (K, 1) column (right), as in NumPy."""
        other = self._lift(other)
        a, w = self.value, other.value
        if a.ndim not in (1, 2) or w.ndim not in (1, 2) or a.shape[-1] != w.shape[0]:
            raise ValueError(
                f"matmul needs (B, K) @ (K, N) (or vectors), got {a.shape} @ {w.shape}"
            )
        a2 = a.reshape(1, -1) if a.ndim == 1 else a  # (K,) -> (1, K)
        w2 = w.reshape(-1, 1) if w.ndim == 1 else w  # (K,) -> (K, 1)
        y = a @ w

        def vjp_fn(g):
            a_bar, w_bar = vjp_matmul(np.reshape(g, (a2.shape[0], w2.shape[1])), a2, w2)
            return a_bar.reshape(a.shape), w_bar.reshape(w.shape)  # back to the operand shapes

        return Tensor(y, (self, other), vjp_fn, "matmul")

    def __getitem__(self, index):
        """``x[index]`` (any NumPy index); the VJP scatters the adjoint back with ``+=``."""
        x_shape, y = self.shape, self.value[index]

        def vjp_fn(g):
            x_bar = np.zeros(x_shape)
            np.add.at(x_bar, index, g)  # a repeated index receives the sum of its adjoints
            return (x_bar,)

        return Tensor(y, (self,), vjp_fn, "index")

    def __radd__(self, other):
        return self._lift(other) + self

    def __rsub__(self, other):
        return self._lift(other) - self

    def __rmul__(self, other):
        return self._lift(other) * self

    def __rmatmul__(self, other):
        return self._lift(other) @ self

    def __neg__(self):
        return self * -1.0

    def __pow__(self, p):
        """``x ** p`` elementwise for a constant real exponent p."""
        if not isinstance(p, numbers.Real) or isinstance(p, bool):
            raise TypeError(f"only constant real exponents are supported, got {type(p).__name__}")
        x = self.value
        return Tensor(x**p, (self,), lambda g: (g * p * x ** (p - 1),), "pow")

    def __truediv__(self, other):
        return self * self._lift(other) ** -1.0

    def __rtruediv__(self, other):
        return self._lift(other) * self**-1.0

    def _unary(self, name):
        x = self.value
        if name == "log" and np.any(x <= 0):
            raise ValueError(f"log of non-positive values (min {x.min()!r})")
        y = _NUMPY_UNARY[name](x)
        return Tensor(y, (self,), lambda g: (vjp_unary(name, g, x, y),), name)

    def sum(self, axis: int | None = None):
        """Sum over all entries (``axis=None``) or over one axis."""
        if axis is not None and not (
            isinstance(axis, int) and -self.value.ndim <= axis < self.value.ndim
        ):
            raise ValueError(f"axis {axis!r} is out of range for shape {self.shape}")
        xs = self.shape
        return Tensor(self.value.sum(axis=axis), (self,), lambda g: (vjp_sum(g, xs, axis),), "sum")

    def backward(self, grad=None) -> list:
        """Fill ``.grad`` of every node of this graph; see :func:`backward`."""
        return backward(self, grad)


def vjp(f: Callable, u, v_bar) -> tuple[np.ndarray, np.ndarray]:
    """Reverse mode: ``(f(u), v_bar J_f(u))`` with one forward and one backward pass (eq. 10.2).

    f: maps a :class:`Tensor` holding an (n,) vector to a Tensor of shape () or (m,). u: (n,) the
    point. v_bar: the output adjoint, shape () or (m,) like f's output. Returns ``v`` = f(u) and
    ``u_bar = v_bar J`` of shape (n,)."""
    u = float_array(np.atleast_1d(u), "u", ndim=1, not_empty=True)
    x = Tensor(u)
    out = f(x)
    if not isinstance(out, Tensor):
        raise TypeError(f"f must return a Tensor, got {type(out).__name__}")
    v_bar = np.asarray(_float(v_bar, "v_bar"))
    if v_bar.shape != out.shape:
        raise ValueError(f"v_bar has shape {v_bar.shape} but f(u) has shape {out.shape}")
    backward(out, v_bar)
    return out.value.copy(), x.grad.copy()


def jacobian_reverse(f: Callable, u) -> np.ndarray:
    """The (m, n) Jacobian by m reverse passes, row i = e_i^T J (eq. 10.2 with v_bar = e_i)."""
    u = float_array(np.atleast_1d(u), "u", ndim=1, not_empty=True)
    out_shape = f(Tensor(u)).shape  # one extra forward pass, to learn m
    if len(out_shape) > 1:
        raise ValueError(f"jacobian_reverse needs f to return () or (m,), got {out_shape}")
    m = int(np.prod(out_shape))
    eye = np.eye(m)
    rows = [vjp(f, u, eye[i].reshape(out_shape))[1] for i in range(m)]  # m x (n,)
    return np.stack(rows, axis=0)  # (m, n)


# --- random programs: the same computation on any engine ---------------------------------------


def apply_op(name: str, *args):
    """Apply a primitive by name to Scalars, Tensors, Duals, torch tensors, floats or arrays."""
    if name in BINARY_OPS:
        if len(args) != 2:
            raise ValueError(f"{name} takes 2 arguments, got {len(args)}")
        x, y = args
        return {"add": operator.add, "sub": operator.sub, "mul": operator.mul}[name](x, y)
    if name not in UNARY_OPS:
        raise ValueError(f"unknown op {name!r}; expected one of {BINARY_OPS + UNARY_OPS}")
    if len(args) != 1:
        raise ValueError(f"{name} takes 1 argument, got {len(args)}")
    (x,) = args
    if isinstance(x, (numbers.Real, np.ndarray)):
        return _NUMPY_UNARY[name](x)
    return getattr(x, name)()  # Scalar, Tensor, Dual and torch.Tensor all have the method


@dataclass(frozen=True)
class Program:
    """A straight-line program: a computation graph written as a list of instructions."""

    n_inputs: int
    instructions: tuple[tuple[str, tuple[int, ...]], ...]
    outputs: tuple[int, ...]

    def __post_init__(self):
        if self.n_inputs < 1:
            raise ValueError(f"a program needs at least one input, got {self.n_inputs}")
        for i, (op, args) in enumerate(self.instructions):
            arity = 2 if op in BINARY_OPS else 1 if op in UNARY_OPS else None
            if arity is None or len(args) != arity:
                raise ValueError(f"instruction {i}: bad op {op!r} with arguments {args}")
            if any(not 0 <= a < self.n_inputs + i for a in args):
                raise ValueError(f"instruction {i} reads a node that is not defined yet: {args}")
        n_nodes = self.n_inputs + len(self.instructions)
        if not self.outputs or any(not 0 <= o < n_nodes for o in self.outputs):
            raise ValueError(f"outputs {self.outputs} must be non-empty node ids < {n_nodes}")

    @property
    def n_nodes(self) -> int:
        return self.n_inputs + len(self.instructions)

    def fan_out(self) -> np.ndarray:
        """(n_nodes,) how many instructions read each node: > 1 means fan-out."""
        uses = np.zeros(self.n_nodes, dtype=np.int64)
        for _, args in self.instructions:
            for a in args:
                uses[a] += 1
        return uses


def _interval(op: str, *bounds: tuple[float, float]) -> tuple[float, float]:
    """Interval arithmetic: the range of op's output when each input lies in its bound."""
    if op == "add":
        (a, b), (c, d) = bounds
        return a + c, b + d
    if op == "sub":
        (a, b), (c, d) = bounds
        return a - d, b - c
    if op == "mul":
        (a, b), (c, d) = bounds
        products = (a * c, a * d, b * c, b * d)
        return min(products), max(products)
    ((a, b),) = bounds
    if op == "tanh":
        return math.tanh(a), math.tanh(b)
    if op == "exp":
        return math.exp(a), math.exp(b)
    if op == "log":
        return math.log(a), math.log(b)
    return max(a, 0.0), max(b, 0.0)  # relu


def random_program(
    n_inputs: int,
    n_ops: int,
    seed: int,
    *,
    input_bound: float = 1.0,
    value_bound: float = 20.0,
    p_recent: float = 0.5,
) -> Program:
    """A random program with fan-out whose values stay finite for inputs in [-bound, bound].

    n_inputs: number of inputs, >= 1. n_ops: number of instructions, >= 1. seed: seed of the
    NumPy generator that draws the program."""
    for name, v in (("n_inputs", n_inputs), ("n_ops", n_ops), ("seed", seed)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if n_inputs < 1 or n_ops < 1 or seed < 0:
        raise ValueError(
            f"need n_inputs >= 1, n_ops >= 1, seed >= 0; got {n_inputs}, {n_ops}, {seed}"
        )
    if not 0 <= p_recent <= 1:
        raise ValueError(f"p_recent must lie in [0, 1], got {p_recent}")
    rng = np.random.default_rng(seed)
    ops = BINARY_OPS + UNARY_OPS
    bounds = [(-input_bound, input_bound)] * n_inputs
    instructions = []
    while len(instructions) < n_ops:
        n = len(bounds)
        op = ops[rng.integers(len(ops))]
        arity = 2 if op in BINARY_OPS else 1
        if rng.random() < p_recent:
            args = tuple(int(a) for a in rng.integers(max(0, n - 4), n, size=arity))
        else:
            args = tuple(int(a) for a in rng.integers(0, n, size=arity))
        arg_bounds = [bounds[a] for a in args]
        if op == "log" and arg_bounds[0][0] < 0.05:
            continue
        if op == "exp" and arg_bounds[0][1] > 3.0:
            continue
        lo, hi = _interval(op, *arg_bounds)
        if max(abs(lo), abs(hi)) > value_bound:
            continue
        instructions.append((op, args))
        bounds.append((lo, hi))
    program = Program(n_inputs, tuple(instructions), (0,))
    uses = program.fan_out()
    sinks = tuple(int(j) for j in range(n_inputs, program.n_nodes) if uses[j] == 0)
    return Program(n_inputs, tuple(instructions), sinks)


def run_program(program: Program, inputs: Sequence, *, all_nodes: bool = False):
    """Evaluate ``program`` on a sequence of ``n_inputs`` values of any engine's type."""
    if not isinstance(program, Program):
        raise TypeError(f"program must be a Program, got {type(program).__name__}")
    if len(inputs) != program.n_inputs:
        raise ValueError(f"program has {program.n_inputs} inputs, got {len(inputs)} values")
    nodes = list(inputs)
    for op, args in program.instructions:
        nodes.append(apply_op(op, *(nodes[a] for a in args)))
    if all_nodes:
        return nodes
    out = nodes[program.outputs[0]]
    for j in program.outputs[1:]:
        out = out + nodes[j]
    return out
