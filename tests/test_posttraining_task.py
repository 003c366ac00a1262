"""The addition task of chapters 33-44 and the stored pretrained decoders."""

import math

import pytest
import torch

from mlbook.models import checkpoints, training
from mlbook.posttraining import task


def test_vocab_covers_the_pretraining_text_and_round_trips():
    text = task.pretraining_text(n_sentences=50, n_sums=50, seed=1)
    assert task.decode(task.encode(text)) == text
    with pytest.raises(ValueError, match="outside VOCAB"):
        task.encode("3*4")


def test_noisy_sums_are_right_at_the_stated_rate():
    lines = task.pretraining_text(n_sentences=1, n_sums=4000, correct_rate=0.3, seed=2).split()
    sums = [ln for ln in lines if "+" in ln]
    right = sum(int(s[0]) + int(s[2]) == int(s[4:]) for s in sums) / len(sums)
    assert abs(right - 0.3) < 4 * math.sqrt(0.3 * 0.7 / len(sums))


def test_split_is_a_partition_of_the_hundred_problems():
    train, test = task.split(0.3, seed=0)
    assert len(test) == 30 and sorted(train + test) == task.problems()


def test_batch_mask_marks_the_answer_and_its_newline():
    tokens, mask = task.batch([(3, 4), (9, 9)])
    assert [task.decode(r) for r in tokens] == ["\n3+4=7\n\n", "\n9+9=18\n"]
    # mask[b, t] scores token t + 1: "7", "\n" for the first row, "1", "8", "\n" for the second
    assert mask.tolist() == [[0, 0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 1, 1, 1]]
    with pytest.raises(ValueError, match="completions\\[0\\]"):
        task.batch([(1, 1)], ["x"])


def test_completion_mask_stops_after_the_first_newline():
    tokens = torch.stack([task.encode("\n1+1=2\n5"), task.encode("\n1+1=123")])
    assert task.completion_mask(tokens).tolist() == [[0, 0, 0, 0, 1, 1, 0]] + [
        [0, 0, 0, 0, 1, 1, 1]
    ]
    assert task.rewards(tokens).tolist() == [1.0, 0.0]
    assert task.answers(tokens) == ["2", "123"]


def test_completion_log_probs_equal_the_chain_rule_by_hand():
    model = checkpoints.load("draft", dtype=torch.float64)
    tokens, mask = task.batch([(2, 5), (8, 7)])
    got = task.completion_log_probs(model, tokens, mask)
    for b in range(2):
        want = 0.0
        for t in range(task.PROMPT_LEN - 1, tokens.shape[1] - 1):
            if mask[b, t]:
                logits = model(tokens[b : b + 1, : t + 1])[0, -1]
                want += torch.log_softmax(logits, -1)[tokens[b, t + 1]].item()
        assert got[b].item() == pytest.approx(want, abs=1e-10)


def test_stored_models_load_and_reproduce_their_recorded_quality():
    base = checkpoints.load("base")
    info = checkpoints.info("base")
    data = task.encode(
        task.pretraining_text(
            **{k: info[k] for k in ("n_sentences", "n_sums", "correct_rate", "seed")}
        )
    )
    val = data[int(0.95 * len(data)) :]
    assert training.evaluate(base, val) == pytest.approx(info["val_loss"], abs=1e-4)
    assert task.accuracy(base, task.problems()) == pytest.approx(info["greedy_accuracy"])
    assert checkpoints.config("draft").d_model < checkpoints.config("base").d_model
    with pytest.raises(ValueError, match="name"):
        checkpoints.load("large")
