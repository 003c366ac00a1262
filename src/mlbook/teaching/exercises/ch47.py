"""Checks of the exercises of chapter 47 (graph neural networks).

The references are independent of :mod:`mlbook.beyond.graph`: networkx builds every graph and
supplies the Weisfeiler–Leman hash (47.1) and the normalised Laplacian of the graph with self
loops, whose complement I - L is the GCN matrix (47.2, 47.3, 47.4); the eigenvalues come from
``numpy.linalg.eigvalsh`` (47.3); the depth sweep is recomputed with NumPy matrix powers (47.4).

Each typical wrong answer is written once, as a function below; a check compares the reader's
answer with those functions' results (to name the mistake), and ``MISTAKES`` lists the same
functions (the tests feed each to its check).
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import torch

from . import (
    as_tensor,
    attempt,
    exercise,
    expect,
    expect_answer,
    expect_tuple,
    paired_mistakes,
)
from . import reference_answer as _ref

F64 = torch.float64


def _nx_graph(n: int, edges) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(range(n), c="0")
    g.add_edges_from(edges)
    return g


def _edge_index(g: nx.Graph) -> torch.Tensor:
    """Both directions of every edge of g, as a (2, E) int64 tensor."""
    pairs = torch.tensor(list(g.edges()), dtype=torch.int64).reshape(-1, 2)
    return torch.cat([pairs.T, pairs.flip(1).T], dim=1)


def _a_hat(g: nx.Graph) -> np.ndarray:
    """D~^(-1/2) (A + I) D~^(-1/2) as I - networkx's normalised Laplacian of g with self loops."""
    h = nx.Graph(g)
    h.add_edges_from((i, i) for i in h.nodes())
    n = h.number_of_nodes()
    return np.eye(n) - nx.normalized_laplacian_matrix(h, nodelist=range(n), weight=None).toarray()


def _dense(g: nx.Graph) -> np.ndarray:
    return nx.to_numpy_array(g, nodelist=range(g.number_of_nodes()), weight=None)


# --- 47.1 ----------------------------------------------------------------------------------------

_PAIRS = [
    (
        "(a) 6-cycle vs two triangles",
        _nx_graph(6, [(i, (i + 1) % 6) for i in range(6)]),
        _nx_graph(6, [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3)]),
        "both graphs are 2-regular: every node starts with the same colour and sees two "
        "neighbours of that colour, so no round ever splits a class (1-WL cannot even see that "
        "one graph is connected and the other is not)",
    ),
    (
        "(b) triangular prism vs K_{3,3}",
        _nx_graph(6, [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (0, 3), (1, 4), (2, 5)]),
        _nx_graph(6, [(i, j) for i in range(3) for j in range(3, 6)]),
        "both graphs are 3-regular: all nodes keep one colour forever, although the prism has "
        "triangles and K_{3,3} has none (1-WL cannot count triangles)",
    ),
    (
        "(c) triangle with a 2-edge tail vs square with a 1-edge tail",
        _nx_graph(5, [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4)]),
        _nx_graph(5, [(0, 1), (1, 2), (2, 3), (3, 0), (3, 4)]),
        "the degrees agree, but round 2 separates the graphs: the neighbour of the degree-1 node "
        "has degree 2 in the first graph and degree 3 in the second",
    ),
]


def _wl_distinguishes(g1: nx.Graph, g2: nx.Graph) -> bool:
    it = g1.number_of_nodes()
    h1 = nx.weisfeiler_lehman_graph_hash(g1, node_attr="c", iterations=it)
    return h1 != nx.weisfeiler_lehman_graph_hash(g2, node_attr="c", iterations=it)


def guess_all_distinguished():
    return [True, True, True]


def guess_none_distinguished():
    return [False, False, False]


def guess_prism_distinguished():
    return [False, True, True]


