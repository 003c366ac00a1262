"""Training at scale: the memory of mixed-precision Adam, collectives, ZeRO, tensor, pipeline and
expert parallelism (chapter 41).

Three kinds of functions. *Formulas* say what a scheme costs (bytes per parameter, bytes sent,
the pipeline bubble). *Simulations* run an algorithm for all n ranks in one process, on a list
of n tensors (one per rank), so that every step can be inspected and tested. *Collectives* run
inside an initialised ``torch.distributed`` process group, one call on every rank, and talk with
point-to-point ``isend``/``recv`` only, so that every byte a rank sends is counted.
:func:`run_local` starts n local processes in one gloo process group and runs a job on every
rank; ``python -m mlbook.systems.distributed`` runs the chapter's job (:func:`chapter_job`)
under ``torchrun``, on one machine or many.

Shape legend
    n ranks (world or group size);  r a rank;  P parameters;  S elements of an all-reduced tensor
    x (S,) one rank's tensor, cut into n chunks by ``torch.tensor_split`` (sizes differ by <= 1)
    X (B, d) MLP input;  W1 (d, h);  b1 (h,);  W2 (h, d);  b2 (d,)
    W1_r (d, h/n) column block r of W1;  b1_r (h/n,);  W2_r (h/n, d) row block r of W2
    p pipeline stages;  m micro-batches;  schedule (p, 2(m + p - 1)) int: +j forward and -j
    backward of micro-batch j (counted from 1), 0 idle
    T tokens per rank;  N experts, N/n on each rank;  k experts per token;  idx, gates (T, k)
"""

from __future__ import annotations

import os
import socket
import tempfile
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..architectures.moe import init_experts, topk_route
from ..nn.activations import swiglu_ffn
from ..nn.optim import adamw_step
from ..validation import (
    divides,
    float_tensor,
    index_tensor,
    integer,
    nonempty,
    one_of,
    positive,
    positive_int,
    same_shape,
    shape_is,
)

__all__ = [
    "MIXED_PRECISION_ADAM",
    "adam_bytes_per_param",
    "storage_bytes",
    "training_state_bytes",
    "ring_bytes",
    "ring_all_reduce_simulated",
    "ring_all_reduce_simulated_naive",
    "ring_reduce_scatter",
    "ring_all_gather",
    "ring_all_reduce",
    "ring_all_reduce_naive",
    "ZERO_STAGES",
    "zero_bytes_per_rank",
    "ZeroShard",
    "zero_init",
    "zero_step",
    "column_row_split",
    "tp_mlp_naive",
    "tp_mlp_simulated",
    "tp_mlp",
    "pipeline_bubble",
    "gpipe_schedule",
    "gpipe_schedule_naive",
    "bubble_fraction",
    "all_to_all",
    "moe_expert_parallel",
    "ring_inputs",
    "zero_problem",
    "tp_problem",
    "moe_problem",
    "chapter_job",
    "run_local",
]


# --- eq. 41.1: the bytes of mixed-precision Adam --------------------------------------------------

#: Bytes per parameter of mixed-precision Adam: bf16 weights and gradients, fp32 master weights
#: and the two fp32 moments.
MIXED_PRECISION_ADAM = {"weights": 2, "gradients": 2, "master weights": 4, "Adam m": 4, "Adam v": 4}


def adam_bytes_per_param(weights=2, gradients=2, master=4, moments=4) -> int:
    """Bytes per parameter of Adam training: weights + gradients + master copy + m + v.

    The defaults are mixed precision (bf16 weights and gradients, fp32 master and moments);
    pure fp32 training is ``(4, 4, 0, 4)``. Implements eq. 41.1.
    """
    for name, v in (("weights", weights), ("gradients", gradients), ("master", master)):
        integer(v, name, low=0)
    integer(moments, "moments", low=0)
    return weights + gradients + master + 2 * moments


def storage_bytes(tensors) -> int:
    """The bytes of memory the tensors occupy: each distinct storage counted once.

    tensors: an iterable of tensors (None entries are skipped). Views of one storage (a flat
    buffer and its slices) count once, at the size of the whole storage.
    """
    seen, total = set(), 0
    for t in tensors:
        if t is None:
            continue
        s = t.untyped_storage()
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            total += s.nbytes()
    return total


