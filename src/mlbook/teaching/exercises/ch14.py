"""Checks of the exercises of chapter 14 (neural networks from scratch).

The references are independent of the reader's answer and of the gradients of :mod:`mlbook.nn.mlp`:
float64 autograd through ``F.cross_entropy`` for the input gradient and for the gradients of a deep
network, full-batch gradient descent driven by autograd for XOR, the variances of the three
initialisations written out and the layers multiplied out by hand for the gains, and an exact count
of slope changes between neighbouring candidate kinks for the linear pieces. ``mlp.init_mlp`` and
``mlp.init_layers`` only supply the random starting weights that the exercises prescribe, and
``mlp.train`` runs the experiment of the prediction exercise.

Each typical wrong answer is written once, as a function of the exercise's arguments computed from
those references; a check passes the ones it names to ``expect_answer(wrong=...)``, and
``MISTAKES`` lists them (with the reference answers of the other functions) for the tests.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ...nn import mlp
from ..check import fmt
from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer, is_close, wrong_values
from . import reference_answer as _ref

F64 = torch.float64


def _expect_lazily(got, want, what, wrong, *, atol, rtol):
    """``expect_answer``, building the named wrong answers (``wrong()``, costly here: each one
    retrains or rebuilds a network) only when the answer is not right."""
    g, w = as_tensor(got, what), as_tensor(want, "the reference")
    if (
        g.shape == w.shape
        and bool(torch.isfinite(g).all())
        and is_close(g, w, atol=atol, rtol=rtol)
    ):
        return g
    return expect_answer(g, w, what, wrong=wrong(), atol=atol, rtol=rtol)


def _logits(p, X):
    return F.relu(X @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]


# --- 14.1 ---------------------------------------------------------------------------------------


def _random_params(D, H, K, gen):
    return {
        "W1": torch.randn(D, H, generator=gen, dtype=F64) / D**0.5,
        "b1": 0.3 * torch.randn(H, generator=gen, dtype=F64),
        "W2": torch.randn(H, K, generator=gen, dtype=F64) / H**0.5,
        "b2": 0.3 * torch.randn(K, generator=gen, dtype=F64),
    }


def _input_grad_autograd(params, X, y):
    Xr = X.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(F.cross_entropy(_logits(params, Xr), y), Xr)
    return grad


def _z2_bar(params, X, y):
    P = torch.softmax(_logits(params, X), dim=1)
    return (P - F.one_hot(y, P.shape[1]).to(F64)) / len(y)


def input_grad_no_mask(params, X, y):
    return _z2_bar(params, X, y) @ params["W2"].T @ params["W1"].T


def input_grad_summed(params, X, y):
    return _input_grad_autograd(params, X, y) * X.shape[0]


def input_grad_flipped(params, X, y):
    return -_input_grad_autograd(params, X, y)


def input_grad_not_transposed(params, X, y):
    Z1 = X @ params["W1"] + params["b1"]
    return (_z2_bar(params, X, y) @ params["W2"].T * (Z1 > 0)) @ params["W1"]


WRONG_14_1 = [
    (
        input_grad_no_mask,
        "the ReLU mask is missing: a unit with Z1 <= 0 passes no gradient back, so "
        "Z1_bar = H_bar * [Z1 > 0]",
    ),
    (
        input_grad_summed,
        "that is the gradient of the summed loss; eq. 14.2 is the mean over the batch "
        "(output_grad divides by B)",
    ),
    (input_grad_flipped, "the sign is flipped: this is the direction that lowers the loss"),
]


@exercise("14.1", "input_grad")
def input_grad(answer) -> str:
    """∂L/∂X of the two-layer ReLU network against float64 autograd, for three batch shapes."""
    gen = torch.Generator().manual_seed(141)
    for B, D, H, K in [(8, 5, 7, 4), (1, 3, 6, 2), (16, 64, 32, 10)]:
        p = _random_params(D, H, K, gen)
        X = torch.randn(B, D, generator=gen, dtype=F64)
        y = torch.randint(0, K, (B,), generator=gen)
        expect_answer(
            attempt(answer, {k: v.clone() for k, v in p.items()}, X.clone(), y.clone()),
            _input_grad_autograd(p, X, y),
            f"input_grad(params, X, y) for B, D, H, K = {B}, {D}, {H}, {K}",
            wrong=wrong_values(WRONG_14_1, p, X, y),
            atol=1e-12,
            rtol=1e-9,
        )
    return "X_bar = Z1_bar W1^T matches autograd of F.cross_entropy for 3 batches (B = 8, 1 and 16)"


# --- 14.2 ---------------------------------------------------------------------------------------

XOR_X = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=F64)
XOR_Y = torch.tensor([0, 1, 1, 0])
_WIDTH = 8  # every network is trained padded to 8 units: a zero unit stays zero


def _train_all(starts, lrs, steps=300):
    """Full-batch gradient descent on the mean cross-entropy for many networks at once.

    starts: parameter dicts (hidden <= 8, padded with zero units, which receive no gradient);
    lrs: one learning rate each. Returns the flat parameters of every network after ``steps``
    steps: (N, 48).
    """

    def pad(p):
        h = p["W1"].shape[1]
        return [
            F.pad(p["W1"], (0, _WIDTH - h)),
            F.pad(p["b1"], (0, _WIDTH - h)),
            F.pad(p["W2"], (0, 0, 0, _WIDTH - h)),
            p["b2"].clone(),
        ]

    W1, b1, W2, b2 = (
        torch.stack(t).requires_grad_(True) for t in zip(*map(pad, starts), strict=True)
    )
    rate = torch.tensor(lrs, dtype=F64)
    n = len(starts)
    for _ in range(steps):
        logits = F.relu(XOR_X @ W1 + b1[:, None]) @ W2 + b2[:, None]  # (N, 4, 2)
        loss = F.cross_entropy(logits.reshape(-1, 2), XOR_Y.repeat(n), reduction="sum") / 4
        grads = torch.autograd.grad(loss, [W1, b1, W2, b2])
        with torch.no_grad():
            for t, g in zip((W1, b1, W2, b2), grads, strict=True):
                t -= rate.reshape(-1, *[1] * (t.dim() - 1)) * g
    return torch.cat([t.detach().reshape(n, -1) for t in (W1, b1, W2, b2)], 1)


def _unpad(flat, hidden):
    W1, b1 = flat[:16].reshape(2, _WIDTH), flat[16:24]
    W2, b2 = flat[24:40].reshape(_WIDTH, 2), flat[40:]
    return {
        "W1": W1[:, :hidden].clone(),
        "b1": b1[:hidden].clone(),
        "W2": W2[:hidden].clone(),
        "b2": b2.clone(),
    }


def _flat_params(value, what, hidden):
    expect(
        isinstance(value, dict) and {"W1", "b1", "W2", "b2"} <= set(value),
        f"{what} should return a parameter dict with keys W1, b1, W2, b2",
    )
    shapes = {"W1": (2, hidden), "b1": (hidden,), "W2": (hidden, 2), "b2": (2,)}
    return torch.cat(
        [as_tensor(value[k], f"{what}[{k!r}]", s).reshape(-1) for k, s in shapes.items()]
    )


def _flat(p):
    return torch.cat([p[k].reshape(-1) for k in ("W1", "b1", "W2", "b2")])


def _start(hidden, seed):
    return mlp.init_mlp(2, hidden, 2, generator=torch.Generator().manual_seed(seed))


def train_xor_untrained(hidden, seed):
    return _start(hidden, seed)


def train_xor_small_lr(hidden, seed):
    return _unpad(_train_all([_start(hidden, seed)], [0.1])[0], hidden)


def train_xor_299(hidden, seed):
    return _unpad(_train_all([_start(hidden, seed)], [1.0], steps=299)[0], hidden)


WRONG_14_2_TRAIN = [
    (train_xor_untrained, "these are the starting weights: train for 300 full-batch steps"),
    (train_xor_small_lr, "the learning rate is 1.0, as in §14.7"),
    (train_xor_299, "one step too few: train for 300 steps"),
]


def _corners_right(params):
    return (_logits(params, XOR_X).argmax(1) == XOR_Y).to(F64)  # (4,)


def solves_xor_accuracy(params):
    return _corners_right(params).mean().item()


def solves_xor_any(params):
    return bool(_corners_right(params).sum() > 0)


def solves_xor_majority(params):
    return bool(_corners_right(params).sum() > 2)


def solves_xor_string(params):
    return "yes" if _corners_right(params).sum() == 4 else "no"


WRONG_14_2_SOLVES = [
    (
        solves_xor_accuracy,
        "that is the accuracy; return True only if all four corners are right",
    ),
    (
        solves_xor_any,
        "one right corner is not enough: all four must be classified correctly",
    ),
    (
        solves_xor_majority,
        "a majority of corners is not enough: all four must be classified correctly",
    ),
]


def _built_xor_nets():
    """Four built networks: 4, 0, 2 and 1 of the four corners right."""
    t = lambda v: torch.tensor(v, dtype=F64)  # noqa: E731
    solve = {
        "W1": t([[1.0, 1.0], [1.0, 1.0]]),
        "b1": t([0.0, -1.0]),
        "W2": t([[0.0, 1.0], [0.0, -2.0]]),
        "b2": t([0.5, 0.0]),
    }  # class 1 iff h1 - 2h2 > 0.5
    swapped = {**solve, "W2": solve["W2"].flip(1), "b2": solve["b2"].flip(0)}
    constant = {"W1": t([[0.0], [0.0]]), "b1": t([0.0]), "W2": t([[0.0, 0.0]]), "b2": t([1.0, 0.0])}
    one = {"W1": t([[-1.0], [1.0]]), "b1": t([0.0]), "W2": t([[0.0, -1.0]]), "b2": t([0.0, 0.5])}
    return [solve, swapped, constant, one]


@exercise("14.2", "train_xor", "solves_xor")
def xor_width(train_xor, solves_xor) -> str:
    """train_xor against gradient descent on autograd's gradients; solves_xor on 24 networks."""
    runs = [(h, s) for h in (2, 8) for s in range(10)]
    final = _train_all([_start(h, s) for h, s in runs], [1.0] * len(runs))
    trained = [_unpad(final[i], h) for i, (h, _) in enumerate(runs)]

    for h, s in [(2, 0), (8, 7)]:  # one success and one failure
        _expect_lazily(
            _flat_params(attempt(train_xor, h, s), f"train_xor({h}, {s})", h),
            _flat(trained[runs.index((h, s))]),
            f"train_xor({h}, {s}) (all parameters)",
            lambda h=h, s=s: {fb: _flat(f(h, s)) for f, fb in WRONG_14_2_TRAIN},
            atol=1e-8,
            rtol=1e-6,
        )

    nets = trained + _built_xor_nets()
    ref = torch.stack([(_corners_right(p).sum() == 4).to(F64) for p in nets])  # (24,)
    answers = []
    for p in nets:
        value = attempt(solves_xor, {k: v.clone() for k, v in p.items()})
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        expect(
            isinstance(value, (bool, int, float, np.bool_, np.number)),
            f"solves_xor should return True or False, got {type(value).__name__}",
        )
        answers.append(float(value))
    expect_answer(
        answers,
        ref,
        "solves_xor for 20 trained and 4 built networks (as 1 = True, 0 = False)",
        wrong={fb: [float(f(p)) for p in nets] for f, fb in WRONG_14_2_SOLVES},
        atol=0,
        rtol=0,
    )
    n2, n8 = int(ref[:10].sum()), int(ref[10:20].sum())
    return (
        f"train_xor matches gradient descent on autograd's gradients for 2 and 8 units; "
        f"over seeds 0-9 solves_xor counts {n2} of 10 successes with 2 hidden units and "
        f"{n8} of 10 with 8"
    )


