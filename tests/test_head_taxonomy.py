"""Unit tests of mlbook.attention.head_taxonomy: scores by hand, synthetic heads of every kind."""

import math

import numpy as np
import pytest
import torch

from mlbook.attention import head_taxonomy as ht


def test_scores_by_hand():
    """A 5-token map whose scores are easy to compute by hand."""
    T = 5
    a = torch.full((T, T), 1.0 / T, dtype=torch.float64)
    a[2] = torch.tensor([0.1, 0.6, 0.2, 0.1, 0.0], dtype=torch.float64)  # content rows are 1, 2, 3
    s = ht.taxonomy_scores(a)
    # previous: content rows with a content predecessor are 2, 3: a[2,1], a[3,2] = 0.6, 0.2;
    # next: rows 1, 2 (row 3's successor is [SEP]): a[1,2], a[2,3] = 0.2, 0.1
    assert math.isclose(float(s["previous"]), (0.6 + 0.2) / 2, abs_tol=1e-12)
    assert math.isclose(float(s["next"]), (0.2 + 0.1) / 2, abs_tol=1e-12)
    assert math.isclose(float(s["self"]), (0.2 + 0.2 + 0.2) / 3, abs_tol=1e-12)
    assert math.isclose(float(s["sink"]), (0.4 + 0.1 + 0.4) / 3, abs_tol=1e-12)
    h_row2 = -sum(p * math.log(p) for p in (0.1, 0.6, 0.2, 0.1))
    assert math.isclose(float(s["entropy"]), (2 * 1.0 + h_row2 / math.log(T)) / 3, abs_tol=1e-12)


def test_no_special_tokens_and_batch_shapes():
    g = torch.Generator().manual_seed(0)
    maps = torch.softmax(torch.randn(3, 4, 6, 6, generator=g), -1)
    s = ht.taxonomy_scores(maps, special=())
    assert all(v.shape == (3, 4) for v in s.values())
    assert float(s["sink"].abs().max()) == 0.0
    ref = maps.double().diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)  # rows 1..5
    torch.testing.assert_close(s["previous"], ref, atol=1e-12, rtol=0)
    assert ht.classify_heads(s).shape == (3, 4)


@pytest.mark.parametrize("kind", ht.CLASSES)
@pytest.mark.parametrize("T", [6, 12, 30])
def test_synthetic_maps_are_classified_correctly(kind, T):
    g = torch.Generator().manual_seed(T)
    for _ in range(5):
        m = ht.synthetic_map(kind, T, generator=g)
        torch.testing.assert_close(
            m.sum(-1), torch.ones(T, dtype=torch.float64), atol=1e-12, rtol=0
        )
        assert ht.classify_heads(ht.taxonomy_scores(m)).item() == kind


def test_threshold_is_the_boundary():
    """A previous-token head with peak p is 'previous' iff its score reaches the threshold."""
    g = torch.Generator().manual_seed(1)
    m = ht.synthetic_map("previous", 10, peak=0.6, generator=g)
    s = ht.taxonomy_scores(m)
    score = float(s["previous"])
    assert ht.classify_heads(s, ht.Thresholds(mass=score)).item() == "previous"
    assert ht.classify_heads(s, ht.Thresholds(mass=score + 1e-9)).item() != "previous"


def test_mean_scores_and_table():
    g = torch.Generator().manual_seed(2)
    maps = [torch.softmax(torch.randn(2, 3, T, T, generator=g), -1) for T in (6, 9)]
    scores = [ht.taxonomy_scores(m) for m in maps]
    mean = ht.mean_scores(scores)
    torch.testing.assert_close(mean["self"], (scores[0]["self"] + scores[1]["self"]) / 2)
    classes = ht.classify_heads(mean)
    table = ht.score_table(mean, classes)
    assert len(table.splitlines()) == 2 + 6
    assert all(c in ht.CLASSES for c in np.ravel(classes))


def test_offset_profile_against_loops_and_scores():
    g = torch.Generator().manual_seed(3)
    maps = torch.softmax(torch.randn(2, 3, 9, 9, generator=g, dtype=torch.float64), -1)
    K = 10  # larger than T: the far offsets have no rows and must be nan
    prof = ht.offset_profile(maps, K)
    assert prof.shape == (2, 3, 2 * K + 1)
    content = range(1, 8)  # T = 9: [CLS] + 7 words + [SEP]
    for n, k in enumerate(range(-K, K + 1)):
        vals = [maps[..., i, i + k] for i in content if i + k in content]
        if vals:
            torch.testing.assert_close(prof[..., n], torch.stack(vals).mean(0), atol=1e-12, rtol=0)
        else:
            assert torch.isnan(prof[..., n]).all()
    s = ht.taxonomy_scores(maps)
    for name, k in (("previous", -1), ("self", 0), ("next", 1)):
        torch.testing.assert_close(prof[..., K + k], s[name], atol=1e-12, rtol=0)


def test_bad_inputs():
    good = torch.softmax(torch.randn(6, 6), -1)
    with pytest.raises(TypeError, match="attn must be a torch.Tensor"):
        ht.taxonomy_scores(good.numpy())
    with pytest.raises(ValueError, match="attn must have shape"):
        ht.taxonomy_scores(torch.rand(4, 5))
    with pytest.raises(ValueError, match="sum to one"):
        ht.taxonomy_scores(torch.rand(6, 6) + 1)  # rows do not sum to 1
    with pytest.raises(ValueError, match="non-negative"):
        ht.taxonomy_scores(-good)
    with pytest.raises(TypeError, match="floating-point"):
        ht.taxonomy_scores(good.long())
    with pytest.raises(ValueError, match="special index"):
        ht.taxonomy_scores(good, special=(0, 6))
    with pytest.raises(ValueError, match="repeat"):
        ht.taxonomy_scores(good, special=(0, -6))  # the same token twice
    with pytest.raises(TypeError, match="not iterable"):
        ht.taxonomy_scores(good, special=0)
    with pytest.raises(ValueError, match="2 content tokens"):
        ht.taxonomy_scores(torch.softmax(torch.randn(3, 3), -1))  # one content token
    with pytest.raises(ValueError, match="Thresholds.mass"):
        ht.Thresholds(mass=0.0)
    with pytest.raises(TypeError, match="Thresholds.broad"):
        ht.Thresholds(broad="high")
    with pytest.raises(ValueError, match="score_list must not be empty"):
        ht.mean_scores([])
    with pytest.raises(ValueError, match="kind"):
        ht.synthetic_map("diagonal", 8)
    with pytest.raises(ValueError, match="T must be in"):
        ht.synthetic_map("self", 4)
    with pytest.raises(ValueError, match="peak"):
        ht.synthetic_map("self", 8, peak=1.0)
    with pytest.raises(ValueError, match=r"need \(L, H\) scores and classes"):
        ht.score_table(ht.taxonomy_scores(good), np.array(["self"]))
    with pytest.raises(ValueError, match="max_offset"):
        ht.offset_profile(good, 0)
    with pytest.raises(TypeError, match="attn must be a torch.Tensor"):
        ht.offset_profile(good.tolist())
