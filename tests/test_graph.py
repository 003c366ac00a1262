"""Unit tests of mlbook.beyond.graph: message passing, the GCN layer, equivariance, 1-WL,
the Dirichlet energy, label propagation and node classification on the karate club.

The references are independent of the module: networkx (adjacency matrices, normalised
Laplacians and their spectra, Weisfeiler–Leman hashes, isomorphism), explicit Python loops over
the nodes, dense matrix algebra written out here, and autograd.
"""

import math

import networkx as nx
import numpy as np
import pytest
import torch

from mlbook.beyond import graph as gr

F64 = torch.float64
TOL = {torch.float64: 1e-12, torch.float32: 1e-5}


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def edge_index_of(g: nx.Graph) -> torch.Tensor:
    pairs = torch.tensor(list(g.edges()), dtype=torch.int64).reshape(-1, 2)
    return torch.cat([pairs.T, pairs.flip(1).T], dim=1)


def a_hat_nx(g: nx.Graph) -> torch.Tensor:
    """I - the normalised Laplacian of g with a self loop at every node (networkx)."""
    h = nx.Graph(g)
    h.add_edges_from((i, i) for i in h.nodes())
    n = h.number_of_nodes()
    L = nx.normalized_laplacian_matrix(h, nodelist=range(n), weight=None).toarray()
    return torch.from_numpy(np.eye(n) - L)


def random_graph(n=12, p=0.3, seed=0, isolated=True):
    g = nx.gnp_random_graph(n, p, seed=seed)
    if isolated:
        g.remove_edges_from(list(g.edges(n - 1)))  # node n - 1 receives no message
    return g


KARATE = nx.karate_club_graph()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny graphs: one thread avoids the overhead of splitting small ops (restored after)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- graphs as tensors -------------------------------------------------------------------------


def test_edge_index_from_edges_stores_both_directions():
    e = gr.edge_index_from_edges([(0, 1), (1, 2)], 3)
    assert e.tolist() == [[0, 1, 1, 2], [1, 2, 0, 1]]
    assert e.dtype == torch.int64


def test_dense_adjacency_matches_networkx():
    kc = gr.karate_club()
    want = nx.to_numpy_array(KARATE, nodelist=range(34), weight=None)
    assert torch.equal(gr.dense_adjacency(kc.edge_index, 34), torch.from_numpy(want))
    assert torch.equal(gr.degree(kc.edge_index, 34), torch.tensor([d for _, d in KARATE.degree()]))


def test_karate_club_data():
    kc = gr.karate_club()
    assert kc.num_nodes == 34 and kc.edge_index.shape == (2, 156)
    assert int((kc.y == 0).sum()) == 17 and int(kc.y[0]) == 0 and int(kc.y[33]) == 1
    assert nx.is_isomorphic(nx.Graph(kc.edge_index.T.tolist()), KARATE)


# --- eq. 47.1: message passing ------------------------------------------------------------------


def loop_aggregate(x, g, reduce):
    """The aggregation written node by node over networkx's neighbour lists."""
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        nb = list(g.neighbors(i))
        if nb:
            rows = x[nb]
            out[i] = {"sum": rows.sum(0), "mean": rows.mean(0), "max": rows.amax(0)}[reduce]
    return out


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_aggregate_matches_loop_and_dense(dtype, reduce):
    for g in (random_graph(seed=1), KARATE):
        n = g.number_of_nodes()
        e = edge_index_of(g)
        x = torch.randn(n, 5, generator=gen(2), dtype=dtype)
        want = loop_aggregate(x, g, reduce)
        torch.testing.assert_close(gr.aggregate(x, e, reduce), want, atol=TOL[dtype], rtol=0)
        A = gr.dense_adjacency(e, n, dtype=dtype)
        torch.testing.assert_close(gr.aggregate_naive(x, A, reduce), want, atol=TOL[dtype], rtol=0)


def test_aggregate_with_edge_weights():
    g = random_graph(seed=3, isolated=False)
    n, e = g.number_of_nodes(), edge_index_of(g)
    x = torch.randn(n, 3, generator=gen(3), dtype=F64)
    w = torch.rand(e.shape[1], generator=gen(4), dtype=F64)
    W = torch.zeros(n, n, dtype=F64)
    W[e[1], e[0]] = w
    torch.testing.assert_close(gr.aggregate(x, e, "sum", weight=w), W @ x, atol=1e-12, rtol=0)