# --- 14.3 ---------------------------------------------------------------------------------------

_VAR = {
    "lecun": lambda n_in, n_out: 1 / n_in,
    "xavier": lambda n_in, n_out: 2 / (n_in + n_out),
    "he": lambda n_in, n_out: 2 / n_in,
}
_ALTERNATING = [64] + [256, 64] * 10  # 20 layers


def _factors(widths, scheme, fan=lambda a, b: a):
    return [fan(a, b) * _VAR[scheme](a, b) for a, b in zip(widths[:-1], widths[1:], strict=True)]


def _gain(widths, scheme):
    return torch.tensor(_factors(widths, scheme), dtype=F64).prod().item()


def predicted_fan_out(widths, scheme):
    return torch.tensor(_factors(widths, scheme, lambda a, b: b), dtype=F64).prod().item()


def predicted_std(widths, scheme):
    return _gain(widths, scheme) ** 0.5


def predicted_first_layer(widths, scheme):
    return _factors(widths, scheme)[0]


WRONG_14_3_PREDICTED = [
    (
        predicted_fan_out,
        "a unit sums n_in products w x: each layer multiplies E[z²] by n_in Var[w], not "
        "n_out Var[w]",
    ),
    (
        predicted_std,
        "that is the factor of the standard deviation; E[z²] is multiplied by its square",
    ),
    (predicted_first_layer, "that is the first layer only: multiply the factors of all layers"),
]


