"""Checks of the exercises of chapter 41 (training at scale).

The references are independent of :mod:`mlbook.systems.distributed`: the bytes of a float32
``nn.Linear`` with its gradients and Adam moments built as ``torch.zeros_like`` (41.1); the sum
of the ranks' tensors with ``torch.stack`` and the chunk sizes of ``torch.tensor_split`` (41.2);
running counts with ``torch.cumsum`` on GPipe schedules written out here and on a
one-forward-one-backward order of tasks, and the bubble formula (41.3); the ZeRO memory formulas
written out (41.4); the sum of the tensors, 2(n - 1)/n of their bytes and 2 log2 n messages
(41.5).

Each typical wrong answer is written once, as a function below; ``MISTAKES`` lists them (the
tests feed each to its check).
"""

from __future__ import annotations

import torch

from . import (
    Incorrect,
    as_int,
    as_number,
    as_tensor,
    attempt,
    exercise,
    expect,
    expect_answer,
    expect_tuple,
    paired_mistakes,
)
from . import reference_answer as _ref

F64 = torch.float64

# --- 41.1 ----------------------------------------------------------------------------------------


def _fp32_adam_bytes() -> float:
    """Bytes per parameter of a float32 layer, its gradients and Adam's m and v."""
    layer = torch.nn.Linear(16, 8)
    params = list(layer.parameters())
    for q in params:
        q.grad = torch.zeros_like(q)
    moments = [torch.zeros_like(q) for q in params for _ in range(2)]  # m and v
    tensors = params + [q.grad for q in params] + moments
    n = sum(q.numel() for q in params)
    return sum(t.numel() * t.element_size() for t in tensors) / n


def guess_doubled():
    return 32


def guess_with_master():
    return 20


def guess_without_gradients():
    return 12


@exercise("41.1", "predict_fp32_adam_bytes")
def fp32_adam_bytes(answer) -> str:
    """Bytes per parameter of float32 Adam, measured on a float32 layer."""
    guess = as_number(attempt(answer), "predict_fp32_adam_bytes()", " of bytes")
    got = _fp32_adam_bytes()
    seen = f"a float32 layer keeps {got:g} bytes per parameter: weights 4, gradients 4, m 4, v 4"
    if abs(guess - got) > 0.5:
        why = {
            32: "not everything doubles: the float32 weights are their own master copy, so "
            "the 4-byte master of mixed precision disappears",
            20: "there is no separate master copy in float32 training: the weights the passes "
            "use are the ones Adam updates",
            12: "the gradients stay in memory until the update: count them too",
        }.get(round(guess), "count four float32 buffers: weights, gradients, m and v")
        raise Incorrect(f"you predicted {guess:g}; {seen}: {why}")
    return f"right: {seen}, the same 16 as mixed precision (2 + 2 + 4 + 4 + 4)"


# --- 41.2 ----------------------------------------------------------------------------------------


def _rs_cases():
    gen = torch.Generator().manual_seed(412)
    return [
        [torch.randn(S, generator=gen, dtype=F64) for _ in range(n)]
        for n, S in ((3, 10), (4, 12), (5, 23), (1, 5))
    ]


def _rs_reference(xs):
    n = len(xs)
    total = torch.stack(xs).sum(0).tensor_split(n)  # the n chunks of the sum
    sizes = [c.numel() * 8 for c in total]
    return [total[r] for r in range(n)], [sum(sizes) - sizes[r] for r in range(n)]


def rs_ends_with_next_chunk(xs):
    n = len(xs)
    chunks, _ = _rs_reference(xs)
    size = sum(c.numel() for c in chunks) * 8
    return [chunks[(r + 1) % n] for r in range(n)], [
        size - chunks[(r + 1) % n].numel() * 8 for r in range(n)
    ]


def rs_whole_tensor_bytes(xs):
    chunks, _ = _rs_reference(xs)
    n, size = len(xs), xs[0].numel() * 8
    return chunks, [(n - 1) * size] * n


