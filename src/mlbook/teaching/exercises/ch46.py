"""Checks of the exercises of chapter 46 (recurrent networks and LSTMs).

The references are independent of :mod:`mlbook.beyond.recurrent`: the Jacobian of the unrolled
linear recurrence by ``torch.autograd.functional.jacobian`` (46.1); the Jacobian of one tanh step
by the same function (46.2); ``torch.nn.LSTMCell`` with the same weights (46.3); and the Jacobian
of a later cell state with respect to an earlier one, the product of the per-step Jacobians of
``torch.nn.LSTMCell`` computed by autograd (46.4).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from . import Incorrect, as_number, attempt, exercise, expect_answer, expect_tuple

F64 = torch.float64


def _randn(gen: torch.Generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=F64)


# --- 46.1 ----------------------------------------------------------------------------------------

RHO, LAG, WIDTH = 0.9, 50, 32


def _measured_gradient_norm() -> float:
    """||dh_50/dh_0|| of h_t = 0.9 Q h_{t-1} + u_t, Q orthogonal, by autograd through the loop."""
    gen = torch.Generator().manual_seed(461)
    Q = torch.linalg.qr(_randn(gen, WIDTH, WIDTH))[0]  # a random orthogonal matrix
    u = _randn(gen, LAG, WIDTH)

    def unrolled(h0: torch.Tensor) -> torch.Tensor:
        h = h0
        for t in range(LAG):
            h = RHO * Q @ h + u[t]
        return h

    J = torch.autograd.functional.jacobian(unrolled, torch.zeros(WIDTH, dtype=F64))
    return float(torch.linalg.matrix_norm(J, ord=2))


def guess_sum_over_steps():
    return RHO * LAG


def guess_one_step():
    return RHO


def guess_orthogonal_keeps_norm():
    return 1.0


def guess_not_a_number():
    return "small"


@exercise("46.1", "predict_gradient_norm")
def gradient_norm(answer) -> str:
    """The norm of the Jacobian of h_50 with respect to h_0, measured by autograd."""
    guess = as_number(attempt(answer), "predict_gradient_norm()")
    measured = _measured_gradient_norm()
    seen = f"autograd measures ||dh_50/dh_0|| = {measured:.3g}"
    if guess <= 0 or abs(math.log(guess / measured)) > math.log(1.1):
        if abs(guess - RHO * LAG) < 1:
            why = (
                "the Jacobians of the 50 steps multiply, they do not add: the product is (0.9 Q)^50"
            )
        elif abs(guess - RHO) < 0.05:
            why = "0.9 is the factor of one step; 50 steps multiply 50 such factors"
        elif abs(guess - 1) < 0.05:
            why = (
                "Q alone keeps every norm (orthogonal), but each step also multiplies by 0.9, "
                "50 times over"
            )
        else:
            why = "every step multiplies the Jacobian by 0.9 Q, whose singular values are all 0.9"
        raise Incorrect(f"you predicted {guess:g}; {seen}: {why}")
    return f"right within 10 %: {seen} = 0.9^50, a factor 0.9 per step"


# --- 46.2 ----------------------------------------------------------------------------------------


def _tanh_step(x, h_prev, W_xh, W_hh, b):
    return torch.tanh(x @ W_xh.T + h_prev @ W_hh.T + b)


def _step_jacobian(x, h_prev, W_xh, W_hh, b) -> torch.Tensor:
    """dh_t/dh_{t-1} for every row of the batch, by torch.autograd.functional.jacobian."""
    rows = [
        torch.autograd.functional.jacobian(lambda hr, xr=xr: _tanh_step(xr, hr, W_xh, W_hh, b), hr0)
        for xr, hr0 in zip(x, h_prev, strict=True)
    ]
    return torch.stack(rows)  # (B, H, H)


def _tanh_prime(x, h_prev, W_xh, W_hh, b):
    return 1 - _tanh_step(x, h_prev, W_xh, W_hh, b) ** 2  # (B, H)


def jacobian_without_tanh(x, h_prev, W_xh, W_hh, b):
    return W_hh.expand(x.shape[0], -1, -1)


def jacobian_transposed(x, h_prev, W_xh, W_hh, b):
    return _tanh_prime(x, h_prev, W_xh, W_hh, b)[:, :, None] * W_hh.T


def jacobian_columns_scaled(x, h_prev, W_xh, W_hh, b):
    return W_hh * _tanh_prime(x, h_prev, W_xh, W_hh, b)[:, None, :]


def jacobian_at_previous_state(x, h_prev, W_xh, W_hh, b):
    return (1 - h_prev**2)[:, :, None] * W_hh


WRONG_JACOBIAN = {
    "the derivative of tanh is missing: dh_t/dh_{t-1} = diag(1 - h_t^2) W_hh": (
        jacobian_without_tanh
    ),
    "the matrix is transposed: row i is dh_{t,i}/dh_{t-1}, so it holds row i of W_hh": (
        jacobian_transposed
    ),
    "tanh' scales the rows (one output unit each), not the columns: diag(1 - h_t^2) W_hh": (
        jacobian_columns_scaled
    ),
    "tanh' is taken at the new state: 1 - h_t^2, with h_t = tanh(W_xh x_t + W_hh h_{t-1} + b), "
    "not 1 - h_{t-1}^2": jacobian_at_previous_state,
}


@exercise("46.2", "rnn_step_jacobian")
def rnn_step_jacobian(answer) -> str:
    """The Jacobian of one tanh step against autograd, for a batch and two widths."""
    for seed, (B, I, H) in ((462, (3, 4, 5)), (463, (2, 3, 7))):
        gen = torch.Generator().manual_seed(seed)
        args = (
            _randn(gen, B, I),
            _randn(gen, B, H),
            _randn(gen, H, I),
            _randn(gen, H, H) / math.sqrt(H),
            _randn(gen, H),
        )
        expect_answer(
            attempt(answer, *(a.clone() for a in args), name="rnn_step_jacobian"),
            _step_jacobian(*args),
            f"rnn_step_jacobian(x, h_prev, W_xh, W_hh, b) for B = {B}, H = {H}",
            wrong={fb: fn(*args) for fb, fn in WRONG_JACOBIAN.items()},
            atol=1e-12,
            rtol=1e-10,
        )
    return "matches the autograd Jacobian of the tanh step for every row of two batches"


# --- 46.3 ----------------------------------------------------------------------------------------


def _torch_lstm(x, h, c, W_ih, W_hh, b_ih, b_hh):
    """torch.nn.LSTMCell with these weights."""
    cell = torch.nn.LSTMCell(W_ih.shape[1], h.shape[1]).to(F64)
    with torch.no_grad():
        for p, w in zip(cell.parameters(), (W_ih, W_hh, b_ih, b_hh), strict=True):
            p.copy_(w)
        return cell(x, (h, c))


def _lstm_variant(
    x, h, c, W_ih, W_hh, b_ih, b_hh, *, order="ifgo", bias=True, out_tanh=True, input_gate=True
):
    pre = x @ W_ih.T + h @ W_hh.T + b_ih + (b_hh if bias else 0)  # (B, 4H)
    parts = dict(zip(order, pre.chunk(4, dim=1), strict=True))
    i, f = torch.sigmoid(parts["i"]), torch.sigmoid(parts["f"])
    g, o = torch.tanh(parts["g"]), torch.sigmoid(parts["o"])
    c_new = f * c + (i * g if input_gate else g)
    return (o * torch.tanh(c_new) if out_tanh else o * c_new), c_new


def lstm_gate_order_ifog(*args):
    return _lstm_variant(*args, order="ifog")


def lstm_gate_order_icfo(*args):
    return _lstm_variant(*args, order="igfo")


def lstm_one_bias(*args):
    return _lstm_variant(*args, bias=False)


def lstm_no_output_tanh(*args):
    return _lstm_variant(*args, out_tanh=False)


def lstm_no_input_gate(*args):
    return _lstm_variant(*args, input_gate=False)


WRONG_LSTM = {
    "PyTorch stacks the gates as i, f, g, o (the candidate g third), not i, f, o, g": (
        lstm_gate_order_ifog
    ),
    "PyTorch stacks the gates as i, f, g, o: the forget gate is the second block of H rows": (
        lstm_gate_order_icfo
    ),
    "PyTorch's LSTM has two bias vectors and adds both, b_ih + b_hh": lstm_one_bias,
    "the output squashes the new cell state first: h_t = o_t * tanh(c_t)": lstm_no_output_tanh,
    "the input gate scales the candidate: c_t = f_t * c_{t-1} + i_t * g_t": lstm_no_input_gate,
}


@exercise("46.3", "lstm_step")
def lstm_step(answer) -> str:
    """One LSTM step in PyTorch's layout against torch.nn.LSTMCell with the same weights."""
    for seed, (B, I, H) in ((464, (3, 5, 4)), (465, (1, 2, 6))):
        gen = torch.Generator().manual_seed(seed)
        args = (
            _randn(gen, B, I),
            _randn(gen, B, H),
            _randn(gen, B, H),
            _randn(gen, 4 * H, I) / math.sqrt(I),
            _randn(gen, 4 * H, H) / math.sqrt(H),
            _randn(gen, 4 * H),
            _randn(gen, 4 * H),
        )
        what = f"lstm_step(x, h, c, W_ih, W_hh, b_ih, b_hh) for B = {B}, H = {H}"
        got = expect_tuple(
            attempt(answer, *(a.clone() for a in args), name="lstm_step"), what, ("h_t", "c_t")
        )
        want = _torch_lstm(*args)
        wrong = {fb: fn(*args) for fb, fn in WRONG_LSTM.items()}
        for j, part in enumerate(("h_t", "c_t")):
            expect_answer(
                got[j],
                want[j],
                f"{what}: {part}",
                wrong={fb: w[j] for fb, w in wrong.items()},
                atol=1e-12,
                rtol=1e-10,
            )
    return (
        "h_t and c_t match torch.nn.LSTMCell with the same weights (gates i, f, g, o; b_ih + b_hh)"
    )