@exercise("47.1", "predict_wl_verdicts")
def wl_verdicts(answer) -> str:
    """The three verdicts against networkx's Weisfeiler–Leman graph hash."""
    got = attempt(answer)
    expect(
        isinstance(got, (list, tuple))
        and len(got) == 3
        and all(isinstance(v, (bool, np.bool_)) for v in got),
        "predict_wl_verdicts() should return a list of three bools, one per pair (a), (b), (c)",
    )
    for (name, g1, g2, why), guess in zip(_PAIRS, got, strict=True):
        truth = _wl_distinguishes(g1, g2)
        verdict = "can" if truth else "cannot"
        expect(bool(guess) == truth, f"pair {name}: 1-WL {verdict} tell them apart; {why}")
    return (
        "right: networkx's WL hashes agree for the 6-cycle and two triangles and for the prism "
        "and K_{3,3} (regular graphs of one degree all look alike), and differ for the two tailed "
        "graphs, which have the same degrees but not the same neighbours' degrees"
    )


# --- 47.2 ----------------------------------------------------------------------------------------


def _tilde(x, edge_index, loops=True, weight=1.0):
    """(A' x, d') for A' = weight * A (+ I) from the edge list, dense and written out."""
    n = x.shape[0]
    A = torch.zeros(n, n, dtype=F64)
    A[edge_index[1], edge_index[0]] = weight
    if loops:
        A = A + torch.eye(n, dtype=F64)
    return A, A.sum(1)


def propagate_without_loops(x, edge_index):
    A, d = _tilde(x, edge_index, loops=False)
    s = d.rsqrt()
    return (s[:, None] * A * s[None, :]) @ x


def propagate_mean(x, edge_index):
    A, d = _tilde(x, edge_index)
    return (A / d[:, None]) @ x


def propagate_sum(x, edge_index):
    A, _ = _tilde(x, edge_index)
    return A @ x


def propagate_degrees_without_loop(x, edge_index):
    A, d = _tilde(x, edge_index)
    s = (d - 1).rsqrt()
    return (s[:, None] * A * s[None, :]) @ x


def propagate_edges_twice(x, edge_index):
    A, d = _tilde(x, edge_index, weight=2.0)
    s = d.rsqrt()
    return (s[:, None] * A * s[None, :]) @ x


WRONG_PROPAGATE = {
    "the self loops are missing: use A + I, so that a node's own features enter its average, "
    "and degrees d + 1": propagate_without_loops,
    "that is the mean D~^-1 (A + I) x; the GCN divides the message j -> i by "
    "sqrt(d~_i d~_j), symmetrically": propagate_mean,
    "the messages are not normalised: divide the message j -> i by sqrt(d~_i d~_j)": propagate_sum,
    "the self loops are added but the degrees are not: d~ = d + 1 counts the loop": (
        propagate_degrees_without_loop
    ),
    "every edge is counted twice: edge_index already holds both directions of each "
    "undirected edge": propagate_edges_twice,
}


@exercise("47.2", "gcn_propagate_edges")
def gcn_propagation(answer) -> str:
    """A_hat x against I - networkx's normalised Laplacian of the graph with self loops."""
    gen = torch.Generator().manual_seed(472)
    graphs = {
        "the karate club": nx.karate_club_graph(),
        "a star with 6 leaves": nx.star_graph(6),
        "a path of 5 nodes plus an isolated node": _nx_graph(6, [(0, 1), (1, 2), (2, 3), (3, 4)]),
    }
    for name, g in graphs.items():
        n = g.number_of_nodes()
        e = _edge_index(g)
        x = torch.randn(n, 3, generator=gen, dtype=F64)
        want = torch.from_numpy(_a_hat(g)) @ x
        wrong = (
            {fb: fn(x, e) for fb, fn in WRONG_PROPAGATE.items()} if "isolated" not in name else {}
        )
        expect_answer(
            attempt(answer, x.clone(), e.clone()),
            want,
            f"gcn_propagate_edges(x, edge_index) on {name}",
            wrong=wrong,
            atol=1e-12,
            rtol=1e-10,
        )
    return (
        "matches (I - L) x, L networkx's normalised Laplacian of A + I, on the karate club, a "
        "star and a graph with an isolated node (which keeps its own features)"
    )


# --- 47.3 ----------------------------------------------------------------------------------------


def _mu(n: int) -> torch.Tensor:
    """Eigenvalues of A_hat for the n-cycle, unsorted, k = 0, ..., n - 1, written out."""
    return (1 + 2 * torch.cos(2 * math.pi * torch.arange(n, dtype=F64) / n)) / 3