def test_mp_layer_matches_naive():
    g = random_graph(seed=5)
    n, e = g.number_of_nodes(), edge_index_of(g)
    x = torch.randn(n, 4, generator=gen(5), dtype=F64)
    Ws, Wn = torch.randn(4, 3, generator=gen(6), dtype=F64), torch.randn(4, 3, generator=gen(7))
    Wn = Wn.to(F64)
    A = gr.dense_adjacency(e, n)
    for reduce in ("sum", "mean", "max"):
        torch.testing.assert_close(
            gr.mp_layer(x, e, Ws, Wn, reduce),
            gr.mp_layer_naive(x, A, Ws, Wn, reduce),
            atol=1e-12,
            rtol=0,
        )
    manual = torch.tanh(x @ Ws + loop_aggregate(x, g, "mean") @ Wn)
    torch.testing.assert_close(
        gr.mp_layer(x, e, Ws, Wn, "mean", activation=torch.tanh), manual, atol=1e-12, rtol=0
    )


# --- eq. 47.2: permutation equivariance ----------------------------------------------------------


def test_permute_is_P_A_P_transpose_and_layers_are_equivariant():
    kc = gr.karate_club()
    n, e = kc.num_nodes, kc.edge_index
    x = torch.randn(n, 4, generator=gen(8), dtype=F64)
    perm = torch.randperm(n, generator=gen(9))
    P = torch.eye(n, dtype=F64)[perm]
    x_p, e_p = gr.permute(x, e, perm)
    A = gr.dense_adjacency(e, n)
    assert torch.equal(x_p, P @ x)
    assert torch.equal(gr.dense_adjacency(e_p, n), P @ A @ P.T)
    W = torch.randn(4, 3, generator=gen(10), dtype=F64)
    for f in (
        lambda x_, e_: gr.mp_layer(x_, e_, W, W, "max"),
        lambda x_, e_: gr.gcn_layer(x_, e_, W),
    ):
        torch.testing.assert_close(f(x_p, e_p), P @ f(x, e), atol=1e-12, rtol=0)
        for reduce in ("sum", "mean", "max"):
            torch.testing.assert_close(
                gr.readout(f(x_p, e_p), reduce), gr.readout(f(x, e), reduce), atol=1e-12, rtol=0
            )
    model = gr.GCN([4, 8, 2], generator=gen(11), dtype=F64)
    torch.testing.assert_close(model(x_p, e_p), P @ model(x, e), atol=1e-12, rtol=0)


# --- eq. 47.3: the GCN layer --------------------------------------------------------------------


@pytest.mark.parametrize("g", [KARATE, nx.star_graph(5), random_graph(seed=12)])
def test_gcn_propagate_matches_networkx_normalized_laplacian(g):
    n, e = g.number_of_nodes(), edge_index_of(g)
    x = torch.randn(n, 3, generator=gen(13), dtype=F64)
    want = a_hat_nx(g)
    torch.testing.assert_close(gr.gcn_propagate(x, e), want @ x, atol=1e-12, rtol=0)
    torch.testing.assert_close(
        gr.normalized_adjacency(gr.dense_adjacency(e, n)), want, atol=1e-12, rtol=0
    )


def test_gcn_weights_by_hand_on_a_path():
    loops, w = gr.gcn_norm(gr.edge_index_from_edges([(0, 1), (1, 2)], 3), 3)
    # degrees with loops 2, 3, 2: edge 0-1 weighs 1/sqrt(6), the loops 1/2, 1/3, 1/2
    got = {(int(j), int(i)): float(v) for (j, i), v in zip(loops.T, w, strict=True)}
    assert got[(0, 1)] == pytest.approx(1 / math.sqrt(6), abs=1e-15)
    assert [got[(i, i)] for i in range(3)] == pytest.approx([0.5, 1 / 3, 0.5], abs=1e-15)


def test_spectrum_of_a_hat_in_minus_one_one():
    for g in (KARATE, nx.cycle_graph(6), nx.complete_bipartite_graph(3, 4)):
        mu = torch.linalg.eigvalsh(a_hat_nx(g))
        assert mu[0] > -1 and abs(float(mu[-1]) - 1) < 1e-12


def test_gcn_layer_matches_naive_and_its_gradient():
    g = random_graph(seed=14)
    n, e = g.number_of_nodes(), edge_index_of(g)
    x = torch.randn(n, 4, generator=gen(15), dtype=F64)
    W = torch.randn(4, 3, generator=gen(16), dtype=F64, requires_grad=True)
    b = torch.randn(3, generator=gen(17), dtype=F64)
    A = gr.dense_adjacency(e, n)
    y = gr.gcn_layer(x, e, W, b)
    torch.testing.assert_close(y, gr.gcn_layer_naive(x, A, W, b), atol=1e-12, rtol=0)
    u = torch.randn(n, 3, generator=gen(18), dtype=F64)
    (g_W,) = torch.autograd.grad((u * y).sum(), W)
    pre = a_hat_nx(g) @ x @ W.detach() + b
    torch.testing.assert_close(
        g_W, x.T @ a_hat_nx(g).T @ (u * (pre > 0)), atol=1e-12, rtol=0
    )  # relu' = 1 where the input is positive


