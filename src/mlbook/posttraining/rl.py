"""Reinforcement learning foundations (chapter 34): returns, values, policy gradients, importance
sampling and generalised advantage estimation.

The sequence functions (:func:`discounted_returns`, :func:`td_errors`, :func:`gae`,
:func:`importance_weights`, :func:`effective_sample_size`) are what later chapters call on the
completions of the book's decoder; the tabular pieces (:class:`MDP`, :func:`gridworld`,
:func:`evaluate_policy`, :func:`rollout`, :func:`reinforce_gradient`, :func:`gae_expectation`)
are the small problem on which chapter 34 checks every estimator against an exact value.

Shape legend
    S states;  A actions;  N episodes or samples;  T time steps (padded with zeros after an
    episode ends);  (...) leading batch axes, kept as they are
    P (S, A, S) transition probabilities P(s' | s, a);  reward (S, A, S) reward r(s, a, s')
    R (S, A) expected reward sum_s' P(s' | s, a) r(s, a, s')
    pi (S, A) a policy pi(a | s), rows sum to one;  theta (S, A) logits of a softmax policy
    v (S,) state values;  q (S, A) action values
    rewards (..., T);  values (..., T) (the value after the last step is 0: the episode ends)
    or (..., T + 1) (the last entry is the bootstrap value of the state after step T - 1)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..validation import (
    distribution,
    float_tensor,
    index_tensor,
    nonsingular,
    positive,
    positive_int,
    probability,
    same_shape,
    shape_is,
)

__all__ = [
    "discounted_returns",
    "discounted_returns_naive",
    "td_errors",
    "gae",
    "gae_naive",
    "importance_weights",
    "effective_sample_size",
    "completion_log_probs_at",
    "MDP",
    "ACTIONS",
    "gridworld",
    "policy_dynamics",
    "evaluate_policy",
    "bellman_backup",
    "evaluate_policy_iterative",
    "q_values",
    "softmax_policy",
    "exact_objective",
    "Episodes",
    "rollout",
    "reinforce_gradient",
    "reinforce_gradient_naive",
    "gae_expectation",
]


# --- returns, TD errors and GAE on sequences ---------------------------------------------------


def _next_values(rewards: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """V(s_t) and V(s_{t+1}), both (..., T), from values of T (then V = 0 after) or T + 1."""
    T = rewards.shape[-1]
    shape_is(values, "values", (*rewards.shape[:-1], None))
    if values.shape[-1] == T:  # the episode ends after the last step
        values = torch.cat([values, values.new_zeros(*values.shape[:-1], 1)], -1)  # (..., T + 1)
    if values.shape[-1] != T + 1:
        raise ValueError(f"values must have T = {T} or T + 1 entries, got {values.shape[-1]}")
    return values[..., :-1], values[..., 1:]


def discounted_returns(rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """Returns G_t = r_t + gamma G_{t+1} by the backward recursion. Implements eq. 34.1 (left).

    rewards: (..., T), zero after an episode ends. Returns G: (..., T).
    """
    float_tensor(rewards, "rewards", min_ndim=1, not_empty=True)
    gamma = probability(gamma, "gamma")
    G = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[..., 0])  # (...,) G_T = 0
    for t in reversed(range(rewards.shape[-1])):
        running = rewards[..., t] + gamma * running
        G[..., t] = running
    return G


def discounted_returns_naive(rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = sum_k gamma^k r_{t+k} as the explicit sum (the reference of
    :func:`discounted_returns`). rewards: (..., T). Returns (..., T)."""
    T = rewards.shape[-1]
    G = torch.zeros_like(rewards)
    for t in range(T):
        for k in range(T - t):
            G[..., t] += gamma**k * rewards[..., t + k]
    return G