def spectrum_without_loops(n):
    return torch.sort(torch.cos(2 * math.pi * torch.arange(n, dtype=F64) / n)).values


def spectrum_unsorted(n):
    return _mu(n)


def spectrum_descending(n):
    return torch.sort(_mu(n), descending=True).values


def rho_including_top(n):
    return float(_mu(n).abs().max())


def rho_without_loops(n):
    return float(torch.cos(2 * math.pi * torch.arange(1, n, dtype=F64) / n).abs().max())


WRONG_SPECTRUM = {
    "those are the eigenvalues of D^-1/2 A D^-1/2 without self loops, cos(2 pi k / n); with "
    "the loops every node has d~ = 3": spectrum_without_loops,
    "return the eigenvalues sorted in ascending order": spectrum_unsorted,
    "sort the eigenvalues in ascending order, not descending": spectrum_descending,
}
WRONG_RHO = {
    "rho excludes the eigenvalue 1 of the smooth vector (lambda = 0 of I - A_hat): it is the "
    "largest |mu_k| over k = 1, ..., n - 1": rho_including_top,
    "that is the factor without self loops, max |cos(2 pi k / n)|; with them mu_k = "
    "(1 + 2 cos(2 pi k / n)) / 3": rho_without_loops,
}


@exercise("47.3", "cycle_spectrum", "cycle_rho")
def cycle_spectrum(spectrum, rho) -> str:
    """The closed-form spectrum of the n-cycle against numpy.linalg.eigvalsh of networkx's A_hat."""
    ns = (5, 4, 3, 6, 7, 10, 33)  # n = 5 first: there every typical mistake differs
    for n in ns:
        eig = np.linalg.eigvalsh(_a_hat(nx.cycle_graph(n)))  # ascending
        expect_answer(
            attempt(spectrum, n),
            eig,
            f"cycle_spectrum({n})",
            wrong={fb: fn(n) for fb, fn in WRONG_SPECTRUM.items()},
            atol=1e-12,
        )
        want = float(np.abs(eig[:-1]).max())  # one eigenvalue 1: the cycle is connected
        got = attempt(rho, n)
        g = as_tensor(got, f"cycle_rho({n})")
        expect(g.numel() == 1, f"cycle_rho({n}) should return one number, got shape {g.shape}")
        expect_answer(
            g.reshape(()),
            want,
            f"cycle_rho({n})",
            wrong={fb: fn(n) for fb, fn in WRONG_RHO.items()},
            atol=1e-12,
        )
    r6, r100 = float(attempt(rho, 6)), float(attempt(rho, 100))
    return (
        f"the spectrum matches eigvalsh for n = {', '.join(map(str, ns))}; rho = {r6:.4f} for "
        f"n = 6 and {r100:.4f} for n = 100: halving the slowest mode's energy takes "
        f"{math.log(2) / (-2 * math.log(r6)):.2g} layers on the 6-cycle and "
        f"{math.log(2) / (-2 * math.log(r100)):.0f} on the 100-cycle"
    )


# --- 47.4 ----------------------------------------------------------------------------------------


def _sweep(depths, *, normalise=True, all_nodes=False, mean=False):
    """Energy E(Z)/||Z||^2 and nearest-centroid accuracy of Z = A_hat^k I on the karate club."""
    g = nx.karate_club_graph()
    n = g.number_of_nodes()
    y = np.array([0 if g.nodes[i]["club"] == "Mr. Hi" else 1 for i in range(n)])
    L = np.eye(n) - _a_hat(g)
    P = np.eye(n) - L
    if mean:
        At = _dense(g) + np.eye(n)
        P = At / At.sum(1, keepdims=True)
    train = [0, 33]
    rest = list(range(n)) if all_nodes else [i for i in range(n) if i not in train]
    energies, accs = [], []
    for k in depths:
        Z = np.linalg.matrix_power(P, k)  # A_hat^k I
        e = np.trace(Z.T @ L @ Z)
        energies.append(e / np.sum(Z**2) if normalise else e)
        cent = np.stack([Z[[t for t in train if y[t] == c]].mean(0) for c in (0, 1)])
        dist = ((Z[rest][:, None, :] - cent[None]) ** 2).sum(-1)  # (len(rest), 2)
        accs.append(float((dist.argmin(1) == y[rest]).mean()))
    return energies, accs