def _multiplied_out(widths, scheme, x, generator, relu=False):
    """The prescribed random layers applied by hand: z_l = z_{l-1} W_l + b_l."""
    layers = mlp.init_layers(widths, scheme, generator=generator)
    z = x
    for i, (W, b) in enumerate(layers):
        z = z @ W + b  # (B, n_l)
        if relu and i < len(layers) - 1:
            z = z.clamp_min(0)
    return z


def _ratio(z, x):
    return (z.pow(2).mean() / x.pow(2).mean()).item()


def measured_with_relu(widths, scheme, x, generator):
    return _ratio(_multiplied_out(widths, scheme, x, generator, relu=True), x)


def measured_not_normalised(widths, scheme, x, generator):
    return _multiplied_out(widths, scheme, x, generator).pow(2).mean().item()


def measured_std_ratio(widths, scheme, x, generator):
    return _ratio(_multiplied_out(widths, scheme, x, generator), x) ** 0.5


WRONG_14_3_MEASURED = [
    (measured_with_relu, "this network is linear: no ReLU between the layers"),
    (
        measured_not_normalised,
        "divide by the mean of x² over all entries: the gain is a ratio",
    ),
    (
        measured_std_ratio,
        "that is the ratio of standard deviations; the gain is the ratio of the means of squares",
    ),
]


