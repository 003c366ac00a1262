"""mlbook.beyond.recurrent against references: torch.nn.RNN/LSTM/GRU, float64 autograd, closed
forms."""

import math

import pytest
import torch

from mlbook import datasets
from mlbook.architectures import ssm
from mlbook.beyond import recurrent as rec

f64 = torch.float64
TOL = 1e-12


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny problems: one thread is faster (no synchronisation) and sums in a fixed order."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


def randn(gen, *shape, scale=1.0):
    return scale * torch.randn(*shape, generator=gen, dtype=f64)


def rnn_args(gen, B=3, T=9, I=4, H=5):
    return (
        randn(gen, B, T, I),
        randn(gen, B, H),
        randn(gen, H, I, scale=0.7),
        randn(gen, H, H, scale=0.5),
        randn(gen, H),
    )


def torch_copy(module, weights):
    """module (torch.nn.RNN/LSTM/GRU or a cell) in float64 with the given parameters."""
    module = module.to(f64)
    with torch.no_grad():
        for p, w in zip(module.parameters(), weights, strict=True):
            p.copy_(w)
    return module


def test_rnn_forward_matches_torch_rnn_with_both_biases_summed(gen):
    x, h0, W_xh, W_hh, b = rnn_args(gen)
    b_ih = randn(gen, 5)
    ref = torch_copy(torch.nn.RNN(4, 5, batch_first=True), (W_xh, W_hh, b_ih, b - b_ih))
    with torch.no_grad():
        out, h_T = ref(x, h0[None])
    hs = rec.rnn_forward(x, h0, W_xh, W_hh, b)
    torch.testing.assert_close(hs, out, atol=TOL, rtol=0)
    torch.testing.assert_close(hs[:, -1], h_T[0], atol=TOL, rtol=0)


def test_linear_rnn_is_the_closed_form_sum_of_matrix_powers(gen):
    x, h0, W_xh, W_hh, b = rnn_args(gen, T=6)
    hs = rec.rnn_forward(x, h0, W_xh, W_hh, b, activation="linear")
    u = x @ W_xh.T + b  # (B, T, H)
    ref = h0 @ torch.linalg.matrix_power(W_hh, 6).T
    for k in range(6):
        ref = ref + u[:, k] @ torch.linalg.matrix_power(W_hh, 5 - k).T
    torch.testing.assert_close(hs[:, -1], ref, atol=TOL, rtol=0)


@pytest.mark.parametrize("T", [1, 2, 9])
def test_bptt_and_its_naive_sum_match_float64_autograd(gen, T):
    x, h0, W_xh, W_hh, b = rnn_args(gen, T=T)
    grad_h = randn(gen, *x.shape[:2], 5)
    leaves = [t.clone().requires_grad_(True) for t in (W_xh, W_hh, b, h0)]
    hs = rec.rnn_forward(x, leaves[3], *leaves[:3])
    ref = torch.autograd.grad((hs * grad_h).sum(), leaves)
    for fn in (rec.rnn_bptt, rec.rnn_bptt_naive):
        for got, want in zip(fn(x, h0, W_xh, W_hh, b, grad_h), ref, strict=True):
            torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_rnn_jacobians_match_autograd_of_one_step(gen):
    x, h0, W_xh, W_hh, b = rnn_args(gen, B=1, T=3)
    hs = rec.rnn_forward(x, h0, W_xh, W_hh, b)
    J = rec.rnn_jacobians(hs, W_hh)
    step = lambda h: torch.tanh(x[0, 2] @ W_xh.T + h @ W_hh.T + b)  # noqa: E731
    torch.testing.assert_close(
        J[0, 2], torch.autograd.functional.jacobian(step, hs[0, 1]), atol=TOL, rtol=0
    )
    lin = rec.rnn_jacobians(hs, W_hh, activation="linear")
    torch.testing.assert_close(lin[0, 1], W_hh, atol=0, rtol=0)


def test_jacobian_product_norms_match_autograd_through_the_sequence(gen):
    x, h0, W_xh, W_hh, b = rnn_args(gen, B=2, T=8)
    hs = rec.rnn_forward(x, h0, W_xh, W_hh, b)
    norms = rec.jacobian_product_norms(rec.rnn_jacobians(hs, W_hh))
    assert norms.shape == (9, 2)
    torch.testing.assert_close(norms[0], torch.ones(2, dtype=f64), atol=TOL, rtol=0)
    for k in (1, 3, 8):
        start = hs[1, 7 - k] if k < 8 else h0[1]

        def tail(h, k=k):
            return rec.rnn_forward(x[1:2, 8 - k :], h[None], W_xh, W_hh, b)[0, -1]

        J = torch.autograd.functional.jacobian(tail, start)
        want = torch.linalg.matrix_norm(J, ord=2)
        torch.testing.assert_close(norms[k, 1], want, atol=1e-12, rtol=0)


