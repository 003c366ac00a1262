"""A multilayer perceptron by hand (chapter 14): Z1 = X W1 + b1, H = max(0, Z1), Z2 = H W2 + b2.

Parameters are a dict ``{"W1", "b1", "W2", "b2"}``; deeper nets are lists of ``(W, b)`` layers.
The pieces that other chapters own are imported, not copied: the ReLU of chapter 11
(:func:`mlbook.nn.activations.relu`), the loss of eq. 14.2, which is the categorical NLL of
chapter 6 (:func:`mlbook.foundations.probability.categorical_nll`), and the gradient step of
chapter 15 (:func:`mlbook.nn.optim.sgd_step`).

Shape legend
    B      batch size (number of examples)
    D      input features
    H      hidden units (width of the hidden layer)
    K      output units (classes; 1 for a scalar regression output)
    X      (B, D) inputs, one example per row
    y      (B,) integer class labels in [0, K)
    W1     (D, H), b1 (H,), W2 (H, K), b2 (K,): weights act from the right, ``X @ W1``
    Z1, Hh (B, H) hidden pre-activations and activations; Z2 (B, K) logits; P (B, K) softmax
    M      number of knots of a piecewise-linear interpolant (M - 1 hidden units)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ..foundations import probability
from ..validation import (
    float_tensor,
    index_tensor,
    one_of,
    positive,
    positive_int,
    same_shape,
    shape_is,
)
from . import activations, optim
from .softmax import log_softmax

__all__ = [
    "PARAM_NAMES",
    "INIT_SCHEMES",
    "init_std",
    "init_mlp",
    "init_layers",
    "forward",
    "output_grad",
    "linear_backward",
    "backward",
    "loss_and_grads",
    "grads_finite_difference",
    "sgd_epoch",
    "train",
    "predict",
    "accuracy",
    "deep_forward",
    "relu_interpolant",
    "tent_layers",
    "count_linear_pieces",
]

#: The keys of a one-hidden-layer parameter dict, in the order of the forward pass.
PARAM_NAMES = ("W1", "b1", "W2", "b2")
#: The initialisation schemes of :func:`init_std`.
INIT_SCHEMES = ("lecun", "xavier", "he")


# --- eq. 14.5: initialisation ---------------------------------------------------------------------


def init_std(fan_in: int, fan_out: int, scheme: str) -> float:
    """The standard deviation of N(0, s^2) weights that each scheme derives from eq. 14.5.

    fan_in, fan_out: the layer's input and output widths. scheme: one of ``"lecun"``,
    ``"xavier"``, ``"he"``. Returns s = sqrt(Var[w])."""
    positive_int(fan_in, "fan_in"), positive_int(fan_out, "fan_out")
    one_of(scheme, "scheme", INIT_SCHEMES)
    if scheme == "lecun":
        return math.sqrt(1.0 / fan_in)
    if scheme == "xavier":
        return math.sqrt(2.0 / (fan_in + fan_out))
    return math.sqrt(2.0 / fan_in)


def init_layers(
    widths: Sequence[int],
    scheme: str = "he",
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random layers for :func:`deep_forward`: W_l ~ N(0, init_std(n_l, n_{l+1})^2), b_l = 0.

    widths: (n_0, n_1, ..., n_L), at least two widths; layer l maps n_{l-1} to n_l features.
    scheme: see :func:`init_std`. generator: the torch random generator (seed it for reproducible
    weights). dtype: a floating-point dtype. Returns L pairs (W_l, b_l) with W_l: (n_{l-1}, n_l),
    b_l: (n_l,)."""
    widths = list(widths)
    if len(widths) < 2:
        raise ValueError(f"widths must hold an input and an output width, got {widths}")
    layers = []
    for n_in, n_out in zip(widths[:-1], widths[1:], strict=True):
        s = init_std(n_in, n_out, scheme)
        W = torch.randn(n_in, n_out, generator=generator, dtype=dtype) * s
        layers.append((W, torch.zeros(n_out, dtype=dtype)))
    return layers