def training_state_bytes(model: torch.nn.Module, optimizer, master=None) -> dict[str, int]:
    """The measured training state: weights, gradients, master weights and optimiser state.

    model: the module whose parameters (and their ``.grad``) the forward pass uses; optimizer:
    a ``torch.optim`` optimizer after at least one step; master: the parameters it updates when
    they are not the model's (mixed precision), or None. Returns bytes by part: "weights",
    "gradients", "master weights", "Adam m", "Adam v" and "step counters" (one per tensor).
    """
    params = list(model.parameters())
    positive_int(len(params), "the number of model.parameters()")
    state = [optimizer.state[q] for group in optimizer.param_groups for q in group["params"]]
    if not any(state):
        raise ValueError("optimizer must have taken a step (its state is empty)")
    return {
        "weights": storage_bytes(params),
        "gradients": storage_bytes(q.grad for q in params),
        "master weights": storage_bytes(master or []),
        "Adam m": storage_bytes(s["exp_avg"] for s in state),
        "Adam v": storage_bytes(s["exp_avg_sq"] for s in state),
        "step counters": storage_bytes(s["step"] for s in state),
    }


# --- eq. 41.2: the ring all-reduce ----------------------------------------------------------------


def ring_bytes(size_bytes: float, n: int) -> float:
    """Bytes each rank sends in a ring all-reduce of ``size_bytes``: 2 (n - 1) / n size.

    Implements eq. 41.2.
    """
    n = positive_int(n, "n")
    return 2 * (n - 1) / n * size_bytes


