"""A multilayer perceptron from scratch: forward pass, loss, backward pass, training, initialisation
(formula sheet, chapter 14).

The network of the sheet has one hidden ReLU layer and a softmax output,

    Z1 = X W1 + b1,  H = max(0, Z1),  Z2 = H W2 + b2,  P = softmax(Z2),

and its parameters live in a plain dict ``{"W1", "b1", "W2", "b2"}`` of torch tensors, so every
function here is a pure function of tensors: :func:`forward` returns the logits and the cache that
:func:`backward` needs, and :func:`backward` returns the gradients written out by hand (eqs.
14.3 and 14.4). Autograd is never used in this module; the notebook and the tests use it as the
independent reference. :func:`grads_finite_difference` is the naive reference beside the backward
pass: two forward passes per parameter instead of one backward pass for all of them.

For depth and initialisation there is a second, list-based form: ``layers`` is a list of
``(W, b)`` pairs, applied by :func:`deep_forward` with the activation between consecutive layers
and none after the last.

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

Every public function validates its input and raises ``TypeError`` (not a floating-point tensor,
labels not integers) or ``ValueError`` (shapes, ranges), naming the offending shapes or values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from .softmax import log_softmax

__all__ = [
    "PARAM_NAMES",
    "INIT_SCHEMES",
    "init_std",
    "init_mlp",
    "init_layers",
    "relu",
    "forward",
    "nll_loss",
    "output_grad",
    "linear_backward",
    "backward",
    "loss_and_grads",
    "grads_finite_difference",
    "sgd_step",
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


# --- validation -----------------------------------------------------------------------------------


def _float_tensor(x, name: str, ndim: int | None = None) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(x.shape)}")
    return x


def _check_params(params) -> tuple[int, int, int]:
    """Validate a parameter dict; return (D, H, K)."""
    if not isinstance(params, dict):
        raise TypeError(
            f"params must be a dict with keys {PARAM_NAMES}, got {type(params).__name__}"
        )
    missing = [k for k in PARAM_NAMES if k not in params]
    if missing:
        raise ValueError(f"params lacks {missing}; it needs the keys {PARAM_NAMES}")
    W1 = _float_tensor(params["W1"], "W1", 2)
    b1 = _float_tensor(params["b1"], "b1", 1)
    W2 = _float_tensor(params["W2"], "W2", 2)
    b2 = _float_tensor(params["b2"], "b2", 1)
    D, H = W1.shape
    if b1.shape[0] != H or W2.shape[0] != H or b2.shape[0] != W2.shape[1]:
        raise ValueError(
            f"inconsistent parameter shapes: W1 {tuple(W1.shape)}, b1 {tuple(b1.shape)}, "
            f"W2 {tuple(W2.shape)}, b2 {tuple(b2.shape)}; need (D, H), (H,), (H, K), (K,)"
        )
    dtypes = {W1.dtype, b1.dtype, W2.dtype, b2.dtype}
    if len(dtypes) > 1:
        raise TypeError(f"all parameters must share one dtype, got {sorted(map(str, dtypes))}")
    return D, H, W2.shape[1]


def _check_inputs(params, X) -> tuple[int, int, int]:
    D, H, K = _check_params(params)
    _float_tensor(X, "X", 2)
    if X.shape[1] != D:
        raise ValueError(f"X has {X.shape[1]} features (shape {tuple(X.shape)}), W1 expects {D}")
    if X.shape[0] == 0:
        raise ValueError("X is empty (batch size 0)")
    if X.dtype != params["W1"].dtype:
        raise TypeError(f"X has dtype {X.dtype}, the parameters {params['W1'].dtype}")
    return D, H, K


def _check_labels(y, B: int, K: int) -> torch.Tensor:
    if not isinstance(y, torch.Tensor):
        raise TypeError(f"y must be a torch.Tensor of class indices, got {type(y).__name__}")
    if y.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise TypeError(f"y must hold integer class indices, got dtype {y.dtype}")
    if y.shape != (B,):
        raise ValueError(f"y must have shape ({B},) to match the batch, got {tuple(y.shape)}")
    if B and (int(y.min()) < 0 or int(y.max()) >= K):
        raise ValueError(f"labels must lie in [0, {K}), got range [{int(y.min())}, {int(y.max())}]")
    return y.long()


def _check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _check_lr(lr) -> float:
    if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"learning rate must be a positive finite number, got {lr!r}")
    return float(lr)


# --- eq. 14.5: initialisation ---------------------------------------------------------------------


def init_std(fan_in: int, fan_out: int, scheme: str) -> float:
    """The standard deviation of N(0, s^2) weights that each scheme derives from eq. 14.5.

    A unit sums ``fan_in`` products w_i x_i, so Var[z] = fan_in Var[w] E[x^2] (eq. 14.5 with
    zero-mean weights). LeCun keeps Var[z] = Var[x] for a linear or tanh-like layer,
    Var[w] = 1/fan_in; He compensates the factor 1/2 that ReLU takes out of E[x^2],
    Var[w] = 2/fan_in; Xavier (Glorot) averages the forward and the backward condition,
    Var[w] = 2/(fan_in + fan_out).

    Args:
        fan_in, fan_out: the layer's input and output widths.
        scheme: one of ``"lecun"``, ``"xavier"``, ``"he"``.

    Returns:
        s = sqrt(Var[w]).
    """
    _check_positive_int(fan_in, "fan_in")
    _check_positive_int(fan_out, "fan_out")
    if scheme == "lecun":
        return math.sqrt(1.0 / fan_in)
    if scheme == "xavier":
        return math.sqrt(2.0 / (fan_in + fan_out))
    if scheme == "he":
        return math.sqrt(2.0 / fan_in)
    raise ValueError(f"unknown initialisation scheme {scheme!r}; choose one of {INIT_SCHEMES}")


def init_layers(
    widths: Sequence[int],
    scheme: str = "he",
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random layers for :func:`deep_forward`: W_l ~ N(0, init_std(n_l, n_{l+1})^2), b_l = 0.

    Args:
        widths: (n_0, n_1, ..., n_L), at least two widths; layer l maps n_{l-1} to n_l features.
        scheme: see :func:`init_std`.
        generator: the torch random generator (seed it for reproducible weights).
        dtype: a floating-point dtype.

    Returns:
        L pairs (W_l, b_l) with W_l: (n_{l-1}, n_l), b_l: (n_l,).
    """
    widths = list(widths)
    if len(widths) < 2:
        raise ValueError(f"need at least an input and an output width, got {widths}")
    for w in widths:
        _check_positive_int(w, "every width")
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point dtype, got {dtype}")
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

    Returns:
        ``{"W1": (D, H), "b1": (H,), "W2": (H, K), "b2": (K,)}``.
    """
    (W1, b1), (W2, b2) = init_layers(
        [d_in, d_hidden, d_out], scheme, generator=generator, dtype=dtype
    )
    return {"W1": W1, "b1": b1, "W2": W2, "b2": b2}


# --- eq. 14.1: the forward pass -------------------------------------------------------------------


def relu(z: torch.Tensor) -> torch.Tensor:
    """max(0, z) elementwise (the activation of eq. 14.1); any shape."""
    _float_tensor(z, "z")
    return torch.clamp_min(z, 0.0)


def forward(
    params: dict[str, torch.Tensor], X: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Z1 = X W1 + b1, H = max(0, Z1), Z2 = H W2 + b2 (eq. 14.1 and the output layer).

    Args:
        params: ``{"W1": (D, H), "b1": (H,), "W2": (H, K), "b2": (K,)}``.
        X: (B, D) inputs.

    Returns:
        Z2: (B, K) logits, and the cache ``{"X", "Z1", "H"}`` that :func:`backward` needs.
    """
    _check_inputs(params, X)
    Z1 = X @ params["W1"] + params["b1"]  # (B, H); b1 broadcasts over the batch
    Hh = relu(Z1)  # (B, H)
    Z2 = Hh @ params["W2"] + params["b2"]  # (B, K)
    return Z2, {"X": X, "Z1": Z1, "H": Hh}