def td_errors(rewards: torch.Tensor, values: torch.Tensor, gamma: float) -> torch.Tensor:
    """TD errors delta_t = r_t + gamma V(s_{t+1}) - V(s_t).

    rewards: (..., T); values: (..., T) or (..., T + 1) (see the shape legend). Returns (..., T).
    """
    float_tensor(rewards, "rewards", min_ndim=1, not_empty=True)
    float_tensor(values, "values", min_ndim=1)
    gamma = probability(gamma, "gamma")
    v, v_next = _next_values(rewards, values)
    return rewards + gamma * v_next - v


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """Generalised advantage estimates by the backward recursion A_t = delta_t + gamma lam A_{t+1}.

    Implements eq. 34.5 (right), vectorised over the leading axes. rewards: (..., T); values:
    (..., T) or (..., T + 1) (see the shape legend); gamma, lam in [0, 1]. Returns A: (..., T).
    """
    lam = probability(lam, "lam")
    delta = td_errors(rewards, values, gamma)  # (..., T)
    A = torch.zeros_like(delta)
    running = torch.zeros_like(delta[..., 0])  # (...,) A_T = 0
    for t in reversed(range(delta.shape[-1])):
        running = delta[..., t] + gamma * lam * running
        A[..., t] = running
    return A


def gae_naive(
    rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float
) -> torch.Tensor:
    """A_t = sum_l (gamma lam)^l delta_{t+l} as the explicit sum: eq. 34.5 (left), the reference
    of :func:`gae`. Same arguments and result."""
    delta = td_errors(rewards, values, gamma)
    T = delta.shape[-1]
    A = torch.zeros_like(delta)
    for t in range(T):
        for l in range(T - t):  # noqa: E741 (the l of eq. 34.5)
            A[..., t] += (gamma * lam) ** l * delta[..., t + l]
    return A


# --- importance sampling -----------------------------------------------------------------------


def importance_weights(logp_target: torch.Tensor, logp_behaviour: torch.Tensor) -> torch.Tensor:
    """Importance weights pi(a) / b(a) = exp(log pi(a) - log b(a)) of samples drawn from b.

    Implements the weight of eq. 34.4. logp_target, logp_behaviour: (...) log-probabilities of
    the same samples (summed over the tokens of a sequence for sequence weights). Returns (...).
    """
    float_tensor(logp_target, "logp_target")
    float_tensor(logp_behaviour, "logp_behaviour")
    same_shape(logp_target, logp_behaviour, ("logp_target", "logp_behaviour"))
    return torch.exp(logp_target - logp_behaviour)


def effective_sample_size(weights: torch.Tensor) -> torch.Tensor:
    """Kish's effective sample size (sum w)^2 / sum w^2 along the last axis.

    weights: (..., N) non-negative importance weights. Returns (...): N for equal weights, 1 when
    one weight dominates.
    """
    float_tensor(weights, "weights", min_ndim=1, not_empty=True, all_finite=True)
    return weights.sum(-1) ** 2 / (weights**2).sum(-1)


def completion_log_probs_at(
    logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor, temperature: float
) -> torch.Tensor:
    """(B,) log pi_tau(y | x) of the completions of ``tokens`` (B, T) (the positions where
    ``mask`` (B, T - 1) is 1) when the decoder samples at ``temperature``: p = softmax(z / tau).

    logits: (B, T - 1, V), the decoder's output on ``tokens[:, :-1]``; one forward pass serves
    every temperature. At tau = 1 it is :func:`mlbook.posttraining.task.completion_log_probs`.
    """
    temperature = positive(temperature, "temperature")
    float_tensor(logits, "logits", ndim=3)
    index_tensor(tokens, "tokens", logits.shape[-1], ndim=2)
    shape_is(logits, "logits", (tokens.shape[0], tokens.shape[1] - 1, None))
    logp = torch.log_softmax(logits.double() / temperature, -1)  # (B, T - 1, V)
    picked = logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)  # (B, T - 1)
    return (picked * shape_is(mask, "mask", picked.shape)).sum(-1)


# --- a tabular Markov decision process ---------------------------------------------------------


@dataclass(frozen=True)
class MDP:
    """A finite episodic MDP: P (S, A, S), reward (S, A, S), terminal (S,) bool, start (S,).

    Terminal states are absorbing with zero reward; ``cells`` holds the (row, column) of each
    state of a grid world (for plotting), ``grid`` the (rows, columns) of the grid.
    """

    P: torch.Tensor
    reward: torch.Tensor
    terminal: torch.Tensor
    start: torch.Tensor
    cells: tuple[tuple[int, int], ...] = ()
    grid: tuple[int, int] = (0, 0)

    @property
    def R(self) -> torch.Tensor:
        """(S, A) expected reward of each state and action."""
        return (self.P * self.reward).sum(-1)

    @property
    def n_states(self) -> int:
        return self.P.shape[0]

    @property
    def n_actions(self) -> int:
        return self.P.shape[1]