def test_linear_rnn_gradient_decays_at_the_spectral_radius(gen):
    W = rec.with_spectral_radius(randn(gen, 24, 24), 0.9)
    assert abs(float(torch.linalg.eigvals(W).abs().max()) - 0.9) < 1e-12
    J = W.expand(1, 80, 24, 24)
    logs = rec.jacobian_product_norms(J)[:, 0].log()
    slope = float((logs[80] - logs[30]) / 50)
    assert abs(slope - math.log(0.9)) < 0.01


@pytest.mark.parametrize("scan", [ssm.scan_blelloch, ssm.scan_hillis_steele])
@pytest.mark.parametrize("T", [1, 5, 33])
def test_linear_rnn_scan_equals_the_sequential_loop(gen, scan, T):
    u, W = randn(gen, 2, T, 6), randn(gen, 6, 6, scale=0.4)
    ref = rec.linear_rnn_naive(u, W)
    torch.testing.assert_close(rec.linear_rnn_scan(u, W, scan), ref, atol=1e-12, rtol=0)
    direct = rec.rnn_forward(
        u,
        torch.zeros(2, 6, dtype=f64),
        torch.eye(6, dtype=f64),
        W,
        torch.zeros(6, dtype=f64),
        activation="linear",
    )
    torch.testing.assert_close(ref, direct, atol=TOL, rtol=0)


def lstm_weights(gen, I=4, H=5, gates=4):
    return (
        randn(gen, gates * H, I, scale=0.5),
        randn(gen, gates * H, H, scale=0.5),
        randn(gen, gates * H),
        randn(gen, gates * H),
    )


def test_lstm_matches_torch_lstm_and_the_naive_cell(gen):
    w = lstm_weights(gen)
    x, h0, c0 = randn(gen, 3, 7, 4), randn(gen, 3, 5), randn(gen, 3, 5)
    ref = torch_copy(torch.nn.LSTM(4, 5, batch_first=True), w)
    with torch.no_grad():
        out, (h_T, c_T) = ref(x, (h0[None], c0[None]))
    hs, cs = rec.lstm_forward(x, h0, c0, *w)
    torch.testing.assert_close(hs, out, atol=TOL, rtol=0)
    torch.testing.assert_close(cs[:, -1], c_T[0], atol=TOL, rtol=0)
    for got, want in zip(rec.lstm_forward_naive(x, h0, c0, *w), (hs, cs), strict=True):
        torch.testing.assert_close(got, want, atol=TOL, rtol=0)
    for got, want in zip(
        rec.lstm_cell(x[:, 0], h0, c0, *w), rec.lstm_cell_naive(x[:, 0], h0, c0, *w), strict=True
    ):
        torch.testing.assert_close(got, want, atol=TOL, rtol=0)


def test_lstm_state_jacobian_matches_autograd_and_its_cell_block_is_diag_f(gen):
    W_ih, W_hh, b_ih, b_hh = lstm_weights(gen)
    x, h, c = randn(gen, 2, 4), randn(gen, 2, 5), randn(gen, 2, 5)
    J = rec.lstm_state_jacobian(x, h, c, W_ih, W_hh, b_ih, b_hh)
    for r in range(2):

        def step(s, r=r):
            h_new, c_new = rec.lstm_cell(
                x[r : r + 1], s[None, :5], s[None, 5:], W_ih, W_hh, b_ih, b_hh
            )
            return torch.cat([h_new[0], c_new[0]])

        ref = torch.autograd.functional.jacobian(step, torch.cat([h[r], c[r]]))
        torch.testing.assert_close(J[r], ref, atol=1e-13, rtol=0)
    f = torch.sigmoid(x @ W_ih[5:10].T + b_ih[5:10] + h @ W_hh[5:10].T + b_hh[5:10])
    torch.testing.assert_close(J[:, 5:, 5:], torch.diag_embed(f), atol=0, rtol=0)


def test_lstm_jacobians_give_the_cell_gradient_of_the_whole_sequence(gen):
    w = lstm_weights(gen, I=3, H=4)
    x, h0, c0 = randn(gen, 1, 6, 3), randn(gen, 1, 4), randn(gen, 1, 4)
    norms = rec.jacobian_product_norms(rec.lstm_jacobians(x, h0, c0, *w), block=slice(4, 8))

    def c_T(c):
        return rec.lstm_forward(x, h0, c[None], *w)[1][0, -1]

    want = torch.linalg.matrix_norm(torch.autograd.functional.jacobian(c_T, c0[0]), ord=2)
    torch.testing.assert_close(norms[6, 0], want, atol=1e-12, rtol=0)


def test_gru_matches_torch_gru_and_the_naive_cell(gen):
    w = lstm_weights(gen, gates=3)
    x, h0 = randn(gen, 3, 7, 4), randn(gen, 3, 5)
    ref = torch_copy(torch.nn.GRU(4, 5, batch_first=True), w)
    with torch.no_grad():
        out, _ = ref(x, h0[None])
    torch.testing.assert_close(rec.gru_forward(x, h0, *w), out, atol=TOL, rtol=0)
    torch.testing.assert_close(
        rec.gru_cell(x[:, 0], h0, *w), rec.gru_cell_naive(x[:, 0], h0, *w), atol=TOL, rtol=0
    )


