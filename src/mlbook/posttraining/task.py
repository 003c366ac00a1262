"""The task that chapters 33-44 fine-tune, align, decode and serve: one-digit addition.

A prompt is ``"\\n3+4="`` (a line starts, two digits and the operators), its completion the sum
and a newline, ``"7\\n"``. The book's decoder is pretrained (``scripts/pretrain_decoders.py``,
loaded by :func:`mlbook.models.checkpoints.load`) on sentences of the toy corpus mixed with
addition lines whose sums are right only ``correct_rate`` of the time, like arithmetic met in
the wild. Its greedy answers are then mostly right and its samples often wrong: the room that
supervised fine-tuning, preference optimisation and reinforcement learning with this exact-match
(verifiable) reward then close.

Shape legend
    B sequences;  P prompt tokens (5);  C completion tokens (at most 3);  T = P + C
    tokens (B, T) int64 ids of :data:`VOCAB`;  mask (B, T - 1) float, 1 where the next-token
    prediction t -> t + 1 belongs to the completion (up to and including its newline)
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from ..language import language_model as lm
from ..models.decoder import Decoder
from ..models.generate import generate
from ..validation import index_tensor, integer, number, positive_int, probability, shape_is

__all__ = [
    "VOCAB",
    "PROMPT_LEN",
    "MAX_COMPLETION",
    "problems",
    "split",
    "encode",
    "decode",
    "prompt_tokens",
    "batch",
    "pretraining_text",
    "token_log_probs",
    "completion_log_probs",
    "completion_mask",
    "sample",
    "answers",
    "rewards",
    "accuracy",
]

#: The characters of the toy corpus, the digits and the two operators; id = position.
VOCAB: tuple[str, ...] = tuple("\n ,.abcdefghiklmnopqrstuvwxyz0123456789+=")
_ID = {c: i for i, c in enumerate(VOCAB)}
PROMPT_LEN = 5  # "\n", a, "+", b, "="
MAX_COMPLETION = 3  # two digits and the newline


def problems(max_operand: int = 9) -> list[tuple[int, int]]:
    """Every pair (a, b) with 0 <= a, b <= max_operand, in order (100 pairs by default)."""
    m = integer(max_operand, "max_operand", low=0, high=9)
    return [(a, b) for a in range(m + 1) for b in range(m + 1)]


def split(test_fraction: float = 0.3, seed: int = 0) -> tuple[list, list]:
    """The 100 problems shuffled by ``seed`` into (train, test); the test pairs are held out."""
    pairs = problems()
    random.Random(seed).shuffle(pairs)
    n_test = round(probability(test_fraction, "test_fraction") * len(pairs))
    return pairs[n_test:], pairs[:n_test]


def encode(text: str) -> torch.Tensor:
    """(len(text),) int64 ids of a text over :data:`VOCAB`."""
    bad = sorted(set(text) - set(VOCAB))
    if bad:
        raise ValueError(f"text has characters outside VOCAB: {bad}")
    return torch.tensor([_ID[c] for c in text], dtype=torch.long)


def decode(ids) -> str:
    """The text of a sequence of ids."""
    return lm.decode(ids, VOCAB)


def prompt_tokens(pairs: Sequence[tuple[int, int]]) -> torch.Tensor:
    """(B, 5) ids of the prompts "\\na+b=" of B problems."""
    if not pairs:
        raise ValueError("pairs must not be empty")
    return torch.stack([encode(f"\n{a}+{b}=") for a, b in pairs])


def batch(
    pairs: Sequence[tuple[int, int]], completions: Sequence[str] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts followed by completions (default: the right sums), as tokens and a loss mask.

    Each completion is the answer text without its newline ("7"); the newline is appended and
    the rest padded with newlines. Returns tokens (B, 5 + 3) and mask (B, 7): mask[b, t] = 1
    where token t + 1 is part of completion b (its digits and its newline).
    """
    if completions is None:
        completions = [str(a + b) for a, b in pairs]
    if len(completions) != len(pairs):
        raise ValueError(f"completions has {len(completions)} entries for {len(pairs)} pairs")
    rows, mask = [], torch.zeros(len(pairs), PROMPT_LEN + MAX_COMPLETION - 1)
    for b, (text, (x, y)) in enumerate(zip(completions, pairs, strict=True)):
        if not 1 <= len(text) < MAX_COMPLETION or not text.isdigit():
            raise ValueError(f"completions[{b}] must be 1-2 digits, got {text!r}")
        body = f"\n{x}+{y}={text}\n"
        rows.append(encode(body.ljust(PROMPT_LEN + MAX_COMPLETION, "\n")))
        mask[b, PROMPT_LEN - 1 : len(body) - 1] = 1.0
    return torch.stack(rows), mask


