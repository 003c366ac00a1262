"""Pretrained weights of the book's decoder that ship with the package (chapters 33-44).

``scripts/pretrain_decoders.py`` trains two Llama-form decoders on
:func:`mlbook.posttraining.task.pretraining_text` (sentences and noisy one-digit sums) and stores
them in ``mlbook/data/decoders.pt``: ``"base"`` (d = 64, two layers: the model that later
chapters fine-tune, align, quantise and serve) and ``"draft"`` (d = 32, one layer: the small
model of speculative decoding and distillation). Nothing downloads; rerun the script to remake
them (about a minute on two cores).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import torch

from ..validation import one_of
from .config import DecoderConfig
from .decoder import Decoder

__all__ = ["NAMES", "config", "load", "info"]

NAMES = ("base", "draft")


@cache
def _stored() -> dict:
    path = resources.files("mlbook").joinpath("data", "decoders.pt")
    with resources.as_file(path) as file:
        return torch.load(file, weights_only=True)


def config(name: str = "base") -> DecoderConfig:
    """The DecoderConfig of the stored model ``name``."""
    return DecoderConfig(**_stored()[one_of(name, "name", NAMES)]["config"])


def info(name: str = "base") -> dict:
    """How ``name`` was trained: steps, batch, learning rate, final losses, the text's settings."""
    return dict(_stored()[one_of(name, "name", NAMES)]["info"])


def load(name: str = "base", dtype: torch.dtype = torch.float32) -> Decoder:
    """A fresh Decoder holding the stored weights of ``name`` (in ``dtype``), in eval mode."""
    model = Decoder(config(name), dtype=dtype)
    state = {k: v.to(dtype) for k, v in _stored()[name]["weights"].items()}
    model.load_state_dict(state)
    return model.eval()
