"""Contrastive and metric learning (chapter 30): cosine similarity, pair and triplet losses,
InfoNCE and its gradient, the mutual-information bound, SigLIP's sigmoid loss and its sharding,
SimCLR on the digits, sentence embeddings by mean pooling.

Shape legend
    N      pairs in a batch: row i of z_a and row i of z_b are a positive pair
    D      embedding width;  P devices a batch is sharded over (N / P rows each)
    z_a, z_b  (N, D) embeddings of the two sides (two views of an image, an image and a text)
    S      (N, N) cosine similarities S_ij = s(z_a_i, z_b_j) of the L2-normalised rows
    P_     (N, N) row softmax of S / tau (called P in the text)
    Y      (N, N) SigLIP labels: +1 on the diagonal, -1 elsewhere
    F_     (N, N) critic scores f(x_i, y_j) of the mutual-information bound
    x      (N, 1, 8, 8) digit images in [0, 1];  h (N, W) representations;  z = head(h)
    labels (N,) class labels of metric learning;  pos, neg (N,) indices of triplet partners
    hidden (B, T, H) token states of a sentence encoder;  mask (B, T) 1 for real tokens

Conventions: ``info_nce`` is the mean row cross-entropy of S / tau with the diagonal as the
targets, averaged over both directions (a -> b and b -> a) unless ``symmetric=False``;
``siglip_loss`` averages over all N^2 pairs (the SigLIP paper divides the same sum by N).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..validation import (
    divides,
    float_tensor,
    index_tensor,
    integer,
    nonempty,
    number,
    one_of,
    positive,
    positive_entries,
    positive_int,
    same_shape,
    shape_is,
)

__all__ = [
    "normalize",
    "cosine_similarity",
    "cosine_distance",
    "similarity_matrix",
    "pair_loss",
    "pair_loss_naive",
    "triplet_loss",
    "random_triplets",
    "batch_hard_triplets",
    "batch_hard_triplets_naive",
    "semi_hard_triplets",
    "info_nce",
    "info_nce_naive",
    "info_nce_similarity_grad",
    "nt_xent",
    "nt_xent_naive",
    "effective_negatives",
    "alignment",
    "uniformity",
    "gaussian_pairs",
    "gaussian_mi",
    "gaussian_critic",
    "infonce_bound",
    "leave_one_out_bound",
    "siglip_loss",
    "siglip_loss_naive",
    "ShardStats",
    "siglip_loss_sharded",
    "info_nce_sharded",
    "shift_images",
    "shift_images_naive",
    "augment_digits",
    "DigitEncoder",
    "train_simclr",
    "train_metric",
    "mean_pool",
    "mean_pool_naive",
    "sentence_embeddings",
    "recall_at_k",
]


def _pair(z_a, z_b) -> tuple[torch.Tensor, torch.Tensor]:
    """Two (N, D) batches of the same shape, N >= 1 (a mismatch would broadcast or misalign)."""
    z_a = nonempty(float_tensor(z_a, "z_a", ndim=2), "z_a")
    z_b = float_tensor(z_b, "z_b", ndim=2)
    same_shape(z_a, z_b, ("z_a", "z_b"))
    return z_a, z_b


# --- eq. 30.1: similarity and distance -----------------------------------------------------------


def normalize(z: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Rows of z (..., D) divided by their Euclidean norms (at least eps): unit vectors."""
    return z / z.norm(dim=-1, keepdim=True).clamp_min(eps)