def pretraining_text(
    n_sentences: int = 3000, n_sums: int = 3000, correct_rate: float = 0.5, seed: int = 0
) -> str:
    """Toy-corpus sentences and addition lines "a+b=c", shuffled together, one per line.

    Each sum is right with probability ``correct_rate``, otherwise a wrong sum drawn uniformly
    from the other values 0..18.
    """
    rng = random.Random(seed)
    lines = lm.toy_corpus(positive_int(n_sentences, "n_sentences"), seed=seed).splitlines()
    q = probability(correct_rate, "correct_rate")
    for _ in range(positive_int(n_sums, "n_sums")):
        a, b = rng.randrange(10), rng.randrange(10)
        c = a + b if rng.random() < q else rng.choice([v for v in range(19) if v != a + b])
        lines.append(f"{a}+{b}={c}")
    rng.shuffle(lines)
    return "\n" + "\n".join(lines) + "\n"


def token_log_probs(model: Decoder, tokens: torch.Tensor) -> torch.Tensor:
    """(B, T - 1) log p(x_{t+1} | x_<=t) of every next token of ``tokens`` (B, T), one pass."""
    index_tensor(tokens, "tokens", model.config.vocab_size, ndim=2)
    logp = torch.log_softmax(model(tokens[:, :-1]).double(), dim=-1)  # (B, T-1, V)
    return logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)  # (B, T-1)


def completion_log_probs(model: Decoder, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) log pi(y | x): the log-probabilities of the completion tokens (mask 1), summed."""
    lp = token_log_probs(model, tokens)
    return (lp * shape_is(mask, "mask", lp.shape)).sum(-1)


def completion_mask(tokens: torch.Tensor) -> torch.Tensor:
    """(B, T - 1) mask of sampled completions: up to and including the first newline after the
    prompt (every completion token when there is none)."""
    index_tensor(tokens, "tokens", len(VOCAB), ndim=2)
    after = tokens[:, PROMPT_LEN:] == _ID["\n"]  # (B, C)
    ended_before = (after.cumsum(1) - after.long()) > 0  # a newline came earlier
    mask = torch.zeros(tokens.shape[0], tokens.shape[1] - 1)
    mask[:, PROMPT_LEN - 1 :] = (~ended_before).float()
    return mask


def sample(
    model: Decoder,
    pairs: Sequence[tuple[int, int]],
    n: int = 1,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` completions per problem (temperature 0: greedy), B = n len(pairs), problem-major.

    Returns tokens (B, 5 + 3) and their :func:`completion_mask` (B, 7).
    """
    prompts = prompt_tokens(pairs).repeat_interleave(positive_int(n, "n"), dim=0)  # (B, 5)
    tau = number(temperature, "temperature", 0.0)
    tokens = generate(model, prompts, MAX_COMPLETION, generator=generator, temperature=tau)
    return tokens, completion_mask(tokens)


def answers(tokens: torch.Tensor) -> list[str]:
    """The completion text of each row: what follows the prompt, up to the first newline."""
    return [decode(row[PROMPT_LEN:]).split("\n")[0] for row in tokens.tolist()]


def rewards(tokens: torch.Tensor) -> torch.Tensor:
    """(B,) float: 1 where the completion is exactly the right sum (then a newline), else 0."""
    out = []
    for row in tokens.tolist():
        text = decode(row[1:])  # "a+b=..."
        a, b = int(text[0]), int(text[2])
        out.append(float(text[4:].startswith(f"{a + b}\n")))
    return torch.tensor(out)


def accuracy(
    model: Decoder,
    pairs: Sequence[tuple[int, int]],
    n: int = 1,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> float:
    """Mean exact-match reward of ``n`` completions per problem (temperature 0: greedy)."""
    tokens, _ = sample(model, pairs, n, temperature, generator)
    return rewards(tokens).mean().item()