@pytest.mark.parametrize(
    ("kind", "torch_module"),
    [("rnn", torch.nn.RNN), ("lstm", torch.nn.LSTM), ("gru", torch.nn.GRU)],
)
def test_recurrent_module_has_torch_layout_and_outputs(kind, torch_module):
    layer = rec.Recurrent(kind, 3, 4, generator=torch.Generator().manual_seed(1)).to(f64)
    ref = torch_copy(torch_module(3, 4, batch_first=True), list(layer.parameters()))
    x = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(2), dtype=f64)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), ref(x)[0], atol=TOL, rtol=0)
    assert all(p.abs().max() <= 0.5 for p in layer.parameters())  # uniform in +-1/sqrt(4)


def test_forget_bias_shifts_only_the_forget_rows():
    plain = rec.Recurrent("lstm", 3, 4, generator=torch.Generator().manual_seed(1))
    shifted = rec.Recurrent(
        "lstm", 3, 4, forget_bias=3.0, generator=torch.Generator().manual_seed(1)
    )
    diff = (shifted.bias_ih - plain.bias_ih).detach()
    torch.testing.assert_close(diff, torch.tensor([0.0] * 4 + [3.0] * 4 + [0.0] * 8))


def test_sequence_classifier_is_seeded_and_reads_the_last_step():
    x = torch.randn(5, 6, 3, generator=torch.Generator().manual_seed(3))
    a, b = (rec.SequenceClassifier("gru", 3, 4, 2, seed=7) for _ in range(2))
    torch.testing.assert_close(a(x), b(x), atol=0, rtol=0)
    assert a(x).shape == (5, 2)
    torch.testing.assert_close(a(x), a.readout(a.rnn(x)[:, -1]), atol=0, rtol=0)


def test_delay_recall_sequences():
    x, y = rec.delay_recall(50, 7, n_symbols=3, n_noise=2, seed=4)
    assert x.shape == (50, 9, 6) and x.dtype == torch.float32 and y.shape == (50,)
    tokens = x.argmax(-1)
    assert torch.equal(tokens[:, 0], y) and (y < 3).all()
    assert ((tokens[:, 1:-1] >= 3) & (tokens[:, 1:-1] < 5)).all() and (tokens[:, -1] == 5).all()
    assert torch.equal(x.sum(-1), torch.ones(50, 9))
    blank, _ = rec.delay_recall(4, 5, n_noise=1)
    assert (blank.argmax(-1)[:, 1:-1] == 4).all()


def test_stored_delay_runs_are_complete():
    data = datasets.stored("delay_recall")
    runs = data["runs"]
    assert len(runs) == 5 * len(data["delays"])
    assert all(len(r["losses"]) == data["settings"]["steps"] for r in runs)
    assert all(0 <= r["test_accuracy"] <= 1 for r in runs)


def test_bad_arguments_raise_clear_errors(gen):
    x, h0, W_xh, W_hh, b = rnn_args(gen)
    w_gru = lstm_weights(gen, gates=3)
    with pytest.raises(ValueError, match="W_ih must have shape"):
        rec.lstm_cell(x[:, 0], h0, h0, *w_gru)
    with pytest.raises(ValueError, match="activation must be one of"):
        rec.rnn_forward(x, h0, W_xh, W_hh, b, activation="relu")
    with pytest.raises(ValueError, match="grad_h must have shape"):
        rec.rnn_bptt(x, h0, W_xh, W_hh, b, torch.zeros(3, 9, 4, dtype=f64))
    with pytest.raises(ValueError, match="W_hh must have shape"):
        rec.rnn_forward(x, h0, W_xh, W_hh[:, :4], b)
    with pytest.raises(ValueError, match="forget_bias is for an LSTM"):
        rec.Recurrent("gru", 3, 4, forget_bias=1.0)
    with pytest.raises(ValueError, match="kind must be one of"):
        rec.Recurrent("transformer", 3, 4)
    jordan = torch.tensor([[0.5, 1.0], [0.0, 0.5]], dtype=f64)  # not diagonalisable
    with pytest.raises(ValueError, match="W must be diagonalisable"):
        rec.linear_rnn_scan(torch.ones(1, 3, 2, dtype=f64), jordan)
    with pytest.raises(ValueError, match="spectral radius of W"):
        rec.with_spectral_radius(torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=f64), 0.9)
    w_lstm = lstm_weights(gen, I=3, H=4)
    with pytest.raises(ValueError, match="number of steps T of x must be a positive int"):
        rec.lstm_forward(torch.zeros(2, 0, 3, dtype=f64), h0[:2, :4], h0[:2, :4], *w_lstm)
    with pytest.raises(ValueError, match="max_lag must be in"):
        rec.jacobian_product_norms(torch.zeros(1, 3, 2, 2), max_lag=4)