@exercise("14.3", "predicted_gain", "measured_gain")
def gain(predicted, measured) -> str:
    """The predicted gain ∏ n_in Var[w] from the schemes' variances; the measured gain by hand."""
    for widths in ([10, 40, 20, 5], _ALTERNATING, [3, 7]):
        name = "alternating 64/256" if len(widths) > 6 else str(widths)
        for scheme in ("xavier", "lecun", "he"):
            expect_answer(
                attempt(predicted, list(widths), scheme),
                _gain(widths, scheme),
                f"predicted_gain({name}, {scheme!r})",
                wrong=wrong_values(WRONG_14_3_PREDICTED, widths, scheme),
                atol=0,
                rtol=1e-9,
            )

    cases = [([5, 9, 3], "he", 7), (_ALTERNATING, "xavier", 512), (_ALTERNATING, "lecun", 512)]
    for k, (widths, scheme, B) in enumerate(cases):
        x = torch.randn(B, widths[0], generator=torch.Generator().manual_seed(143 + k), dtype=F64)
        name = "alternating 64/256" if len(widths) > 6 else str(widths)
        fresh = lambda k=k: torch.Generator().manual_seed(k)  # noqa: E731  the prescribed weights
        got = _expect_lazily(
            attempt(measured, list(widths), scheme, x.clone(), fresh()),
            _ratio(_multiplied_out(widths, scheme, x, fresh()), x),
            f"measured_gain({name}, {scheme!r}, x of shape {tuple(x.shape)})",
            lambda w=widths, sc=scheme, x=x, fresh=fresh: {
                fb: f(w, sc, x, fresh()) for f, fb in WRONG_14_3_MEASURED
            },
            atol=0,
            rtol=1e-9,
        )
        if len(widths) > 6:
            ratio = float(got) / _gain(widths, scheme)
            expect(
                0.5 < ratio < 2.0,
                f"the measured gain for {scheme} should lie within a factor 2 of the prediction",
            )
    return (
        "predicted_gain matches ∏ n_in Var[w] for 3 width lists and 3 schemes; "
        "measured_gain matches the same weights multiplied out by hand, within a factor 2 "
        "of the prediction after 20 alternating layers"
    )


