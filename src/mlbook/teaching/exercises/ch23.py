"""Checks of the exercises of chapter 23 (training a GPT from scratch).

Greedy decoding is checked against an argmax loop written here and against ``generate``; the
parameter split against the tensors of ``transformers``' ``GPT2LMHeadModel`` built on the ``meta``
device; the unit conversions against NumPy, and the unigram cross-entropy against character counts
(``collections.Counter``) of the chapter's own corpus, with the bigram model recomputed in NumPy;
the prediction about unshifted targets against a small model trained here (23.4); and the
temperature sweep against ``F.cross_entropy`` and the entropy of ``torch.softmax`` of the scaled
logits (23.5).

Each typical wrong answer is written once, as a function at the end of the module: the checks
evaluate those functions to recognise a mistake, and ``MISTAKES`` lists them for the tests.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import torch
import torch.nn.functional as F

from ...language import language_model as lm
from ...models import decoder, training
from ...models.config import gpt2_config
from ...models.generate import generate
from ..check import fmt
from . import Incorrect, as_tensor, attempt, exercise, expect, expect_answer, expect_tuple


def _argmax_path(
    model, prompts: torch.Tensor, n_new: int, *, window: int | None = None, position: int = -1
) -> torch.Tensor:
    """Greedy tokens with an explicit loop; ``window`` and ``position`` produce the mistakes."""
    window = model.config.max_seq_len if window is None else window
    out = prompts.clone()
    with torch.no_grad():
        for _ in range(n_new):
            logits = model(out[:, -window:])[:, position]  # (B, V)
            out = torch.cat([out, logits.argmax(dim=-1)[:, None]], dim=1)
    return out


@exercise("23.1", "greedy_by_hand")
def greedy_by_hand(answer) -> str:
    """The greedy path against an argmax loop and generate, past the model's context."""
    cfg = gpt2_config(vocab_size=13, d_model=16, n_layers=2, n_heads=2, max_seq_len=8, init_std=0.3)
    gen = torch.Generator().manual_seed(231)
    model = decoder.Decoder(cfg, generator=gen, dtype=torch.float64).eval()
    for B, P, n_new in ((3, 5, 10), (2, 1, 3), (2, 4, 0)):
        prompts = torch.randint(0, cfg.vocab_size, (B, P), generator=gen)
        want = _argmax_path(model, prompts, n_new)
        args = (model, prompts, n_new)
        wrong = {
            "return the prompts followed by the new tokens, shape (B, P + n_new)": (
                greedy_new_tokens_only(*args)
            )
        }
        if n_new:
            wrong["the next token comes from the logits of the last position, model(x)[:, -1]"] = (
                greedy_first_position(*args)
            )
        if P + n_new > cfg.max_seq_len:
            wrong["feed the last max_seq_len tokens, not max_seq_len - 1"] = greedy_short_window(
                *args
            )
        try:
            got = attempt(answer, model, prompts.clone(), n_new)
        except Incorrect as err:
            if "max_seq_len" in str(err):
                raise Incorrect(
                    f"{err}: feed the model only the last max_seq_len tokens, it has "
                    "no position embedding beyond them"
                ) from None
            raise
        expect_answer(
            got,
            want,
            f"greedy_by_hand(model, prompts of shape {(B, P)}, {n_new})",
            wrong=wrong,
            atol=0,
            rtol=0,
        )
        expect(
            isinstance(got, torch.Tensor) and not got.is_floating_point(),
            "greedy_by_hand should return the token ids as an int64 tensor",
        )
        for name, kwargs in (
            ("temperature 0", dict(temperature=0.0)),
            ("top-k = 1 at temperature 1.3", dict(temperature=1.3, top_k=1)),
        ):
            sampled = generate(model, prompts, n_new, torch.Generator().manual_seed(0), **kwargs)
            expect(torch.equal(sampled, want), f"generate with {name} should give the greedy path")
    return (
        "matches an argmax loop for prompts of lengths 5, 1, 4 and outputs longer than the "
        "context of 8, as do generate at temperature 0 and top-k = 1 at temperature 1.3"
    )


