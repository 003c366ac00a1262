"""Small real data sets that ship inside the book's dependencies: nothing is downloaded.

digits   scikit-learn's 8 x 8 handwritten digits (1,797 images, 10 classes, 16 grey levels),
         split once into a stratified train and test part; images (N, 1, 8, 8) in [0, 1].
stored   the results of the book's longer runs (``scripts/*.py``), shipped as JSON in
         ``mlbook/data``, so that a chapter can plot what a script measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np
import torch

from .validation import integer, number

__all__ = ["ImageSplit", "digits", "stored"]


@dataclass(frozen=True)
class ImageSplit:
    """Images (N, C, H, W) with integer labels (N,), a train part and a test part."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def n_classes(self) -> int:
        return int(self.y_train.max()) + 1


@lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits  # ships its data inside the wheel

    d = load_digits()
    return d.images.astype(np.float64) / 16.0, d.target.astype(np.int64)


def digits(
    test_fraction: float = 0.25, seed: int = 0, dtype: torch.dtype = torch.float32
) -> ImageSplit:
    """The 8 x 8 digits, split so that every class keeps the same share in train and test.

    test_fraction: the share of each class held out; seed: the split's generator. Returns an
    :class:`ImageSplit` with x (N, 1, 8, 8) in [0, 1] of ``dtype`` and y (N,) int64 in 0..9."""
    test_fraction = number(test_fraction, "test_fraction", 0.0, 1.0, open_low=True, open_high=True)
    g = torch.Generator().manual_seed(integer(seed, "seed", low=0))
    images, labels = _digits_arrays()
    x = torch.from_numpy(images).to(dtype).unsqueeze(1)  # (N, 1, 8, 8)
    y = torch.from_numpy(labels)  # (N,)
    train, test = [], []
    for c in range(10):
        idx = torch.nonzero(y == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=g)]
        n_test = round(len(idx) * test_fraction)
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    tr = torch.cat(train)[torch.randperm(sum(map(len, train)), generator=g)]
    te = torch.cat(test)[torch.randperm(sum(map(len, test)), generator=g)]
    return ImageSplit(x[tr], y[tr], x[te], y[te])


def stored(name: str) -> dict:
    """The stored results ``mlbook/data/<name>.json`` of one of the book's scripts."""
    files = resources.files("mlbook").joinpath("data")
    path = files.joinpath(f"{name}.json")
    if not path.is_file():
        have = sorted(
            p.name.removesuffix(".json") for p in files.iterdir() if p.name.endswith(".json")
        )
        raise ValueError(f"name must be one of {have}, got {name!r}")
    return json.loads(path.read_text(encoding="utf-8"))
