"""Recurrent networks (chapter 46): the RNN and backpropagation through time, LSTM and GRU cells.

Shape legend
    B batch;  T time steps;  I input width;  H hidden width;  G gates (RNN 1, GRU 3, LSTM 4)
    x        (B, T, I) inputs, batch first;  u (B, T, H) inputs already mapped to the state
    h, c     (B, H) hidden state and (LSTM) cell state;  hs, cs (B, T, H) all of them
    W_xh     (H, I), W_hh (H, H), b (H,): the RNN of eq. 46.1, h_t = tanh(W_xh x_t + W_hh h_{t-1}
             + b) for column vectors; a batch holds row vectors and computes x W_xh^T
    W_ih     (G H, I), W_hh (G H, H), b_ih, b_hh (G H,): gated cells in PyTorch's layout, the
             gates stacked in PyTorch's order (LSTM: i, f, g, o;  GRU: r, z, n), two bias vectors
    grad_h   (B, T, H) dL/dh_t of the loss through the outputs at each step (not through h_{t+1})
    J        (B, T, H, H) per-step Jacobians dh_t/dh_{t-1};  (B, T, 2H, 2H) for the LSTM's (h, c)

Every cell that PyTorch also has takes PyTorch's weights unchanged, so the book's LSTM and GRU
equal ``torch.nn.LSTM`` and ``torch.nn.GRU`` with the same parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..architectures import ssm
from ..validation import (
    cell_weights,
    float_tensor,
    integer,
    nonsingular,
    number,
    one_of,
    positive,
    positive_int,
    shape_is,
)

__all__ = [
    "GATES",
    "rnn_forward",
    "rnn_bptt",
    "rnn_bptt_naive",
    "rnn_jacobians",
    "jacobian_product_norms",
    "with_spectral_radius",
    "linear_rnn_scan",
    "linear_rnn_naive",
    "lstm_cell",
    "lstm_cell_naive",
    "lstm_forward",
    "lstm_forward_naive",
    "lstm_state_jacobian",
    "lstm_jacobians",
    "gru_cell",
    "gru_cell_naive",
    "gru_forward",
    "Recurrent",
    "SequenceClassifier",
    "delay_recall",
]

#: Gates per kind of cell: the rows of W_ih and W_hh are G blocks of H.
GATES = {"rnn": 1, "gru": 3, "lstm": 4}


# --- eq. 46.1: the recurrence ---------------------------------------------------------------------


def rnn_forward(
    x: torch.Tensor,
    h0: torch.Tensor,
    W_xh: torch.Tensor,
    W_hh: torch.Tensor,
    b: torch.Tensor,
    activation: str = "tanh",
) -> torch.Tensor:
    """h_t = tanh(W_xh x_t + W_hh h_{t-1} + b), t = 1..T. Implements eq. 46.1.

    x: (B, T, I); h0: (B, H); activation "tanh" or "linear" (the linear RNN). Returns hs (B, T, H).
    """
    float_tensor(x, "x", ndim=3)
    one_of(activation, "activation", ("tanh", "linear"))
    H = W_hh.shape[0]
    shape_is(h0, "h0", (x.shape[0], H))
    shape_is(W_xh, "W_xh", (H, x.shape[2]))
    shape_is(W_hh, "W_hh", (H, H))
    shape_is(b, "b", (H,))
    act = torch.tanh if activation == "tanh" else (lambda a: a)
    u = x @ W_xh.T + b  # (B, T, H): the input part of every step at once
    h, hs = h0, []
    for t in range(x.shape[1]):
        h = act(u[:, t] + h @ W_hh.T)  # (B, H)
        hs.append(h)
    return torch.stack(hs, dim=1)  # (B, T, H)


# --- eq. 46.2: backpropagation through time -------------------------------------------------------


def rnn_bptt(
    x: torch.Tensor,
    h0: torch.Tensor,
    W_xh: torch.Tensor,
    W_hh: torch.Tensor,
    b: torch.Tensor,
    grad_h: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of L = sum_t <grad_h[:, t], h_t> by one backward sweep. Implements eq. 46.2.

    Same arguments as :func:`rnn_forward` (tanh), and grad_h: (B, T, H), the gradient each step's
    loss sends into h_t. Returns (dL/dW_xh (H, I), dL/dW_hh (H, H), dL/db (H,), dL/dh0 (B, H)).
    """
    hs = rnn_forward(x, h0, W_xh, W_hh, b)  # (B, T, H)
    shape_is(grad_h, "grad_h", tuple(hs.shape))
    prev = torch.cat([h0[:, None], hs[:, :-1]], dim=1)  # (B, T, H): h_{t-1}
    delta = torch.zeros_like(h0)  # dL/dh_t through the future, (B, H)
    d_pre = torch.empty_like(hs)  # dL/da_t, a_t the argument of tanh, (B, T, H)
    for t in reversed(range(x.shape[1])):
        delta = delta + grad_h[:, t]  # the loss at step t reads h_t too
        d_pre[:, t] = delta * (1 - hs[:, t] ** 2)  # through tanh
        delta = d_pre[:, t] @ W_hh  # to h_{t-1}: times dh_t/dh_{t-1}
    g_xh = torch.einsum("bth,bti->hi", d_pre, x)  # sum over t and the batch
    g_hh = torch.einsum("bth,btk->hk", d_pre, prev)
    return g_xh, g_hh, d_pre.sum((0, 1)), delta


