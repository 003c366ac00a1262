"""Train a classifier with autograd, and judge learned features: the loop the vision, contrastive
and self-supervised chapters share (30, 31, 45, 48).

Shapes: x (N, ...) inputs, y (N,) class labels, z (N, D) features.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import minimize

from ..validation import (
    float_tensor,
    index_tensor,
    integer,
    nonempty,
    positive,
    positive_int,
    shape_is,
)
from .optim import Optimizer, OptimizerConfig

__all__ = ["fit_classifier", "accuracy", "linear_probe", "knn_accuracy"]


def fit_classifier(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    steps: int,
    lr: float = 1e-2,
    batch_size: int = 128,
    weight_decay: float = 0.0,
    seed: int = 0,
) -> list[float]:
    """Minimise the mean cross-entropy of ``model(x)`` against y with AdamW on random minibatches.

    model maps x (B, ...) to logits (B, K); the minibatches are drawn by a generator seeded with
    ``seed``. The update is the book's AdamW (eq. 15.4, :class:`~mlbook.nn.optim.Optimizer`),
    equal to ``torch.optim.AdamW``. Returns the loss of every step (the model trains in place)."""
    nonempty(float_tensor(x, "x", min_ndim=2), "x")
    shape_is(index_tensor(y, "y"), "y", (len(x),))
    steps, batch_size = positive_int(steps, "steps"), positive_int(batch_size, "batch_size")
    g = torch.Generator().manual_seed(integer(seed, "seed", low=0))
    config = OptimizerConfig("adamw", lr=positive(lr, "lr"), weight_decay=weight_decay)
    opt = Optimizer([p for p in model.parameters() if p.requires_grad], config)
    model.train()
    losses = []
    for _ in range(steps):
        idx = torch.randint(len(x), (min(batch_size, len(x)),), generator=g)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """The share of rows whose largest logit of ``model(x)`` is at the label y."""
    nonempty(x, "x")
    shape_is(index_tensor(y, "y"), "y", (len(x),))
    was_training = model.training
    model.eval()
    pred = model(x).argmax(dim=-1)  # (N,)
    model.train(was_training)
    return float((pred == y).double().mean())


def linear_probe(
    z_train: torch.Tensor,
    y_train: torch.Tensor,
    z_test: torch.Tensor,
    y_test: torch.Tensor,
    *,
    l2: float = 1e-3,
    steps: int = 100,
) -> float:
    """Test accuracy of a multinomial logistic regression fitted on frozen features.

    The features are standardised with the training rows' statistics; the convex loss
    (mean cross-entropy + l2/2 ||W||^2) is minimised by SciPy's L-BFGS in float64."""
    z_train = nonempty(float_tensor(z_train, "z_train", ndim=2), "z_train").double()
    z_test = float_tensor(z_test, "z_test", ndim=2).double()
    if z_test.shape[1] != z_train.shape[1]:
        raise ValueError(f"z_test must have {z_train.shape[1]} columns, got {z_test.shape[1]}")
    shape_is(index_tensor(y_train, "y_train"), "y_train", (len(z_train),))
    shape_is(index_tensor(y_test, "y_test"), "y_test", (len(z_test),))
    mean, std = z_train.mean(0), z_train.std(0).clamp_min(1e-8)  # (D,)
    a, b = (z_train - mean) / std, (z_test - mean) / std
    k = int(max(y_train.max(), y_test.max())) + 1
    shape = (a.shape[1] + 1, k)  # W (D, K) with the bias as its last row

    @torch.enable_grad()  # also when called under torch.no_grad()
    def loss_and_grad(flat: np.ndarray) -> tuple[float, np.ndarray]:
        w = torch.from_numpy(flat).view(shape).requires_grad_(True)
        loss = F.cross_entropy(a @ w[:-1] + w[-1], y_train) + 0.5 * l2 * (w[:-1] ** 2).sum()
        loss.backward()
        return loss.item(), w.grad.numpy().ravel()

    opts = {"maxiter": positive_int(steps, "steps")}
    fitted = minimize(
        loss_and_grad, np.zeros(shape[0] * k), jac=True, method="L-BFGS-B", options=opts
    )
    w = torch.from_numpy(fitted.x).view(shape)
    return float(((b @ w[:-1] + w[-1]).argmax(1) == y_test).double().mean())


def knn_accuracy(
    z_train: torch.Tensor,
    y_train: torch.Tensor,
    z_test: torch.Tensor,
    y_test: torch.Tensor,
    k: int = 5,
) -> float:
    """Test accuracy of a k-nearest-neighbour vote by cosine similarity (ties: smaller label)."""
    z_train = nonempty(float_tensor(z_train, "z_train", ndim=2), "z_train")
    z_test = float_tensor(z_test, "z_test", ndim=2)
    shape_is(index_tensor(y_train, "y_train"), "y_train", (len(z_train),))
    shape_is(index_tensor(y_test, "y_test"), "y_test", (len(z_test),))
    k = integer(k, "k", low=1, high=len(z_train))
    sim = F.normalize(z_test, dim=1) @ F.normalize(z_train, dim=1).T  # (N_test, N_train)
    nearest = y_train[sim.topk(k, dim=1).indices]  # (N_test, k)
    votes = F.one_hot(nearest, int(y_train.max()) + 1).sum(1)  # (N_test, K)
    return float((votes.argmax(1) == y_test).double().mean())