def _ring_steps(xs, steps: int):
    """The reduce-scatter loop run for ``steps`` steps: (chunks[rank][chunk], bytes sent)."""
    n = len(xs)
    chunks = [list(x.clone().tensor_split(n)) for x in xs]
    sent = [0] * n
    for s in range(steps):
        msgs = [chunks[r][(r - s - 1) % n].clone() for r in range(n)]
        for r in range(n):
            sent[r] += msgs[r].numel() * 8
            chunks[r][(r - s - 2) % n] += msgs[(r - 1) % n]
    return chunks, sent


def rs_n_steps(xs):
    """n steps instead of n - 1: one chunk too many is sent (and added to a partial sum)."""
    chunks, sent = _ring_steps(xs, len(xs))
    return [chunks[r][r] for r in range(len(xs))], sent


@exercise("41.2", "ring_reduce_scatter_sim")
def reduce_scatter(answer) -> str:
    """The chunks each rank holds and the bytes it sent, against the sum and the chunk sizes."""
    for xs in _rs_cases():
        n = len(xs)
        out = attempt(answer, [x.clone() for x in xs])
        chunks, sent = expect_tuple(out, "ring_reduce_scatter_sim(xs)", ("chunks", "sent"))
        expect(
            isinstance(chunks, (list, tuple)) and len(chunks) == n,
            f"chunks should be a list of {n} tensors, one per rank",
        )
        want_c, want_s = _rs_reference(xs)
        what = f"ring_reduce_scatter_sim for n = {n}, S = {xs[0].numel()}"
        got = torch.cat([as_tensor(c, f"chunks[{r}]").reshape(-1) for r, c in enumerate(chunks)])
        wrong_c = {
            "rank r must end with chunk r (send chunk r - s - 1 at step s), not chunk r + 1": (
                torch.cat(rs_ends_with_next_chunk(xs)[0])
            ),
        }
        expect_answer(got, torch.cat(want_c), f"{what}: the chunks", wrong=wrong_c, atol=1e-12)
        sent = [as_int(v, f"sent[{r}]", "bytes") for r, v in enumerate(sent)]
        wrong_s = {
            "each step sends one chunk, about S/n entries, not the whole tensor": (
                rs_whole_tensor_bytes(xs)[1] if n > 1 else None
            ),
            "count the bytes of the chunks sent (numel * element_size, 8 for float64), not "
            "the entries": [s // 8 for s in want_s] if n > 1 else None,
            "one chunk too many was sent: the reduce-scatter takes n - 1 steps, not n": (
                rs_n_steps(xs)[1] if n > 1 else None
            ),
        }
        expect_answer(sent, want_s, f"{what}: the bytes sent", wrong=wrong_s, atol=0, rtol=0)
    return (
        "rank r holds chunk r of the sum and sent S - |chunk r| entries of 8 bytes, for n = 1, "
        "3, 4 and 5 and sizes that n does not divide"
    )


# --- 41.3 ----------------------------------------------------------------------------------------


def _gpipe(p: int, m: int) -> torch.Tensor:
    """GPipe: forward of j (from 0) on stage s at s + j; backward in reverse after the flush."""
    grid = torch.zeros(p, 2 * (m + p - 1), dtype=torch.int64)
    for s in range(p):
        for j in range(m):
            grid[s, s + j] = j + 1
            grid[s, 2 * (m + p - 1) - 1 - s - j] = -(m - j)
    return grid


def _one_f_one_b(p: int, m: int) -> torch.Tensor:
    """The order of tasks of one-forward-one-backward (warm-up p - s - 1 forwards), with an idle
    step between any two tasks (the peak depends on the order only)."""
    rows = []
    for s in range(p):
        warm = min(p - s - 1, m)
        order = [j + 1 for j in range(warm)]
        f, b = warm, 0
        while b < m:
            if f < m:
                order.append(f + 1)
                f += 1
            order.append(-(b + 1))
            b += 1
        row = []
        for task in order:
            row += [task, 0]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.int64)


def _peak(schedule: torch.Tensor) -> torch.Tensor:
    return torch.cumsum((schedule > 0).long() - (schedule < 0).long(), dim=1).max(dim=1).values


def peak_counts_forwards(schedule):
    return (schedule > 0).sum(dim=1)


def peak_final(schedule):
    return torch.cumsum(torch.sign(schedule), dim=1)[:, -1]


