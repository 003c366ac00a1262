"""mlbook.language.embedding vs independent references: F.embedding, F.one_hot products, autograd in
float64, gradcheck, and torch's own tied nn.Embedding / nn.Linear."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mlbook.language import embedding as emb

TOL = {torch.float64: 1e-12, torch.float32: 1e-5}


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_lookup_equals_one_hot_product_and_f_embedding(gen, dtype):
    E = torch.randn(50, 8, generator=gen, dtype=dtype)
    ids = torch.randint(0, 50, (3, 7), generator=gen)
    x = emb.embedding_lookup(E, ids)
    assert x.shape == (3, 7, 8)
    torch.testing.assert_close(x, F.embedding(ids, E), atol=0, rtol=0)
    torch.testing.assert_close(emb.one_hot_lookup(E, ids), x, atol=TOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_scatter_add_gradient_matches_autograd_with_repeats(gen, dtype):
    V, d = 20, 5
    E = torch.randn(V, d, generator=gen, dtype=dtype, requires_grad=True)
    ids = torch.tensor([[3, 7, 3, 3], [0, 7, 19, 3]])  # repeated ids on purpose
    G = torch.randn(2, 4, d, generator=gen, dtype=dtype)
    (F.embedding(ids, E) * G).sum().backward()
    tol = TOL[dtype]
    torch.testing.assert_close(emb.embedding_grad(G, ids, V), E.grad, atol=tol, rtol=0)
    torch.testing.assert_close(emb.embedding_grad_naive(G, ids, V), E.grad, atol=tol, rtol=0)
    one_hot = F.one_hot(ids.reshape(-1), V).to(dtype)  # (N, V)
    torch.testing.assert_close(E.grad, one_hot.T @ G.reshape(-1, d), atol=tol, rtol=0)
    wrong = torch.zeros(V, d, dtype=dtype)
    wrong[ids.reshape(-1)] = G.reshape(-1, d)  # assignment drops repeats
    assert (wrong - E.grad).abs().max() > 0.1


def test_gradient_row_sums_count_tokens(gen):
    ids = torch.randint(0, 12, (40,), generator=gen)
    g = emb.embedding_grad(torch.ones(40, 3, dtype=torch.float64), ids, 12)
    torch.testing.assert_close(g[:, 0], torch.bincount(ids, minlength=12).double())


def test_scatter_add_function_passes_gradcheck(gen):
    E = torch.randn(6, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    ids = torch.tensor([1, 4, 1, 5, 1])
    assert torch.autograd.gradcheck(lambda W: emb.ScatterAddEmbedding.apply(W, ids), (E,))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_tied_logits_and_both_gradient_contributions(gen, dtype):
    V, d, T = 30, 6, 9
    W = torch.randn(d, d, generator=gen, dtype=dtype)
    ids = torch.randint(0, V, (T,), generator=gen)
    ids[2] = ids[5]
    targets = torch.randint(0, V, (T,), generator=gen)
    ref_emb = nn.Embedding(V, d, dtype=dtype)
    head = nn.Linear(d, V, bias=False, dtype=dtype)
    head.weight = ref_emb.weight  # torch's own weight tying
    h = torch.tanh(ref_emb(ids) @ W)
    z = head(h)
    torch.testing.assert_close(emb.tied_logits(h, ref_emb.weight), z, atol=TOL[dtype], rtol=0)
    F.cross_entropy(z, targets).backward()

    E = ref_emb.weight.detach()
    x = emb.embedding_lookup(E, ids)
    h = torch.tanh(x @ W)
    z = emb.tied_logits(h, E)
    grad_z = (torch.softmax(z, -1) - F.one_hot(targets, V).to(dtype)) / T
    grad_h = grad_z @ E
    grad_x = (grad_h * (1 - h**2)) @ W.T
    g_in = emb.embedding_grad(grad_x, ids, V)
    g_out = emb.tied_output_grad(h, grad_z)
    tol = 10 * TOL[dtype]
    torch.testing.assert_close(g_in + g_out, ref_emb.weight.grad, atol=tol, rtol=0)
    assert (g_out - ref_emb.weight.grad).abs().max() > 1e-3  # neither part alone
    assert (g_in - ref_emb.weight.grad).abs().max() > 1e-3


def test_tied_embedding_module_shares_one_parameter(gen):
    m = emb.TiedEmbedding(11, 4, generator=gen, dtype=torch.float64)
    assert len(list(m.parameters())) == 1
    ids = torch.tensor([[1, 2, 2]])
    x = m(ids)
    torch.testing.assert_close(m.logits(x), x @ m.weight.T)
    m.logits(x).sum().backward()
    assert m.weight.grad.shape == (11, 4)


def test_bad_input_raises(gen):
    E = torch.randn(5, 3, generator=gen)
    with pytest.raises(ValueError, match=r"ids must hold indices in \[0, 5\)"):
        emb.embedding_lookup(E, torch.tensor([5]))
    with pytest.raises(ValueError, match="ids must hold indices"):  # would wrap around
        emb.embedding_lookup(E, torch.tensor([-1]))
    with pytest.raises(TypeError, match="integer"):
        emb.embedding_lookup(E, torch.tensor([1.0]))
    with pytest.raises(ValueError, match="2 axes"):
        emb.embedding_lookup(E[0], torch.tensor([1]))
    with pytest.raises(TypeError, match="floating-point"):
        emb.one_hot_lookup(E.long(), torch.tensor([1]))
    with pytest.raises(TypeError, match="torch.Tensor"):
        emb.one_hot_lookup(E.tolist(), torch.tensor([1]))
    with pytest.raises(ValueError, match="grad_x must have shape"):
        emb.embedding_grad(torch.ones(2, 3), torch.tensor([1, 2, 3]), 5)
    with pytest.raises(ValueError, match="vocab_size"):
        emb.embedding_grad(torch.ones(3, 3), torch.tensor([1, 2, 3]), 0)
    with pytest.raises(ValueError, match="ids must hold indices"):
        emb.embedding_grad_naive(torch.ones(3, 3), torch.tensor([1, 2, 9]), 5)
    with pytest.raises(ValueError, match="ids must hold indices"):  # would wrap around
        emb.embedding_grad_naive(torch.ones(3, 3), torch.tensor([1, 2, -1]), 5)
    with pytest.raises(ValueError, match="grad_x must have shape"):  # reshape would hide it
        emb.embedding_grad_naive(torch.ones(3, 2), torch.tensor([1, 2]), 5)
    with pytest.raises(ValueError, match="ids must hold indices"):
        emb.ScatterAddEmbedding.apply(E, torch.tensor([7]))
    with pytest.raises(ValueError, match="grad_z must have shape"):
        emb.tied_output_grad(torch.ones(2, 3), torch.ones(3, 5))
    with pytest.raises(ValueError, match="grad_z must have shape"):  # same N, wrong pairing
        emb.tied_output_grad(torch.ones(2, 3, 4), torch.ones(3, 2, 5))
    with pytest.raises(TypeError, match="h must be a torch.Tensor"):
        emb.tied_output_grad([1.0], torch.ones(3, 5))
    with pytest.raises(ValueError, match="vocab_size"):
        emb.TiedEmbedding(0, 3)