def rnn_bptt_naive(
    x: torch.Tensor,
    h0: torch.Tensor,
    W_xh: torch.Tensor,
    W_hh: torch.Tensor,
    b: torch.Tensor,
    grad_h: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq. 46.2 term by term: for every loss step t and every earlier step k, the product of the
    Jacobians dh_j/dh_{j-1}, j = k+1..t, times the immediate derivative of h_k. O(T^2) matrix
    products; the reference of :func:`rnn_bptt`, same arguments and results."""
    hs = rnn_forward(x, h0, W_xh, W_hh, b)
    shape_is(grad_h, "grad_h", tuple(hs.shape))
    T = x.shape[1]
    prev = torch.cat([h0[:, None], hs[:, :-1]], dim=1)  # (B, T, H)
    J = rnn_jacobians(hs, W_hh)  # (B, T, H, H): dh_t/dh_{t-1}
    g_xh, g_hh, g_b = torch.zeros_like(W_xh), torch.zeros_like(W_hh), torch.zeros_like(b)
    g_h0 = torch.zeros_like(h0)
    for t in range(T):
        row = grad_h[:, t, None, :]  # (B, 1, H): dl_t/dh_t
        for k in range(t, -1, -1):  # row = dl_t/dh_t dh_t/dh_{t-1} ... dh_{k+1}/dh_k
            a = row[:, 0] * (1 - hs[:, k] ** 2)  # (B, H): through the tanh of step k
            g_xh += a.T @ x[:, k]
            g_hh += a.T @ prev[:, k]
            g_b += a.sum(0)
            row = row @ J[:, k]  # one more Jacobian: now dl_t/dh_{k-1}
        g_h0 += row[:, 0]
    return g_xh, g_hh, g_b, g_h0


# --- products of Jacobians: vanishing and exploding gradients -------------------------------------


def rnn_jacobians(hs: torch.Tensor, W_hh: torch.Tensor, activation: str = "tanh") -> torch.Tensor:
    """dh_t/dh_{t-1} = diag(1 - h_t^2) W_hh (tanh) or W_hh (linear), the factors of eq. 46.2:
    hs (B, T, H) -> (B, T, H, H)."""
    float_tensor(hs, "hs", ndim=3)
    one_of(activation, "activation", ("tanh", "linear"))
    shape_is(W_hh, "W_hh", (hs.shape[2], hs.shape[2]))
    if activation == "linear":
        return W_hh.expand(*hs.shape[:2], -1, -1)
    return (1 - hs**2)[..., :, None] * W_hh  # row i of W_hh times tanh'(a_{t,i})


def jacobian_product_norms(
    J: torch.Tensor, max_lag: int | None = None, block: slice | None = None
) -> torch.Tensor:
    """The spectral norms ||dh_T/dh_{T-k}|| = ||J_T J_{T-1} ... J_{T-k+1}||_2, k = 0..max_lag.

    Implements eq. 46.3. J: (B, T, S, S) per-step Jacobians of a state of size S; max_lag <= T
    (default T); block: the part of the state whose block of the product is measured (the cell
    state of an LSTM, ``slice(H, 2 H)``; default all of it). Returns (max_lag + 1, B); at k = 0
    the product is the identity.
    """
    float_tensor(J, "J", ndim=4)
    T = J.shape[1]
    max_lag = T if max_lag is None else integer(max_lag, "max_lag", 0, T)
    block = slice(None) if block is None else block
    P = torch.eye(J.shape[-1], dtype=J.dtype).expand(J.shape[0], -1, -1)  # (B, S, S)
    norms = [torch.linalg.matrix_norm(P[:, block, block], ord=2)]
    for k in range(1, max_lag + 1):
        P = P @ J[:, T - k]  # dh_T/dh_{T-k}, one Jacobian further back
        norms.append(torch.linalg.matrix_norm(P[:, block, block], ord=2))
    return torch.stack(norms)


def with_spectral_radius(W: torch.Tensor, rho: float) -> torch.Tensor:
    """W rescaled so that its spectral radius (largest |eigenvalue|) is rho: (H, H) -> (H, H)."""
    rho = number(rho, "rho", 0.0)
    radius = torch.linalg.eigvals(W).abs().max()
    positive(float(radius), "the spectral radius of W")
    return W * (rho / radius)


# --- the linear RNN is a linear recurrence: a parallel scan (chapter 28) --------------------------


def linear_rnn_naive(u: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """h_t = W h_{t-1} + u_t, h_0 = 0, one step at a time: u (B, T, H), W (H, H) -> hs (B, T, H)."""
    float_tensor(u, "u", ndim=3)
    shape_is(W, "W", (u.shape[2], u.shape[2]))
    h, hs = torch.zeros_like(u[:, 0]), []
    for t in range(u.shape[1]):
        h = h @ W.T + u[:, t]
        hs.append(h)
    return torch.stack(hs, dim=1)


def linear_rnn_scan(
    u: torch.Tensor,
    W: torch.Tensor,
    scan: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = ssm.scan_blelloch,
) -> torch.Tensor:
    """h_t = W h_{t-1} + u_t by a parallel scan in the eigenbasis of W (W = V diag(lam) V^-1).

    u: (B, T, H); W: (H, H) diagonalisable; scan: a scan of chapter 28 (``ssm.scan_blelloch``,
    ``ssm.scan_hillis_steele``). Returns hs (B, T, H), as :func:`linear_rnn_naive`.
    """
    float_tensor(u, "u", ndim=3)
    shape_is(W, "W", (u.shape[2], u.shape[2]))
    lam, V = torch.linalg.eig(W)  # (H,), (H, H) complex
    nonsingular(V, "the eigenvector matrix of W (W must be diagonalisable)")
    z_in = torch.linalg.solve(V, u.to(V.dtype).transpose(1, 2))  # (B, H, T): V^-1 u_t
    b = z_in.permute(2, 0, 1)  # (T, B, H): one scalar recurrence per eigenvalue
    a = lam.expand_as(b).clone()  # (T, B, H): z_t = lam z_{t-1} + b_t
    z = scan(a, b)  # (T, B, H)
    return (z @ V.T).real.permute(1, 0, 2).to(u.dtype)  # h_t = V z_t, (B, T, H)


# --- eqs. 46.4-46.5: the LSTM cell --------------------------------------------------------------


def lstm_cell(
    x: torch.Tensor,
    h: torch.Tensor,
    c: torch.Tensor,
    W_ih: torch.Tensor,
    W_hh: torch.Tensor,
    b_ih: torch.Tensor,
    b_hh: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM step, all four gates from one product. Implements eqs. 46.4-46.5.

    x: (B, I); h, c: (B, H); PyTorch's layout, gates i, f, g, o. Returns (h_t, c_t), (B, H) each.
    """
    cell_weights(x, h, W_ih, W_hh, b_ih, b_hh, 4)
    shape_is(c, "c", tuple(h.shape))
    pre = x @ W_ih.T + b_ih + h @ W_hh.T + b_hh  # (B, 4H)
    i, f, g, o = pre.chunk(4, dim=1)  # (B, H) each, PyTorch's order
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c = f * c + i * g  # the additive cell path, eq. 46.5
    return o * torch.tanh(c), c


def lstm_cell_naive(x, h, c, W_ih, W_hh, b_ih, b_hh) -> tuple[torch.Tensor, torch.Tensor]:
    """Eqs. 46.4-46.5 gate by gate, each with its own blocks of the weights; the reference of
    :func:`lstm_cell`, same arguments and results."""
    cell_weights(x, h, W_ih, W_hh, b_ih, b_hh, 4)
    H = h.shape[1]

    def gate(k: int, squash) -> torch.Tensor:
        rows = slice(k * H, (k + 1) * H)  # gate k's block of H rows
        return squash(x @ W_ih[rows].T + b_ih[rows] + h @ W_hh[rows].T + b_hh[rows])

    i, f = gate(0, torch.sigmoid), gate(1, torch.sigmoid)
    g, o = gate(2, torch.tanh), gate(3, torch.sigmoid)
    c_new = f * c + i * g
    return o * torch.tanh(c_new), c_new


def lstm_forward(
    x: torch.Tensor,
    h0: torch.Tensor,
    c0: torch.Tensor,
    W_ih: torch.Tensor,
    W_hh: torch.Tensor,
    b_ih: torch.Tensor,
    b_hh: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The LSTM over a sequence, the input part of every step in one product; eqs. 46.4-46.5.

    x: (B, T, I); h0, c0: (B, H). Returns (hs, cs), (B, T, H) each, as :func:`lstm_forward_naive`.
    """
    float_tensor(x, "x", ndim=3)
    positive_int(x.shape[1], "the number of steps T of x")
    cell_weights(x[:, 0], h0, W_ih, W_hh, b_ih, b_hh, 4)
    shape_is(c0, "c0", tuple(h0.shape))
    xw = x @ W_ih.T + (b_ih + b_hh)  # (B, T, 4H): the input part of all steps
    h, c, hs, cs = h0, c0, [], []
    for t in range(x.shape[1]):
        i, f, g, o = (xw[:, t] + h @ W_hh.T).chunk(4, dim=1)  # (B, H) each
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        hs.append(h)
        cs.append(c)
    return torch.stack(hs, dim=1), torch.stack(cs, dim=1)


def lstm_forward_naive(x, h0, c0, W_ih, W_hh, b_ih, b_hh) -> tuple[torch.Tensor, torch.Tensor]:
    """The LSTM over a sequence, one :func:`lstm_cell` call per step; the reference of
    :func:`lstm_forward`, same arguments and results."""
    float_tensor(x, "x", ndim=3)
    h, c, hs, cs = h0, c0, [], []
    for t in range(x.shape[1]):
        h, c = lstm_cell(x[:, t], h, c, W_ih, W_hh, b_ih, b_hh)
        hs.append(h)
        cs.append(c)
    return torch.stack(hs, dim=1), torch.stack(cs, dim=1)


def lstm_state_jacobian(x, h, c, W_ih, W_hh, b_ih, b_hh) -> torch.Tensor:
    """The Jacobian of one LSTM step (h, c) -> (h_t, c_t), in closed form.

    Same arguments as :func:`lstm_cell`. Returns (B, 2H, 2H), blocks [[dh_t/dh, dh_t/dc],
    [dc_t/dh, dc_t/dc]]; the cell-to-cell block dc_t/dc is diag(f_t).
    """
    cell_weights(x, h, W_ih, W_hh, b_ih, b_hh, 4)
    H = h.shape[1]
    shape_is(c, "c", tuple(h.shape))
    pre = x @ W_ih.T + b_ih + h @ W_hh.T + b_hh  # (B, 4H)
    i, f, g, o = pre.chunk(4, dim=1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c_new = f * c + i * g
    tc = torch.tanh(c_new)
    Wi, Wf, Wg, Wo = W_hh.split(H)  # (H, H) each: how h moves each gate's argument
    dc_dh = (c * f * (1 - f))[..., None] * Wf + (g * i * (1 - i))[..., None] * Wi
    dc_dh = dc_dh + (i * (1 - g**2))[..., None] * Wg  # (B, H, H)
    dc_dc = torch.diag_embed(f)  # (B, H, H): the additive path
    dh_dc_new = o * (1 - tc**2)  # (B, H): h_t = o_t tanh(c_t)
    dh_dh = (tc * o * (1 - o))[..., None] * Wo + dh_dc_new[..., None] * dc_dh
    dh_dc = torch.diag_embed(dh_dc_new * f)
    top = torch.cat([dh_dh, dh_dc], dim=2)  # (B, H, 2H)
    return torch.cat([top, torch.cat([dc_dh, dc_dc], dim=2)], dim=1)  # (B, 2H, 2H)


def lstm_jacobians(x, h0, c0, W_ih, W_hh, b_ih, b_hh) -> torch.Tensor:
    """The Jacobians of every LSTM step along a sequence: x (B, T, I), h0, c0 (B, H) ->
    (B, T, 2H, 2H), step t's as :func:`lstm_state_jacobian` at the state it starts from."""
    float_tensor(x, "x", ndim=3)
    h, c, Js = h0, c0, []
    for t in range(x.shape[1]):
        Js.append(lstm_state_jacobian(x[:, t], h, c, W_ih, W_hh, b_ih, b_hh))
        h, c = lstm_cell(x[:, t], h, c, W_ih, W_hh, b_ih, b_hh)
    return torch.stack(Js, dim=1)


# --- eq. 46.6: the GRU cell ----------------------------------------------------------------------


def gru_cell(
    x: torch.Tensor,
    h: torch.Tensor,
    W_ih: torch.Tensor,
    W_hh: torch.Tensor,
    b_ih: torch.Tensor,
    b_hh: torch.Tensor,
) -> torch.Tensor:
    """One GRU step in PyTorch's layout (gates r, z, n). Implements eq. 46.6.

    x: (B, I); h: (B, H). Returns h_t (B, H).
    """
    cell_weights(x, h, W_ih, W_hh, b_ih, b_hh, 3)
    xr, xz, xn = (x @ W_ih.T + b_ih).chunk(3, dim=1)  # (B, H) each
    hr, hz, hn = (h @ W_hh.T + b_hh).chunk(3, dim=1)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)  # the reset gate scales W_hn h + b_hn
    return (1 - z) * n + z * h


def gru_cell_naive(x, h, W_ih, W_hh, b_ih, b_hh) -> torch.Tensor:
    """Eq. 46.6 gate by gate with the weights' blocks; the reference of :func:`gru_cell`."""
    cell_weights(x, h, W_ih, W_hh, b_ih, b_hh, 3)
    H = h.shape[1]
    Wr, Wz, Wn = W_ih.split(H)
    Ur, Uz, Un = W_hh.split(H)
    br, bz, bn = b_ih.split(H)
    cr, cz, cn = b_hh.split(H)
    r = torch.sigmoid(x @ Wr.T + br + h @ Ur.T + cr)
    z = torch.sigmoid(x @ Wz.T + bz + h @ Uz.T + cz)
    n = torch.tanh(x @ Wn.T + bn + r * (h @ Un.T + cn))
    return (1 - z) * n + z * h


def gru_forward(x, h0, W_ih, W_hh, b_ih, b_hh) -> torch.Tensor:
    """The GRU over a sequence: x (B, T, I), h0 (B, H). Returns hs (B, T, H)."""
    float_tensor(x, "x", ndim=3)
    h, hs = h0, []
    for t in range(x.shape[1]):
        h = gru_cell(x[:, t], h, W_ih, W_hh, b_ih, b_hh)
        hs.append(h)
    return torch.stack(hs, dim=1)


# --- modules: where the parameters live -----------------------------------------------------------


class Recurrent(torch.nn.Module):
    """A recurrent layer of kind "rnn", "lstm" or "gru" with PyTorch's parameter layout and
    initialisation (every weight uniform in +-1/sqrt(H)); ``forget_bias`` is added to the LSTM's
    forget-gate rows of ``bias_ih``. forward: x (B, T, I) -> hs (B, T, H), from zero states."""

    def __init__(
        self,
        kind: str,
        input_size: int,
        hidden_size: int,
        *,
        forget_bias: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.kind = one_of(kind, "kind", tuple(GATES))
        I, H = positive_int(input_size, "input_size"), positive_int(hidden_size, "hidden_size")
        forget_bias = number(forget_bias, "forget_bias")
        if forget_bias and kind != "lstm":
            raise ValueError(f"forget_bias is for an LSTM, got kind={kind!r}")
        G, bound = GATES[kind], 1 / math.sqrt(H)

        def uniform(*shape) -> torch.nn.Parameter:
            w = torch.rand(*shape, generator=generator) * 2 * bound - bound
            return torch.nn.Parameter(w)

        self.weight_ih, self.weight_hh = uniform(G * H, I), uniform(G * H, H)
        self.bias_ih, self.bias_hh = uniform(G * H), uniform(G * H)
        with torch.no_grad():
            self.bias_ih[H : 2 * H] += forget_bias  # rows of f (LSTM: i, f, g, o)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h0 = x.new_zeros(x.shape[0], self.weight_hh.shape[1])  # (B, H)
        w = (self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        if self.kind == "rnn":
            return rnn_forward(x, h0, w[0], w[1], w[2] + w[3])
        if self.kind == "gru":
            return gru_forward(x, h0, *w)
        return lstm_forward(x, h0, h0, *w)[0]


class SequenceClassifier(torch.nn.Module):
    """A recurrent layer read out at its last step: x (B, T, I) -> logits (B, K)."""

    def __init__(
        self,
        kind: str,
        input_size: int,
        hidden_size: int,
        n_classes: int,
        *,
        forget_bias: float = 0.0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(integer(seed, "seed", low=0))
        self.rnn = Recurrent(kind, input_size, hidden_size, forget_bias=forget_bias, generator=gen)
        self.readout = torch.nn.Linear(hidden_size, positive_int(n_classes, "n_classes"))
        with torch.no_grad():  # seeded like the recurrent layer, not by the global generator
            bound = 1 / math.sqrt(hidden_size)
            for p in self.readout.parameters():
                p.copy_(torch.rand(p.shape, generator=gen) * 2 * bound - bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.readout(self.rnn(x)[:, -1])  # (B, K)


# --- a task with a delay --------------------------------------------------------------------------


def delay_recall(
    n: int, delay: int, n_symbols: int = 4, n_noise: int = 4, *, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of a symbol to remember, ``delay`` random distractors and a query token; the
    label is the first symbol.

    Token ids: symbols 0..n_symbols-1, distractors n_symbols..n_symbols+n_noise-1, the query last.
    Returns x (n, delay + 2, V) float32 one-hot, V = n_symbols + n_noise + 1, and y (n,) int64
    in [0, n_symbols).
    """
    n, delay = positive_int(n, "n"), integer(delay, "delay", low=0)
    S, N = integer(n_symbols, "n_symbols", low=2), positive_int(n_noise, "n_noise")
    gen = torch.Generator().manual_seed(integer(seed, "seed", low=0))
    y = torch.randint(S, (n,), generator=gen)  # (n,) the symbol to recall
    noise = S + torch.randint(N, (n, delay), generator=gen)  # (n, delay) distractors
    query = torch.full((n, 1), S + N)
    tokens = torch.cat([y[:, None], noise, query], dim=1)  # (n, T), T = delay + 2
    return F.one_hot(tokens, S + N + 1).float(), y