def _hf_split(
    vocab_size: int, block_size: int, d_model: int, n_layer: int, tied: bool
) -> tuple[int, int]:
    """(all parameters, embedding parameters) of transformers' GPT-2 of these sizes."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=block_size,
        n_embd=d_model,
        n_layer=n_layer,
        n_head=1,
        tie_word_embeddings=tied,
        bos_token_id=None,
        eos_token_id=None,
    )
    with torch.device("meta"):
        model = GPT2LMHeadModel(config)
    total = sum(p.numel() for p in model.parameters())  # a tied head is counted once
    embeddings = model.transformer.wte.weight.numel() + model.transformer.wpe.weight.numel()
    if not tied:
        embeddings += model.lm_head.weight.numel()
    return total, embeddings


@exercise("23.2", "gpt_parameter_split")
def gpt_parameter_split(answer) -> str:
    """(total, share) against transformers' GPT2LMHeadModel on the meta device."""
    cases = (
        (29, 32, 64, 2, True),
        (50257, 32, 64, 2, False),
        (50257, 1024, 768, 12, True),
        (29, 32, 64, 2, False),
    )
    for V, T, d, L, tied in cases:
        total, emb = _hf_split(V, T, d, L, tied)
        what = f"gpt_parameter_split({V}, {T}, {d}, {L}, tied={tied})"
        out = attempt(answer, V, T, d, L, tied)
        expect(
            isinstance(out, (tuple, list)) and len(out) == 2,
            f"{what} should return a pair (total, share), got {type(out).__name__}",
        )
        args = (V, T, d, L, tied)
        wrong_total = {
            "each block also holds 13d biases and LayerNorm parameters, and the final "
            "LayerNorm 2d more": split_blocks_without_biases(*args)[0]
        }
        if tied:
            wrong_total["a tied head is the embedding matrix itself: count it once"] = (
                split_head_always_counted(*args)[0]
            )
        else:
            wrong_total["an untied head is a second V × d matrix: add V·d to the total"] = (
                split_head_never_counted(*args)[0]
            )
        expect_answer(out[0], total, f"the total of {what}", wrong=wrong_total, atol=0.5, rtol=0)
        share = emb / total
        wrong_share = {
            "the position table (block_size × d) is an embedding too": split_without_positions(
                *args
            )[1],
            "return a fraction in [0, 1], not a percentage": split_percent(*args)[1],
            "divide by the total, not by the parameters outside the embeddings": (
                split_outside_embeddings(*args)[1]
            ),
        }
        if not tied:
            wrong_share[
                "the untied head counts with the embeddings: it is a second V × d matrix"
            ] = split_head_never_counted(*args)[1]
        expect_answer(
            out[1], share, f"the share of {what}", wrong=wrong_share, atol=1e-12, rtol=1e-10
        )
    return (
        "matches the tensors of transformers' GPT2LMHeadModel for the chapter's model, tied "
        "and untied, V = 50,257 untied and the GPT-2 small shape"
    )


def _bits_ppl(out, what: str) -> torch.Tensor:
    if isinstance(out, torch.Tensor) and out.numel() == 2:  # a 2-element tensor is a pair too
        out = tuple(out.reshape(-1))
    values = []
    for v in expect_tuple(out, what, ("bits", "perplexity")):
        t = as_tensor(v, what)
        expect(t.numel() == 1, f"{what} should return two numbers, got shape {tuple(t.shape)}")
        values.append(t.reshape(()))
    return torch.stack(values)


def _corpus() -> tuple[str, str, int]:
    """The chapter's corpus and its 90/10 split, as text."""
    text = lm.toy_corpus(4000, seed=0)
    n_train = int(0.9 * len(text))
    return text[:n_train], text[n_train:], len(set(text))