ACTIONS = ("up", "right", "down", "left")
_MOVES = ((-1, 0), (0, 1), (1, 0), (0, -1))  # (row, column) steps, row 0 at the top


def gridworld(
    slip: float = 0.1,
    step_reward: float = -0.04,
    offset: float = 0.0,
    dtype: torch.dtype = torch.float64,
) -> MDP:
    """The 4 x 3 grid world: start bottom left, a wall at (1, 1), +1 at (0, 3), -1 at (1, 3).

    Each action (up, right, down, left) moves as intended with probability 1 - 2 slip and to
    either side with probability ``slip`` each; a move into the wall or off the grid stays put.
    Every step costs ``step_reward``; entering the +1 or -1 cell adds that reward and ends the
    episode; ``offset`` is added to both of those payoffs, so that every return, and the value
    of every policy, moves by ``offset`` (every episode ends once). Returns an :class:`MDP` with
    S = 11 states and A = 4 actions.
    """
    slip = probability(slip, "slip")
    if slip > 0.5:
        raise ValueError(
            f"slip must be at most 0.5 (then the intended move has 1 - 2 slip), got {slip}"
        )
    rows, cols, wall = 3, 4, (1, 1)
    cells = tuple((r, c) for r in range(rows) for c in range(cols) if (r, c) != wall)
    index = {cell: i for i, cell in enumerate(cells)}
    payoff = {(0, 3): 1.0 + offset, (1, 3): -1.0 + offset}
    S, A = len(cells), len(ACTIONS)
    P = torch.zeros(S, A, S, dtype=dtype)
    reward = torch.zeros(S, A, S, dtype=dtype)
    terminal = torch.tensor([cell in payoff for cell in cells])
    for s, (r, c) in enumerate(cells):
        if (r, c) in payoff:
            P[s, :, s] = 1.0  # absorbing, zero reward
            continue
        for a in range(A):
            for side, p in ((a, 1 - 2 * slip), ((a + 1) % A, slip), ((a - 1) % A, slip)):
                dr, dc = _MOVES[side]
                nxt = (r + dr, c + dc)
                s2 = index.get(nxt, s)  # the wall and the edge: stay
                P[s, a, s2] += p
                reward[s, a, s2] = step_reward + payoff.get(cells[s2], 0.0)
    start = torch.zeros(S, dtype=dtype)
    start[index[(2, 0)]] = 1.0
    return MDP(P, reward, terminal, start, cells, (rows, cols))