# --- 46.4 ----------------------------------------------------------------------------------------

BIASES, LAGS, STEPS, INPUTS, HIDDEN = (0.0, 1.0, 3.0), [0, 1, 4, 8, 16, 24], 24, 3, 5


def _cell(forget_bias: float) -> torch.nn.LSTMCell:
    torch.manual_seed(466)  # torch's own initialisation, seeded
    cell = torch.nn.LSTMCell(INPUTS, HIDDEN).to(F64)
    with torch.no_grad():
        cell.bias_ih[HIDDEN : 2 * HIDDEN] += forget_bias
    return cell


def _products(cell, x) -> list[torch.Tensor]:
    """d(h_T, c_T)/d(h_{T-k}, c_{T-k}) for k = 0..T, (2H, 2H) each: the per-step Jacobians of
    torch.nn.LSTMCell by autograd, multiplied from the last step back."""
    H, T = cell.hidden_size, x.shape[0]
    s, Js = torch.zeros(2 * H, dtype=F64), []
    for t in range(T):

        def step(state, t=t):
            h, c = cell(x[t : t + 1], (state[None, :H], state[None, H:]))
            return torch.cat([h[0], c[0]])

        Js.append(torch.autograd.functional.jacobian(step, s))
        with torch.no_grad():
            s = step(s)
    P, out = torch.eye(2 * H, dtype=F64), [torch.eye(2 * H, dtype=F64)]
    for k in range(1, T + 1):
        P = P @ Js[T - k]
        out.append(P)
    return out