@exercise("23.3", "bits_and_perplexity", "unigram_cross_entropy")
def units_and_unigram(convert, unigram) -> str:
    """Bits and perplexity against NumPy; the unigram cross-entropy against character counts."""
    for loss in (0.775, 0.0, math.log(29), 2.5):
        bits, ppl = float(np.log2(np.exp(loss))), float(np.exp(loss))
        what = f"bits_and_perplexity({loss:.4g})"
        expect_answer(
            _bits_ppl(attempt(convert, loss), what),
            torch.tensor([bits, ppl], dtype=torch.float64),
            what,
            wrong={
                "bits = nats / ln 2 (one bit is ln 2 nats), not nats × ln 2": list(
                    units_times_ln2(loss)
                ),
                "perplexity is e^L for a loss in nats (2^L is for a loss in bits)": list(
                    units_base_two(loss)
                ),
                "return (bits, perplexity) in that order": list(units_swapped(loss)),
            },
            atol=1e-9,
            rtol=1e-6,
        )

    train_text, val_text, V = _corpus()
    vocab = lm.build_vocab(train_text + val_text)
    train, val = lm.encode(train_text, vocab), lm.encode(val_text, vocab)
    counts = Counter(train_text)
    n = len(train_text)
    want = -sum(math.log(counts[c] / n) for c in val_text) / len(val_text)
    what = "unigram_cross_entropy(train, val, V) on the chapter's corpus"
    args = (train, val, V)
    got = expect_answer(
        attempt(unigram, train.clone(), val.clone(), V),
        want,
        what,
        wrong={
            "that is the entropy of the training frequencies; score the validation characters "
            "with them": unigram_train_entropy(*args),
            "count the frequencies on the training text, then score the validation text": (
                unigram_val_frequencies(*args)
            ),
            "in nats: use the natural logarithm, not log2": unigram_log2(*args),
            "take the mean over the validation characters, not the sum": unigram_sum(*args),
            "the sign is flipped: the cross-entropy -mean log p is positive": -want,
        },
        atol=1e-9,
        rtol=1e-6,
    )
    ids_train, ids_val = np.array(train.tolist()), np.array(val.tolist())
    pairs = np.ones((V, V))  # add-one smoothing
    np.add.at(pairs, (ids_train[:-1], ids_train[1:]), 1.0)
    bigram = pairs / pairs.sum(axis=1, keepdims=True)
    bigram_val = -np.log(bigram[ids_val[:-1], ids_val[1:]]).mean()
    expect(
        bigram_val < float(got) < math.log(V),
        "the unigram cross-entropy should lie between the bigram model's and log V",
    )

    small_train = torch.tensor([0, 1, 1, 2, 2, 2, 3, 3, 3, 3, 5])
    small_val = torch.tensor([5, 3, 3, 0, 2])
    c = Counter(small_train.tolist())
    want_small = -sum(math.log(c[i] / 11) for i in small_val.tolist()) / 5
    expect_answer(
        attempt(unigram, small_train.clone(), small_val.clone(), 6),
        want_small,
        "unigram_cross_entropy on 11 ids with V = 6 (id 4 never occurs)",
        atol=1e-9,
        rtol=1e-6,
    )
    return (
        "bits and perplexity match NumPy for 4 losses; the unigram cross-entropy matches "
        "character counts of the chapter's corpus and lies between the bigram model's "
        "and log V"
    )


# --- 23.4 ------------------------------------------------------------------------------------


OPTIONS = ("near zero", "about the bigram loss", "about log V", "far above log V")


