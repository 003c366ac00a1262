"""Checks of the exercises of chapter 14 (neural networks from scratch).

The references are independent of the reader's answer and of the gradients of :mod:`mlbook.nn.mlp`:
float64 autograd through ``F.cross_entropy`` for the input gradient, full-batch gradient descent
driven by autograd (all starting points trained at once) for XOR, the variances of the three
initialisations written out and the layers multiplied out by hand for the gains, and an exact count
of slope changes between neighbouring candidate kinks for the linear pieces. ``mlp.init_mlp`` and
``mlp.init_layers`` only supply the random starting weights that the exercises prescribe.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ...nn import mlp
from . import as_tensor, attempt, exercise, expect, expect_answer
from . import reference_answer as _ref

F64 = torch.float64


# --- 14.1 ---------------------------------------------------------------------------------------


def _random_params(D, H, K, gen):
    return {
        "W1": torch.randn(D, H, generator=gen, dtype=F64) / D**0.5,
        "b1": 0.3 * torch.randn(H, generator=gen, dtype=F64),
        "W2": torch.randn(H, K, generator=gen, dtype=F64) / H**0.5,
        "b2": 0.3 * torch.randn(K, generator=gen, dtype=F64),
    }


@exercise("14.1", "input_grad")
def input_grad(answer) -> str:
    """∂L/∂X of the two-layer ReLU network against float64 autograd, for three batch shapes."""
    gen = torch.Generator().manual_seed(141)
    for B, D, H, K in [(8, 5, 7, 4), (1, 3, 6, 2), (16, 64, 32, 10)]:
        p = _random_params(D, H, K, gen)
        X = torch.randn(B, D, generator=gen, dtype=F64)
        y = torch.randint(0, K, (B,), generator=gen)
        Xr = X.clone().requires_grad_(True)
        Z1 = Xr @ p["W1"] + p["b1"]
        (ref,) = torch.autograd.grad(F.cross_entropy(F.relu(Z1) @ p["W2"] + p["b2"], y), Xr)
        P = torch.softmax(F.relu(Z1.detach()) @ p["W2"] + p["b2"], dim=1)
        Z2_bar = (P - F.one_hot(y, K).to(F64)) / B
        unmasked = Z2_bar @ p["W2"].T @ p["W1"].T
        expect_answer(
            attempt(answer, {k: v.clone() for k, v in p.items()}, X.clone(), y.clone()),
            ref,
            f"input_grad(params, X, y) for B, D, H, K = {B}, {D}, {H}, {K}",
            wrong={
                "the ReLU mask is missing: a unit with Z1 <= 0 passes no gradient back, so "
                "Z1_bar = H_bar * [Z1 > 0]": unmasked,
                "that is the gradient of the summed loss; eq. 14.2 is the mean over the batch "
                "(output_grad divides by B)": ref * B,
                "the sign is flipped: this is the direction that lowers the loss": -ref,
            },
            atol=1e-12,
            rtol=1e-9,
        )
    return "X_bar = Z1_bar W1^T matches autograd of F.cross_entropy for 3 batches (B = 8, 1 and 16)"


# --- 14.2 ---------------------------------------------------------------------------------------

_XOR_X = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=F64)
_XOR_Y = torch.tensor([0, 1, 1, 0])
_WIDTH = 8  # every network is trained padded to 8 units: a zero unit stays zero


def _train_all(starts, lrs, steps=300):
    """Full-batch gradient descent on the mean cross-entropy for many networks at once.

    starts: parameter dicts (hidden <= 8, padded with zero units, which receive no gradient);
    lrs: one learning rate each. Returns the flat parameters of every network after each of the
    last two steps: (2, N, 48) for steps - 1 and steps.
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
    n, snaps = len(starts), []
    for step in range(steps):
        logits = F.relu(_XOR_X @ W1 + b1[:, None]) @ W2 + b2[:, None]  # (N, 4, 2)
        loss = F.cross_entropy(logits.reshape(-1, 2), _XOR_Y.repeat(n), reduction="sum") / 4
        grads = torch.autograd.grad(loss, [W1, b1, W2, b2])
        with torch.no_grad():
            for t, g in zip((W1, b1, W2, b2), grads, strict=True):
                t -= rate.reshape(-1, *[1] * (t.dim() - 1)) * g
        if step >= steps - 2:
            snaps.append(torch.cat([t.detach().reshape(n, -1) for t in (W1, b1, W2, b2)], 1))
    return torch.stack(snaps)


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
    """train_xor against gradient descent on autograd's gradients; solves_xor on 20 networks."""
    runs = [(h, s) for h in (2, 8) for s in range(10)]
    probes = [(2, 0), (8, 7)]  # one success and one failure
    starts = [_start(h, s) for h, s in runs] + [_start(h, s) for h, s in probes]
    snaps = _train_all(starts, [1.0] * len(runs) + [0.1] * len(probes))
    trained = [_unpad(snaps[1, i], h) for i, (h, _) in enumerate(runs)]

    for j, (h, s) in enumerate(probes):
        i = runs.index((h, s))
        got = _flat_params(attempt(train_xor, h, s), f"train_xor({h}, {s})", h)
        expect_answer(
            got,
            _flat(trained[i]),
            f"train_xor({h}, {s}) (all parameters)",
            wrong={
                "these are the starting weights: train for 300 full-batch steps": _flat(
                    _start(h, s)
                ),
                "the learning rate is 1.0, as in §14.6": _flat(_unpad(snaps[1, len(runs) + j], h)),
                "one step too few: train for 300 steps": _flat(_unpad(snaps[0, i], h)),
            },
            atol=1e-8,
            rtol=1e-6,
        )

    nets = trained + _built_xor_nets()
    logits = [F.relu(_XOR_X @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"] for p in nets]
    correct = torch.stack([(z.argmax(1) == _XOR_Y).to(F64) for z in logits])  # (24, 4)
    ref = (correct.sum(1) == 4).to(F64)
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
        wrong={
            "that is the accuracy; return True only if all four corners are right": correct.mean(1),
            "one right corner is not enough: all four must be classified correctly": (
                correct.sum(1) > 0
            ).to(F64),
            "a majority of corners is not enough: all four must be classified correctly": (
                correct.sum(1) > 2
            ).to(F64),
        },
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


def _gain(widths, scheme, fan):
    factors = [fan(a, b) * _VAR[scheme](a, b) for a, b in zip(widths[:-1], widths[1:], strict=True)]
    return torch.tensor(factors, dtype=F64).prod().item(), factors


@exercise("14.3", "predicted_gain", "measured_gain")
def gain(predicted, measured) -> str:
    """The predicted gain ∏ n_in Var[w] from the schemes' variances; the measured gain by hand."""
    for widths in ([10, 40, 20, 5], _ALTERNATING, [3, 7]):
        for scheme in ("xavier", "lecun", "he"):
            want, factors = _gain(widths, scheme, lambda a, b: a)
            by_out, _ = _gain(widths, scheme, lambda a, b: b)
            expect_answer(
                attempt(predicted, list(widths), scheme),
                want,
                f"predicted_gain({widths if len(widths) < 6 else 'alternating 64/256'}, "
                f"{scheme!r})",
                wrong={
                    "a unit sums n_in products w x: each layer multiplies E[z²] by n_in Var[w], "
                    "not n_out Var[w]": by_out,
                    "that is the factor of the standard deviation; E[z²] is multiplied by its "
                    "square": want**0.5,
                    "that is the first layer only: multiply the factors of all layers": factors[0],
                },
                atol=0,
                rtol=1e-9,
            )

    cases = [([5, 9, 3], "he", 7), (_ALTERNATING, "xavier", 512), (_ALTERNATING, "lecun", 512)]
    for k, (widths, scheme, B) in enumerate(cases):
        x = torch.randn(B, widths[0], generator=torch.Generator().manual_seed(143 + k), dtype=F64)
        layers = mlp.init_layers(widths, scheme, generator=torch.Generator().manual_seed(k))
        z = x
        for W, b in layers:
            z = z @ W + b  # (B, n_l), linear
        want = (z.pow(2).mean() / x.pow(2).mean()).item()
        wrong = {
            "divide by the mean of x² over all entries: the gain is a ratio": z.pow(2)
            .mean()
            .item(),
            "that is the ratio of standard deviations; the gain is the ratio of the means "
            "of squares": want**0.5,
        }
        if k == 0:  # the small network names the ReLU
            a = x
            for i, (W, b) in enumerate(layers):
                a = a @ W + b
                a = a.clamp_min(0) if i < len(layers) - 1 else a
            wrong["this network is linear: no ReLU between the layers"] = (
                a.pow(2).mean() / x.pow(2).mean()
            ).item()
        name = "alternating 64/256" if len(widths) > 6 else str(widths)
        got = expect_answer(
            attempt(measured, list(widths), scheme, x.clone(), torch.Generator().manual_seed(k)),
            want,
            f"measured_gain({name}, {scheme!r}, x of shape {tuple(x.shape)})",
            wrong=wrong,
            atol=0,
            rtol=1e-9,
        )
        if len(widths) > 6:
            ratio = float(got) / _gain(widths, scheme, lambda a, b: a)[0]
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
    want = [_exact_pieces(p, lo, hi) for p in nets]
    got = [_count(answer, p, lo, hi, "predicted_pieces(params, -2, 5)") for p in nets]
    flipped = [
        1 + int(((p["b1"] / p["W1"][0] > lo) & (p["b1"] / p["W1"][0] < hi)).sum()) for p in nets
    ]
    expect_answer(
        got,
        want,
        "predicted_pieces for 20 random networks with H = 10 on [-2, 5]",
        wrong={
            "H + 1 is the most a network can have; count only the kinks inside [lo, hi]": [11]
            * len(nets),
            "that is the number of kinks; the pieces are one more": [n - 1 for n in want],
            "the kink of max(0, w x + b) is at x = -b/w, not b/w": flipped,
        },
        atol=0,
        rtol=0,
    )

    built = [
        (
            "two units sharing the kink 0.5 bend the function once",
            _net([1.0, 2.0, -1.0], [-0.5, -1.0, 4.0], [1.0, 1.0, 1.5]),
            1,
        ),
        (
            "a unit with output weight 0 bends nothing",
            _net([1.0, 1.0, -2.0], [1.0, -0.5, -3.0], [0.0, 1.0, -1.0]),
            1,
        ),
        (
            "a unit with input weight 0 is a constant and bends nothing",
            _net([0.0, 1.0, 1.0], [0.3, -0.5, -9.0], [1.0, 1.0, 1.0]),
            0,
        ),
    ]
    for feedback, p, extra in built:
        n = _exact_pieces(p, lo, hi)
        value = _count(answer, p, lo, hi, "predicted_pieces(params, -2, 5)")
        expect_answer(
            value,
            n,
            "predicted_pieces for a network built by hand",
            wrong={feedback: n + extra} if extra else None,
            atol=0,
            rtol=0,
        )
    return (
        "1 + the kinks inside [lo, hi] matches an exact count of slope changes for 20 random "
        "networks and 3 built ones (shared kink, zero weights, kinks outside)"
    )


# Typical wrong answers (one place: the tests build each and check that it is rejected with
# its feedback) ---------------------------------------------------------------------


XOR_X = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
XOR_Y = torch.tensor([0, 1, 1, 0])


# --- 14.1


def input_grad_no_mask(params, X, y):
    logits, cache = mlp.forward(params, X)
    H_bar = mlp.output_grad(logits, y) @ params["W2"].T
    return H_bar @ params["W1"].T


def input_grad_summed(params, X, y):
    return _ref("14.1", "input_grad")(params, X, y) * X.shape[0]


def input_grad_flipped(params, X, y):
    return -_ref("14.1", "input_grad")(params, X, y)


def input_grad_not_transposed(params, X, y):
    logits, cache = mlp.forward(params, X)
    H_bar = mlp.output_grad(logits, y) @ params["W2"].T
    return (H_bar * (cache["Z1"] > 0)) @ params["W1"]


# --- 14.2


ref_train_xor = _ref("14.2", "train_xor")
ref_solves_xor = _ref("14.2", "solves_xor")


def train_xor_untrained(hidden, seed):
    return mlp.init_mlp(2, hidden, 2, generator=torch.Generator().manual_seed(seed))


def train_xor_small_lr(hidden, seed):
    start = train_xor_untrained(hidden, seed)
    return mlp.train(start, XOR_X, XOR_Y, lr=0.1, epochs=300)[0]


def train_xor_299(hidden, seed):
    start = train_xor_untrained(hidden, seed)
    return mlp.train(start, XOR_X, XOR_Y, lr=1.0, epochs=299)[0]


def solves_xor_accuracy(params):
    return mlp.accuracy(params, XOR_X, XOR_Y)


def solves_xor_any(params):
    return bool((mlp.predict(params, XOR_X) == XOR_Y).any())


def solves_xor_majority(params):
    return mlp.accuracy(params, XOR_X, XOR_Y) > 0.5


def solves_xor_string(params):
    return "yes" if mlp.accuracy(params, XOR_X, XOR_Y) == 1.0 else "no"


# --- 14.3


ref_predicted = _ref("14.3", "predicted_gain")
ref_measured = _ref("14.3", "measured_gain")


def predicted_fan_out(widths, scheme):
    gain = 1.0
    for n_in, n_out in zip(widths[:-1], widths[1:], strict=True):
        gain *= n_out * mlp.init_std(n_in, n_out, scheme) ** 2
    return gain


def predicted_std(widths, scheme):
    gain = 1.0
    for n_in, n_out in zip(widths[:-1], widths[1:], strict=True):
        gain *= (n_in * mlp.init_std(n_in, n_out, scheme) ** 2) ** 0.5
    return gain


def predicted_first_layer(widths, scheme):
    return widths[0] * mlp.init_std(widths[0], widths[1], scheme) ** 2


def measured_with_relu(widths, scheme, x, generator):
    layers = mlp.init_layers(widths, scheme, generator=generator)
    out, _ = mlp.deep_forward(x, layers, activation="relu")
    return (out.pow(2).mean() / x.pow(2).mean()).item()


def measured_not_normalised(widths, scheme, x, generator):
    layers = mlp.init_layers(widths, scheme, generator=generator)
    out, _ = mlp.deep_forward(x, layers, activation="linear")
    return out.pow(2).mean().item()


def measured_std_ratio(widths, scheme, x, generator):
    layers = mlp.init_layers(widths, scheme, generator=generator)
    out, _ = mlp.deep_forward(x, layers, activation="linear")
    return (out.pow(2).mean().sqrt() / x.pow(2).mean().sqrt()).item()  # RMS ratio


# --- 14.4


def pieces_all_units(params, lo, hi):
    return params["W1"].shape[1] + 1


def pieces_kinks_only(params, lo, hi):
    return _ref("14.4", "predicted_pieces")(params, lo, hi) - 1


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


MISTAKES = {
    "14.1": [
        (input_grad_no_mask, "ReLU mask is missing"),
        (input_grad_summed, "summed loss"),
        (input_grad_flipped, "sign is flipped"),
        (input_grad_not_transposed, "raised RuntimeError"),
    ],
    "14.2": [
        ((train_xor_untrained, ref_solves_xor), "starting weights"),
        ((train_xor_small_lr, ref_solves_xor), "learning rate is 1.0"),
        ((train_xor_299, ref_solves_xor), "one step too few"),
        ((ref_train_xor, solves_xor_accuracy), "that is the accuracy"),
        ((ref_train_xor, solves_xor_any), "one right corner is not enough"),
        ((ref_train_xor, solves_xor_majority), "a majority of corners"),
        ((ref_train_xor, solves_xor_string), "should return True or False"),
    ],
    "14.3": [
        ((predicted_fan_out, ref_measured), "not n_out Var[w]"),
        ((predicted_std, ref_measured), "factor of the standard deviation"),
        ((predicted_first_layer, ref_measured), "first layer only"),
        ((ref_predicted, measured_with_relu), "no ReLU"),
        ((ref_predicted, measured_not_normalised), "divide by the mean of x²"),
        ((ref_predicted, measured_std_ratio), "ratio of standard deviations"),
    ],
    "14.4": [
        (pieces_all_units, "count only the kinks inside"),
        (pieces_kinks_only, "the pieces are one more"),
        (pieces_sign_flipped, "-b/w, not b/w"),
        (pieces_counts_shared_twice, "sharing the kink"),
        (pieces_ignores_output_weight, "output weight 0"),
    ],
}