# --- eq. 47.4: 1-WL ------------------------------------------------------------------------------


def same_partition(c1, c2):
    return torch.equal(c1[:, None] == c1[None, :], c2[:, None] == c2[None, :])


def nx_colourings(g, rounds):
    nx.set_node_attributes(g, "0", "c")
    h = nx.weisfeiler_lehman_subgraph_hashes(
        g, node_attr="c", iterations=rounds, include_initial_labels=True
    )
    n = g.number_of_nodes()
    return [
        torch.tensor([sorted({v[t] for v in h.values()}).index(h[i][t]) for i in range(n)])
        for t in range(rounds + 1)
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wl_refine_matches_networkx_and_dict_version(seed):
    g = nx.gnp_random_graph(15, 0.2, seed=seed)
    e, n = edge_index_of(g), 15
    hist = gr.wl_refine(e, n)
    ref = nx_colourings(nx.Graph(g), len(hist))
    assert all(same_partition(a, b) for a, b in zip(hist, ref, strict=False))
    assert same_partition(ref[-2], ref[-1])  # the returned colouring is stable
    assert all(same_partition(a, b) for a, b in zip(hist, gr.wl_refine_naive(e, n), strict=True))


def test_wl_test_on_classic_pairs():
    hexagon = nx.cycle_graph(6)
    triangles = nx.disjoint_union(nx.cycle_graph(3), nx.cycle_graph(3))
    told, c1, c2 = gr.wl_test(edge_index_of(hexagon), 6, edge_index_of(triangles), 6)
    assert not told and not nx.is_isomorphic(hexagon, triangles)
    assert torch.equal(c1, c2)
    tail3 = nx.Graph([(0, 1), (1, 2), (2, 0), (2, 3), (3, 4)])
    tail4 = nx.Graph([(0, 1), (1, 2), (2, 3), (3, 0), (3, 4)])
    assert gr.wl_test(edge_index_of(tail3), 5, edge_index_of(tail4), 5)[0]
    kc = gr.karate_club()
    _, e_p = gr.permute(torch.zeros(34, 1), kc.edge_index, torch.randperm(34, generator=gen(19)))
    assert not gr.wl_test(kc.edge_index, 34, e_p, 34)[0]


# --- eqs. 47.5 and 47.6: over-smoothing -----------------------------------------------------------


def test_dirichlet_energy_matches_trace_and_edge_sum():
    kc = gr.karate_club()
    x = torch.randn(34, 6, generator=gen(20), dtype=F64)
    L = torch.eye(34, dtype=F64) - a_hat_nx(KARATE)
    want = torch.trace(x.T @ L @ x)
    torch.testing.assert_close(gr.dirichlet_energy(x, kc.edge_index), want, atol=1e-10, rtol=0)
    A = gr.dense_adjacency(kc.edge_index, 34)
    torch.testing.assert_close(gr.dirichlet_energy_naive(x, A), want, atol=1e-10, rtol=0)
    d = torch.tensor([d + 1 for _, d in KARATE.degree()], dtype=F64)
    edge_sum = sum(
        float(((x[i] / d[i].sqrt() - x[j] / d[j].sqrt()) ** 2).sum()) for i, j in KARATE.edges()
    )
    assert float(want) == pytest.approx(edge_sum, abs=1e-10)
    smooth = d.sqrt()[:, None] * torch.randn(1, 6, generator=gen(21), dtype=F64)
    assert abs(float(gr.dirichlet_energy(smooth, kc.edge_index))) < 1e-12


def test_spectral_energy_and_the_bound():
    kc = gr.karate_club()
    A = gr.dense_adjacency(kc.edge_index, 34)
    x = torch.randn(34, 5, generator=gen(22), dtype=F64)
    spec = np.sort(1 - nx.normalized_laplacian_spectrum(nx.Graph(a_hat_nx(KARATE).numpy() > 0)))
    rho = gr.smoothing_factor(A)
    assert rho == pytest.approx(np.abs(spec[:-1]).max(), abs=1e-12)
    h, E0 = x, float(gr.dirichlet_energy(x, kc.edge_index))
    for k in range(12):
        E = float(gr.dirichlet_energy(h, kc.edge_index))
        assert float(gr.spectral_energy(x, A, k)) == pytest.approx(E, rel=1e-9, abs=1e-14)
        assert E <= rho ** (2 * k) * E0 * (1 + 1e-9)
        h = gr.gcn_propagate(h, kc.edge_index)


def test_smoothing_factor_of_the_cycle_in_closed_form():
    for n in (4, 5, 9):
        A = gr.dense_adjacency(edge_index_of(nx.cycle_graph(n)), n)
        assert gr.smoothing_factor(A) == pytest.approx((1 + 2 * math.cos(2 * math.pi / n)) / 3)


def test_appnp_converges_to_its_closed_form():
    kc = gr.karate_club()
    x = torch.randn(34, 3, generator=gen(23), dtype=F64)
    limit = 0.2 * torch.linalg.solve(torch.eye(34, dtype=F64) - 0.8 * a_hat_nx(KARATE), x)
    torch.testing.assert_close(
        gr.appnp_propagate(x, kc.edge_index, 200, 0.2), limit, atol=1e-12, rtol=0
    )
    assert torch.equal(gr.appnp_propagate(x, kc.edge_index, 0, 0.2), x)


# --- semi-supervised node classification ----------------------------------------------------------


def test_label_propagation_closed_form_and_iteration():
    kc = gr.karate_club()
    train, y_train = torch.tensor([0, 33, 5]), kc.y[torch.tensor([0, 33, 5])]
    Fs = gr.label_propagation(kc.edge_index, 34, train, y_train, 2, alpha=0.8)
    A = torch.from_numpy(nx.to_numpy_array(KARATE, nodelist=range(34), weight=None))
    s = A.sum(1).rsqrt()
    S = s[:, None] * A * s[None, :]
    Y = torch.zeros(34, 2, dtype=F64)
    Y[train, y_train] = 1
    torch.testing.assert_close(Fs, 0.8 * S @ Fs + 0.2 * Y, atol=1e-12, rtol=0)
    naive = gr.label_propagation_naive(kc.edge_index, 34, train, y_train, 2, alpha=0.8, steps=200)
    torch.testing.assert_close(Fs, naive, atol=1e-12, rtol=0)


def test_gcn_learns_the_karate_factions_from_two_labels():
    kc = gr.karate_club()
    train = torch.tensor([0, 33])
    model = gr.GCN([34, 16, 2], generator=gen(1))
    losses = gr.train_node_classifier(model, torch.eye(34), kc.edge_index, kc.y, train, steps=60)
    assert losses[-1] < 0.1 * losses[0]
    with torch.no_grad():
        pred = model(torch.eye(34), kc.edge_index).argmax(1)
    test = torch.tensor([i for i in range(34) if i not in (0, 33)])
    assert float((pred[test] == kc.y[test]).double().mean()) >= 0.85


# --- argument checks -----------------------------------------------------------------------------


def test_argument_checks():
    x = torch.zeros(3, 2)
    e = gr.edge_index_from_edges([(0, 2), (1, 2)], 3)  # (2, 4)
    with pytest.raises(ValueError, match="edges must hold distinct entries"):
        gr.edge_index_from_edges([(0, 1), (2, 2)], 3)  # a self loop
    with pytest.raises(ValueError, match=r"edge_index must hold indices in \[0, 2\)"):
        gr.aggregate(torch.zeros(2, 2), e)
    with pytest.raises(ValueError, match="edge_index must have shape"):
        gr.aggregate(x, e.T)
    with pytest.raises(ValueError, match="reduce must be one of"):
        gr.aggregate(x, e, "median")
    with pytest.raises(ValueError, match=r"reduce \(with edge weights\) must be one of"):
        gr.aggregate(x, e, "mean", weight=torch.ones(4))
    with pytest.raises(ValueError, match="weight must have shape"):
        gr.aggregate(x, e, "sum", weight=torch.ones(3))
    with pytest.raises(ValueError, match="perm must hold distinct entries"):
        gr.permute(x, e, torch.tensor([0, 0, 1]))
    with pytest.raises(ValueError, match="W must have shape"):
        gr.gcn_layer(x, e, torch.zeros(3, 2))
    with pytest.raises(ValueError, match="len\\(dims\\) must be in"):
        gr.GCN([4])
    with pytest.raises(ValueError, match="colors must have shape"):
        gr.wl_refine(e, 3, colors=torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="train must hold distinct entries"):
        gr.label_propagation(e, 3, torch.tensor([0, 0]), torch.tensor([0, 1]), 2)
    with pytest.raises(ValueError, match="alpha must be a finite number"):
        gr.label_propagation(e, 3, torch.tensor([0]), torch.tensor([0]), 2, alpha=1.0)