def _unshifted_run() -> tuple[float, float, float]:
    """Train a small GPT with targets = inputs (the shift forgotten) on the chapter's corpus.

    Returns its loss on unshifted validation windows, on the real next-token task, and log V.
    """
    text = lm.toy_corpus(400, seed=1)
    vocab = lm.build_vocab(text)
    data = lm.encode(text, vocab)
    train, val = data[: int(0.9 * len(data))], data[int(0.9 * len(data)) :]
    cfg = gpt2_config(vocab_size=len(vocab), d_model=32, n_layers=1, n_heads=2, max_seq_len=16)
    model = decoder.Decoder(cfg, generator=torch.Generator().manual_seed(234))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(30):
        x, _ = training.get_batch(train, 8, 16, gen)
        loss = F.cross_entropy(model(x).transpose(1, 2), x)  # the bug: y = x
        opt.zero_grad()
        loss.backward()
        opt.step()
    n = (len(val) - 1) // 16
    xv = val[: n * 16].view(n, 16)
    with torch.no_grad():
        copy = F.cross_entropy(model(xv).transpose(1, 2), xv).item()
        real = F.cross_entropy(model(xv[:, :-1]).transpose(1, 2), xv[:, 1:]).item()
    return copy, real, math.log(len(vocab))


@exercise("23.4", "predict_unshifted_loss")
def unshifted_loss(answer) -> str:
    """The chosen option against a model trained here with the shift forgotten."""
    what = "predict_unshifted_loss()"
    guess = attempt(answer)
    expect(
        guess in OPTIONS,
        f"{what} should return one of {', '.join(repr(o) for o in OPTIONS)}, got {guess!r}",
    )
    copy, real, log_v = _unshifted_run()
    expect(copy < 0.2 < log_v < real, "internal: the run should copy its input")
    reveal = (
        f"after 30 updates the loss on unshifted validation windows is {fmt(copy, 2)} nats, "
        f"while on the real task, predicting the next character, the same model scores "
        f"{fmt(real, 3)}, above log V = {fmt(log_v, 3)}"
    )
    if guess == OPTIONS[0]:
        return (
            f"right: {reveal}. With y = x the output at position t is asked for the token at t, "
            "which the model sees: it learns to copy (the tied head helps), so a loss far below "
            "log V early in training points to targets that were not shifted"
        )
    why = {
        OPTIONS[1]: "the bigram model predicts the next character; with y = x there is nothing "
        "to predict",
        OPTIONS[2]: "log V is the loss of a model that knows nothing, but here the answer is in "
        "the input",
        OPTIONS[3]: "only the real next-token task, which the model never trained on, lands there",
    }[guess]
    raise Incorrect(f"{what} = {guess!r}: {why}; {reveal}")


# --- 23.5 ------------------------------------------------------------------------------------


TAUS = (0.5, 0.8, 1.0, 1.25, 2.0)


def _sweep_reference(model, tokens, taus):
    """(loss, entropy) of softmax(z / tau) on the next tokens, with F.cross_entropy."""
    with torch.no_grad():
        z = model(tokens[:, :-1])  # (B, T - 1, V)
    out = []
    for tau in taus:
        logp = torch.log_softmax(z / tau, dim=-1)
        loss = F.cross_entropy((z / tau).transpose(1, 2), tokens[:, 1:]).item()
        entropy = -(logp.exp() * logp).sum(-1).mean().item()
        out.append((loss, entropy))
    return out