# --- 14.4 ---------------------------------------------------------------------------------------


def _exact_pieces(p, lo, hi):
    """Pieces of x -> W2^T relu(W1 x + b1) + b2 on [lo, hi] by evaluation between candidates."""
    w, b, c = p["W1"][0], p["b1"], p["W2"][:, 0]
    cand = -b[w != 0] / w[w != 0]
    cand = cand[(cand > lo) & (cand < hi)]
    edges = torch.cat([torch.tensor([lo, hi], dtype=F64), cand]).unique()  # sorted
    left, right = (
        edges[:-1] + (edges[1:] - edges[:-1]) / 3,
        edges[:-1] + 2 * (edges[1:] - edges[:-1]) / 3,
    )

    def f(x):
        return torch.relu(x[:, None] * w + b) @ c + p["b2"][0]

    slopes = (f(right) - f(left)) / (right - left)  # one per piece
    scale = 1.0 + float((c.abs() * w.abs()).sum())
    return 1 + int(((slopes[1:] - slopes[:-1]).abs() > 1e-9 * scale).sum())


def _net(w, b, c):
    return {
        "W1": torch.tensor([w], dtype=F64),
        "b1": torch.tensor(b, dtype=F64),
        "W2": torch.tensor(c, dtype=F64)[:, None],
        "b2": torch.tensor([0.2], dtype=F64),
    }


def _count(answer, p, lo, hi, what):
    value = attempt(answer, {k: v.clone() for k, v in p.items()}, lo, hi)
    n = as_tensor(value, what, ())
    expect(float(n) == round(float(n)), f"{what} should be a whole number, got {float(n)}")
    return float(n)


def pieces_all_units(params, lo, hi):
    return params["W1"].shape[1] + 1


def pieces_kinks_only(params, lo, hi):
    return _exact_pieces(params, lo, hi) - 1


def pieces_sign_flipped(params, lo, hi):
    kinks = params["b1"] / params["W1"][0]
    return 1 + int(((kinks > lo) & (kinks < hi)).sum())


def pieces_counts_shared_twice(params, lo, hi):
    w, b, c = params["W1"][0], params["b1"], params["W2"][:, 0]
    keep = (w != 0) & (c != 0)
    kinks = -b[keep] / w[keep]
    return 1 + int(((kinks > lo) & (kinks < hi)).sum())


def pieces_ignores_output_weight(params, lo, hi):
    w, b = params["W1"][0], params["b1"]
    kinks = (-b[w != 0] / w[w != 0]).unique()
    return 1 + int(((kinks > lo) & (kinks < hi)).sum())


WRONG_14_4_RANDOM = [
    (
        pieces_all_units,
        "H + 1 is the most a network can have; count only the kinks inside [lo, hi]",
    ),
    (pieces_kinks_only, "that is the number of kinks; the pieces are one more"),
    (pieces_sign_flipped, "the kink of max(0, w x + b) is at x = -b/w, not b/w"),
]
WRONG_14_4_BUILT = [
    (pieces_counts_shared_twice, "two units sharing the kink 0.5 bend the function once"),
    (pieces_ignores_output_weight, "a unit with output weight 0 bends nothing"),
]


