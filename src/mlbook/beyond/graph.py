"""Graph neural networks (chapter 47): message passing, the GCN layer, permutation equivariance,
1-WL colour refinement, over-smoothing and the Dirichlet energy, semi-supervised node labels.

A graph is an edge list: an undirected edge {u, v} is stored twice, as the two directed edges
u -> v and v -> u, and a message travels along a directed edge j -> i from its source j to its
target i. The dense adjacency of the naive references has A[i, j] = 1 for an edge j -> i, so that
summing the messages of the neighbours is the matrix product A @ x.

Shape legend
    n nodes;  E directed edges (twice the undirected ones);  d, d' feature widths;  K classes
    edge_index  (2, E) int64: row 0 the sources j, row 1 the targets i of the messages j -> i
    edges       (m, 2) undirected pairs {u, v}, each listed once
    x, h        (n, d) node features;  W (d, d') weights;  b (d',) bias
    A           (n, n) dense adjacency;  A_hat (n, n) the GCN propagation matrix of eq. 47.3
    w, deg      (E,) edge weights;  (n,) in-degrees (for an undirected graph: the degrees)
    colors      (n,) int64 colours of 1-WL refinement, 0, 1, ... in a canonical order
    perm        (n,) a permutation: node i of the permuted graph is node perm[i] of the original
    y, train    (n,) int64 labels;  (L,) int64 indices of the labelled nodes
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..nn.optim import Optimizer, OptimizerConfig
from ..validation import (
    distinct,
    float_tensor,
    index_tensor,
    integer,
    nonempty,
    number,
    one_of,
    positive,
    positive_int,
    shape_is,
)

__all__ = [
    "Graph",
    "edge_index_from_edges",
    "dense_adjacency",
    "degree",
    "add_self_loops",
    "permute",
    "aggregate",
    "aggregate_naive",
    "mp_layer",
    "mp_layer_naive",
    "readout",
    "gcn_norm",
    "gcn_propagate",
    "normalized_adjacency",
    "gcn_layer",
    "gcn_layer_naive",
    "GCN",
    "wl_refine",
    "wl_refine_naive",
    "wl_histogram",
    "disjoint_union",
    "wl_test",
    "dirichlet_energy",
    "dirichlet_energy_naive",
    "spectral_energy",
    "smoothing_factor",
    "appnp_propagate",
    "label_propagation",
    "label_propagation_naive",
    "train_node_classifier",
    "karate_club",
]

_REDUCE = ("sum", "mean", "max")


class Graph(NamedTuple):
    """A graph with node labels: its edge list, its number of nodes and one label per node."""

    edge_index: torch.Tensor  # (2, E) both directions of every undirected edge
    num_nodes: int
    y: torch.Tensor  # (n,) int64 node labels


def _edges_of(edge_index, n: int) -> torch.Tensor:
    """Check an edge list of an n-node graph: (2, E) integer indices in [0, n)."""
    index_tensor(edge_index, "edge_index", high=n, ndim=2)
    return shape_is(edge_index, "edge_index", (2, None))


# --- graphs as tensors ----------------------------------------------------------------------------


def edge_index_from_edges(edges, num_nodes: int) -> torch.Tensor:
    """The (2, E) edge list of an undirected graph from its m pairs {u, v}: E = 2m.

    edges: (m, 2) integers (a tensor or a list of pairs), no self loops, each pair once.
    Returns both directions of every pair, u -> v first, then v -> u.
    """
    n = positive_int(num_nodes, "num_nodes")
    pairs = torch.as_tensor(edges, dtype=torch.int64).reshape(-1, 2)  # (m, 2)
    index_tensor(pairs, "edges", high=n, ndim=2)
    distinct(pairs, "edges")  # a self loop (u, u) would be counted twice by gcn_norm
    return torch.cat([pairs.T, pairs.flip(1).T], dim=1)  # (2, 2m)


def dense_adjacency(edge_index: torch.Tensor, num_nodes: int, dtype=torch.float64) -> torch.Tensor:
    """The (n, n) adjacency with A[i, j] = number of edges j -> i (1 for a simple graph)."""
    _edges_of(edge_index, num_nodes)
    A = torch.zeros(num_nodes, num_nodes, dtype=dtype)
    return A.index_put_(
        (edge_index[1], edge_index[0]), torch.ones((), dtype=dtype), accumulate=True
    )


def degree(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """The (n,) in-degrees: how many messages each node receives (int64)."""
    _edges_of(edge_index, num_nodes)
    return torch.bincount(edge_index[1], minlength=num_nodes)


def add_self_loops(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """The edge list with one self loop i -> i per node appended: (2, E + n)."""
    _edges_of(edge_index, num_nodes)
    loops = torch.arange(num_nodes).expand(2, num_nodes)  # (2, n)
    return torch.cat([edge_index, loops], dim=1)


def permute(x: torch.Tensor, edge_index: torch.Tensor, perm: torch.Tensor):
    """Relabel the nodes: (P x, the edge list of P A P^T), with node i the old node perm[i].

    x: (n, d); perm: (n,) a permutation of 0..n-1. An old edge j -> i becomes inv[j] -> inv[i],
    where inv is the inverse permutation. Returns (x[perm], edge_index relabelled).
    """
    n = x.shape[0]
    shape_is(index_tensor(perm, "perm", high=n, ndim=1), "perm", (n,))
    distinct(perm, "perm")  # a repeated node is not a permutation
    _edges_of(edge_index, n)
    inv = torch.argsort(perm)  # (n,) inv[old] = new
    return x[perm], inv[edge_index]


# --- eq. 47.1: message passing --------------------------------------------------------------------


def aggregate(
    x: torch.Tensor,
    edge_index: torch.Tensor,
    reduce: str = "sum",
    weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """m_i = the sum, mean or max of the messages x_j over the edges j -> i (eq. 47.1).

    x: (n, d); edge_index: (2, E); weight: (E,) optional edge weights (sum only). Scattered with
    index_add_ (sum, mean) or scatter_reduce (max); a node with no incoming edge gets zeros.
    Returns m: (n, d).
    """
    float_tensor(x, "x", ndim=2)
    _edges_of(edge_index, x.shape[0])
    one_of(reduce, "reduce", _REDUCE)
    src, dst = edge_index
    msg = x[src]  # (E, d) one message per edge
    if weight is not None:
        one_of(reduce, "reduce (with edge weights)", ("sum",))
        shape_is(weight, "weight", (edge_index.shape[1],))
        msg = msg * weight[:, None]
    if reduce == "max":
        idx = dst[:, None].expand_as(msg)  # (E, d) the target row of every entry
        return torch.zeros_like(x).scatter_reduce(0, idx, msg, "amax", include_self=False)
    out = torch.zeros_like(x).index_add_(0, dst, msg)  # (n, d)
    if reduce == "mean":
        deg = torch.bincount(dst, minlength=x.shape[0]).clamp(min=1)  # (n,)
        out = out / deg[:, None].to(x.dtype)
    return out


def aggregate_naive(x: torch.Tensor, A: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    """The dense reference of :func:`aggregate`: A @ x, row-normalised, or a masked max.

    x: (n, d); A: (n, n) 0/1 adjacency with A[i, j] = 1 for an edge j -> i. Returns (n, d).
    """
    float_tensor(x, "x", ndim=2)
    shape_is(A, "A", (x.shape[0], x.shape[0]))
    one_of(reduce, "reduce", _REDUCE)
    A = A.to(x.dtype)
    if reduce == "max":
        scores = torch.where(A[:, :, None] > 0, x[None, :, :], -math.inf)  # (n, n, d)
        out = scores.amax(dim=1)
        return torch.where(torch.isinf(out), torch.zeros_like(out), out)
    out = A @ x
    if reduce == "mean":
        out = out / A.sum(1, keepdim=True).clamp(min=1)
    return out


def mp_layer(
    x: torch.Tensor,
    edge_index: torch.Tensor,
    W_self: torch.Tensor,
    W_neigh: torch.Tensor,
    reduce: str = "sum",
    activation: Callable | None = torch.relu,
) -> torch.Tensor:
    """h'_i = sigma(x_i W_self + m_i W_neigh), m_i aggregated over j -> i. Implements eq. 47.1.

    x: (n, d); W_self, W_neigh: (d, d'); reduce: "sum", "mean" or "max"; activation: sigma, or
    None for the identity. Returns h': (n, d').
    """
    float_tensor(x, "x", ndim=2)
    shape_is(W_self, "W_self", (x.shape[1], None))
    shape_is(W_neigh, "W_neigh", tuple(W_self.shape))
    h = x @ W_self + aggregate(x, edge_index, reduce) @ W_neigh  # (n, d')
    return activation(h) if activation is not None else h


def mp_layer_naive(x, A, W_self, W_neigh, reduce="sum", activation=torch.relu) -> torch.Tensor:
    """:func:`mp_layer` with the dense aggregation of :func:`aggregate_naive`. Returns (n, d')."""
    h = x @ W_self + aggregate_naive(x, A, reduce) @ W_neigh
    return activation(h) if activation is not None else h


def readout(h: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    """A whole-graph vector from the node features: their sum, mean or max, (n, d) -> (d,)."""
    nonempty(float_tensor(h, "h", ndim=2), "h")
    one_of(reduce, "reduce", _REDUCE)
    if reduce == "max":
        return h.amax(0)
    return h.sum(0) if reduce == "sum" else h.mean(0)


# --- eq. 47.3: the GCN layer ----------------------------------------------------------------------


def gcn_norm(edge_index: torch.Tensor, num_nodes: int, dtype=torch.float64):
    """The edges of A + I and their weights 1 / sqrt(d~_i d~_j), d~ = degree + 1 (eq. 47.3).

    Returns (edge_index with self loops (2, E + n), w (E + n,)).
    """
    loops = add_self_loops(edge_index, num_nodes)  # (2, E + n)
    deg = torch.bincount(loops[1], minlength=num_nodes).to(dtype)  # (n,) d~ = d + 1
    inv_sqrt = deg.rsqrt()
    return loops, inv_sqrt[loops[0]] * inv_sqrt[loops[1]]


def gcn_propagate(x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """A_hat x = D~^(-1/2) (A + I) D~^(-1/2) x by message passing over the edge list (eq. 47.3).

    x: (n, d); edge_index: (2, E). Returns (n, d).
    """
    float_tensor(x, "x", ndim=2)
    loops, w = gcn_norm(edge_index, x.shape[0], dtype=x.dtype)
    return aggregate(x, loops, "sum", weight=w)


def normalized_adjacency(A: torch.Tensor) -> torch.Tensor:
    """The dense A_hat = D~^(-1/2) (A + I) D~^(-1/2), D~ the degrees of A + I (eq. 47.3).

    A: (n, n) symmetric 0/1 adjacency without self loops. Returns (n, n).
    """
    float_tensor(A, "A", ndim=2)
    shape_is(A, "A", (A.shape[0], A.shape[0]))
    A_tilde = A + torch.eye(A.shape[0], dtype=A.dtype)
    d_inv_sqrt = A_tilde.sum(1).rsqrt()  # (n,)
    return d_inv_sqrt[:, None] * A_tilde * d_inv_sqrt[None, :]


def gcn_layer(
    x: torch.Tensor,
    edge_index: torch.Tensor,
    W: torch.Tensor,
    b: torch.Tensor | None = None,
    activation: Callable | None = torch.relu,
) -> torch.Tensor:
    """H' = sigma(A_hat H W + b), propagated over the edge list. Implements eq. 47.3.

    x: (n, d); W: (d, d'); b: (d',) or None; activation: sigma, or None. Returns (n, d').
    """
    float_tensor(x, "x", ndim=2)
    shape_is(W, "W", (x.shape[1], None))
    h = gcn_propagate(x @ W, edge_index)  # (n, d')
    if b is not None:
        h = h + shape_is(b, "b", (W.shape[1],))
    return activation(h) if activation is not None else h


def gcn_layer_naive(x, A, W, b=None, activation=torch.relu) -> torch.Tensor:
    """:func:`gcn_layer` with the dense matrix of :func:`normalized_adjacency`. Returns (n, d')."""
    h = normalized_adjacency(A.to(x.dtype)) @ x @ W
    if b is not None:
        h = h + b
    return activation(h) if activation is not None else h


class GCN(nn.Module):
    """A stack of GCN layers (eq. 47.3), ReLU between them, logits out: dims = (d, ..., K).

    Weights start from Glorot's uniform initialisation drawn with ``generator``; biases at 0.
    forward(x (n, d), edge_index (2, E)) -> (n, K).
    """

    def __init__(
        self,
        dims: Sequence[int],
        *,
        generator: torch.Generator | None = None,
        dtype=torch.float32,
    ) -> None:
        super().__init__()
        integer(len(dims), "len(dims)", low=2)  # an input and an output width at least
        dims = [positive_int(v, "dims") for v in dims]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for d_in, d_out in zip(dims[:-1], dims[1:], strict=True):
            bound = math.sqrt(6.0 / (d_in + d_out))
            u = torch.rand(d_in, d_out, generator=generator, dtype=dtype)
            self.weights.append(nn.Parameter((2 * u - 1) * bound))
            self.biases.append(nn.Parameter(torch.zeros(d_out, dtype=dtype)))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        last = len(self.weights) - 1
        for i, (W, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = gcn_layer(x, edge_index, W, b, activation=None if i == last else torch.relu)
        return x


# --- eq. 47.4: 1-WL colour refinement -------------------------------------------------------------


def wl_refine(
    edge_index: torch.Tensor,
    num_nodes: int,
    colors: torch.Tensor | None = None,
    rounds: int | None = None,
) -> list[torch.Tensor]:
    """1-WL: c_i <- a new colour for (c_i, the multiset of the c_j, j -> i). Implements eq. 47.4.

    A node's signature is its colour followed by the counts of each colour among its neighbours,
    one row of (n, 1 + K); equal rows get equal new colours, numbered in the sorted order of the
    rows (torch.unique), so the colours of isomorphic graphs come out the same.
    colors: (n,) int64 initial colours (default: all 0); rounds: how many refinements (default:
    until the partition stops splitting, at most n - 1). Returns the colourings, initial first.
    """
    n = positive_int(num_nodes, "num_nodes")
    _edges_of(edge_index, n)
    if colors is None:
        colors = torch.zeros(n, dtype=torch.int64)
    shape_is(index_tensor(colors, "colors", ndim=1), "colors", (n,))
    _, c = torch.unique(colors, return_inverse=True)  # (n,) colours 0..K-1
    history = [c]
    limit = n - 1 if rounds is None else integer(rounds, "rounds", low=0)
    src, dst = edge_index
    for _ in range(limit):
        K = int(c.max()) + 1
        counts = torch.zeros(n, K, dtype=torch.int64).index_add_(0, dst, F.one_hot(c[src], K))
        signature = torch.cat([c[:, None], counts], dim=1)  # (n, 1 + K)
        _, new = torch.unique(signature, dim=0, return_inverse=True)  # (n,)
        if rounds is None and int(new.max()) == int(c.max()):
            break  # no class split: the partition is stable
        c = new
        history.append(c)
    return history


def wl_refine_naive(edge_index, num_nodes, colors=None, rounds=None) -> list[torch.Tensor]:
    """:func:`wl_refine` with Python dicts: signatures (c_i, sorted neighbour colours), sorted.

    The colour numbers may differ from :func:`wl_refine`'s; the partitions are the same.
    """
    n = num_nodes
    nbrs: list[list[int]] = [[] for _ in range(n)]
    for j, i in edge_index.T.tolist():
        nbrs[i].append(j)
    c = [0] * n if colors is None else colors.tolist()
    palette = sorted(set(c))
    c = [palette.index(v) for v in c]
    history = [torch.tensor(c)]
    for _ in range(n - 1 if rounds is None else rounds):
        sig = [(c[i], tuple(sorted(c[j] for j in nbrs[i]))) for i in range(n)]
        palette = sorted(set(sig))
        new = [palette.index(s) for s in sig]
        if rounds is None and len(palette) == len(set(c)):
            break
        c = new
        history.append(torch.tensor(c))
    return history


def wl_histogram(colors: torch.Tensor, num_colors: int | None = None) -> torch.Tensor:
    """How many nodes have each colour: (n,) -> (K,) int64."""
    index_tensor(colors, "colors", ndim=1)
    return torch.bincount(colors, minlength=num_colors or 0)


def disjoint_union(edge_index1, n1: int, edge_index2, n2: int):
    """Both graphs as one: the nodes of the second renumbered n1, ..., n1 + n2 - 1.

    Returns (edge_index (2, E1 + E2), n1 + n2).
    """
    _edges_of(edge_index1, n1)
    _edges_of(edge_index2, n2)
    return torch.cat([edge_index1, edge_index2 + n1], dim=1), n1 + n2


def wl_test(edge_index1, n1: int, edge_index2, n2: int):
    """Does 1-WL tell two graphs apart? Refine both together, compare their colour histograms.

    Returns (distinguished, colors1 (n1,), colors2 (n2,)): True if at some round the two
    histograms differ (the graphs are then not isomorphic); False means that no message-passing
    network can tell them apart. The colours are those of the stable round.
    """
    union, n = disjoint_union(edge_index1, n1, edge_index2, n2)
    history = wl_refine(union, n)
    distinguished = any(
        not torch.equal(
            wl_histogram(c[:n1], int(c.max()) + 1), wl_histogram(c[n1:], int(c.max()) + 1)
        )
        for c in history
    )
    return distinguished, history[-1][:n1], history[-1][n1:]


# --- eqs. 47.5 and 47.6: over-smoothing -----------------------------------------------------------


def dirichlet_energy(x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """E(X) = 1/2 sum over edges j -> i of ||x_i / sqrt(d~_i) - x_j / sqrt(d~_j)||^2 (eq. 47.5).

    x: (n, d); d~ = degree + 1, the degrees of A + I. Each undirected edge is stored twice, so
    the 1/2 counts it once. Returns a scalar tensor, equal to tr(X^T (I - A_hat) X).
    """
    float_tensor(x, "x", ndim=2)
    _edges_of(edge_index, x.shape[0])
    deg = torch.bincount(edge_index[1], minlength=x.shape[0]).to(x.dtype) + 1  # (n,)
    z = x * deg.rsqrt()[:, None]  # (n, d) x_i / sqrt(d~_i)
    src, dst = edge_index
    return 0.5 * ((z[dst] - z[src]) ** 2).sum()


def dirichlet_energy_naive(x: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """tr(X^T (I - A_hat) X) with the dense A_hat of :func:`normalized_adjacency` (eq. 47.5)."""
    L = torch.eye(A.shape[0], dtype=x.dtype) - normalized_adjacency(A.to(x.dtype))
    return torch.trace(x.T @ L @ x)


def spectral_energy(x: torch.Tensor, A: torch.Tensor, k: int) -> torch.Tensor:
    """E(A_hat^k X) = sum_i lambda_i (1 - lambda_i)^(2k) ||u_i^T X||^2 (eq. 47.6).

    lambda_i, u_i: the eigenpairs of I - A_hat (torch.linalg.eigh). x: (n, d); A: (n, n);
    k >= 0. Returns a scalar tensor.
    """
    float_tensor(x, "x", ndim=2)
    shape_is(A, "A", (x.shape[0], x.shape[0]))
    k = integer(k, "k", low=0)
    lam, U = torch.linalg.eigh(torch.eye(x.shape[0], dtype=x.dtype) - normalized_adjacency(A))
    coef = ((U.T @ x) ** 2).sum(1)  # (n,) ||u_i^T X||^2
    return (lam * (1 - lam) ** (2 * k) * coef).sum()


def smoothing_factor(A: torch.Tensor, tol: float = 1e-9) -> float:
    """rho = max |1 - lambda_i| over the eigenvalues lambda_i > tol of I - A_hat (eq. 47.6).

    One propagation multiplies the Dirichlet energy by at most rho^2. rho < 1 on every graph: the
    self loops keep every lambda_i below 2. A: (n, n) symmetric adjacency without self loops.
    """
    float_tensor(A, "A", ndim=2)
    positive(tol, "tol")
    lam = torch.linalg.eigvalsh(torch.eye(A.shape[0], dtype=A.dtype) - normalized_adjacency(A))
    return float((1 - lam[lam > tol]).abs().max())


def appnp_propagate(x: torch.Tensor, edge_index: torch.Tensor, k: int, alpha: float):
    """k steps of H <- (1 - alpha) A_hat H + alpha X from H = X: propagation that keeps a share
    alpha of the input at every step (personalised PageRank). x: (n, d). Returns (n, d)."""
    k = integer(k, "k", low=0)
    alpha = number(alpha, "alpha", 0.0, 1.0)
    h = x
    for _ in range(k):
        h = (1 - alpha) * gcn_propagate(h, edge_index) + alpha * x
    return h


# --- semi-supervised node classification ----------------------------------------------------------


def _one_hot_labels(train, y_train, num_nodes, num_classes, dtype):
    train = index_tensor(train, "train", high=num_nodes, ndim=1)
    distinct(train, "train")  # a repeated labelled node would count twice
    shape_is(index_tensor(y_train, "y_train", high=num_classes), "y_train", (len(train),))
    Y = torch.zeros(num_nodes, num_classes, dtype=dtype)
    Y[train, y_train] = 1.0
    return Y  # (n, K)


def label_propagation(
    edge_index: torch.Tensor,
    num_nodes: int,
    train: torch.Tensor,
    y_train: torch.Tensor,
    num_classes: int,
    alpha: float = 0.9,
) -> torch.Tensor:
    """Label propagation: F = (1 - alpha) (I - alpha S)^(-1) Y, S = D^(-1/2) A D^(-1/2).

    The fixed point of F <- alpha S F + (1 - alpha) Y, Y the one-hot labels of the nodes train
    (zeros elsewhere); solved as one linear system in float64. Returns F: (n, K) class scores.
    """
    n = positive_int(num_nodes, "num_nodes")
    alpha = number(alpha, "alpha", 0.0, 1.0, open_high=True)
    Y = _one_hot_labels(train, y_train, n, positive_int(num_classes, "num_classes"), torch.float64)
    d_inv_sqrt = degree(edge_index, n).to(torch.float64).clamp(min=1).rsqrt()  # (n,)
    S = d_inv_sqrt[:, None] * dense_adjacency(edge_index, n) * d_inv_sqrt[None, :]
    return (1 - alpha) * torch.linalg.solve(torch.eye(n, dtype=torch.float64) - alpha * S, Y)


def label_propagation_naive(
    edge_index, num_nodes, train, y_train, num_classes, alpha=0.9, steps=300
) -> torch.Tensor:
    """:func:`label_propagation` by iterating F <- alpha S F + (1 - alpha) Y over the edge list."""
    Y = _one_hot_labels(train, y_train, num_nodes, num_classes, torch.float64)
    deg = degree(edge_index, num_nodes).to(torch.float64).clamp(min=1)
    w = (deg[edge_index[0]] * deg[edge_index[1]]).rsqrt()  # (E,) S_ij
    Fs = Y.clone()
    for _ in range(steps):
        Fs = alpha * aggregate(Fs, edge_index, "sum", weight=w) + (1 - alpha) * Y
    return Fs


def train_node_classifier(
    model: nn.Module,
    x: torch.Tensor,
    edge_index: torch.Tensor,
    y: torch.Tensor,
    train: torch.Tensor,
    *,
    steps: int,
    lr: float = 1e-2,
    weight_decay: float = 5e-4,
) -> list[float]:
    """Full-batch training on a graph: every step runs model(x, edge_index) on all nodes and
    minimises the cross-entropy on the labelled nodes ``train`` only, with the book's AdamW
    (:class:`mlbook.nn.optim.Optimizer`, chapter 15).

    x: (n, d); y: (n,) labels (only y[train] is used); train: (L,) int64. Returns the losses.
    """
    float_tensor(x, "x", ndim=2)
    n = x.shape[0]
    _edges_of(edge_index, n)
    shape_is(index_tensor(y, "y", ndim=1), "y", (n,))
    nonempty(index_tensor(train, "train", high=n, ndim=1), "train")
    config = OptimizerConfig(kind="adamw", lr=positive(lr, "lr"), weight_decay=weight_decay)
    opt = Optimizer(model.parameters(), config)
    model.train()
    losses = []
    for _ in range(positive_int(steps, "steps")):
        loss = F.cross_entropy(model(x, edge_index)[train], y[train])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


def karate_club() -> Graph:
    """Zachary's karate club (34 members, 78 friendships), as shipped with networkx: the label
    is the faction each member joined after the split, 0 = the instructor's ("Mr. Hi", node 0),
    1 = the administrator's ("Officer", node 33)."""
    import networkx as nx

    G = nx.karate_club_graph()
    n = G.number_of_nodes()
    edges = sorted((min(u, v), max(u, v)) for u, v in G.edges())
    y = torch.tensor([0 if G.nodes[i]["club"] == "Mr. Hi" else 1 for i in range(n)])
    return Graph(edge_index_from_edges(edges, n), n, y)