def _stack_ranks(xs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    xs = list(xs)
    positive_int(len(xs), "the number of ranks len(xs)")
    for r, x in enumerate(xs):
        float_tensor(x, f"xs[{r}]", ndim=1, not_empty=True)
        same_shape(x, xs[0], (f"xs[{r}]", "xs[0]"))  # every rank reduces the same shape
    return xs


def ring_all_reduce_simulated(
    xs: Sequence[torch.Tensor],
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The ring all-reduce of n ranks' tensors, simulated in one process. Implements eq. 41.2.

    Rank r sends to rank r + 1 and receives from rank r - 1 (mod n). Reduce-scatter: at step s
    rank r sends chunk r - s - 1 and adds the chunk r - s - 2 it receives, so that after n - 1
    steps it holds the full sum of chunk r. All-gather: at step s it sends chunk r - s and
    stores the chunk r - s - 1 it receives. xs: n tensors (S,). Returns (n sums (S,), bytes
    sent by each rank (n,) int64).
    """
    xs = _stack_ranks(xs)
    n = len(xs)
    chunks = [list(torch.tensor_split(x.clone(), n)) for x in xs]  # [rank][chunk] views
    sent = torch.zeros(n, dtype=torch.int64)
    for phase in ("reduce-scatter", "all-gather"):
        for s in range(n - 1):
            c_out = [
                (r - s - 1) % n if phase == "reduce-scatter" else (r - s) % n for r in range(n)
            ]
            msgs = [chunks[r][c_out[r]].clone() for r in range(n)]  # every rank sends at once
            for r in range(n):
                sent[r] += msgs[r].numel() * msgs[r].element_size()
                left = (r - 1) % n
                if phase == "reduce-scatter":
                    chunks[r][c_out[left]] += msgs[left]  # c_out[left] = r - s - 2
                else:
                    chunks[r][c_out[left]].copy_(msgs[left])
    return [torch.cat(c) for c in chunks], sent


def ring_all_reduce_simulated_naive(
    xs: Sequence[torch.Tensor],
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The naive reference of :func:`ring_all_reduce_simulated`: the all-reduce through one
    root. Ranks 1..n-1 send their tensor to rank 0, which adds them and sends the sum back to
    each. xs: n tensors (S,). Returns (n sums (S,), bytes sent by each rank (n,) int64:
    (n - 1) S for the root, S for every other rank)."""
    xs = _stack_ranks(xs)
    n, b = len(xs), xs[0].numel() * xs[0].element_size()
    total = xs[0].clone()
    for x in xs[1:]:
        total += x
    sent = torch.full((n,), b, dtype=torch.int64)
    sent[0] = (n - 1) * b
    return [total.clone() for _ in range(n)], sent


def _group_info(group) -> tuple[int, int, Callable[[int], int]]:
    """(rank in the group, group size, group rank -> global rank)."""
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    if group is None:
        return rank, n, lambda r: r
    return rank, n, lambda r: dist.get_global_rank(group, r)


def _exchange(out: torch.Tensor, into: torch.Tensor, dst: int, src: int) -> int:
    """Send ``out`` to global rank dst while receiving ``into`` from src; returns bytes sent."""
    req = dist.isend(out.contiguous(), dst)
    dist.recv(into, src)
    req.wait()
    return out.numel() * out.element_size()


def ring_reduce_scatter(x: torch.Tensor, group=None) -> tuple[torch.Tensor, int]:
    """Collective: the reduce-scatter half of the ring. x: (S,) this rank's tensor (not
    changed). Returns (chunk r of the sum over ranks, (S/n,); bytes this rank sent)."""
    float_tensor(x, "x", ndim=1, not_empty=True)
    r, n, glob = _group_info(group)
    chunks = [c.clone() for c in torch.tensor_split(x, n)]
    sent = 0
    for s in range(n - 1):
        c_out, c_in = (r - s - 1) % n, (r - s - 2) % n
        buf = torch.empty_like(chunks[c_in])
        sent += _exchange(chunks[c_out], buf, glob((r + 1) % n), glob((r - 1) % n))
        chunks[c_in] += buf  # the left neighbour's partial sum of this chunk
    return chunks[r], sent


def ring_all_gather(chunk: torch.Tensor, size: int, group=None) -> tuple[torch.Tensor, int]:
    """Collective: the all-gather half of the ring. chunk: this rank's chunk r of a tensor of
    ``size`` elements cut by ``torch.tensor_split``. Returns (the whole tensor (size,); bytes
    this rank sent)."""
    r, n, glob = _group_info(group)
    out = chunk.new_empty(size)
    chunks = list(torch.tensor_split(out, n))  # views into out
    shape_is(chunk, "chunk", chunks[r].shape)
    chunks[r].copy_(chunk)
    sent = 0
    for s in range(n - 1):
        c_out, c_in = (r - s) % n, (r - s - 1) % n
        sent += _exchange(chunks[c_out], chunks[c_in], glob((r + 1) % n), glob((r - 1) % n))
    return out, sent


def ring_all_reduce(x: torch.Tensor, group=None) -> tuple[torch.Tensor, int]:
    """Collective: the ring all-reduce (reduce-scatter, then all-gather). Implements eq. 41.2.

    x: (S,) this rank's tensor. Returns (the sum over the ranks (S,); bytes this rank sent).
    """
    mine, sent_rs = ring_reduce_scatter(x, group)
    total, sent_ag = ring_all_gather(mine, x.numel(), group)
    return total, sent_rs + sent_ag


def ring_all_reduce_naive(x: torch.Tensor, group=None) -> tuple[torch.Tensor, int]:
    """Collective: the naive reference of :func:`ring_all_reduce`, every rank to rank 0 and the
    sum back. x: (S,). Returns (the sum (S,); bytes this rank sent)."""
    float_tensor(x, "x", ndim=1, not_empty=True)
    r, n, glob = _group_info(group)
    b = x.numel() * x.element_size()
    if r != 0:
        dist.send(x.contiguous(), glob(0))
        total = torch.empty_like(x)
        dist.recv(total, glob(0))
        return total, b
    total, buf = x.clone(), torch.empty_like(x)
    for q in range(1, n):
        dist.recv(buf, glob(q))
        total += buf
    for q in range(1, n):
        dist.send(total, glob(q))
    return total, (n - 1) * b


# --- eq. 41.3: ZeRO ----------------------------------------------------------------------------

#: What each ZeRO stage shards across the ranks (stage 0 is plain data parallelism).
ZERO_STAGES = {
    0: "nothing (data parallel)",
    1: "optimiser state",
    2: "optimiser state + gradients",
    3: "optimiser state + gradients + weights",
}


def zero_bytes_per_rank(
    P: float, n: int, stage: int, weights: int = 2, gradients: int = 2, optimizer: int = 12
) -> float:
    """Bytes of training state per rank under ZeRO ``stage`` with n ranks and P parameters.

    optimizer: bytes of optimiser state per parameter (12: fp32 master, m, v). Stage 0:
    (2 + 2 + 12) P; 1: 2P + 2P + 12P/n; 2: 2P + 14P/n; 3: 16P/n. Implements eq. 41.3.
    """
    n = positive_int(n, "n")
    stage = one_of(stage, "stage", tuple(ZERO_STAGES))
    shard = [optimizer, gradients, weights][:stage]  # the parts this stage divides by n
    whole = [weights, gradients, optimizer][: 3 - stage]
    return P * (sum(whole) + sum(shard) / n)


@dataclass
class ZeroShard:
    """What one rank keeps between ZeRO steps: bf16 weights and gradients, fp32 master
    weights and Adam moments, each whole or this rank's chunk, as the stage says."""

    stage: int
    size: int  # P, the number of parameters of the whole model
    weights: torch.Tensor  # bf16 (P,), or chunk r (stage 3)
    grads: torch.Tensor  # bf16 (P,) (stages 0-1), or chunk r (stages 2-3)
    master: torch.Tensor  # fp32 (P,) (stage 0), or chunk r
    m: torch.Tensor
    v: torch.Tensor
    step: int = 0

    def nbytes(self) -> dict[str, int]:
        """Bytes this rank holds, by part."""
        parts = ("weights", "grads", "master", "m", "v")
        return {k: getattr(self, k).numel() * getattr(self, k).element_size() for k in parts}


def zero_init(w: torch.Tensor, stage: int, group=None) -> ZeroShard:
    """Collective-aware: the ZeroShard of this rank for the fp32 initial weights w (P,)."""
    float_tensor(w, "w", ndim=1, not_empty=True)
    one_of(stage, "stage", tuple(ZERO_STAGES))
    r, n, _ = _group_info(group)
    mine = torch.tensor_split(w, n)[r]  # (P/n,) this rank's chunk
    master = (w if stage == 0 else mine).float().clone()
    weights = (mine if stage == 3 else w).to(torch.bfloat16)
    grads = torch.zeros(w.numel() if stage < 2 else mine.numel(), dtype=torch.bfloat16)
    return ZeroShard(
        stage, w.numel(), weights, grads, master, torch.zeros_like(master), torch.zeros_like(master)
    )


def zero_step(
    state: ZeroShard,
    local_grad: Callable[[torch.Tensor], torch.Tensor],
    *,
    lr: float,
    weight_decay: float = 0.0,
    group=None,
) -> int:
    """Collective: one ZeRO step of mixed-precision AdamW; returns the bytes this rank sent.

    local_grad(weights): the fp32 gradient (P,) of this rank's loss at the bf16 weights (P,).
    Stage 3 first all-gathers the weights. Stage 0 all-reduces the bf16 gradients (summed in
    fp32) and updates all the master weights; stages 1-3 reduce-scatter them and update their
    chunk, with AdamW (eq. 15.4) on the mean gradient; stages 1-2 then all-gather the new bf16
    weights, stage 3 keeps its chunk.
    """
    n = _group_info(group)[1]
    sent = 0
    weights = state.weights
    if state.stage == 3:  # the whole model exists only for the forward and backward pass
        weights, b = ring_all_gather(state.weights, state.size, group)
        sent += b
    g = local_grad(weights).to(torch.bfloat16)  # (P,) the bf16 gradient of this rank's data
    if state.stage == 0:
        g_sum, b = ring_all_reduce(g.float(), group)
        state.grads.copy_(g)
    else:
        g_sum, b = ring_reduce_scatter(g.float(), group)  # (P/n,) this rank's chunk
        if state.stage == 1:
            state.grads.copy_(g)  # stage 1 still keeps the whole gradient
        else:
            state.grads.copy_(g_sum)
    sent += b
    state.step += 1
    new, m, v = adamw_step(
        state.master, state.m, state.v, g_sum / n, state.step, lr=lr, weight_decay=weight_decay
    )
    state.master.copy_(new)  # in place: the buffers this rank holds
    state.m.copy_(m)
    state.v.copy_(v)
    if state.stage in (1, 2):
        full, b = ring_all_gather(state.master.to(torch.bfloat16), state.size, group)
        state.weights.copy_(full)
        sent += b
    else:
        state.weights.copy_(state.master)  # stage 0: all of them; stage 3: its chunk
    return sent


# --- eq. 41.4: the tensor-parallel MLP ------------------------------------------------------------


def column_row_split(W1, b1, W2, n: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Cut an MLP for n ranks: W1 (d, h) by columns, b1 (h,) alike, W2 (h, d) by rows.

    Returns n triples (W1_r (d, h/n), b1_r (h/n,), W2_r (h/n, d)); n must divide h.
    """
    n = positive_int(n, "n")
    h = float_tensor(W1, "W1", ndim=2).shape[1]
    shape_is(b1, "b1", (h,))
    shape_is(W2, "W2", (h, None))
    divides(n, "n", h, "the hidden width h")
    return list(zip(W1.chunk(n, dim=1), b1.chunk(n), W2.chunk(n, dim=0), strict=True))


def tp_mlp_naive(X, W1, b1, W2, b2) -> torch.Tensor:
    """The unsplit MLP: GELU(X W1 + b1) W2 + b2. X (B, d) -> (B, d)."""
    return F.gelu(X @ W1 + b1) @ W2 + b2


def tp_mlp_simulated(X, W1, b1, W2, b2, n: int) -> torch.Tensor:
    """The tensor-parallel MLP on n simulated ranks: each computes its partial
    GELU(X W1_r + b1_r) W2_r, the all-reduce sums them, b2 is added once. Implements eq. 41.4."""
    float_tensor(X, "X", ndim=2)
    parts = [F.gelu(X @ W1_r + b1_r) @ W2_r for W1_r, b1_r, W2_r in column_row_split(W1, b1, W2, n)]
    return torch.stack(parts).sum(0) + b2  # (n, B, d) -> (B, d)


def tp_mlp(X, W1_r, b1_r, W2_r, b2, group=None) -> tuple[torch.Tensor, int]:
    """Collective: the tensor-parallel MLP with this rank's column block of W1 and row block of
    W2; one all-reduce of the (B, d) partial outputs. Implements eq. 41.4.

    Returns (the MLP's output (B, d), equal on every rank; bytes this rank sent).
    """
    float_tensor(X, "X", ndim=2)
    partial = F.gelu(X @ W1_r + b1_r) @ W2_r  # (B, d) this rank's share of H W2
    total, sent = ring_all_reduce(partial.reshape(-1), group)  # (B d,)
    return total.reshape(partial.shape) + b2, sent


# --- eq. 41.5: the pipeline bubble ----------------------------------------------------------------


def pipeline_bubble(p: int, m: int) -> float:
    """The idle fraction of a GPipe schedule: (p - 1) / (m + p - 1). Implements eq. 41.5."""
    p, m = positive_int(p, "p"), positive_int(m, "m")
    return (p - 1) / (m + p - 1)


def gpipe_schedule(p: int, m: int) -> torch.Tensor:
    """The GPipe schedule of p stages and m micro-batches, every step one time unit.

    Stage s runs the forward of micro-batch j (from 0) at step s + j; after the last forward the
    backward passes run in the reverse order of stages and micro-batches: stage s runs the
    backward of micro-batch j at step (m + p - 1) + (p - 1 - s) + (m - 1 - j).
    Returns (p, 2(m + p - 1)) int64: j + 1 forward, -(j + 1) backward, 0 idle.
    """
    p, m = positive_int(p, "p"), positive_int(m, "m")
    grid = torch.zeros(p, 2 * (m + p - 1), dtype=torch.int64)
    for s in range(p):
        for j in range(m):
            grid[s, s + j] = j + 1
            grid[s, (m + p - 1) + (p - 1 - s) + (m - 1 - j)] = -(j + 1)
    return grid


def gpipe_schedule_naive(p: int, m: int) -> torch.Tensor:
    """The GPipe schedule by simulation: at every step each stage runs one task whose inputs are
    ready (a forward needs the previous stage's forward of that micro-batch; a backward needs all
    m forwards of the last stage done and the next stage's backward of that micro-batch),
    forwards first, the highest-numbered backward first. Same layout as :func:`gpipe_schedule`."""
    p, m = positive_int(p, "p"), positive_int(m, "m")
    fwd = [[None] * m for _ in range(p)]  # fwd[s][j]: the step stage s ran forward j
    bwd = [[None] * m for _ in range(p)]

    def done(table, s, j, t):  # stage s finished task j before step t
        return table[s][j] is not None and table[s][j] < t

    columns, t = [], 0
    while any(b is None for row in bwd for b in row):
        col = [0] * p
        flushed = all(done(fwd, p - 1, j, t) for j in range(m))  # every forward is through
        for s in range(p):
            ready_f = [
                j for j in range(m) if fwd[s][j] is None and (s == 0 or done(fwd, s - 1, j, t))
            ]
            ready_b = [
                j
                for j in range(m)
                if bwd[s][j] is None and flushed and (s == p - 1 or done(bwd, s + 1, j, t))
            ]
            if ready_f:
                fwd[s][min(ready_f)], col[s] = t, min(ready_f) + 1
            elif ready_b:
                bwd[s][max(ready_b)], col[s] = t, -(max(ready_b) + 1)
        columns.append(col)
        t += 1
    return torch.tensor(columns, dtype=torch.int64).T


def bubble_fraction(schedule: torch.Tensor) -> float:
    """The measured idle fraction of a schedule (p, steps): idle slots / all slots."""
    index_tensor(schedule.abs(), "schedule", ndim=2)
    nonempty(schedule, "schedule")
    return float((schedule == 0).double().mean())


# --- expert parallelism: the all-to-all -------------------------------------------------------


def all_to_all(outbox: Sequence[torch.Tensor], group=None) -> tuple[list[torch.Tensor], int]:
    """Collective: rank r sends outbox[q] (c_rq, ...) to rank q and receives inbox[q] from it.

    The row counts travel first (one int64 to every other rank), then the rows; what a rank
    addresses to itself stays in memory. Returns (inbox: n tensors (c_qr, ...); bytes of rows
    this rank sent, counts excluded).
    """
    r, n, glob = _group_info(group)
    integer(len(outbox), "len(outbox)", n, n)  # one entry per rank
    counts = torch.tensor([len(o) for o in outbox], dtype=torch.int64)
    incoming = torch.zeros(n, dtype=torch.int64)
    for k in range(1, n):  # round k: send to r + k while receiving from r - k
        dst, src = (r + k) % n, (r - k) % n
        _exchange(counts[dst : dst + 1], incoming[src : src + 1], glob(dst), glob(src))
    inbox, sent = [None] * n, 0
    inbox[r] = outbox[r].clone()
    tail = tuple(outbox[r].shape[1:])
    for k in range(1, n):
        dst, src = (r + k) % n, (r - k) % n
        inbox[src] = outbox[r].new_empty(int(incoming[src]), *tail)
        sent += _exchange(outbox[dst], inbox[src], glob(dst), glob(src))
    return inbox, sent


def moe_expert_parallel(x, idx, gates, W, V, W2, n_experts: int, group=None):
    """Collective: the routed MoE layer (eq. 27.2) with N / n experts on each rank.

    x: (T, d) this rank's tokens; idx, gates: (T, k) their experts and gates; W, V: (N/n, d, h),
    W2: (N/n, h, d) the SwiGLU experts r N/n, ..., (r + 1) N/n - 1 of this rank. Dispatch: each
    assignment (t, j) sends x_t to the rank of expert idx[t, j] (an all-to-all); each rank runs
    its experts; combine: the outputs travel back (the reverse all-to-all) and are summed with
    their gates. Returns (y (T, d); bytes of token vectors this rank sent, both ways).
    """
    float_tensor(x, "x", ndim=2)
    r, n, _ = _group_info(group)
    divides(n, "the number of ranks", n_experts, "n_experts")
    index_tensor(idx, "idx", high=n_experts, ndim=2)
    same_shape(gates, idx, ("gates", "idx"))
    per = n_experts // n
    shape_is(W, "W", (per, x.shape[1], None))
    owner = idx // per  # (T, k) rank of each assignment's expert
    order = [(owner == q).nonzero(as_tuple=True) for q in range(n)]  # (token, slot) by rank
    tokens, sent = all_to_all([x[t] for t, _ in order], group)  # dispatch
    experts, _ = all_to_all([idx[t, j] for t, j in order], group)  # their expert ids
    outputs = []
    for inbox, ids in zip(tokens, experts, strict=True):
        out = torch.zeros_like(inbox)  # (c, d)
        for i in range(per):
            sel = ids == r * per + i
            out[sel] = swiglu_ffn(inbox[sel], W[i], V[i], W2[i])
        outputs.append(out)
    back, sent_back = all_to_all(outputs, group)  # combine: back to the tokens' rank
    y = torch.zeros_like(x)
    for (t, j), out in zip(order, back, strict=True):
        y.index_add_(0, t, gates[t, j, None] * out)
    return y, sent + sent_back


# --- the chapter's experiment: inputs that every rank and the reader can rebuild --------------


def ring_inputs(n: int, size: int, seed: int = 0) -> list[torch.Tensor]:
    """n float64 tensors (size,), one per rank, drawn from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(size, generator=gen, dtype=torch.float64) for _ in range(n)]


def zero_problem(P: int, n: int, batch: int = 8, seed: int = 1):
    """A least-squares model of P weights with ``batch`` examples on each of n ranks.

    Returns (w0 (P,) fp32, [local_grad_r]: the gradient of rank r's loss
    |A_r w - y_r|^2 / (2 batch) at bf16 weights, in fp32)."""
    gen = torch.Generator().manual_seed(seed)
    w0 = torch.randn(P, generator=gen) * 0.1
    data = [
        (torch.randn(batch, P, generator=gen) / P**0.5, torch.randn(batch, generator=gen))
        for _ in range(n)
    ]

    def grad_fn(A, y):
        return lambda w: A.T @ (A @ w.float() - y) / A.shape[0]  # (P,)

    return w0, [grad_fn(A, y) for A, y in data]


def tp_problem(B: int = 6, d: int = 8, h: int = 24, seed: int = 2):
    """A float64 MLP (W1 (d, h), b1, W2 (h, d), b2) and an input X (B, d)."""
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    return rnd(B, d), rnd(d, h) / d**0.5, rnd(h), rnd(h, d) / h**0.5, rnd(d)


def moe_problem(
    n: int, T: int = 16, d: int = 8, h: int = 16, N: int | None = None, k: int = 2, seed: int = 3
):
    """Tokens of n ranks (n T, d) float64, their top-k routing (idx, gates) and N SwiGLU experts
    (W, V (N, d, h), W2 (N, h, d)); N = 2n unless given."""
    N = 2 * n if N is None else N
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n * T, d, generator=gen, dtype=torch.float64)
    experts = init_experts(N, d, h, generator=gen, dtype=torch.float64)
    route = topk_route(x @ experts["W_r"], k)
    return x, route.idx, route.gates, experts


#: The settings of :func:`chapter_job`.
JOB = dict(
    ring_size=12_000, zero_params=4096, zero_steps=2, lr=1e-2, weight_decay=0.1, moe_tokens=16
)


def chapter_job(rank: int, n: int) -> dict:
    """Every experiment of chapter 41 on this rank of an n-rank process group; returns what the
    rank measured (tensors and byte counts), for :func:`run_local` or ``torchrun``."""
    out: dict = {"rank": rank}
    xs = ring_inputs(n, JOB["ring_size"])
    out["ring"], out["root"], out["torch"] = {}, {}, None
    for k in range(2, n + 1):  # the ring in sub-groups of 2, ..., n ranks
        group = dist.new_group(list(range(k)))  # every rank takes part in creating each group
        if rank < k:
            out["ring"][k] = ring_all_reduce(xs[rank], group)
            out["root"][k] = ring_all_reduce_naive(xs[rank], group)
    ref = xs[rank].clone()
    dist.all_reduce(ref)  # torch's own all-reduce, for comparison
    out["torch"] = ref
    P = JOB["zero_params"]
    w0, grads = zero_problem(P, n)
    out["zero"] = {}
    for stage in ZERO_STAGES:
        state = zero_init(w0, stage)
        sent = [
            zero_step(state, grads[rank], lr=JOB["lr"], weight_decay=JOB["weight_decay"])
            for _ in range(JOB["zero_steps"])
        ]
        out["zero"][stage] = {
            "bytes": state.nbytes(),
            "sent": sent,
            "master": state.master,
            "weights": state.weights,
        }
    X, W1, b1, W2, b2 = tp_problem()
    W1_r, b1_r, W2_r = column_row_split(W1, b1, W2, n)[rank]
    out["tp"] = tp_mlp(X, W1_r, b1_r, W2_r, b2)
    T = JOB["moe_tokens"]
    x, idx, gates, ex = moe_problem(n, T)
    mine = slice(rank * T, (rank + 1) * T)
    per = ex["W"].shape[0] // n
    local = slice(rank * per, (rank + 1) * per)
    out["moe"] = moe_expert_parallel(
        x[mine],
        idx[mine],
        gates[mine],
        ex["W"][local],
        ex["V"][local],
        ex["W2"][local],
        ex["W"].shape[0],
    )
    inp = torch.arange(4 * n, dtype=torch.float64) + 100 * rank
    got, _ = all_to_all(list(inp.chunk(n)))
    ref = torch.empty_like(inp)
    dist.all_to_all_single(ref, inp)
    out["a2a"] = (torch.cat(got), ref)
    return out


# --- running a job on local processes ---------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loopback() -> str | None:
    """The loopback interface's name ("lo" on Linux, "lo0" on macOS), for gloo's sockets."""
    names = [name for _, name in socket.if_nameindex()]
    return next((n for n in ("lo", "lo0") if n in names), None)


def _child(rank: int, n: int, port: int, job, folder: str, timeout: float) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(n)
    )
    ifname = _loopback()
    if ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = ifname  # local ranks talk over the loopback
    torch.set_num_threads(1)
    code = 0
    try:
        dist.init_process_group("gloo", rank=rank, world_size=n, timeout=timedelta(seconds=timeout))
        torch.save(job(rank, n), Path(folder) / f"rank{rank}.pt")
    except BaseException:  # report to the parent, which raises it
        (Path(folder) / f"rank{rank}.err").write_text(traceback.format_exc())
        code = 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    os._exit(code)  # leave without running the parent's exit handlers


def run_local(job: Callable[[int, int], dict], n: int = 4, timeout: float = 60.0) -> list:
    """Run ``job(rank, n)`` on n local processes joined in one gloo process group.

    The processes are forked where the platform can (they start in milliseconds and inherit the
    imported modules; elsewhere they are spawned and ``job`` must be importable). Each returns
    its result through a file in a temporary folder; all are joined (or killed after
    ``timeout`` seconds) before this returns. Returns the results by rank.
    """
    n = positive_int(n, "n")
    positive(timeout, "timeout")
    import multiprocessing as mp

    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with tempfile.TemporaryDirectory() as folder:
        port = _free_port()
        procs = [
            ctx.Process(target=_child, args=(r, n, port, job, folder, timeout)) for r in range(n)
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout)
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
        errors = sorted(Path(folder).glob("rank*.err"))
        if errors:
            raise RuntimeError(f"{errors[0].stem} failed:\n{errors[0].read_text()}")
        missing = [r for r in range(n) if not (Path(folder) / f"rank{r}.pt").exists()]
        if missing:
            raise RuntimeError(f"ranks {missing} returned nothing (killed after {timeout} s?)")
        return [torch.load(Path(folder) / f"rank{r}.pt", weights_only=True) for r in range(n)]


def main() -> None:
    """Under torchrun: run :func:`chapter_job` on this rank; rank 0 prints the ring's bytes."""
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    result = chapter_job(rank, n)
    if rank == 0:
        size = JOB["ring_size"] * 8
        for k, (_, sent) in result["ring"].items():
            print(
                f"ring of {k} ranks: rank 0 sent {sent} bytes, 2(n-1)/n size = "
                f"{ring_bytes(size, k):.0f}"
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