@exercise("14.4", "predicted_pieces")
def pieces(answer) -> str:
    """Pieces from the kinks vs an exact count of slope changes, random and built networks."""
    gen = torch.Generator().manual_seed(144)
    lo, hi = -2.0, 5.0
    nets = [
        {
            "W1": torch.randn(1, 10, generator=gen, dtype=F64),
            "b1": torch.randn(10, generator=gen, dtype=F64),
            "W2": torch.randn(10, 1, generator=gen, dtype=F64),
            "b2": torch.randn(1, generator=gen, dtype=F64),
        }
        for _ in range(20)
    ]
    expect_answer(
        [_count(answer, p, lo, hi, "predicted_pieces(params, -2, 5)") for p in nets],
        [_exact_pieces(p, lo, hi) for p in nets],
        "predicted_pieces for 20 random networks with H = 10 on [-2, 5]",
        wrong={fb: [f(p, lo, hi) for p in nets] for f, fb in WRONG_14_4_RANDOM},
        atol=0,
        rtol=0,
    )
    built = [
        _net([1.0, 2.0, -1.0], [-0.5, -1.0, 4.0], [1.0, 1.0, 1.5]),  # two units share a kink
        _net([1.0, 1.0, -2.0], [1.0, -0.5, -3.0], [0.0, 1.0, -1.0]),  # an output weight 0
        _net([0.0, 1.0, 1.0], [0.3, -0.5, -9.0], [1.0, 1.0, 1.0]),  # an input weight 0, a kink out
    ]
    for p in built:
        n = _exact_pieces(p, lo, hi)
        named = {fb: v for fb, v in wrong_values(WRONG_14_4_BUILT, p, lo, hi).items() if v != n}
        expect_answer(
            _count(answer, p, lo, hi, "predicted_pieces(params, -2, 5)"),
            n,
            "predicted_pieces for a network built by hand",
            wrong=named,
            atol=0,
            rtol=0,
        )
    return (
        "1 + the kinks inside [lo, hi] matches an exact count of slope changes for 20 random "
        "networks and 3 built ones (shared kink, zero weights, kinks outside)"
    )


# --- 14.5 ---------------------------------------------------------------------------------------

_PERMUTE_OPTIONS = ("chance", "lower", "same")


def _digits():
    from sklearn.datasets import load_digits

    digits = load_digits()  # ships with scikit-learn
    X = torch.tensor(digits.data / 16.0, dtype=F64)  # (1797, 64)
    y = torch.tensor(digits.target)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    n = int(0.8 * len(y))
    return X[perm[:n]], y[perm[:n]], X[perm[n:]], y[perm[n:]]


def _permuted_pixels_experiment():
    """Test accuracies after 3 epochs, and the largest difference of the test logits: original
    pixels, and pixels shuffled by one fixed permutation with the first layer's rows shuffled the
    same way."""
    X_tr, y_tr, X_te, y_te = _digits()
    pixels = torch.randperm(64, generator=torch.Generator().manual_seed(145))
    start = mlp.init_mlp(64, 32, 10, generator=torch.Generator().manual_seed(0))
    matched = {**start, "W1": start["W1"][pixels]}  # row d of W1 reads pixel d
    accs, logits = [], []
    for p0, cols in [(start, slice(None)), (matched, pixels)]:
        trained, _ = mlp.train(
            p0,
            X_tr[:, cols],
            y_tr,
            lr=0.2,
            epochs=3,
            batch_size=64,
            generator=torch.Generator().manual_seed(1),
        )
        accs.append(mlp.accuracy(trained, X_te[:, cols], y_te))
        logits.append(mlp.forward(trained, X_te[:, cols])[0])
    return accs[0], accs[1], (logits[0] - logits[1]).abs().max().item()


def guess_chance():
    return "chance"


def guess_lower():
    return "lower"