def _table(products, lags, H, *, ord=2, part="c", shift=0) -> torch.Tensor:
    """The norms of one block of the products at the lags: part "c" (dc_T/dc_{T-k}) or "h"."""
    block = slice(H, 2 * H) if part == "c" else slice(0, H)
    return torch.stack(
        [torch.linalg.matrix_norm(products[max(k - shift, 0)][block, block], ord=ord) for k in lags]
    )


def norms_frobenius(cell, x, lags):
    return _table(_products(cell, x), lags, cell.hidden_size, ord="fro")


def norms_of_hidden_state(cell, x, lags):
    return _table(_products(cell, x), lags, cell.hidden_size, part="h")


def norms_one_lag_short(cell, x, lags):
    return _table(_products(cell, x), lags, cell.hidden_size, shift=1)


def norms_direct_path(cell, x, lags):
    """Only the additive path: the norm of prod_t diag(f_t), the largest product of f."""
    H, h, c, fs = cell.hidden_size, *[torch.zeros(1, cell.hidden_size, dtype=F64)] * 2, []
    with torch.no_grad():
        for t in range(x.shape[0]):
            pre = x[t : t + 1] @ cell.weight_ih.T + h @ cell.weight_hh.T
            fs.append(torch.sigmoid(pre + cell.bias_ih + cell.bias_hh)[0, H : 2 * H])
            h, c = cell(x[t : t + 1], (h, c))
    f = torch.stack(fs)  # (T, H)
    return torch.stack([f[len(f) - k :].prod(0).max() if k else f.new_ones(()) for k in lags])