def policy_dynamics(mdp: MDP, pi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The Markov chain of a policy: P_pi (S, S) and r_pi (S,), terminal rows set to zero.

    pi: (S, A), rows sum to one. P_pi[s, s'] = sum_a pi(a|s) P(s'|s, a), r_pi[s] =
    sum_a pi(a|s) R(s, a); a terminal state leads nowhere (the episode has ended).
    """
    shape_is(pi, "pi", (mdp.n_states, mdp.n_actions))
    distribution(pi, "pi")
    alive = (~mdp.terminal).to(pi.dtype)[:, None]  # (S, 1)
    P_pi = alive * torch.einsum("sa,sat->st", pi, mdp.P)  # (S, S)
    r_pi = alive[:, 0] * (pi * mdp.R).sum(-1)  # (S,)
    return P_pi, r_pi


def evaluate_policy(mdp: MDP, pi: torch.Tensor, gamma: float) -> torch.Tensor:
    """Exact state values v = (I - gamma P_pi)^{-1} r_pi by a linear solve. Implements eq. 34.1.

    pi: (S, A); gamma in [0, 1] (gamma = 1 needs a policy that ends every episode). Returns
    v: (S,), zero at terminal states. Differentiable in pi.
    """
    gamma = probability(gamma, "gamma")
    P_pi, r_pi = policy_dynamics(mdp, pi)
    M = torch.eye(mdp.n_states, dtype=pi.dtype) - gamma * P_pi  # (S, S)
    nonsingular(M.detach(), "I - gamma P_pi (does the policy end every episode?)")
    return torch.linalg.solve(M, r_pi)


def bellman_backup(mdp: MDP, pi: torch.Tensor, v: torch.Tensor, gamma: float) -> torch.Tensor:
    """One Bellman backup, (T_pi v)(s) = r_pi(s) + gamma sum_s' P_pi(s, s') v(s'). v: (S,)."""
    P_pi, r_pi = policy_dynamics(mdp, pi)
    return r_pi + gamma * P_pi @ v


def evaluate_policy_iterative(mdp: MDP, pi: torch.Tensor, gamma: float, iters: int) -> torch.Tensor:
    """Iterated Bellman backups from v_0 = 0: the (iters + 1, S) iterates v_0, ..., v_iters."""
    gamma = probability(gamma, "gamma")
    P_pi, r_pi = policy_dynamics(mdp, pi)
    vs = [torch.zeros(mdp.n_states, dtype=pi.dtype)]
    for _ in range(positive_int(iters, "iters")):
        vs.append(r_pi + gamma * P_pi @ vs[-1])
    return torch.stack(vs)


def q_values(mdp: MDP, v: torch.Tensor, gamma: float) -> torch.Tensor:
    """Action values q(s, a) = R(s, a) + gamma sum_s' P(s'|s, a) v(s') from state values v (S,);
    zero at terminal states. Returns (S, A)."""
    shape_is(v, "v", (mdp.n_states,))
    alive = (~mdp.terminal).to(v.dtype)[:, None]  # (S, 1)
    return alive * (mdp.R + gamma * mdp.P @ v)


def softmax_policy(theta: torch.Tensor) -> torch.Tensor:
    """pi(a|s) = softmax_a theta(s, a). theta: (S, A). Returns (S, A)."""
    return torch.softmax(theta, dim=-1)


def exact_objective(mdp: MDP, theta: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """J(theta) = sum_s start(s) v_pi(s) for the softmax policy of theta (S, A); a scalar,
    differentiable in theta (autograd then gives the exact policy gradient)."""
    return mdp.start @ evaluate_policy(mdp, softmax_policy(theta), gamma)


@dataclass(frozen=True)
class Episodes:
    """N sampled episodes, padded after their end: states, actions (N, T) int64, rewards (N, T),
    alive (N, T) bool (True at the steps the episode takes)."""

    states: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    alive: torch.Tensor


def rollout(
    mdp: MDP,
    pi: torch.Tensor,
    n: int,
    generator: torch.Generator | None = None,
    *,
    start_state: int | torch.Tensor | None = None,
    first_action: int | torch.Tensor | None = None,
    max_steps: int = 1000,
) -> Episodes:
    """Sample ``n`` episodes until every one has ended.

    pi: (S, A) one policy, or (N, S, A) one policy per episode. Episodes start from
    ``mdp.start`` or from ``start_state`` (an int or (N,) states); ``first_action`` (an int or
    (N,) actions) fixes the first action (the rollouts of an action value). Each step draws
    a ~ pi(.|s) and s' ~ P(.|s, a) by inverting cumulative sums with uniforms from
    ``generator``. Raises if an episode is still running after ``max_steps`` steps.
    """
    n = positive_int(n, "n")
    distribution(pi, "pi")
    shape_is(pi, "pi", (n, mdp.n_states, mdp.n_actions)[3 - pi.ndim :])
    S, A = mdp.n_states, mdp.n_actions
    c_pi = pi.cumsum(-1).expand(n, S, A)  # (N, S, A) cumulative policy of each episode
    c_P = mdp.P.cumsum(-1)  # (S, A, S)
    rows = torch.arange(n)
    if start_state is None:
        u = torch.rand(n, 1, generator=generator, dtype=pi.dtype)
        s = (mdp.start.cumsum(-1) <= u).sum(-1).clamp(max=S - 1)  # (N,)
    else:
        s = torch.as_tensor(start_state).expand(n).clone()
    running = ~mdp.terminal[s]  # (N,)
    states, actions, rewards, alive = [], [], [], []
    for t in range(positive_int(max_steps, "max_steps")):
        if not running.any():
            break
        u = torch.rand(n, 2, generator=generator, dtype=pi.dtype)  # (N, 2)
        a = (c_pi[rows, s] <= u[:, :1]).sum(-1).clamp(max=A - 1)  # (N,) a ~ pi(.|s)
        if t == 0 and first_action is not None:
            a = torch.as_tensor(first_action).expand(n).clone()
        s2 = (c_P[s, a] <= u[:, 1:]).sum(-1).clamp(max=S - 1)  # (N,) s' ~ P(.|s, a)
        states.append(s)
        actions.append(a)
        rewards.append(mdp.reward[s, a, s2] * running)
        alive.append(running)
        running = running & ~mdp.terminal[s2]
        s = s2
    else:
        if running.any():
            raise RuntimeError(
                f"{int(running.sum())} episodes still running after {max_steps} steps"
            )
    return Episodes(*(torch.stack(x, 1) for x in (states, actions, rewards, alive)))


def reinforce_gradient(theta: torch.Tensor, ep: Episodes, weights: torch.Tensor) -> torch.Tensor:
    """Per-episode REINFORCE estimates sum_t w_t grad_theta log pi(a_t|s_t) of a softmax policy.

    Implements eqs. 34.2-34.3 with w_t = G_t (or G_t - b(s_t)). theta: (S, A); ep: N episodes;
    weights: (N, T), ignored after an episode ends. The score of a softmax policy is
    grad_theta(s, .) log pi(a|s) = onehot(a) - pi(.|s) at row s. Returns (N, S, A).
    """
    float_tensor(theta, "theta", ndim=2)
    index_tensor(ep.states, "states", theta.shape[0], ndim=2)
    index_tensor(ep.actions, "actions", theta.shape[1], ndim=2)
    same_shape(weights, ep.states, ("weights", "states"))
    S, A = theta.shape
    pi = softmax_policy(theta)  # (S, A)
    N = ep.states.shape[0]
    w = torch.where(ep.alive, weights, 0.0)  # (N, T)
    score = torch.nn.functional.one_hot(ep.actions, A).to(theta.dtype) - pi[ep.states]  # (N, T, A)
    row = torch.arange(N)[:, None] * S + ep.states  # (N, T) row of (episode, state) in (N S, A)
    out = theta.new_zeros(N * S, A).index_add_(
        0, row.reshape(-1), (w[..., None] * score).reshape(-1, A)
    )
    return out.reshape(N, S, A)


def reinforce_gradient_naive(
    theta: torch.Tensor, ep: Episodes, weights: torch.Tensor
) -> torch.Tensor:
    """:func:`reinforce_gradient` by autograd of sum_t w_t log pi(a_t|s_t), one episode at a
    time (the reference). Same arguments and result."""
    grads = []
    for i in range(ep.states.shape[0]):
        th = theta.detach().clone().requires_grad_(True)
        keep = ep.alive[i]
        logp = torch.log_softmax(th, -1)[ep.states[i][keep], ep.actions[i][keep]]  # (T_i,)
        (g,) = torch.autograd.grad((weights[i][keep] * logp).sum(), th)
        grads.append(g)
    return torch.stack(grads)


def gae_expectation(
    mdp: MDP, pi: torch.Tensor, v_hat: torch.Tensor, gamma: float, lam: float
) -> torch.Tensor:
    """Exact mean of the GAE of the first step, E[A^GAE_0 | s_0 = s, a_0 = a], for a critic
    v_hat (S,) (its terminal entries are taken as 0). Returns (S, A).

    With m(s) = sum_a pi(a|s) E[A_0 | s, a], the recursion of eq. 34.5 gives
    m = (I - gamma lam P_pi)^{-1} delta_pi, where delta(s, a) = R(s, a) + gamma P(s, a) v_hat -
    v_hat(s) is the mean TD error; then E[A_0 | s, a] = delta(s, a) + gamma lam P(s, a) m.
    """
    gamma, lam = probability(gamma, "gamma"), probability(lam, "lam")
    shape_is(v_hat, "v_hat", (mdp.n_states,))
    alive = (~mdp.terminal).to(v_hat.dtype)
    v0 = v_hat * alive  # (S,)
    delta = alive[:, None] * (mdp.R + gamma * mdp.P @ v0 - v0[:, None])  # (S, A)
    P_pi, _ = policy_dynamics(mdp, pi)
    m = torch.linalg.solve(
        torch.eye(mdp.n_states, dtype=v_hat.dtype) - gamma * lam * P_pi, (pi * delta).sum(-1)
    )  # (S,)
    return delta + alive[:, None] * gamma * lam * (mdp.P @ m)