def tradeoff_bubble_over_m(p, ms):
    return [(p - 1) / m for m in ms], [m for m in ms]


def tradeoff_peak_p(p, ms):
    return [(p - 1) / (m + p - 1) for m in ms], [p for _ in ms]


@exercise("41.3", "peak_in_flight", "gpipe_tradeoff")
def pipeline_tradeoff(peak_answer, tradeoff_answer) -> str:
    """Peak micro-batches in flight on GPipe and 1F1B orders; GPipe's bubble and peak over m."""
    for p, m in ((4, 8), (3, 2), (5, 5)):
        for name, sched in (
            ("GPipe", _gpipe(p, m)),
            ("one-forward-one-backward", _one_f_one_b(p, m)),
        ):
            got = attempt(peak_answer, sched.clone())
            expect_answer(
                got,
                _peak(sched),
                f"peak_in_flight on a {name} schedule with p = {p}, m = {m}",
                wrong={
                    "a backward pass frees its micro-batch's activations: keep a running "
                    "count, +1 at a forward, -1 at a backward": peak_counts_forwards(sched),
                    "take the largest count over time, not the count at the end": peak_final(sched),
                },
                atol=0,
                rtol=0,
            )
    p, ms = 4, list(range(1, 33))
    out = attempt(tradeoff_answer, p, ms)
    bubbles, peaks = expect_tuple(out, "gpipe_tradeoff(4, ms)", ("bubbles", "peaks"))
    want_b = [(p - 1) / (m + p - 1) for m in ms]
    expect_answer(
        bubbles,
        want_b,
        "the bubbles of gpipe_tradeoff(4, 1..32)",
        wrong={
            "(p - 1) / m is only the large-m limit; the bubble is (p - 1) / (m + p - 1)": [
                (p - 1) / m for m in ms
            ]
        },
        atol=1e-12,
    )
    want_p = [int(_peak(_gpipe(p, m))[0]) for m in ms]
    expect_answer(
        peaks,
        want_p,
        "the peaks of gpipe_tradeoff(4, 1..32)",
        wrong={"GPipe holds all m micro-batches before the first backward, not p": [p for _ in ms]},
        atol=0,
    )
    return (
        f"the peak matches running counts on GPipe and one-forward-one-backward orders; GPipe with "
        f"p = 4: bubble {want_b[0]:.3g} -> {want_b[-1]:.3g} and peak in flight {want_p[0]} -> "
        f"{want_p[-1]} as m goes 1 -> 32, while one-forward-one-backward keeps at most p - s"
    )


# --- 41.4 ----------------------------------------------------------------------------------------


def _zero_gb(P: float, n: int, stage: int) -> float:
    bytes_ = {0: 16 * P, 1: 4 * P + 12 * P / n, 2: 2 * P + 14 * P / n, 3: 16 * P / n}[stage]
    return bytes_ / 1e9


def guess_stage_three():
    return 3


def guess_stage_zero():
    return 0


@exercise("41.4", "predict_lowest_stage")
def lowest_stage(answer) -> str:
    """The lowest ZeRO stage whose state fits 80 GB for 7B parameters on 8 GPUs."""
    guess = as_int(attempt(answer), "predict_lowest_stage()", "a ZeRO stage")
    gb = [_zero_gb(7e9, 8, s) for s in range(4)]
    want = next(s for s in range(4) if gb[s] <= 80)
    seen = "GB per GPU: " + ", ".join(f"stage {s}: {g:.1f}" for s, g in enumerate(gb))
    if guess != want:
        why = {
            0: "plain data parallelism keeps all 16 bytes of 7e9 parameters on every GPU: 112 GB",
            2: "stage 2 fits too, but stage 1 already does: sharding the 12 bytes of optimiser "
            "state leaves 4P + 12P/8",
            3: "stage 3 fits, but so does stage 1: sharding the optimiser state alone brings "
            "112 GB down to 38.5 GB",
        }.get(guess, "the stage is 0, 1, 2 or 3")
        raise Incorrect(f"you predicted stage {guess}; {seen}: {why}")
    return f"right: {seen}; stage {want} is the lowest that fits in 80 GB"


