"""Unit tests of mlbook.attention.pretrained: offline fallback, attention maps, the hub path.

The packaged MiniLM encoder loads offline; the hub test runs only where a hub is reachable.
"""

import contextlib
import io
import socket

import pytest
import torch

from mlbook.attention import dot_product as at
from mlbook.attention import pretrained as pt

SENTENCE = "The bank of the river was steep."


@pytest.fixture(scope="module")
def offline_encoder():
    """load_encoder() with the hub switched off: it must fall back quietly to the package."""
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        mp.setenv("HF_HUB_OFFLINE", "1")
        enc = pt.load_encoder()
    return enc, err.getvalue()


def test_offline_load_falls_back_to_package(offline_encoder):
    enc, stderr = offline_encoder
    assert stderr == ""
    assert enc.source == "package" and enc.name == pt.PACKAGE_MODEL
    assert "HF_HUB_OFFLINE" in enc.message and pt.TURKISH_BERT in enc.message
    assert "\n" not in enc.message
    assert (enc.num_layers, enc.num_heads) == (6, 12)
    assert not enc.model.training
    with pytest.raises(AttributeError, match="assign"):
        enc.source = "hub"  # frozen


def test_attention_maps_are_row_stochastic_and_quiet(offline_encoder, capfd):
    enc, _ = offline_encoder
    tokens, attn = pt.attention_maps(enc, SENTENCE)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "bank" in tokens
    T = len(tokens)
    assert attn.shape == (6, 12, T, T) and attn.dtype == torch.float32
    torch.testing.assert_close(attn.sum(-1), torch.ones(6, 12, T), atol=1e-5, rtol=0)
    out = capfd.readouterr()
    assert out.err == ""


def test_maps_are_scaled_dot_product_attention(offline_encoder):
    """Independent check: recompute each layer's maps from its own projections (eq. 19.1)."""
    enc, _ = offline_encoder
    _, attn = pt.attention_maps(enc, SENTENCE)
    for layer in (0, 3, 5):
        q, k, v = pt.layer_qkv(enc, SENTENCE, layer)
        assert q.shape == (12, attn.shape[-1], 32)
        _, w = at.scaled_dot_product_attention(q, k, v)
        torch.testing.assert_close(w, attn[layer], atol=2e-6, rtol=0)


def test_word_pieces_and_head_scores(offline_encoder):
    enc, _ = offline_encoder
    tokens, attn = pt.attention_maps(enc, SENTENCE)
    words = pt.word_pieces(enc, SENTENCE)
    assert [w for w, _ in words] == ["The", "bank", "of", "the", "river", "was", "steep", "."]
    pieces = pt.word_pieces(enc, "unbelievably steep")  # split into word pieces
    assert pieces[0][0] == "unbelievably" and len(pieces[0][1]) > 1
    assert "".join(tokens[i] for i in dict(words)["bank"]) == "bank"
    s = pt.head_scores(attn, [2], [5, 6])
    torch.testing.assert_close(s, attn[:, :, 2, 5] + attn[:, :, 2, 6])
    s2 = pt.head_scores(attn, [2, 5], 1)
    torch.testing.assert_close(s2, (attn[:, :, 2, 1] + attn[:, :, 5, 1]) / 2)
    assert s.shape == (6, 12) and (s >= 0).all() and (s <= 1 + 1e-6).all()


def test_bad_input(offline_encoder, monkeypatch):
    enc, _ = offline_encoder
    with pytest.raises(ValueError, match="4 axes"):
        pt.head_scores(torch.ones(2, 3, 4), 0, 1)
    with pytest.raises(ValueError, match="attn must have shape"):
        pt.head_scores(torch.ones(1, 1, 4, 5), 0, 1)
    with pytest.raises(ValueError, match="key must hold indices"):
        pt.head_scores(torch.ones(1, 1, 4, 4), 0, [9])
    with pytest.raises(ValueError, match="key must hold indices"):  # would wrap around
        pt.head_scores(torch.ones(1, 1, 4, 4), 0, [-1])
    with pytest.raises(ValueError, match="query must not be empty"):  # would average to nan
        pt.head_scores(torch.ones(1, 1, 4, 4), [], 1)
    with pytest.raises(ValueError, match="layer"):
        pt.layer_qkv(enc, SENTENCE, 6)
    with pytest.raises(ValueError, match="prefer"):
        pt.load_encoder("")
    with pytest.raises(ValueError, match="timeout"):
        pt.hub_reachable(0)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert pt.hub_reachable() == (False, "TRANSFORMERS_OFFLINE=1 is set")


def test_hub_model_loads_where_a_hub_is_reachable():
    online, why = pt.hub_reachable()
    if not online:
        pytest.skip(f"no hub reachable: {why}")
    enc = pt.load_encoder(pt.TURKISH_BERT)
    assert enc.source == "hub" and enc.name == pt.TURKISH_BERT
    tokens, attn = pt.attention_maps(enc, "Kıyıdaki banka diktir")
    assert attn.shape == (12, 12, len(tokens), len(tokens))
    assert [w for w, _ in pt.word_pieces(enc, "Kıyıdaki banka diktir")] == [
        "Kıyıdaki",
        "banka",
        "diktir",
    ]


def test_hub_probe_is_bounded_even_when_the_lookup_stalls(monkeypatch):
    import threading
    import time

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    release = threading.Event()

    def stall(*args, **kwargs):  # a DNS lookup that hangs until the test releases it
        release.wait(30)
        raise socket.gaierror("released")

    monkeypatch.setattr(pt.socket, "create_connection", stall)
    start = time.perf_counter()
    online, why = pt.hub_reachable(0.2)
    release.set()
    assert not online and "no answer within 0.2 s" in why
    assert time.perf_counter() - start < 2

    def refuse(*args, **kwargs):
        raise ConnectionRefusedError()

    monkeypatch.setattr(pt.socket, "create_connection", refuse)
    assert pt.hub_reachable(0.2) == (
        False,
        "cannot connect to huggingface.co:443 (ConnectionRefusedError)",
    )