@exercise("23.5", "temperature_sweep")
def temperature_sweep(answer) -> str:
    """Loss and entropy of softmax(z / tau) against F.cross_entropy and the softmax's entropy."""
    cfg = gpt2_config(
        vocab_size=11, d_model=16, n_layers=1, n_heads=2, max_seq_len=12, init_std=0.4
    )
    model = decoder.Decoder(cfg, generator=torch.Generator().manual_seed(235), dtype=torch.float64)
    model.eval()
    tokens = torch.randint(0, 11, (6, 12), generator=torch.Generator().manual_seed(1))
    want = torch.tensor(_sweep_reference(model, tokens, TAUS), dtype=torch.float64)  # (5, 2)
    what = f"temperature_sweep(model, tokens, {list(TAUS)})"
    got = attempt(answer, model, tokens.clone(), list(TAUS))
    expect(
        isinstance(got, (list, tuple)) and len(got) == len(TAUS),
        f"{what} should return a list of {len(TAUS)} pairs (loss, entropy), one per tau",
    )
    pairs = [
        expect_tuple(p, f"{what} at tau = {t}", ("loss", "entropy"))
        for p, t in zip(got, TAUS, strict=True)
    ]
    values = torch.tensor([[float(as_tensor(v, what).reshape(())) for v in p] for p in pairs])
    args = (model, tokens, list(TAUS))
    expect_answer(
        values.double(),
        want,
        what + " as (loss, entropy) pairs",
        wrong={
            "the logits are multiplied by tau; temperature divides them, softmax(z / tau)": (
                torch.tensor(sweep_times_tau(*args))
            ),
            "the loss ignores tau: score the targets under softmax(z / tau) too": torch.tensor(
                sweep_loss_at_one(*args)
            ),
            "the entropy is in bits; the book measures in nats (natural log)": torch.tensor(
                sweep_entropy_bits(*args)
            ),
            "the targets are the inputs; position t predicts the token at t + 1": torch.tensor(
                sweep_unshifted(*args)
            ),
        },
        atol=1e-8,
        rtol=1e-6,
    )
    return (
        f"the losses and entropies match F.cross_entropy and the entropy of softmax(z / tau) "
        f"for tau = {', '.join(map(str, TAUS))} on a small random GPT; the entropy rises with "
        "tau at every position, as it must"
    )


# Typical wrong answers, written once: the checks above evaluate them to name a mistake, and the
# tests build each one and check that it is rejected with its feedback ---------------------------


# --- 23.1 ---