DEPTHS = [1, 2, 4, 8, 16, 24, 32, 64]


def sweep_raw_energy(edge_index, x, y, train, depths):
    return _sweep(depths, normalise=False)


def sweep_all_nodes(edge_index, x, y, train, depths):
    return _sweep(depths, all_nodes=True)


def sweep_mean_propagation(edge_index, x, y, train, depths):
    return _sweep(depths, mean=True)


WRONG_SWEEP = {
    "divide the energy by ||Z||_F^2: the relative energy is scale-free": sweep_raw_energy,
    "measure the accuracy on the nodes that are not in train only": sweep_all_nodes,
    "propagate with the symmetric A_hat of eq. 47.3 (gr.gcn_propagate), not the mean "
    "D~^-1 (A + I)": sweep_mean_propagation,
}


@exercise("47.4", "depth_sweep")
def depth_sweep(answer) -> str:
    """Relative energies and nearest-centroid accuracies against NumPy matrix powers."""
    g = nx.karate_club_graph()
    n = g.number_of_nodes()
    e = _edge_index(g)
    y = torch.tensor([0 if g.nodes[i]["club"] == "Mr. Hi" else 1 for i in range(n)])
    train = torch.tensor([0, 33])
    what = f"depth_sweep(edge_index, x, y, train, depths={DEPTHS}) on the karate club"
    got = expect_tuple(
        attempt(answer, e.clone(), torch.eye(n, dtype=F64), y.clone(), train.clone(), DEPTHS),
        what,
        ("energies", "accuracies"),
    )
    want = _sweep(DEPTHS)
    wrong = {fb: fn(e, None, y, train, DEPTHS) for fb, fn in WRONG_SWEEP.items()}
    for j, part in enumerate(("relative energies", "accuracies")):
        expect_answer(
            got[j],
            want[j],
            f"{what}: {part}",
            wrong={fb: w[j] for fb, w in wrong.items()},
            atol=1e-10,
            rtol=1e-8,
        )
    slope = np.polyfit(DEPTHS[-3:], np.log(want[0][-3:]), 1)[0]
    energies = ", ".join(f"{v:.2g}" for v in want[0])
    accs = ", ".join(f"{v:.2f}" for v in want[1])
    return (
        f"both lists match NumPy matrix powers for depths {DEPTHS}: E(Z)/||Z||^2 = {energies} "
        f"(slope of log E per layer {slope:.3f}); nearest-centroid accuracy {accs}"
    )


# Typical wrong answers, listed once (the tests build each and check that it is rejected with
# its feedback) -----------------------------------------------------------------------------------

_spectrum_ref = _ref("47.3", "cycle_spectrum")
_rho_ref = _ref("47.3", "cycle_rho")

MISTAKES = {
    "47.1": [
        (guess_all_distinguished, "both graphs are 2-regular"),
        (guess_none_distinguished, "round 2 separates the graphs"),
        (guess_prism_distinguished, "3-regular"),
    ],
    "47.2": [
        (propagate_without_loops, "the self loops are missing"),
        (propagate_mean, "that is the mean"),
        (propagate_sum, "not normalised"),
        (propagate_degrees_without_loop, "the degrees are not"),
        (propagate_edges_twice, "counted twice"),
    ],
    "47.3": paired_mistakes(
        _spectrum_ref,
        _rho_ref,
        [
            (spectrum_without_loops, "without self loops"),
            (spectrum_unsorted, "sorted in ascending order"),
            (spectrum_descending, "not descending"),
        ],
        [
            (rho_including_top, "excludes the eigenvalue 1"),
            (rho_without_loops, "the factor without self loops"),
        ],
    ),
    "47.4": [
        (sweep_raw_energy, "divide the energy"),
        (sweep_all_nodes, "not in train only"),
        (sweep_mean_propagation, "not the mean"),
    ],
}
