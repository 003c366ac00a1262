"""Tests of mlbook.systems.distributed against independent references: sums and byte counts
written out, torch.nn layers, the published ZeRO memory figures, a hand-written AdamW, the
routed MoE layer of chapter 27 and torch.distributed's own collectives."""

import math
from types import SimpleNamespace

import pytest
import torch

from mlbook.architectures import moe
from mlbook.systems import distributed as D

F64 = torch.float64


def assert_close(actual, expected, atol):
    """Same shape and |actual - expected| <= atol everywhere (torch.testing would import
    torch.distributed.tensor, seconds on first use)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    err = float((actual.double() - expected.double()).abs().max())
    assert err <= atol, f"max abs error {err:.3g} > {atol:g}"


def test_adam_bytes_per_param():
    assert D.adam_bytes_per_param() == 16 == sum(D.MIXED_PRECISION_ADAM.values())
    assert D.adam_bytes_per_param(4, 4, 0, 4) == 16  # pure fp32 training: the same 16
    assert D.adam_bytes_per_param(2, 2, 0, 2) == 8
    with pytest.raises(ValueError, match="moments must be in"):
        D.adam_bytes_per_param(moments=-4)


def test_storage_bytes_counts_each_storage_once():
    flat = torch.zeros(100)
    views = list(flat.split(30))  # four views of one storage
    assert D.storage_bytes(views) == 400
    assert D.storage_bytes([torch.zeros(3, dtype=torch.bfloat16), None, torch.zeros(5)]) == 26


def test_training_state_bytes_fp32_adam():
    model = torch.nn.Linear(7, 5)
    P = 7 * 5 + 5
    for q in model.parameters():
        q.grad = torch.ones_like(q)
    state = {
        q: {
            "exp_avg": torch.zeros_like(q),
            "exp_avg_sq": torch.zeros_like(q),
            "step": torch.tensor(1.0),
        }
        for q in model.parameters()
    }  # the layout of torch.optim.AdamW's state
    opt = SimpleNamespace(state=state, param_groups=[{"params": list(model.parameters())}])
    got = D.training_state_bytes(model, opt)
    assert got == {
        "weights": 4 * P,
        "gradients": 4 * P,
        "master weights": 0,
        "Adam m": 4 * P,
        "Adam v": 4 * P,
        "step counters": 8,
    }
    empty = SimpleNamespace(
        state={q: {} for q in model.parameters()}, param_groups=opt.param_groups
    )
    with pytest.raises(ValueError, match="optimizer must have taken a step"):
        D.training_state_bytes(model, empty)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6])
@pytest.mark.parametrize("size", [1, 7, 60])
def test_ring_simulated_sums_and_sends_2_n_minus_1_over_n(n, size):
    gen = torch.Generator().manual_seed(n * 100 + size)
    xs = [torch.randn(size, generator=gen, dtype=F64) for _ in range(n)]
    outs, sent = D.ring_all_reduce_simulated(xs)
    want = torch.stack(xs).sum(0)
    for out in outs:
        assert_close(out, want, atol=1e-12)
    assert int(sent.sum()) == 2 * (n - 1) * size * 8  # every step moves the whole tensor once
    if size % n == 0:
        assert sent.tolist() == [D.ring_bytes(size * 8, n)] * n
    naive, naive_sent = D.ring_all_reduce_simulated_naive(xs)
    for a, b in zip(naive, outs, strict=True):
        assert_close(a, b, atol=1e-12)
    assert int(naive_sent[0]) == (n - 1) * size * 8


def test_ring_rejects_mismatched_ranks():
    with pytest.raises(ValueError, match=r"xs\[1\] and xs\[0\] must have the same shape"):
        D.ring_all_reduce_simulated([torch.zeros(4), torch.zeros(5)])
    with pytest.raises(
        ValueError, match=r"the number of ranks len\(xs\) must be a positive int, got 0"
    ):
        D.ring_all_reduce_simulated([])


def test_zero_formulas_match_the_published_figures():
    # ZeRO (Rajbhandari et al., 2020), Figure 1: 7.5B parameters, 64 GPUs, K = 12
    P, n = 7.5e9, 64
    got = [D.zero_bytes_per_rank(P, n, s) / 1e9 for s in range(4)]
    assert [round(g, 1) for g in got] == [120.0, 31.4, 16.6, 1.9]
    assert D.zero_bytes_per_rank(1000, 10, 2) == 2 * 1000 + 14 * 1000 / 10  # eq. 41.3
    assert D.zero_bytes_per_rank(1000, 1, 3) == 16 * 1000
    with pytest.raises(ValueError, match="stage must be one of"):
        D.zero_bytes_per_rank(1000, 4, 4)


def test_tensor_parallel_mlp_equals_torch_layers():
    X, W1, b1, W2, b2 = D.tp_problem()
    d, h = W1.shape
    mlp = torch.nn.Sequential(
        torch.nn.Linear(d, h), torch.nn.GELU(), torch.nn.Linear(h, d)
    ).double()
    with torch.no_grad():
        mlp[0].weight.copy_(W1.T), mlp[0].bias.copy_(b1)
        mlp[2].weight.copy_(W2.T), mlp[2].bias.copy_(b2)
        want = mlp(X)
    assert_close(D.tp_mlp_naive(X, W1, b1, W2, b2), want, atol=1e-12)
    for n in (1, 2, 3, 8, 24):
        got = D.tp_mlp_simulated(X, W1, b1, W2, b2, n)
        assert_close(got, want, atol=1e-12)
    with pytest.raises(ValueError, match="n=5 must divide the hidden width h=24"):
        D.column_row_split(W1, b1, W2, 5)


@pytest.mark.parametrize("p", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("m", [1, 2, 5, 8])
def test_gpipe_schedule_closed_form_equals_the_simulation(p, m):
    grid = D.gpipe_schedule(p, m)
    assert torch.equal(grid, D.gpipe_schedule_naive(p, m))
    for s in range(p):  # every stage runs each micro-batch's forward and backward exactly once
        row = grid[s][grid[s] != 0]
        assert sorted(row.tolist()) == sorted(list(range(1, m + 1)) + list(range(-m, 0)))
    busy = 2 * m * p
    assert D.bubble_fraction(grid) == pytest.approx(1 - busy / grid.numel(), abs=1e-15)
    assert D.bubble_fraction(grid) == pytest.approx(D.pipeline_bubble(p, m), abs=1e-15)


def test_pipeline_bubble_rejects_bad_sizes():
    with pytest.raises(ValueError, match="p must be a positive int"):
        D.pipeline_bubble(0, 4)


def _adamw_reference(w, grads_at, n, steps, lr, wd, b1=0.9, b2=0.999, eps=1e-8):
    """Mixed-precision AdamW on one process, written out: bf16 weights for the gradients, the
    mean of the ranks' bf16 gradients, fp32 master weights and moments."""
    master, m, v = w.clone(), torch.zeros_like(w), torch.zeros_like(w)
    for t in range(1, steps + 1):
        bf = master.to(torch.bfloat16)
        g = sum(f(bf).to(torch.bfloat16).double() for f in grads_at).float() / n
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        master = master * (1 - lr * wd) - lr * (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps)
    return master