WRONG_NORMS = {
    "use the spectral norm (matrix_norm(J, ord=2)), not the Frobenius norm": dict(ord="fro"),
    "measure the cell state: dc_T/dc_{T-k} (h_{T-k} held fixed), not dh_T/dh_{T-k}": dict(part="h"),
    "the lag is one step short: lag k spans the k steps from T - k to T": dict(shift=1),
}
DIRECT_PATH = (
    "that is the additive path alone, prod diag(f_t); the full Jacobian also runs through h"
)


@exercise("46.4", "cell_gradient_norms")
def cell_gradient_norms(answer) -> str:
    """||dc_T/dc_{T-k}|| for three forget-gate biases against autograd through LSTMCell."""
    gen = torch.Generator().manual_seed(467)
    x = _randn(gen, STEPS, INPUTS)
    slopes = []
    for b in BIASES:
        cell = _cell(b)
        products = _products(cell, x)
        want = _table(products, LAGS, HIDDEN)
        wrong = {fb: _table(products, LAGS, HIDDEN, **kw) for fb, kw in WRONG_NORMS.items()}
        wrong[DIRECT_PATH] = norms_direct_path(cell, x, LAGS)
        expect_answer(
            attempt(answer, cell, x.clone(), list(LAGS), name="cell_gradient_norms"),
            want,
            f"cell_gradient_norms(cell, x, lags={LAGS}) with forget-gate bias {b:g}",
            wrong=wrong,
            atol=1e-10,
            rtol=1e-8,
        )
        slopes.append(np.polyfit(LAGS[1:], np.log(want[1:].numpy()), 1)[0])
    per_bias = ", ".join(f"b_f = {b:g}: {s:.3f}" for b, s in zip(BIASES, slopes, strict=True))
    return (
        f"matches autograd through torch.nn.LSTMCell for lags {LAGS}; slopes of log-norm "
        f"against lag: {per_bias}"
    )


# Typical wrong answers, listed once (the tests build each and check that it is rejected with
# its feedback) -----------------------------------------------------------------------------------

MISTAKES = {
    "46.1": [
        (guess_sum_over_steps, "multiply, they do not add"),
        (guess_one_step, "factor of one step"),
        (guess_orthogonal_keeps_norm, "Q alone keeps every norm"),
        (guess_not_a_number, "should return a number"),
    ],
    "46.2": [
        (jacobian_without_tanh, "derivative of tanh is missing"),
        (jacobian_transposed, "transposed"),
        (jacobian_columns_scaled, "scales the rows"),
        (jacobian_at_previous_state, "taken at the new state"),
    ],
    "46.3": [
        (lstm_gate_order_ifog, "not i, f, o, g"),
        (lstm_gate_order_icfo, "forget gate is the second block"),
        (lstm_one_bias, "two bias vectors"),
        (lstm_no_output_tanh, "h_t = o_t * tanh(c_t)"),
        (lstm_no_input_gate, "input gate scales the candidate"),
    ],
    "46.4": [
        (norms_frobenius, "not the Frobenius norm"),
        (norms_of_hidden_state, "measure the cell state"),
        (norms_one_lag_short, "one step short"),
        (norms_direct_path, "additive path alone"),
    ],
}
