"""Decoding beyond one token at a time: beam search and speculative sampling (chapter 39).

Greedy decoding, temperature, top-k and top-p live in :mod:`mlbook.models.generate` (chapter 23);
this module adds what chapter 39 derives: the score of a sequence as a sum of log-probabilities
(eq. 39.2) with length normalisation, beam search (naive reference: :func:`beam_search_naive`,
exhaustive search), the acceptance probability and residual of speculative sampling
(eqs. 39.4-39.5) with its sampler (naive reference: :func:`speculative_sample_naive`), the
expected tokens per target call and the speedup, and a speculative decoder that pairs a draft
model with the book's decoder.

Shape legend
    V vocabulary;  N samples;  W beam width;  P prompt length;  T sequence length
    gamma (γ) draft tokens proposed per step;  p target, q draft probabilities (..., V)
    step_fn: a function from tokens (W, T) int64 to next-token log-probabilities (W, V)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from ..models.decoder import Decoder
from ..models.generate import sampling_probs
from ..validation import distribution, index_tensor, integer, nonempty, number, positive_int

__all__ = [
    "sequence_score",
    "length_normalised",
    "beam_search",
    "beam_search_naive",
    "acceptance_prob",
    "residual",
    "speculative_sample",
    "speculative_sample_naive",
    "acceptance_rate",
    "expected_tokens",
    "speedup",
    "simple_speedup",
    "optimal_gamma",
    "model_step_fn",
    "speculative_generate",
    "speculative_generate_naive",
]

StepFn = Callable[[torch.Tensor], torch.Tensor]


def sequence_score(step_log_probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """s(y) = sum_t log p(y_t | y_<t): the log-probability of a continuation. Implements eq. 39.2.

    step_log_probs: (..., T, V) log-probabilities of each step's next token; tokens: (..., T)
    the chosen tokens. Returns (...,).
    """
    index_tensor(tokens, "tokens", step_log_probs.shape[-1])
    return step_log_probs.gather(-1, tokens[..., None]).squeeze(-1).sum(-1)


def length_normalised(score, length, alpha: float = 1.0):
    """s(y) / |y|^alpha: the score per token (alpha = 1), the raw sum (alpha = 0)."""
    alpha = number(alpha, "alpha", 0.0)
    return score / (torch.as_tensor(length, dtype=torch.float64) ** alpha)


def _finish(pool: list, alpha: float) -> tuple[torch.Tensor, float]:
    """The hypothesis of the pool [(tokens, score)] with the best length-normalised score."""
    best = max(pool, key=lambda h: (float(length_normalised(h[1], len(h[0]), alpha)), h[0]))
    return torch.tensor(best[0], dtype=torch.long), float(best[1])


def beam_search(
    step_fn: StepFn,
    prompt: torch.Tensor,
    n_new: int,
    beam_width: int,
    eos: int | None = None,
    alpha: float = 0.0,
) -> tuple[torch.Tensor, float]:
    """Beam search: keep the ``beam_width`` best partial continuations by summed log-probability.

    prompt: (P,) int64. At each step every live hypothesis is extended by every token, the
    W V candidates are ranked by their score (eq. 39.2, all of one length) and the best W kept;
    a candidate that ends in ``eos`` and ranks above the last one kept leaves the beam for the
    finished pool. At the end the
    finished and the live hypotheses are compared by s / |y|^alpha. Returns the continuation
    (L,) without the prompt and its raw score s.
    """
    prompt = nonempty(index_tensor(prompt, "prompt", ndim=1), "prompt")
    n_new = positive_int(n_new, "n_new")
    W = positive_int(beam_width, "beam_width")
    alpha = number(alpha, "alpha", 0.0)
    live, scores = prompt[None, :], torch.zeros(1, dtype=torch.float64)  # (w, P + t), (w,)
    finished: list = []
    for _ in range(n_new):
        logp = step_fn(live).double()  # (w, V)
        V = logp.shape[-1]
        cand = (scores[:, None] + logp).reshape(-1)  # (w V,) score of every extension
        order = torch.argsort(cand, descending=True, stable=True)  # (w V,) best first
        row, tok = order // V, order % V
        ends = tok == eos if eos is not None else torch.zeros_like(tok, dtype=torch.bool)
        keep = ~ends & ((~ends).cumsum(0) <= W)  # the W best that go on
        if not bool(keep.any()):
            last = order.numel() - 1
        else:
            last = int(keep.nonzero().max())
        for i in (ends & (torch.arange(order.numel()) <= last)).nonzero()[:, 0].tolist():
            seq = torch.cat([live[row[i]], tok[i : i + 1]])  # ranked above the last kept one
            finished.append((seq[prompt.numel() :].tolist(), float(cand[order[i]])))
        if not bool(keep.any()):
            live = live[:0]
            break
        live = torch.cat([live[row[keep]], tok[keep][:, None]], 1)  # (w', P + t + 1)
        scores = cand[order[keep]]
    pool = finished + [
        (r[prompt.numel() :].tolist(), s) for r, s in zip(live, scores.tolist(), strict=True)
    ]
    return _finish(pool, alpha)


def beam_search_naive(
    step_fn: StepFn,
    prompt: torch.Tensor,
    n_new: int,
    vocab: int,
    eos: int | None = None,
    alpha: float = 0.0,
) -> tuple[torch.Tensor, float]:
    """The best continuation of at most ``n_new`` tokens by exhaustive search (V^n of them).

    The reference of :func:`beam_search`: a beam at least as wide as the number of sequences
    keeps them all. Sequences stop at their first ``eos``. Same returns.
    """
    prompt = nonempty(index_tensor(prompt, "prompt", ndim=1), "prompt")
    alpha = number(alpha, "alpha", 0.0)
    pool = []
    for seq in itertools.product(range(vocab), repeat=positive_int(n_new, "n_new")):
        if eos is not None and eos in seq:
            seq = seq[: seq.index(eos) + 1]
        s = 0.0
        for t in range(len(seq)):
            context = torch.cat([prompt, torch.tensor(seq[:t], dtype=torch.long)])
            s += float(step_fn(context[None, :])[0, seq[t]])
        pool.append((list(seq), s))
    return _finish(pool, alpha)


def acceptance_prob(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """a(x) = min(1, p(x) / q(x)) for every token x (1 where q(x) = 0). Implements eq. 39.4.

    p, q: (..., V) target and draft distributions. Returns (..., V).
    """
    p, q = distribution(p, "p"), distribution(q, "q")
    return torch.where(q > 0, (p / q).clamp(max=1.0), torch.ones_like(p))


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """r(x) = max(0, p(x) - q(x)) / sum_y max(0, p(y) - q(y)). Implements eq. 39.5.

    Where p = q nothing is ever rejected and r is returned as p. p, q: (..., V). Returns (..., V).
    """
    p, q = distribution(p, "p"), distribution(q, "q")
    r = (p - q).clamp(min=0)  # (..., V)
    mass = r.sum(-1, keepdim=True)  # (..., 1) = 1 - sum min(p, q): the rejection probability
    return torch.where(mass > 0, r / mass.clamp(min=torch.finfo(r.dtype).tiny), p)


def speculative_sample(
    p: torch.Tensor,
    q: torch.Tensor,
    n: int,
    generator: torch.Generator | None = None,
    use_residual: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """n independent speculative draws of one token: x ~ q, kept with probability a(x), else a
    draw from the residual r (``use_residual=False``: from p itself, the wrong fix).

    p, q: (V,). Returns tokens (n,) int64 and accepted (n,) bool.
    """
    p, q = distribution(p, "p"), distribution(q, "q")
    n = positive_int(n, "n")
    x = torch.multinomial(q, n, replacement=True, generator=generator)  # (n,) proposals
    u = torch.rand(n, generator=generator, dtype=p.dtype)
    accepted = u < acceptance_prob(p, q)[x]  # (n,)
    fallback = residual(p, q) if use_residual else p
    y = torch.multinomial(fallback, n, replacement=True, generator=generator)  # (n,)
    return torch.where(accepted, x, y), accepted


def speculative_sample_naive(
    p: torch.Tensor, q: torch.Tensor, n: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """:func:`speculative_sample` one draw at a time, in the order of the derivation."""
    p, q = distribution(p, "p"), distribution(q, "q")
    out = []
    for _ in range(positive_int(n, "n")):
        x = int(torch.multinomial(q, 1, generator=generator))
        if float(torch.rand((), generator=generator, dtype=p.dtype)) < min(1.0, p[x] / q[x]):
            out.append(x)
            continue
        r = torch.clamp(p - q, min=0)
        out.append(int(torch.multinomial(r / r.sum(), 1, generator=generator)))
    return torch.tensor(out, dtype=torch.long)


def acceptance_rate(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """alpha = E_{x~q}[a(x)] = sum_x min(p(x), q(x)) = 1 - TV(p, q). p, q: (..., V) -> (...,)."""
    p, q = distribution(p, "p"), distribution(q, "q")
    return torch.minimum(p, q).sum(-1)


def expected_tokens(alpha, gamma: int):
    """Expected tokens per target call, (1 - alpha^(gamma+1)) / (1 - alpha) (gamma + 1 at 1).

    alpha: a float or tensor in [0, 1]; gamma >= 0 draft tokens per step.
    """
    gamma = integer(gamma, "gamma", low=0)
    a = torch.as_tensor(alpha, dtype=torch.float64)
    geometric = (1 - a ** (gamma + 1)) / (1 - a).clamp(min=1e-300)
    return torch.where(a < 1, geometric, torch.full_like(a, gamma + 1.0))


def speedup(alpha, gamma: int, c: float):
    """Expected speedup over plain decoding: E[tokens per step] / (1 + gamma c), where c is the
    cost of one draft call relative to one target call."""
    c = number(c, "c", 0.0)
    return expected_tokens(alpha, gamma) / (1 + integer(gamma, "gamma", low=0) * c)


def simple_speedup(gamma: int, c_step: float) -> float:
    """The simple estimate gamma / (1 + c_step): all gamma drafts accepted, a draft step of cost
    c_step (all gamma draft calls together) relative to one target call."""
    return integer(gamma, "gamma", low=1) / (1 + number(c_step, "c_step", 0.0))


def optimal_gamma(alpha: float, c: float, gamma_max: int = 64) -> int:
    """The gamma in 1..gamma_max with the largest :func:`speedup` (the first one on ties)."""
    gammas = range(1, positive_int(gamma_max, "gamma_max") + 1)
    return max(gammas, key=lambda g: (float(speedup(alpha, g, c)), -g))


def model_step_fn(model: Decoder, temperature: float = 1.0) -> StepFn:
    """step_fn of :func:`beam_search` for a decoder: log p(next | tokens) at the last position."""

    def step(tokens: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            z = model(tokens)[:, -1].double()  # (W, V)
        return torch.log_softmax(z / temperature, dim=-1)

    return step


def _next_probs(model: Decoder, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """(..., T, V) float64 next-token distributions after each prefix of tokens (..., T), one
    pass (temperature 0: at temperature 1, for the argmax)."""
    with torch.no_grad():
        z = model(tokens if tokens.dim() == 2 else tokens[None, :]).double()  # (B, T, V)
    z = z if tokens.dim() == 2 else z[0]
    return sampling_probs(z, temperature) if temperature > 0 else torch.softmax(z, -1)


def _models(target, draft) -> int:
    for m, name in ((target, "target"), (draft, "draft")):
        if not isinstance(m, Decoder):
            raise TypeError(f"{name} must be a Decoder, got {type(m).__name__}")
    return min(target.config.max_seq_len, draft.config.max_seq_len)


def speculative_generate(
    target: Decoder,
    draft: Decoder,
    prompt: torch.Tensor,
    n_new: int,
    gamma: int,
    generator: torch.Generator | None = None,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, dict]:
    """Continue each row of ``prompt`` (B, P) by ``n_new`` tokens with speculative sampling
    (temperature 0: greedy acceptance, identical to greedy decoding of the target).

    Each step the draft proposes gamma tokens, one at a time; the target scores all of them in
    one pass; proposals are accepted left to right with probability a(x) (eq. 39.4; greedy: when
    x is the target's argmax); the first rejection is replaced by a draw from the residual
    (eq. 39.5; greedy: the target's argmax), and when all are accepted the target's next
    distribution gives one token more. Rows advance by different amounts: they share a
    right-padded buffer, which a causal model reads correctly (position t sees only <= t).
    Returns tokens (B, P + n_new) and counts per row: "target_calls", "proposed", "accepted",
    "produced" (tokens made before the last step's overshoot is cut), all (B,) int64.
    """
    limit = _models(target, draft)
    prompt = nonempty(index_tensor(prompt, "prompt", target.config.vocab_size, ndim=2), "prompt")
    n_new = integer(n_new, "n_new", low=0)
    gamma = positive_int(gamma, "gamma")
    tau = number(temperature, "temperature", 0.0)
    B, P = prompt.shape
    goal = P + n_new
    integer(goal + gamma - 1, "len(prompt) + n_new + gamma - 1", high=limit)
    buf = torch.zeros(B, goal + gamma, dtype=torch.long)  # (B, goal + gamma) right-padded
    buf[:, :P] = prompt
    L = torch.full((B,), P)  # (B,) tokens done per row
    stats = {
        k: torch.zeros(B, dtype=torch.long)
        for k in ("target_calls", "proposed", "accepted", "produced")
    }
    steps = torch.arange(gamma + 1)
    while bool((L < goal).any()):
        act = (L < goal).nonzero()[:, 0]  # (A,) rows still going
        b, l, rows = buf[act], L[act], torch.arange(act.numel())
        qs = []
        for i in range(gamma):  # the draft proposes gamma tokens for every row
            q = _next_probs(draft, b[:, : int(l.max()) + i], tau)[rows, l + i - 1]  # (A, V)
            x = q.argmax(-1) if tau == 0 else torch.multinomial(q, 1, generator=generator)[:, 0]
            b[rows, l + i] = x
            qs.append(q)
        q = torch.stack(qs, 1)  # (A, gamma, V)
        pt = _next_probs(target, b[:, : int(l.max()) + gamma], tau)  # (A, T, V) one pass
        p = pt[rows[:, None], l[:, None] - 1 + steps]  # (A, gamma + 1, V)
        x = b[rows[:, None], l[:, None] + steps[:-1]]  # (A, gamma) the drafts
        if tau == 0:
            ok = x == p[:, :gamma].argmax(-1)
        else:
            a = acceptance_prob(p[:, :gamma], q).gather(-1, x[..., None])[..., 0]  # (A, gamma)
            ok = torch.rand(a.shape, generator=generator, dtype=a.dtype) < a
        n_acc = ok.long().cumprod(1).sum(1)  # (A,) drafts accepted before the first rejection
        p_n, q_n = p[rows, n_acc], q[rows, n_acc.clamp(max=gamma - 1)]  # (A, V)
        if tau == 0:
            fix = p_n.argmax(-1)
        else:  # the residual after a rejection, the target's own next token after none
            dist = torch.where((n_acc < gamma)[:, None], residual(p_n, q_n), p_n)
            fix = torch.multinomial(dist, 1, generator=generator)[:, 0]
        b[rows, l + n_acc] = fix
        buf[act], L[act] = b, l + n_acc + 1
        for key, v in (
            ("target_calls", 1),
            ("proposed", gamma),
            ("accepted", n_acc),
            ("produced", n_acc + 1),
        ):
            stats[key][act] += v
    return buf[:, :goal], stats


def speculative_generate_naive(
    target: Decoder,
    draft: Decoder,
    prompt: torch.Tensor,
    n_new: int,
    gamma: int,
    generator: torch.Generator | None = None,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, dict]:
    """:func:`speculative_generate` for one prompt (P,), one step and one draft at a time.

    Returns (P + n_new,) tokens and counts: target calls, draft calls, proposed and accepted.
    """
    limit = _models(target, draft)
    out = nonempty(index_tensor(prompt, "prompt", target.config.vocab_size, ndim=1), "prompt")
    n_new = integer(n_new, "n_new", low=0)
    gamma = positive_int(gamma, "gamma")
    tau = number(temperature, "temperature", 0.0)
    integer(out.numel() + n_new, "len(prompt) + n_new", high=limit)
    stats = {"target_calls": 0, "draft_calls": 0, "proposed": 0, "accepted": 0}
    goal = out.numel() + n_new
    while out.numel() < goal:
        g = min(gamma, goal - out.numel())
        ctx, qs = out, []
        for _ in range(g):  # the draft proposes g tokens autoregressively
            q = _next_probs(draft, ctx, tau)[-1]  # (V,)
            x = q.argmax() if tau == 0 else torch.multinomial(q, 1, generator=generator)[0]
            qs.append(q)
            ctx = torch.cat([ctx, x.reshape(1)])
        ps = _next_probs(target, ctx, tau)[out.numel() - 1 :]  # (g + 1, V) one target pass
        stats["draft_calls"] += g
        stats["target_calls"] += 1
        stats["proposed"] += g
        drafts, new, n_acc = ctx[out.numel() :], [], 0
        for i in range(g):  # accept left to right until the first rejection
            x, p, q = int(drafts[i]), ps[i], qs[i]
            if tau == 0:
                ok = x == int(p.argmax())
            else:
                u = float(torch.rand((), generator=generator, dtype=p.dtype))
                ok = u < float(acceptance_prob(p, q)[x])
            if not ok:
                r = (
                    p.argmax()
                    if tau == 0
                    else torch.multinomial(residual(p, q), 1, generator=generator)
                )
                new.append(int(r))
                break
            new.append(x)
            n_acc += 1
        if n_acc == g:  # every draft accepted: the target's next distribution is free
            p = ps[g]
            bonus = p.argmax() if tau == 0 else torch.multinomial(p, 1, generator=generator)[0]
            new.append(int(bonus))
        stats["accepted"] += n_acc
        out = torch.cat([out, torch.tensor(new[: goal - out.numel()], dtype=torch.long)])
    return out, stats