WRONG_14_5 = [
    (
        guess_chance,
        "a person cannot read the scrambled digits, but the MLP never used the pixels' "
        "neighbourhood: its first layer sums W1[d, j] x_d over all pixels d in any order, so "
        "shuffling the pixels only shuffles the rows of W1",
    ),
    (
        guess_lower,
        "not even a little: with the rows of W1 shuffled the same way, the two networks compute "
        "the same function at every step of training",
    ),
]


@exercise("14.5", "predict_permuted_pixels")
def permuted_pixels(predict) -> str:
    """The reader's guess of the test accuracy on shuffled pixels vs the measured accuracies."""
    guess = attempt(predict)
    expect(
        isinstance(guess, str) and guess in _PERMUTE_OPTIONS,
        f"predict_permuted_pixels() should return one of {_PERMUTE_OPTIONS}, got {guess!r}",
    )
    original, shuffled, gap = _permuted_pixels_experiment()
    expect(gap < 1e-9, "the experiment: matched starts should give the same network")
    reveal = (
        f"test accuracy after 3 epochs: {fmt(original, 3)} on the original pixels and "
        f"{fmt(shuffled, 3)} on the shuffled ones, with W1's rows shuffled alike at the start, and "
        "the same test logits to rounding; a different random start would change the accuracy "
        "only as any two random starts do"
    )
    for wrong, feedback in WRONG_14_5:
        if guess == wrong():
            raise Incorrect(f"predict_permuted_pixels(): {feedback} ({reveal})")
    return f"right: {reveal}; an MLP has no notion of which pixels are neighbours"


# --- 14.6 ---------------------------------------------------------------------------------------


def _deep_autograd(layers, X, y, relu_on_logits=False, reduction="mean"):
    """(loss, [W_1_bar, b_1_bar, ...]) of a deep ReLU network by float64 autograd."""
    leaves = [t.clone().requires_grad_(True) for W, b in layers for t in (W, b)]
    A = X
    for i in range(len(layers)):
        A = A @ leaves[2 * i] + leaves[2 * i + 1]
        if i < len(layers) - 1 or relu_on_logits:
            A = F.relu(A)
    loss = F.cross_entropy(A, y, reduction=reduction)
    return loss.detach(), [g for g in torch.autograd.grad(loss, leaves)]


def _flat_deep(loss, grads):
    return torch.cat([loss.reshape(1)] + [g.reshape(-1) for g in grads])


def _deep_no_mask(layers, X, y):
    """The backward pass without the ReLU masks (the forward pass is right)."""
    loss, _ = _deep_autograd(layers, X, y)
    acts = [X]
    for i, (W, b) in enumerate(layers):
        Z = acts[-1] @ W + b
        acts.append(F.relu(Z) if i < len(layers) - 1 else Z)
    Z_bar = (torch.softmax(acts[-1], 1) - F.one_hot(y, acts[-1].shape[1]).to(F64)) / len(y)
    grads = []
    for i in reversed(range(len(layers))):
        grads = [acts[i].T @ Z_bar, Z_bar.sum(0)] + grads
        Z_bar = Z_bar @ layers[i][0].T
    return loss, grads


def deep_no_mask(layers, X, y):
    loss, grads = _deep_no_mask(layers, X, y)
    return loss, [(grads[2 * i], grads[2 * i + 1]) for i in range(len(layers))]


def deep_summed(layers, X, y):
    loss, grads = _deep_autograd(layers, X, y, reduction="sum")
    return loss / len(y), [(grads[2 * i], grads[2 * i + 1]) for i in range(len(layers))]


def deep_relu_on_logits(layers, X, y):
    loss, grads = _deep_autograd(layers, X, y, relu_on_logits=True)
    return loss, [(grads[2 * i], grads[2 * i + 1]) for i in range(len(layers))]


def deep_reversed(layers, X, y):
    loss, grads = _deep_autograd(layers, X, y)
    return loss, [(grads[2 * i], grads[2 * i + 1]) for i in reversed(range(len(layers)))]