def cosine_similarity(z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """s(z, w) = z^T w / (|z| |w|) of matching rows: z, w (..., D) -> (...). Implements eq. 30.1."""
    same_shape(z, w, ("z", "w"))
    return (normalize(z) * normalize(w)).sum(-1)


def cosine_distance(z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """d = 1 - s(z, w) of matching rows, in [0, 2]: z, w (..., D) -> (...). Implements eq. 30.1."""
    return 1.0 - cosine_similarity(z, w)


def similarity_matrix(z_a: torch.Tensor, z_b: torch.Tensor) -> torch.Tensor:
    """All cosine similarities S_ij = s(z_a_i, z_b_j): z_a (N, D), z_b (M, D) -> (N, M)."""
    float_tensor(z_a, "z_a", ndim=2)
    shape_is(float_tensor(z_b, "z_b", ndim=2), "z_b", (None, z_a.shape[1]))
    return normalize(z_a) @ normalize(z_b).T


# --- eq. 30.2 and 30.3: pairs and triplets with a margin -----------------------------------------


def pair_loss(
    z: torch.Tensor, w: torch.Tensor, y: torch.Tensor, margin: float = 0.5
) -> torch.Tensor:
    """Mean contrastive pair loss y d^2 + (1 - y) max(0, m - d)^2 with the cosine distance d.

    z, w: (N, D) the two sides of N pairs; y: (N,) 1 for a similar pair, 0 for a dissimilar one
    (float or bool); margin: m > 0. Implements eq. 30.2.
    """
    z, w = _pair(z, w)
    shape_is(y, "y", (len(z),))
    positive(margin, "margin")
    y = y.to(z.dtype)
    d = cosine_distance(z, w)  # (N,)
    return (y * d**2 + (1 - y) * (margin - d).clamp_min(0) ** 2).mean()


def pair_loss_naive(z, w, y, margin: float = 0.5) -> torch.Tensor:
    """:func:`pair_loss` one pair at a time (the reference of the tests)."""
    total = z.new_zeros(())
    for i in range(len(z)):
        d = 1 - z[i] @ w[i] / (z[i].norm() * w[i].norm())
        total = total + (d**2 if y[i] else max(margin - d, 0.0 * d) ** 2)
    return total / len(z)


def triplet_loss(
    anchor: torch.Tensor, positive_: torch.Tensor, negative: torch.Tensor, margin: float = 0.2
) -> torch.Tensor:
    """Mean triplet loss max(0, d(a, p) - d(a, n) + m) with the cosine distance d.

    anchor, positive_, negative: (N, D) rows of N triplets; margin: m > 0. Implements eq. 30.3.
    """
    anchor, positive_ = _pair(anchor, positive_)
    same_shape(anchor, negative, ("anchor", "negative"))
    positive(margin, "margin")
    d_ap = cosine_distance(anchor, positive_)  # (N,)
    d_an = cosine_distance(anchor, negative)  # (N,)
    return (d_ap - d_an + margin).clamp_min(0).mean()


def random_triplets(labels: torch.Tensor, generator: torch.Generator):
    """For each anchor i a random positive (same label, not i) and a random negative.

    labels: (N,) ints, every label at least twice. Returns (pos, neg), two (N,) index tensors.
    """
    labels = index_tensor(labels, "labels", ndim=1)
    same = labels[:, None] == labels[None, :]  # (N, N)
    eye = torch.eye(len(labels), dtype=torch.bool)
    if not bool(((same & ~eye).any(1)).all()) or bool(same.all()):
        raise ValueError("labels must give every anchor a positive and a negative")
    u = torch.rand(len(labels), len(labels), generator=generator)  # (N, N) random keys
    pos = torch.where(same & ~eye, u, -1.0).argmax(1)  # a uniform pick among the positives
    neg = torch.where(~same, u, -1.0).argmax(1)
    return pos, neg


def batch_hard_triplets(z: torch.Tensor, labels: torch.Tensor):
    """Batch-hard mining: for each anchor the farthest positive and the closest negative.

    z: (N, D) embeddings; labels: (N,). Returns (pos, neg), two (N,) index tensors.
    """
    float_tensor(z, "z", ndim=2)
    shape_is(index_tensor(labels, "labels"), "labels", (len(z),))
    d = 1 - similarity_matrix(z, z)  # (N, N) cosine distances
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(len(z), dtype=torch.bool)
    if not bool(((same & ~eye).any(1)).all()) or bool(same.all()):
        raise ValueError("labels must give every anchor a positive and a negative")
    pos = torch.where(same & ~eye, d, -math.inf).argmax(1)
    neg = torch.where(~same, d, math.inf).argmin(1)
    return pos, neg


def semi_hard_triplets(z: torch.Tensor, labels: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Semi-hard mining (FaceNet): for anchor i with positive pos_i, the closest negative that
    is farther than the positive, d(a, n) > d(a, p); if there is none, the farthest negative.

    z: (N, D) embeddings; labels: (N,); pos: (N,) the positives. Returns neg, (N,) indices.
    """
    float_tensor(z, "z", ndim=2)
    shape_is(index_tensor(labels, "labels"), "labels", (len(z),))
    shape_is(index_tensor(pos, "pos", high=len(z)), "pos", (len(z),))
    d = 1 - similarity_matrix(z, z)  # (N, N)
    d_ap = d[torch.arange(len(z)), pos]  # (N,)
    neg_ok = labels[:, None] != labels[None, :]
    semi = neg_ok & (d > d_ap[:, None])
    closest = torch.where(semi, d, math.inf).argmin(1)
    farthest = torch.where(neg_ok, d, -math.inf).argmax(1)
    return torch.where(semi.any(1), closest, farthest)


def batch_hard_triplets_naive(z, labels):
    """:func:`batch_hard_triplets` anchor by anchor (the reference of the tests)."""
    pos, neg = [], []
    for i in range(len(z)):
        d = [float(1 - z[i] @ z[j] / (z[i].norm() * z[j].norm())) for j in range(len(z))]
        ps = [j for j in range(len(z)) if labels[j] == labels[i] and j != i]
        ns = [j for j in range(len(z)) if labels[j] != labels[i]]
        pos.append(max(ps, key=lambda j: d[j]))
        neg.append(min(ns, key=lambda j: d[j]))
    return torch.tensor(pos), torch.tensor(neg)


# --- eq. 30.4: InfoNCE ---------------------------------------------------------------------------


def _row_nce(logits: torch.Tensor) -> torch.Tensor:
    """Mean over rows of -log softmax(logits_i)_i: logits (N, N) -> ()."""
    return (torch.logsumexp(logits, dim=1) - logits.diagonal()).mean()


def info_nce(
    z_a: torch.Tensor, z_b: torch.Tensor, temperature: float, *, symmetric: bool = True
) -> torch.Tensor:
    """InfoNCE: the mean cross-entropy of the rows of S / tau against the diagonal.

    z_a, z_b: (N, D) embeddings, row i of each a positive pair (they are L2-normalised here);
    temperature: tau > 0. With ``symmetric=True`` (CLIP's form) the mean of the a -> b loss
    (rows of S) and the b -> a loss (columns); with ``symmetric=False`` the a -> b loss only.
    Returns a scalar. Implements eq. 30.4.
    """
    z_a, z_b = _pair(z_a, z_b)
    logits = similarity_matrix(z_a, z_b) / positive(temperature, "temperature")  # (N, N)
    loss = _row_nce(logits)
    return 0.5 * (loss + _row_nce(logits.T)) if symmetric else loss


def info_nce_naive(z_a, z_b, temperature: float, *, symmetric: bool = True) -> torch.Tensor:
    """:func:`info_nce` with explicit sums over rows and columns (the reference of the tests)."""
    N = len(z_a)
    S = [[float(z_a[i] @ z_b[j] / (z_a[i].norm() * z_b[j].norm())) for j in range(N)]
         for i in range(N)]  # fmt: skip

    def direction(s):
        total = 0.0
        for i in range(N):
            top = max(s[i])
            lse = top / temperature + math.log(sum(math.exp((v - top) / temperature) for v in s[i]))
            total += lse - s[i][i] / temperature
        return total / N

    rows = direction(S)
    if not symmetric:
        return torch.tensor(rows, dtype=torch.float64)
    cols = direction([list(col) for col in zip(*S, strict=True)])
    return torch.tensor(0.5 * (rows + cols), dtype=torch.float64)


def info_nce_similarity_grad(S: torch.Tensor, temperature: float) -> torch.Tensor:
    """The gradient (P - I) / (N tau) of the one-directional InfoNCE with respect to S.

    S: (N, N) similarities; P = softmax(S / tau) row by row. The gradient with respect to the
    logits S / tau is tau times this, (P - I) / N. Implements eq. 30.4.
    """
    N = len(shape_is(float_tensor(S, "S", ndim=2), "S", (len(S), len(S))))
    tau = positive(temperature, "temperature")
    P = torch.softmax(S / tau, dim=1)  # (N, N)
    return (P - torch.eye(N, dtype=S.dtype)) / (N * tau)


def nt_xent(z_a: torch.Tensor, z_b: torch.Tensor, temperature: float) -> torch.Tensor:
    """SimCLR's loss: InfoNCE over the 2N views, every other view of the batch a negative.

    z_a, z_b: (N, D) the two views of N images. Row k of the (2N, 2N) similarity matrix of
    [z_a; z_b] has the other view of image k as its target and itself masked out.
    """
    z_a, z_b = _pair(z_a, z_b)
    N = len(z_a)
    z = normalize(torch.cat([z_a, z_b]))  # (2N, D)
    logits = z @ z.T / positive(temperature, "temperature")  # (2N, 2N)
    logits = logits.masked_fill(torch.eye(2 * N, dtype=torch.bool), -math.inf)  # no self-pairs
    target = torch.cat([torch.arange(N, 2 * N), torch.arange(N)])  # (2N,) the other view
    return (torch.logsumexp(logits, 1) - logits[torch.arange(2 * N), target]).mean()


def nt_xent_naive(z_a, z_b, temperature: float) -> torch.Tensor:
    """:func:`nt_xent` view by view (the reference of the tests)."""
    z = torch.cat([z_a, z_b])
    N2 = len(z)
    total = 0.0
    for k in range(N2):
        t = (k + N2 // 2) % N2
        s = [float(z[k] @ z[j] / (z[k].norm() * z[j].norm())) / temperature for j in range(N2)]
        total += math.log(sum(math.exp(s[j]) for j in range(N2) if j != k)) - s[t]
    return torch.tensor(total / N2, dtype=torch.float64)


def effective_negatives(S: torch.Tensor, temperature: float) -> torch.Tensor:
    """exp(entropy) of each anchor's softmax weights on its negatives: (N, N) -> (N,).

    Row i's negative gradient weights are P_ij, j != i, renormalised; the exponential of their
    entropy counts how many negatives carry the gradient (N - 1 if equal, 1 if one dominates).
    """
    N = S.shape[0]
    logits = S / positive(temperature, "temperature")
    logits = logits.masked_fill(torch.eye(N, dtype=torch.bool), -math.inf)  # negatives only
    logq = torch.log_softmax(logits, dim=1)
    q = logq.exp()
    return torch.exp(-(q * logq.masked_fill(q == 0, 0.0)).sum(1))


def alignment(z_a: torch.Tensor, z_b: torch.Tensor, alpha: float = 2.0) -> torch.Tensor:
    """Mean |z_a_i - z_b_i|^alpha of the normalised positive pairs (Wang and Isola): ()."""
    z_a, z_b = _pair(z_a, z_b)
    return ((normalize(z_a) - normalize(z_b)).norm(dim=1) ** alpha).mean()


def uniformity(z: torch.Tensor, t: float = 2.0) -> torch.Tensor:
    """log of the mean of exp(-t |z_i - z_j|^2) over pairs i < j of normalised rows: ()."""
    z = normalize(float_tensor(z, "z", ndim=2))
    integer(len(z), "the number of rows of z", low=2)
    sq = (2 - 2 * z @ z.T).clamp_min(0)  # (N, N) squared distances of unit vectors
    i, j = torch.triu_indices(len(z), len(z), offset=1)
    return torch.logsumexp(-t * sq[i, j], 0) - math.log(len(i))


# --- the mutual-information bound I(X; Y) >= log N - L -------------------------------------------


def gaussian_pairs(
    n: int,
    dim: int,
    rho: float,
    generator: torch.Generator,
    *,
    batches: int | None = None,
    dtype=torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """n draws of (x, y), x ~ N(0, I) and y = rho x + sqrt(1 - rho^2) e: (n, dim) each, or
    (batches, n, dim) with ``batches``."""
    n, dim = positive_int(n, "n"), positive_int(dim, "dim")
    rho = number(rho, "rho", -1.0, 1.0, open_low=True, open_high=True)
    lead = () if batches is None else (positive_int(batches, "batches"),)
    x = torch.randn(*lead, n, dim, generator=generator, dtype=dtype)
    e = torch.randn(*lead, n, dim, generator=generator, dtype=dtype)
    return x, rho * x + math.sqrt(1 - rho**2) * e


def gaussian_mi(rho: float, dim: int) -> float:
    """I(X; Y) = -(dim / 2) log(1 - rho^2) nats for the pairs of :func:`gaussian_pairs`."""
    rho = number(rho, "rho", -1.0, 1.0, open_low=True, open_high=True)
    return -0.5 * positive_int(dim, "dim") * math.log1p(-(rho**2))


def gaussian_critic(x: torch.Tensor, y: torch.Tensor, rho: float) -> torch.Tensor:
    """The optimal critic f(x_i, y_j) = log p(y_j | x_i) - log p(y_j) of every pair:
    x (..., N, d), y (..., M, d) -> (..., N, M).

    For the pairs of :func:`gaussian_pairs`: p(y | x) = N(rho x, (1 - rho^2) I), p(y) = N(0, I).
    """
    rho = number(rho, "rho", -1.0, 1.0, open_low=True, open_high=True)
    v = 1 - rho**2
    sq = torch.cdist(rho * x, y) ** 2  # (..., N, M) |y_j - rho x_i|^2
    return -0.5 * x.shape[-1] * math.log(v) - sq / (2 * v) + 0.5 * (y**2).sum(-1)[..., None, :]


def _square(scores: torch.Tensor) -> int:
    float_tensor(scores, "scores", min_ndim=2)
    N = scores.shape[-1]
    shape_is(scores, "scores", (None,) * (scores.ndim - 2) + (N, N))
    return N


def infonce_bound(scores: torch.Tensor) -> torch.Tensor:
    """log N - L for batches of critic scores F_ij = f(x_i, y_j): (..., N, N) -> (...).

    L is the mean row cross-entropy against the diagonal (the positives); its expectation is a
    lower bound on I(X; Y), and every batch's value is at most log N.
    """
    N = _square(scores)
    lse = torch.logsumexp(scores, dim=-1)  # (..., N)
    return math.log(N) - (lse - scores.diagonal(dim1=-2, dim2=-1)).mean(-1)


def leave_one_out_bound(scores: torch.Tensor) -> torch.Tensor:
    """log(N - 1) - L' with the positive left out of each denominator: (..., N, N) -> (...).

    The negative control of the bound: its expectation is at least I(X; Y), not at most.
    """
    N = integer(_square(scores), "the batch size N of scores", low=2)
    off = scores.masked_fill(torch.eye(N, dtype=torch.bool), -math.inf)  # (..., N, N) negatives
    lse = torch.logsumexp(off, dim=-1)
    return math.log(N - 1) - (lse - scores.diagonal(dim1=-2, dim2=-1)).mean(-1)


# --- eq. 30.5: SigLIP ----------------------------------------------------------------------------


def siglip_loss(
    z_a: torch.Tensor, z_b: torch.Tensor, scale: float = 10.0, bias: float = -10.0
) -> torch.Tensor:
    """Mean over all N^2 pairs of log(1 + exp(-Y_ij (t S_ij + b))), Y = 2 I - 1.

    z_a, z_b: (N, D) embeddings (normalised here); scale: t > 0; bias: b. Each pair is its own
    binary classification, positive on the diagonal. Implements eq. 30.5.
    """
    z_a, z_b = _pair(z_a, z_b)
    logits = positive(scale, "scale") * similarity_matrix(z_a, z_b) + number(bias, "bias")
    Y = 2 * torch.eye(len(z_a), dtype=logits.dtype) - 1  # (N, N) +1 diagonal, -1 elsewhere
    return F.softplus(-Y * logits).mean()


def siglip_loss_naive(z_a, z_b, scale: float = 10.0, bias: float = -10.0) -> torch.Tensor:
    """:func:`siglip_loss` pair by pair (the reference of the tests)."""
    N = len(z_a)
    total = 0.0
    for i in range(N):
        for j in range(N):
            s = float(z_a[i] @ z_b[j] / (z_a[i].norm() * z_b[j].norm()))
            u = -(1.0 if i == j else -1.0) * (scale * s + bias)
            total += max(u, 0.0) + math.log1p(math.exp(-abs(u)))  # log(1 + e^u), stable
    return torch.tensor(total / N**2, dtype=torch.float64)


class ShardStats(NamedTuple):
    """What one device of a sharded loss holds and receives (counted by the simulation)."""

    received_rows: int  # embedding rows received from other devices
    peak_logits: int  # entries of the largest logit block held at once


def _shards(N: int, devices: int) -> list[slice]:
    devices = integer(devices, "devices", 1, N)
    divides(devices, "devices", N, "the batch N")
    n = N // devices
    return [slice(p * n, (p + 1) * n) for p in range(devices)]


def siglip_loss_sharded(
    z_a: torch.Tensor, z_b: torch.Tensor, scale: float, bias: float, devices: int
) -> tuple[torch.Tensor, ShardStats]:
    """SigLIP over ``devices`` shards, as a ring: each device keeps its N/P rows of z_a and
    passes its z_b block on, P - 1 times, adding the loss of one (N/P, N/P) block per step.

    Returns (the loss of :func:`siglip_loss`, the counts of device 0).
    """
    z_a, z_b = _pair(z_a, z_b)
    shards = _shards(len(z_a), devices)
    a, b = normalize(z_a), normalize(z_b)
    total, received, peak = z_a.new_zeros(()), 0, 0
    for p, rows in enumerate(shards):  # device p
        for step in range(len(shards)):  # the z_b block that visits it at this step
            q = (p + step) % len(shards)
            block = scale * a[rows] @ b[shards[q]].T + bias  # (N/P, N/P)
            Y = 2.0 * (p == q) * torch.eye(block.shape[0], dtype=block.dtype) - 1
            total = total + F.softplus(-Y * block).sum()
            if p == 0:
                received += block.shape[1] if q != p else 0
                peak = max(peak, block.numel())
    return total / len(z_a) ** 2, ShardStats(received, peak)


def info_nce_sharded(
    z_a: torch.Tensor, z_b: torch.Tensor, temperature: float, devices: int
) -> tuple[torch.Tensor, ShardStats]:
    """Symmetric InfoNCE over ``devices`` shards: each row's softmax needs all N columns, so
    every device all-gathers z_b (for its rows) and z_a (for its columns) and holds an
    (N/P, N) logit block for each direction.

    Returns (the loss of :func:`info_nce`, the counts of device 0).
    """
    z_a, z_b = _pair(z_a, z_b)
    shards = _shards(len(z_a), devices)
    a, b = normalize(z_a), normalize(z_b)
    tau = positive(temperature, "temperature")
    total, received, peak = z_a.new_zeros(()), 0, 0
    for p, rows in enumerate(shards):
        target = torch.arange(rows.start, rows.stop)  # the positives' columns
        for mine, other in ((a, b), (b, a)):  # a -> b on my rows, then b -> a on my columns
            logits = mine[rows] @ other.T / tau  # (N/P, N) after the all-gather of `other`
            idx = torch.arange(len(target))
            total = total + (torch.logsumexp(logits, 1) - logits[idx, target]).sum()
            if p == 0:
                received += len(other) - len(target)
                peak = max(peak, logits.numel())
    return total / (2 * len(z_a)), ShardStats(received, peak)


# --- SimCLR on the digits -------------------------------------------------------------------------


def shift_images(x: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor) -> torch.Tensor:
    """Shift each image by (dy_n, dx_n) pixels, filling with zeros: x (N, C, H, W) -> same.

    dy, dx: (N,) integer shifts (positive: down, right), each of size less than H or W.
    """
    x = float_tensor(x, "x", ndim=4)
    N, C, H, W = x.shape
    shape_is(index_tensor(dy.abs(), "|dy|", high=H), "dy", (N,))
    shape_is(index_tensor(dx.abs(), "|dx|", high=W), "dx", (N,))
    pad = F.pad(x, (W, W, H, H))  # (N, C, 3H, 3W)
    rows = (H - dy)[:, None] + torch.arange(H)  # (N, H) source rows
    cols = (W - dx)[:, None] + torch.arange(W)  # (N, W) source columns
    n, c = torch.arange(N)[:, None, None, None], torch.arange(C)[None, :, None, None]
    return pad[n, c, rows[:, None, :, None], cols[:, None, None, :]]  # (N, C, H, W)


def shift_images_naive(x, dy, dx):
    """:func:`shift_images` image by image with slices (the reference of the tests)."""
    out = torch.zeros_like(x)
    H, W = x.shape[-2:]
    for n in range(len(x)):
        a, b = int(dy[n]), int(dx[n])
        out[n, :, max(a, 0) : H + min(a, 0), max(b, 0) : W + min(b, 0)] = x[
            n, :, max(-a, 0) : H + min(-a, 0), max(-b, 0) : W + min(-b, 0)
        ]
    return out


def augment_digits(
    x: torch.Tensor,
    generator: torch.Generator,
    *,
    max_shift: int = 1,
    contrast: float = 0.3,
    drop: float = 0.1,
    noise: float = 0.1,
) -> torch.Tensor:
    """A random view of each image: a shift of up to ``max_shift`` pixels in each direction, a
    contrast factor in [1 - contrast, 1 + contrast], each pixel dropped (set to 0) with
    probability ``drop``, Gaussian noise of standard deviation ``noise``, clipped to [0, 1].

    x: (N, 1, H, W) in [0, 1]; generator: draws the views (in that order). Returns (N, 1, H, W).
    """
    x = float_tensor(x, "x", ndim=4)
    s = integer(max_shift, "max_shift", 0, min(x.shape[-2:]) - 1)
    contrast = number(contrast, "contrast", 0.0, 1.0)
    drop = number(drop, "drop", 0.0, 1.0, open_high=True)
    noise = number(noise, "noise", 0.0)
    N = len(x)
    dy = torch.randint(-s, s + 1, (N,), generator=generator)
    dx = torch.randint(-s, s + 1, (N,), generator=generator)
    x = shift_images(x, dy, dx)
    factor = 1 + contrast * (2 * torch.rand(N, 1, 1, 1, generator=generator, dtype=x.dtype) - 1)
    keep = torch.rand(x.shape, generator=generator, dtype=x.dtype) >= drop
    x = x * factor * keep + noise * torch.randn(x.shape, generator=generator, dtype=x.dtype)
    return x.clamp(0, 1)


class DigitEncoder(nn.Module):
    """A small MLP encoder of 8 x 8 images: h = backbone(x) (N, width), z = head(h) (N, proj).

    The representation h is what a probe or a nearest-neighbour vote uses; the loss sees the
    projection z (SimCLR's finding: the head absorbs what the augmentations remove).
    """

    def __init__(self, pixels: int = 64, hidden: int = 256, width: int = 64, proj: int = 32):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Flatten(), nn.Linear(pixels, hidden), nn.ReLU(), nn.Linear(hidden, width)
        )
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(width, proj))
        self.losses: list[float] = []  # one per training step, filled by the trainers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The representation h (N, width) of images x (N, 1, H, W)."""
        return self.backbone(x)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """The projection z = head(h) (N, proj) that the contrastive loss sees."""
        return self.head(self.backbone(x))


def _seeded_encoder(seed: int, **sizes) -> DigitEncoder:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(integer(seed, "seed", low=0))
        return DigitEncoder(**sizes)


def train_simclr(
    x: torch.Tensor,
    *,
    steps: int = 200,
    seed: int = 0,
    batch_size: int = 128,
    temperature: float = 0.2,
    lr: float = 3e-3,
    **sizes,
) -> DigitEncoder:
    """SimCLR on unlabelled images x (N, 1, 8, 8): two views per image (:func:`augment_digits`),
    the NT-Xent loss (:func:`nt_xent`) on the projections, Adam.

    The encoder's initialisation, the minibatches and the views are drawn from ``seed``; sizes
    (hidden, width, proj) go to :class:`DigitEncoder`. Returns the trained encoder in eval
    mode; its ``losses`` hold the loss of every step.
    """
    x = nonempty(float_tensor(x, "x", ndim=4), "x")
    steps, batch_size = positive_int(steps, "steps"), positive_int(batch_size, "batch_size")
    model = _seeded_encoder(seed, pixels=x[0].numel(), **sizes)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=positive(lr, "lr"))
    model.train()
    for _ in range(steps):
        batch = x[torch.randint(len(x), (min(batch_size, len(x)),), generator=g)]
        loss = nt_xent(
            model.project(augment_digits(batch, g)),
            model.project(augment_digits(batch, g)),
            temperature,
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        model.losses.append(loss.item())
    return model.eval()


def train_metric(
    x: torch.Tensor,
    labels: torch.Tensor,
    *,
    loss: str = "triplet",
    mining: str = "batch_hard",
    margin: float = 0.2,
    steps: int = 150,
    seed: int = 0,
    batch_size: int = 128,
    lr: float = 3e-3,
) -> tuple[DigitEncoder, dict[str, list[float]]]:
    """Supervised metric learning of the encoder's representation h on labelled images.

    loss: "triplet" (eq. 30.3, triplets from ``mining``: "random", "batch_hard" or
    "semi_hard", the last with random positives), "pair"
    (eq. 30.2 on pairs of the batch, half similar) or "pull" (the pair loss without its
    dissimilar term, the negative control). Each batch holds batch_size / K random images of
    each of the K classes (at least 2). Returns (encoder, history) with the loss and, for
    triplets, the share of active triplets (loss > 0) per step.
    """
    x = nonempty(float_tensor(x, "x", ndim=4), "x")
    shape_is(index_tensor(labels, "labels"), "labels", (len(x),))
    one_of(loss, "loss", ("triplet", "pair", "pull"))
    one_of(mining, "mining", ("random", "batch_hard", "semi_hard"))
    model = _seeded_encoder(seed, pixels=x[0].numel())
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=positive(lr, "lr"))
    hist: dict[str, list[float]] = {"loss": [], "active": []}
    classes = [torch.nonzero(labels == k).flatten() for k in labels.unique()]
    per_class = max(2, positive_int(batch_size, "batch_size") // len(classes))
    for _ in range(positive_int(steps, "steps")):
        idx = torch.cat(  # a balanced batch: per_class random images of every class
            [rows[torch.randint(len(rows), (per_class,), generator=g)] for rows in classes]
        )
        h, y = model(x[idx]), labels[idx]
        if loss == "triplet":
            with torch.no_grad():
                if mining == "batch_hard":
                    pos, neg = batch_hard_triplets(h, y)
                else:
                    pos, neg = random_triplets(y, g)
                    if mining == "semi_hard":
                        neg = semi_hard_triplets(h, y, pos)
            per = (cosine_distance(h, h[pos]) - cosine_distance(h, h[neg]) + margin).clamp_min(0)
            value = per.mean()
            hist["active"].append(float((per > 0).double().mean()))
        else:  # pairs (i, partner_i): a same-label partner for the first half, random for the rest
            pos, _ = random_triplets(y, g)
            half = len(y) // 2
            partner = torch.cat([pos[:half], torch.randint(len(y), (len(y) - half,), generator=g)])
            same = (y == y[partner]).to(h.dtype)
            d = cosine_distance(h, h[partner])
            value = (
                (same * d**2).mean() if loss == "pull" else pair_loss(h, h[partner], same, margin)
            )
        opt.zero_grad(set_to_none=True)
        value.backward()
        opt.step()
        hist["loss"].append(value.item())
        model.losses.append(value.item())
    return model.eval(), hist


# --- sentence embeddings and retrieval -----------------------------------------------------------


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of each sentence's token states over its real tokens: (B, T, H), (B, T) -> (B, H).

    mask: 1 (or True) for real tokens, 0 for padding; every sentence has at least one token.
    """
    float_tensor(hidden, "hidden", ndim=3)
    shape_is(mask, "mask", hidden.shape[:2])
    m = mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    count = positive_entries(m.sum(1), "the number of tokens that mask keeps per sentence")
    return (hidden * m).sum(1) / count  # (B, H)


def mean_pool_naive(hidden, mask):
    """:func:`mean_pool` sentence by sentence (the reference of the tests)."""
    return torch.stack([hidden[b][mask[b].bool()].mean(0) for b in range(len(hidden))])


@torch.no_grad()
def sentence_embeddings(encoder, sentences: list[str]) -> torch.Tensor:
    """Unit-length sentence embeddings (B, H): mean pooling of the last hidden states over the
    real tokens, then L2 normalisation (as sentence-transformers' MiniLM does).

    encoder: an :class:`mlbook.attention.pretrained.Encoder` (tokenizer and model).
    """
    nonempty(sentences, "sentences")
    batch = encoder.tokenizer(sentences, padding=True, truncation=True, return_tensors="pt")
    hidden = encoder.model(**batch).last_hidden_state  # (B, T, H)
    return normalize(mean_pool(hidden, batch["attention_mask"]))


def recall_at_k(sim: torch.Tensor, targets: torch.Tensor, k: int = 1) -> float:
    """The share of queries whose target is among their k most similar candidates.

    sim: (Q, C) query-candidate similarities; targets: (Q,) the right candidate of each query.
    """
    float_tensor(sim, "sim", ndim=2)
    shape_is(index_tensor(targets, "targets", high=sim.shape[1]), "targets", (len(sim),))
    k = integer(k, "k", 1, sim.shape[1])
    top = sim.topk(k, dim=1).indices  # (Q, k)
    return float((top == targets[:, None]).any(1).double().mean())