def init_mlp(
    d_in: int,
    d_hidden: int,
    d_out: int,
    scheme: str = "he",
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> dict[str, torch.Tensor]:
    """A one-hidden-layer parameter dict with random weights (see :func:`init_std`), zero biases.

    Returns ``{"W1": (D, H), "b1": (H,), "W2": (H, K), "b2": (K,)}``."""
    (W1, b1), (W2, b2) = init_layers(
        [d_in, d_hidden, d_out], scheme, generator=generator, dtype=dtype
    )
    return {"W1": W1, "b1": b1, "W2": W2, "b2": b2}


# --- eq. 14.1: the forward pass -------------------------------------------------------------------


def forward(
    params: dict[str, torch.Tensor], X: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Z1 = X W1 + b1, H = max(0, Z1), Z2 = H W2 + b2 (eq. 14.1 and the output layer).

    params: ``{"W1": (D, H), "b1": (H,), "W2": (H, K), "b2": (K,)}``. X: (B, D) inputs. Returns
    Z2: (B, K) logits, and the cache ``{"X", "Z1", "H"}`` that :func:`backward` needs."""
    float_tensor(X, "X", ndim=2, not_empty=True)  # an empty batch would average to NaN
    shape_is(params["b1"], "b1", params["W1"].shape[1:])  # a bias must not broadcast
    shape_is(params["b2"], "b2", params["W2"].shape[1:])
    Z1 = X @ params["W1"] + params["b1"]  # (B, H); b1 broadcasts over the batch
    Hh = activations.relu(Z1)  # (B, H)
    Z2 = Hh @ params["W2"] + params["b2"]  # (B, K)
    return Z2, {"X": X, "Z1": Z1, "H": Hh}


# --- eq. 14.3: the gradient at the logits ---------------------------------------------------------


def output_grad(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dL/dZ2 = (P - Y) / B, Y the one-hot labels (eq. 14.3).

    logits: (B, K) logits. y: (B,) integer labels in [0, K). Returns (B, K) the gradient of
    the mean NLL of eq. 14.2 (``categorical_nll``) with respect to the logits."""
    B, K = float_tensor(logits, "logits", ndim=2, not_empty=True).shape
    y = shape_is(index_tensor(y, "y", high=K), "y", (B,)).long()
    P = torch.exp(log_softmax(logits, dim=1))  # (B, K)
    Y = torch.zeros_like(P).scatter_(1, y[:, None], 1.0)  # (B, K) one-hot rows
    return (P - Y) / B


# --- eq. 14.4: backpropagation through a linear layer ---------------------------------------------


def linear_backward(
    A: torch.Tensor, W: torch.Tensor, Z_bar: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of a linear layer Z = A W + b given Z_bar = dL/dZ (eq. 14.4).

    A: (B, n_in) the layer's input. W: (n_in, n_out) its weights. Z_bar: (B, n_out) the gradient
    arriving from above. Returns (W_bar (n_in, n_out), b_bar (n_out,), A_bar (B, n_in))."""
    return A.T @ Z_bar, Z_bar.sum(dim=0), Z_bar @ W.T


def backward(
    params: dict[str, torch.Tensor],
    cache: dict[str, torch.Tensor],
    y: torch.Tensor,
    logits: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """The hand-written backward pass of :func:`forward` + the mean NLL (eqs. 14.3, 14.4).

    params: the parameter dict of :func:`forward`. cache: the cache :func:`forward` returned. y:
    (B,) labels. logits: (B, K) the logits :func:`forward` returned. Returns ``{"W1": (D, H),
    "b1": (H,), "W2": (H, K), "b2": (K,)}``, the gradients of the loss."""
    Z2_bar = output_grad(logits, y)  # (B, K)  eq. 14.3
    W2_bar, b2_bar, H_bar = linear_backward(cache["H"], params["W2"], Z2_bar)  # eq. 14.4
    Z1_bar = H_bar * (cache["Z1"] > 0)  # (B, H)  ReLU mask
    W1_bar, b1_bar, _ = linear_backward(cache["X"], params["W1"], Z1_bar)  # eq. 14.4
    return {"W1": W1_bar, "b1": b1_bar, "W2": W2_bar, "b2": b2_bar}


def loss_and_grads(
    params: dict[str, torch.Tensor], X: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One forward and one backward pass: (L, gradients) for a batch (eqs. 14.1-14.4)."""
    logits, cache = forward(params, X)
    return probability.categorical_nll(logits, y), backward(params, cache, y, logits)


def grads_finite_difference(
    params: dict[str, torch.Tensor], X: torch.Tensor, y: torch.Tensor, eps: float = 1e-6
) -> dict[str, torch.Tensor]:
    """The naive reference for :func:`backward`: central differences, parameter by parameter.

    Returns a dict of the same shapes as ``params``."""
    eps = positive(eps, "eps")

    def loss(p):
        return float(probability.categorical_nll(forward(p, X)[0], y))

    grads = {}
    for name in PARAM_NAMES:
        base = params[name]
        g = torch.zeros_like(base)
        flat = g.view(-1)
        for j in range(base.numel()):
            shifted = []
            for sign in (1.0, -1.0):
                t = base.clone()
                t.view(-1)[j] += sign * eps
                shifted.append(loss({**params, name: t}))
            flat[j] = (shifted[0] - shifted[1]) / (2 * eps)
        grads[name] = g
    return grads


# --- training -------------------------------------------------------------------------------------


def sgd_epoch(
    params: dict[str, torch.Tensor],
    X: torch.Tensor,
    y: torch.Tensor,
    lr: float,
    batch_size: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[dict[str, torch.Tensor], float]:
    """One pass over the data in shuffled minibatches, one step of ``optim.sgd_step`` per batch
    and parameter (the dicts passed in are not modified).

    params, X (N, D), y (N,): as in :func:`forward`, y the labels. lr: the learning rate.
    batch_size: examples per step; ``None`` means full-batch gradient descent (no shuffle).
    generator: the torch generator that shuffles (seed it for reproducible runs). Returns the new
    parameters and the mean of the minibatch losses over the epoch."""
    N = len(float_tensor(X, "X", ndim=2, not_empty=True))
    shape_is(y, "y", (N,))
    lr = positive(lr, "lr")
    if batch_size is None:
        batch_size, order = N, torch.arange(N)
    else:
        positive_int(batch_size, "batch_size")
        order = torch.randperm(N, generator=generator)
    total = 0.0
    for start in range(0, N, batch_size):
        idx = order[start : start + batch_size]
        loss, grads = loss_and_grads(params, X[idx], y[idx])
        params = {k: optim.sgd_step(params[k], grads[k], lr) for k in PARAM_NAMES}
        total += float(loss) * len(idx)
    return params, total / N


def train(
    params: dict[str, torch.Tensor],
    X: torch.Tensor,
    y: torch.Tensor,
    lr: float,
    epochs: int,
    batch_size: int | None = None,
    generator: torch.Generator | None = None,
    callback: Callable[[int, dict[str, torch.Tensor]], None] | None = None,
) -> tuple[dict[str, torch.Tensor], list[float]]:
    """Minibatch SGD for ``epochs`` epochs with the hand-written gradients.

    callback: if given, called as ``callback(epoch, params)`` after every epoch. Returns the
    trained parameters and the list of per-epoch mean training losses."""
    positive_int(epochs, "epochs")
    history = []
    for epoch in range(epochs):
        params, mean_loss = sgd_epoch(params, X, y, lr, batch_size, generator)
        history.append(mean_loss)
        if callback is not None:
            callback(epoch, params)
    return params, history


def predict(params: dict[str, torch.Tensor], X: torch.Tensor) -> torch.Tensor:
    """(B,) the class with the largest logit for each row of X."""
    return forward(params, X)[0].argmax(dim=1)


def accuracy(params: dict[str, torch.Tensor], X: torch.Tensor, y: torch.Tensor) -> float:
    """The fraction of rows of X whose predicted class equals y."""
    shape_is(y, "y", (len(X),))
    return float((predict(params, X) == y).double().mean())


# --- depth and expressiveness ---------------------------------------------------------------------

_ACTIVATIONS = {
    "relu": activations.relu,
    "tanh": torch.tanh,
    "linear": lambda z: z,
}


def deep_forward(
    X: torch.Tensor, layers: Sequence[tuple[torch.Tensor, torch.Tensor]], activation: str = "relu"
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Apply L layers Z_l = A_{l-1} W_l + b_l with A_l = phi(Z_l) between them, none after the last.

    X: (B, n_0) inputs. layers: L pairs (W_l (n_{l-1}, n_l), b_l (n_l,)). activation: ``"relu"``,
    ``"tanh"`` or ``"linear"``. Returns the output Z_L (B, n_L) and the list of all L pre-
    activations [Z_1, ..., Z_L]."""
    phi = _ACTIVATIONS[one_of(activation, "activation", _ACTIVATIONS)]
    A, pre = X, []
    for ell, (W, b) in enumerate(layers):
        shape_is(b, f"b of layer {ell + 1}", W.shape[1:])  # a bias must not broadcast
        Z = A @ W + b  # (B, n_l)
        pre.append(Z)
        A = phi(Z) if ell < len(layers) - 1 else Z
    return A, pre


def relu_interpolant(knots: torch.Tensor, values: torch.Tensor) -> dict[str, torch.Tensor]:
    """Closed-form weights of a one-hidden-layer ReLU net that interpolates (t_k, v_k) exactly.

    knots: (M,) strictly increasing, M >= 2. values: (M,) the values to hit. Returns a parameter
    dict for :func:`forward` with D = 1, H = M - 1, K = 1."""
    float_tensor(knots, "knots", ndim=1)
    same_shape(knots, values, ("knots", "values"))
    if not bool((knots[1:] > knots[:-1]).all()):
        raise ValueError("knots must be strictly increasing")
    slopes = (values[1:] - values[:-1]) / (knots[1:] - knots[:-1])  # (M-1,)
    jumps = torch.cat([slopes[:1], slopes[1:] - slopes[:-1]])  # (M-1,)
    H = knots.shape[0] - 1
    return {
        "W1": torch.ones(1, H, dtype=knots.dtype),
        "b1": -knots[:-1].clone(),
        "W2": jumps[:, None].to(knots.dtype),
        "b2": values[:1].clone(),
    }


def tent_layers(
    k: int, dtype: torch.dtype = torch.float64
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A ReLU network of k hidden layers, two units each, computing the tent map composed k times.

    Returns k + 1 pairs (W, b) for :func:`deep_forward` with ``activation="relu"``."""
    positive_int(k, "k")
    first = torch.tensor([[1.0, 1.0]], dtype=dtype)  # (1, 2)
    fold = torch.tensor([[2.0], [-4.0]], dtype=dtype)  # (2, 1): T from the two units
    b = torch.tensor([0.0, -0.5], dtype=dtype)
    layers = [(first, b.clone())]
    layers += [(fold @ first, b.clone()) for _ in range(k - 1)]  # (2, 1) @ (1, 2) -> (2, 2)
    layers.append((fold.clone(), torch.zeros(1, dtype=dtype)))
    return layers


def count_linear_pieces(x: torch.Tensor, fx: torch.Tensor, tol: float = 1e-9) -> int:
    """The number of linear pieces of a piecewise-linear function sampled on a sorted grid.

    x: (N,) strictly increasing grid, N >= 3. fx: (N,) the function's values on it. Returns 1 +
    the number of kinks."""
    float_tensor(x, "x", ndim=1)
    same_shape(x, fx, ("x", "fx"))
    if len(x) < 3:
        raise ValueError(f"x must have at least 3 grid points, got {len(x)}")
    if not bool((x[1:] > x[:-1]).all()):
        raise ValueError("x must be strictly increasing")
    slopes = (fx[1:] - fx[:-1]) / (x[1:] - x[:-1])  # (N-1,)
    scale = max(1.0, float(slopes.abs().max()))
    change = (slopes[1:] - slopes[:-1]).abs() > tol * scale  # (N-2,)
    starts = int(change[0]) + int((change[1:] & ~change[:-1]).sum())
    return 1 + starts