WRONG_14_6 = [
    (
        deep_no_mask,
        "the ReLU masks are missing: below each hidden layer Z_bar = A_bar * [Z > 0]",
    ),
    (
        deep_summed,
        "the gradients are those of the summed loss; the loss is the mean over the batch, so "
        "Z_L_bar = (P - Y) / B",
    ),
    (
        deep_relu_on_logits,
        "there is no ReLU after the last layer: the logits Z_L go straight into the softmax",
    ),
]


def _deep_answer(value, what, layers):
    expect(
        isinstance(value, (tuple, list)) and len(value) == 2,
        f"{what} should return a pair (loss, grads)",
    )
    loss, grads = value
    expect(
        isinstance(grads, (tuple, list)) and len(grads) == len(layers),
        f"{what}: grads should be a list of {len(layers)} pairs (W_bar, b_bar), one per layer",
    )
    parts = [as_tensor(loss, f"the loss of {what}", ())]
    for i, ((W, b), g) in enumerate(zip(layers, grads, strict=True)):
        expect(
            isinstance(g, (tuple, list)) and len(g) == 2,
            f"{what}: grads[{i}] should be a pair (W_bar, b_bar)",
        )
        parts.append(as_tensor(g[0], f"W_bar of layer {i + 1} of {what}", tuple(W.shape)))
        parts.append(as_tensor(g[1], f"b_bar of layer {i + 1} of {what}", tuple(b.shape)))
    return torch.cat([p.reshape(-1) for p in parts])


@exercise("14.6", "deep_loss_and_grads")
def deep_loss_and_grads(answer) -> str:
    """The loss and every gradient of a deep ReLU network vs float64 autograd, 4 architectures."""
    gen = torch.Generator().manual_seed(146)
    for widths, B in [([5, 3], 6), ([6, 8, 4], 10), ([4, 7, 7, 7, 3], 9), ([3, 16, 2], 1)]:
        layers = [
            (
                torch.randn(a, b, generator=gen, dtype=F64) / a**0.5,
                0.2 * torch.randn(b, generator=gen, dtype=F64),
            )
            for a, b in zip(widths[:-1], widths[1:], strict=True)
        ]
        X = torch.randn(B, widths[0], generator=gen, dtype=F64)
        y = torch.randint(0, widths[-1], (B,), generator=gen)
        what = f"deep_loss_and_grads for widths {widths}, B = {B}"
        copy = [(W.clone(), b.clone()) for W, b in layers]
        expect_answer(
            _deep_answer(attempt(answer, copy, X.clone(), y.clone()), what, layers),
            _flat_deep(*_deep_autograd(layers, X, y)),
            what,
            wrong={
                fb: _flat_deep(loss, [t for pair in grads for t in pair])
                for fb, (loss, grads) in wrong_values(WRONG_14_6, layers, X, y).items()
            },
            atol=1e-12,
            rtol=1e-9,
        )
    return (
        "the loss and the gradients of every layer match float64 autograd for 4 networks "
        "(1 to 4 layers, B = 1 to 10)"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------

ref_train_xor = _ref("14.2", "train_xor")
ref_solves_xor = _ref("14.2", "solves_xor")
ref_predicted = _ref("14.3", "predicted_gain")
ref_measured = _ref("14.3", "measured_gain")

MISTAKES = {
    "14.1": WRONG_14_1 + [(input_grad_not_transposed, "raised RuntimeError")],
    "14.2": [((f, ref_solves_xor), fb) for f, fb in WRONG_14_2_TRAIN]
    + [((ref_train_xor, f), fb) for f, fb in WRONG_14_2_SOLVES]
    + [((ref_train_xor, solves_xor_string), "should return True or False")],
    "14.3": [((f, ref_measured), fb) for f, fb in WRONG_14_3_PREDICTED]
    + [((ref_predicted, f), fb) for f, fb in WRONG_14_3_MEASURED],
    "14.4": WRONG_14_4_RANDOM + WRONG_14_4_BUILT,
    "14.5": WRONG_14_5,
    "14.6": WRONG_14_6 + [(deep_reversed, "should have shape")],
}