# --- 41.5 ----------------------------------------------------------------------------------------


def _hd_cases():
    gen = torch.Generator().manual_seed(415)
    return [[torch.randn(48, generator=gen, dtype=F64) for _ in range(n)] for n in (4, 8, 16, 2, 1)]


def hd_recursive_doubling(xs):
    """Whole tensors exchanged at every one of log2 n steps (no halving)."""
    n, total = len(xs), torch.stack(xs).sum(0)
    steps = n.bit_length() - 1
    return [total.clone() for _ in range(n)], [steps * xs[0].numel() * 8] * n, [steps] * n


def hd_messages_per_chunk(xs):
    """Right sums and bytes, but one message counted per chunk: n - 1 chunks each way."""
    n, total = len(xs), torch.stack(xs).sum(0)
    b = 2 * (n - 1) * xs[0].numel() * 8 // n
    return [total.clone() for _ in range(n)], [b] * n, [2 * (n - 1)] * n


@exercise("41.5", "halving_doubling_all_reduce")
def halving_doubling(answer) -> str:
    """Sums, bytes 2(n - 1)/n size and 2 log2 n messages, for n = 1, 2, 4, 8, 16."""
    for xs in _hd_cases():
        n, S = len(xs), xs[0].numel()
        out = attempt(answer, [x.clone() for x in xs])
        outs, sent, messages = expect_tuple(
            out, "halving_doubling_all_reduce(xs)", ("outs", "sent", "messages")
        )
        what = f"halving_doubling_all_reduce for n = {n}, S = {S}"
        expect(
            isinstance(outs, (list, tuple)) and len(outs) == n,
            f"{what}: outs should be a list of {n} tensors, one per rank",
        )
        total = torch.stack(xs).sum(0)
        got = torch.stack([as_tensor(o, f"outs[{r}]", (S,)) for r, o in enumerate(outs)])
        expect_answer(got, total.expand(n, S), f"{what}: the sums", atol=1e-12)
        sent = [as_int(v, f"sent[{r}]", "bytes") for r, v in enumerate(sent)]
        wrong_s = {
            "halving sends half of the chunks still held, not the whole tensor (that is "
            "recursive doubling, log2 n times the size)": hd_recursive_doubling(xs)[1]
            if n > 2
            else None,
        }
        expect_answer(
            sent, [2 * (n - 1) * S * 8 // n] * n, f"{what}: the bytes sent", wrong=wrong_s, atol=0
        )
        messages = [as_int(v, f"messages[{r}]", "messages") for r, v in enumerate(messages)]
        steps = 2 * (n.bit_length() - 1)
        wrong_m = {
            "one message per exchange with a partner, not one per chunk: 2 log2 n in all, "
            "where the ring needs 2(n - 1)": hd_messages_per_chunk(xs)[2] if n > 2 else None,
        }
        expect_answer(messages, [steps] * n, f"{what}: the messages", wrong=wrong_m, atol=0)
    return (
        "the sums are right, each rank sent 2(n - 1)/n of the tensor's bytes, as the ring does, "
        "in 2 log2 n messages (8 for n = 16, where the ring needs 30)"
    )


MISTAKES = {
    "41.1": [
        (guess_doubled, "their own master copy"),
        (guess_with_master, "no separate master copy"),
        (guess_without_gradients, "count them too"),
    ],
    "41.2": [
        (rs_ends_with_next_chunk, "must end with chunk r"),
        (rs_whole_tensor_bytes, "not the whole tensor"),
        (rs_n_steps, "n - 1 steps, not n"),
    ],
    "41.3": paired_mistakes(
        _ref("41.3", "peak_in_flight"),
        _ref("41.3", "gpipe_tradeoff"),
        [(peak_counts_forwards, "keep a running count"), (peak_final, "not the count at the end")],
        [(tradeoff_bubble_over_m, "only the large-m limit"), (tradeoff_peak_p, "not p")],
    ),
    "41.4": [
        (guess_stage_three, "so does stage 1"),
        (guess_stage_zero, "112 GB"),
    ],
    "41.5": [
        (hd_recursive_doubling, "recursive doubling"),
        (hd_messages_per_chunk, "not one per chunk"),
    ],
}