@pytest.fixture(scope="module")
def ranks():
    return D.run_local(D.chapter_job, 3)


def test_local_ring_all_reduce_matches_the_sum_and_torch(ranks):
    n, size = 3, D.JOB["ring_size"]
    xs = D.ring_inputs(n, size)
    for k in (2, 3):
        want = torch.stack(xs[:k]).sum(0)
        for r in range(k):
            out, sent = ranks[r]["ring"][k]
            assert_close(out, want, atol=1e-12)
            assert sent == 2 * (k - 1) * size * 8 // k
        assert ranks[0]["root"][k][1] == (k - 1) * size * 8
        for r in range(k):  # the naive all-reduce agrees with the ring
            assert_close(ranks[r]["root"][k][0], ranks[r]["ring"][k][0], atol=1e-12)
    for r in range(n):
        assert_close(ranks[r]["torch"], torch.stack(xs).sum(0), atol=1e-12)
        a2a, ref = ranks[r]["a2a"]
        assert torch.equal(a2a, ref)


def test_local_zero_memory_and_updates(ranks):
    n, P = 3, D.JOB["zero_params"]
    w0, grads = D.zero_problem(P, n)
    want = _adamw_reference(w0, grads, n, D.JOB["zero_steps"], D.JOB["lr"], D.JOB["weight_decay"])
    for stage in range(4):
        for r in range(n):
            got = ranks[r]["zero"][stage]
            assert sum(got["bytes"].values()) == pytest.approx(
                D.zero_bytes_per_rank(P, n, stage),
                rel=2e-3,  # chunks of 1365 or 1366
            )
            master = got["master"]
            chunk = w0.tensor_split(n)[r] if stage else w0
            shape_want = want if stage == 0 else want.tensor_split(n)[r]
            assert master.shape == chunk.shape
            assert_close(master, shape_want, atol=1e-6)


def test_local_tensor_parallel_and_expert_parallel(ranks):
    n = 3
    X, W1, b1, W2, b2 = D.tp_problem()
    for r in range(n):
        y, sent = ranks[r]["tp"]
        assert_close(y, D.tp_mlp_naive(X, W1, b1, W2, b2), atol=1e-12)
        assert sent == 2 * (n - 1) * X.numel() * 8 // n
    T = D.JOB["moe_tokens"]
    x, idx, gates, ex = D.moe_problem(n, T, N=6)  # N = 6: two experts per rank
    want = moe.moe_routed(x, idx, gates, ex["W"], ex["V"], ex["W2"])
    home = torch.arange(n * T)[:, None].expand_as(idx) // T  # (n T, k) rank of each token
    owner = idx // (6 // n)  # rank of each assignment's expert
    for r in range(n):
        y, sent = ranks[r]["moe"]
        assert_close(y, want[r * T : (r + 1) * T], atol=1e-12)
        away = int(((home == r) & (owner != r)).sum())  # dispatched to other ranks
        arrived = int(((home != r) & (owner == r)).sum())  # computed here, sent back
        assert sent == (away + arrived) * x.shape[1] * 8


def _failing_job(rank, n):
    raise ArithmeticError(f"rank {rank} cannot")


def test_run_local_reports_a_failing_rank():
    with pytest.raises(RuntimeError, match="rank0 failed"):
        D.run_local(_failing_job, 2, timeout=20)
    assert math.isfinite(D.pipeline_bubble(1, 1))