def greedy_uncropped(model, prompts, n_new):
    out = prompts.clone()
    with torch.no_grad():
        for _ in range(n_new):
            out = torch.cat([out, model(out)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return out


def greedy_first_position(model, prompts, n_new):
    return _argmax_path(model, prompts, n_new, position=0)


def greedy_new_tokens_only(model, prompts, n_new):
    return _argmax_path(model, prompts, n_new)[:, prompts.shape[1] :]


def greedy_short_window(model, prompts, n_new):
    return _argmax_path(model, prompts, n_new, window=model.config.max_seq_len - 1)


def greedy_float(model, prompts, n_new):
    return _argmax_path(model, prompts, n_new).double()


# --- 23.2 ---


def _split(V, T, d, L, tied=True):
    """(total, share): embeddings (V + T) d, blocks L (12 d^2 + 13 d), final LayerNorm 2 d."""
    head = 0 if tied else V * d
    total = (V + T) * d + L * (12 * d * d + 13 * d) + 2 * d + head
    return total, ((V + T) * d + head) / total


def split_head_always_counted(V, T, d, L, tied=True):
    return _split(V, T, d, L, False)


def split_head_never_counted(V, T, d, L, tied=True):
    total, _ = _split(V, T, d, L, True)
    return total, (V + T) * d / total


def split_without_positions(V, T, d, L, tied=True):
    total, share = _split(V, T, d, L, tied)
    return total, share - T * d / total


def split_percent(V, T, d, L, tied=True):
    total, share = _split(V, T, d, L, tied)
    return total, 100 * share


def split_outside_embeddings(V, T, d, L, tied=True):
    total, share = _split(V, T, d, L, tied)
    return total, share / (1 - share)


def split_blocks_without_biases(V, T, d, L, tied=True):
    total, _ = _split(V, T, d, L, tied)
    total -= L * 13 * d + 2 * d
    head = 0 if tied else V * d
    return total, ((V + T) * d + head) / total


# --- 23.3 ---


def _units(loss):
    return loss / math.log(2), math.exp(loss)


def _unigram(train, val, V):
    freq = torch.bincount(train, minlength=V).double() / len(train)
    return -freq[val].log().mean().item()


def units_times_ln2(loss):
    return loss * math.log(2), math.exp(loss)


def units_base_two(loss):
    return loss / math.log(2), 2.0**loss


def units_swapped(loss):
    return math.exp(loss), loss / math.log(2)


def units_bits_only(loss):
    return loss / math.log(2)


def unigram_train_entropy(train, val, V):
    freq = torch.bincount(train, minlength=V).double() / len(train)
    nz = freq[freq > 0]
    return -(nz * nz.log()).sum().item()


def unigram_val_frequencies(train, val, V):
    freq = torch.bincount(val, minlength=V).double() / len(val)
    return -freq[val].log().mean().item()


def unigram_log2(train, val, V):
    return _unigram(train, val, V) / math.log(2)


def unigram_sum(train, val, V):
    return _unigram(train, val, V) * len(val)


# --- 23.4 ---


def predict_bigram():
    return OPTIONS[1]


def predict_log_v():
    return OPTIONS[2]


def predict_above_log_v():
    return OPTIONS[3]


def predict_number():
    return 0.0


# --- 23.5 ---


def _sweep_variant(model, tokens, taus, *, scale, loss_tau=True, bits=False, shift=1):
    """(loss, entropy) pairs with one choice changed (the mistakes below)."""
    with torch.no_grad():
        z = model(tokens[:, :-1])  # (B, T - 1, V)
    targets = tokens[:, shift : tokens.shape[1] - 1 + shift]
    out = []
    for tau in taus:
        zt = scale(z, tau)
        loss = F.cross_entropy((zt if loss_tau else z).transpose(1, 2), targets).item()
        p = torch.softmax(zt, dim=-1)
        entropy = -(p * p.log()).sum(-1).mean().item()
        out.append((loss, entropy / math.log(2) if bits else entropy))
    return out


def sweep_times_tau(model, tokens, taus):
    return _sweep_variant(model, tokens, taus, scale=lambda z, t: z * t)


def sweep_loss_at_one(model, tokens, taus):
    return _sweep_variant(model, tokens, taus, scale=lambda z, t: z / t, loss_tau=False)


def sweep_entropy_bits(model, tokens, taus):
    return _sweep_variant(model, tokens, taus, scale=lambda z, t: z / t, bits=True)


def sweep_unshifted(model, tokens, taus):
    return _sweep_variant(model, tokens, taus, scale=lambda z, t: z / t, shift=0)


def sweep_losses_only(model, tokens, taus):
    return [loss for loss, _ in _sweep_reference(model, tokens, taus)]


MISTAKES = {
    "23.1": [
        (greedy_uncropped, "feed the model only the last max_seq_len tokens"),
        (greedy_first_position, "logits of the last position"),
        (greedy_new_tokens_only, "followed by the new tokens"),
        (greedy_short_window, "not max_seq_len - 1"),
        (greedy_float, "int64 tensor"),
    ],
    "23.2": [
        (split_head_always_counted, "count it once"),
        (split_head_never_counted, "is a second V × d matrix: add V·d"),
        (split_without_positions, "position table"),
        (split_percent, "not a percentage"),
        (split_outside_embeddings, "outside the embeddings"),
        (split_blocks_without_biases, "13d biases"),
    ],
    "23.3": [
        ((units_times_ln2, _unigram), "not nats × ln 2"),
        ((units_base_two, _unigram), "perplexity is e^L"),
        ((units_swapped, _unigram), "in that order"),
        ((units_bits_only, _unigram), "should return a pair"),
        ((_units, unigram_train_entropy), "entropy of the training frequencies"),
        ((_units, unigram_val_frequencies), "count the frequencies on the training text"),
        ((_units, unigram_log2), "natural logarithm"),
        ((_units, unigram_sum), "not the sum"),
    ],
    "23.4": [
        (predict_bigram, "nothing to predict"),
        (predict_log_v, "the answer is in the input"),
        (predict_above_log_v, "never trained on"),
        (predict_number, "should return one of"),
    ],
    "23.5": [
        (sweep_times_tau, "multiplied by tau"),
        (sweep_loss_at_one, "the loss ignores tau"),
        (sweep_entropy_bits, "in bits"),
        (sweep_unshifted, "the targets are the inputs"),
        (sweep_losses_only, "should return a pair (loss, entropy)"),
    ],
}