# --- eq. 14.2: the loss ---------------------------------------------------------------------------


def nll_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """L = -(1/B) sum_i log P[i, y_i] with P = softmax(logits) row by row (eq. 14.2).

    The log-probabilities come from the stable log-softmax of chapter 12, never from log(P).

    Args:
        logits: (B, K) logits Z2.
        y: (B,) integer labels in [0, K).

    Returns:
        A scalar tensor, the mean negative log-likelihood.
    """
    _float_tensor(logits, "logits", 2)
    B, K = logits.shape
    if B == 0:
        raise ValueError("logits is empty (batch size 0)")
    y = _check_labels(y, B, K)
    logp = log_softmax(logits, dim=1)  # (B, K)
    return -logp.gather(1, y[:, None]).squeeze(1).mean()  # (B, 1) -> (B,) -> scalar


# --- eq. 14.3: the gradient at the logits ---------------------------------------------------------


def output_grad(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dL/dZ2 = (P - Y) / B, Y the one-hot labels (eq. 14.3).

    Args:
        logits: (B, K) logits.
        y: (B,) integer labels in [0, K).

    Returns:
        (B, K) the gradient of :func:`nll_loss` with respect to the logits.
    """
    _float_tensor(logits, "logits", 2)
    B, K = logits.shape
    if B == 0:
        raise ValueError("logits is empty (batch size 0)")
    y = _check_labels(y, B, K)
    P = torch.exp(log_softmax(logits, dim=1))  # (B, K)
    Y = torch.zeros_like(P).scatter_(1, y[:, None], 1.0)  # (B, K) one-hot rows
    return (P - Y) / B


# --- eq. 14.4: backpropagation through a linear layer ---------------------------------------------


def linear_backward(
    A: torch.Tensor, W: torch.Tensor, Z_bar: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of a linear layer Z = A W + b given Z_bar = dL/dZ (eq. 14.4).

    W_bar = A^T Z_bar and A_bar = Z_bar W^T; the bias was broadcast over the batch, so its
    gradient sums Z_bar over the batch: b_bar = 1^T Z_bar.

    Args:
        A: (B, n_in) the layer's input.
        W: (n_in, n_out) its weights.
        Z_bar: (B, n_out) the gradient arriving from above.

    Returns:
        (W_bar (n_in, n_out), b_bar (n_out,), A_bar (B, n_in)).
    """
    _float_tensor(A, "A", 2)
    _float_tensor(W, "W", 2)
    _float_tensor(Z_bar, "Z_bar", 2)
    if A.shape[1] != W.shape[0] or Z_bar.shape != (A.shape[0], W.shape[1]):
        raise ValueError(
            f"shapes do not chain: A {tuple(A.shape)}, W {tuple(W.shape)}, "
            f"Z_bar {tuple(Z_bar.shape)}; need (B, n_in), (n_in, n_out), (B, n_out)"
        )
    return A.T @ Z_bar, Z_bar.sum(dim=0), Z_bar @ W.T


def backward(
    params: dict[str, torch.Tensor],
    cache: dict[str, torch.Tensor],
    y: torch.Tensor,
    logits: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """The hand-written backward pass of :func:`forward` + :func:`nll_loss` (eqs. 14.3, 14.4).

    Z2_bar = (P - Y)/B; (W2_bar, b2_bar, H_bar) from the output layer; Z1_bar = H_bar * [Z1 > 0]
    (ReLU passes the gradient where it was active; at Z1 = 0 exactly we use 0); (W1_bar, b1_bar)
    from the hidden layer. The gradient with respect to X is not needed and not computed.

    Args:
        params: the parameter dict of :func:`forward`.
        cache: the cache :func:`forward` returned.
        y: (B,) labels.
        logits: (B, K) the logits :func:`forward` returned.

    Returns:
        ``{"W1": (D, H), "b1": (H,), "W2": (H, K), "b2": (K,)}``, the gradients of the loss.
    """
    _check_params(params)
    if not isinstance(cache, dict) or not {"X", "Z1", "H"} <= set(cache):
        raise ValueError("cache must be the dict {'X', 'Z1', 'H'} returned by forward")
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
    return nll_loss(logits, y), backward(params, cache, y, logits)


def grads_finite_difference(
    params: dict[str, torch.Tensor], X: torch.Tensor, y: torch.Tensor, eps: float = 1e-6
) -> dict[str, torch.Tensor]:
    """The naive reference for :func:`backward`: central differences, parameter by parameter.

    dL/dtheta_j ~ (L(theta + eps e_j) - L(theta - eps e_j)) / (2 eps), error O(eps^2) plus
    rounding O(machine eps / eps): use float64. Costs two forward passes per parameter, where
    the backward pass costs about two forward passes in total.

    Returns:
        A dict of the same shapes as ``params``.
    """
    _check_inputs(params, X)
    if not (isinstance(eps, float) and eps > 0):
        raise ValueError(f"eps must be a positive float, got {eps!r}")

    def loss(p):
        return float(nll_loss(forward(p, X)[0], y))

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


def sgd_step(
    params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], lr: float
) -> dict[str, torch.Tensor]:
    """theta <- theta - lr * grad for every parameter; returns a new dict (inputs untouched)."""
    _check_params(params)
    lr = _check_lr(lr)
    for name in PARAM_NAMES:
        if name not in grads or grads[name].shape != params[name].shape:
            got = tuple(grads[name].shape) if name in grads else None
            raise ValueError(
                f"gradient of {name} has shape {got}, the parameter {tuple(params[name].shape)}"
            )
    return {name: params[name] - lr * grads[name] for name in PARAM_NAMES}


def sgd_epoch(
    params: dict[str, torch.Tensor],
    X: torch.Tensor,
    y: torch.Tensor,
    lr: float,
    batch_size: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[dict[str, torch.Tensor], float]:
    """One pass over the data in shuffled minibatches, one SGD step per batch.

    Args:
        params, X (N, D), y (N,): as in :func:`forward` and :func:`nll_loss`.
        lr: the learning rate.
        batch_size: examples per step; ``None`` means full-batch gradient descent (no shuffle).
        generator: the torch generator that shuffles (seed it for reproducible runs).

    Returns:
        The new parameters and the mean of the minibatch losses over the epoch.
    """
    _, _, K = _check_inputs(params, X)
    N = X.shape[0]
    _check_labels(y, N, K)
    lr = _check_lr(lr)
    if batch_size is None:
        batch_size, order = N, torch.arange(N)
    else:
        _check_positive_int(batch_size, "batch_size")
        order = torch.randperm(N, generator=generator)
    total = 0.0
    for start in range(0, N, batch_size):
        idx = order[start : start + batch_size]
        loss, grads = loss_and_grads(params, X[idx], y[idx])
        params = sgd_step(params, grads, lr)
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

    Args:
        callback: if given, called as ``callback(epoch, params)`` after every epoch.

    Returns:
        The trained parameters and the list of per-epoch mean training losses.
    """
    _check_positive_int(epochs, "epochs")
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
    _, _, K = _check_inputs(params, X)
    y = _check_labels(y, X.shape[0], K)
    return float((predict(params, X) == y).double().mean())


# --- depth and expressiveness ---------------------------------------------------------------------

_ACTIVATIONS = {
    "relu": lambda z: torch.clamp_min(z, 0.0),
    "tanh": torch.tanh,
    "linear": lambda z: z,
}


def deep_forward(
    X: torch.Tensor, layers: Sequence[tuple[torch.Tensor, torch.Tensor]], activation: str = "relu"
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Apply L layers Z_l = A_{l-1} W_l + b_l with A_l = phi(Z_l) between them, none after the last.

    Args:
        X: (B, n_0) inputs.
        layers: L pairs (W_l (n_{l-1}, n_l), b_l (n_l,)).
        activation: ``"relu"``, ``"tanh"`` or ``"linear"``.

    Returns:
        The output Z_L (B, n_L) and the list of all L pre-activations [Z_1, ..., Z_L].
    """
    _float_tensor(X, "X", 2)
    if activation not in _ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {list(_ACTIVATIONS)}")
    if len(layers) == 0:
        raise ValueError("layers is empty")
    phi = _ACTIVATIONS[activation]
    A, pre = X, []
    for ell, (W, b) in enumerate(layers):
        _float_tensor(W, f"W of layer {ell + 1}", 2)
        _float_tensor(b, f"b of layer {ell + 1}", 1)
        if A.shape[1] != W.shape[0] or b.shape[0] != W.shape[1]:
            raise ValueError(
                f"layer {ell + 1}: input has {A.shape[1]} features, W is "
                f"{tuple(W.shape)}, b is {tuple(b.shape)}"
            )
        Z = A @ W + b  # (B, n_l)
        pre.append(Z)
        A = phi(Z) if ell < len(layers) - 1 else Z
    return A, pre


def relu_interpolant(knots: torch.Tensor, values: torch.Tensor) -> dict[str, torch.Tensor]:
    """Closed-form weights of a one-hidden-layer ReLU net that interpolates (t_k, v_k) exactly.

    With slopes s_k = (v_{k+1} - v_k)/(t_{k+1} - t_k), k = 0..M-2, the piecewise-linear
    interpolant on [t_0, t_{M-1}] is

        g(x) = v_0 + s_0 max(0, x - t_0) + sum_{k=1}^{M-2} (s_k - s_{k-1}) max(0, x - t_k):

    each unit switches on at a knot and changes the slope there by the jump in slope. So
    W1 = 1, b1 = -t_k, W2 = the slope jumps, b2 = v_0; M - 1 hidden units. Outside the knots'
    range g continues linearly (right) or stays at v_0 (left).

    Args:
        knots: (M,) strictly increasing, M >= 2.
        values: (M,) the values to hit.

    Returns:
        A parameter dict for :func:`forward` with D = 1, H = M - 1, K = 1.
    """
    _float_tensor(knots, "knots", 1)
    _float_tensor(values, "values", 1)
    if knots.shape != values.shape or knots.shape[0] < 2:
        raise ValueError(
            f"need M >= 2 knots and as many values, got {tuple(knots.shape)} and "
            f"{tuple(values.shape)}"
        )
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

    T(x) = 2 max(0, x) - 4 max(0, x - 1/2) equals 2x on [0, 1/2] and 2 - 2x on [1/2, 1]. Layer 1
    computes (x, x - 1/2); each later hidden layer folds the previous T into its own two units,
    W = [2, -4]^T [1, 1]; the output layer is [2, -4]^T. On [0, 1] the result is T^k, with 2^k
    linear pieces from 2k hidden units.

    Returns:
        k + 1 pairs (W, b) for :func:`deep_forward` with ``activation="relu"``.
    """
    _check_positive_int(k, "k")
    first = torch.tensor([[1.0, 1.0]], dtype=dtype)  # (1, 2)
    fold = torch.tensor([[2.0], [-4.0]], dtype=dtype)  # (2, 1): T from the two units
    b = torch.tensor([0.0, -0.5], dtype=dtype)
    layers = [(first, b.clone())]
    layers += [(fold @ first, b.clone()) for _ in range(k - 1)]  # (2, 1) @ (1, 2) -> (2, 2)
    layers.append((fold.clone(), torch.zeros(1, dtype=dtype)))
    return layers


def count_linear_pieces(x: torch.Tensor, fx: torch.Tensor, tol: float = 1e-9) -> int:
    """The number of linear pieces of a piecewise-linear function sampled on a sorted grid.

    Slopes between neighbouring grid points are compared; every run of consecutive slope
    changes larger than ``tol`` (relative to the largest slope) is one kink: a kink that falls
    strictly inside a grid cell changes the slope twice, on entering and on leaving that cell.
    The count is exact when every piece spans at least three grid points.

    Args:
        x: (N,) strictly increasing grid, N >= 3.
        fx: (N,) the function's values on it.

    Returns:
        1 + the number of kinks.
    """
    _float_tensor(x, "x", 1)
    _float_tensor(fx, "fx", 1)
    if x.shape != fx.shape or x.shape[0] < 3:
        raise ValueError(
            f"need N >= 3 grid points and as many values, got {tuple(x.shape)} and "
            f"{tuple(fx.shape)}"
        )
    if not bool((x[1:] > x[:-1]).all()):
        raise ValueError("x must be strictly increasing")
    slopes = (fx[1:] - fx[:-1]) / (x[1:] - x[:-1])  # (N-1,)
    scale = max(1.0, float(slopes.abs().max()))
    change = (slopes[1:] - slopes[:-1]).abs() > tol * scale  # (N-2,)
    starts = int(change[0]) + int((change[1:] & ~change[:-1]).sum())
    return 1 + starts
