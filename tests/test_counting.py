"""The FLOP counts of mlbook.models.counting against torch's FlopCounterMode.

One convention throughout (the book's, and FlopCounterMode's): a multiply-add is 2 FLOPs, and only
matrix products count. The references are FlopCounterMode on the book's own blocks, and on
transformers' GPT2LMHeadModel and LlamaForCausalLM built on the ``meta`` device (shapes only, no
memory), so that the published shapes are measured, not only the formula evaluated.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from mlbook.models import counting, decoder
from mlbook.models.config import LLAMA2_7B, DecoderConfig, gpt2_config


def small(**kw) -> DecoderConfig:
    base = dict(vocab_size=40, d_model=32, n_layers=2, n_heads=4, d_ff=48, max_seq_len=32)
    return DecoderConfig(**{**base, **kw})


@pytest.mark.parametrize(
    "cfg",
    [
        small(),
        small(n_kv_heads=2, bias=True),
        small(mlp="gelu", norm="layer", bias=True),
        small(n_experts=4, top_k=2),
        small(layer_pattern="S", ssm_state=4, ssm_conv=3),
    ],
    ids=["swiglu", "gqa-bias", "gelu", "moe", "ssm"],
)
def test_layer_flops_match_flop_counter_on_one_block(cfg):
    """layer_flops(kind, T, T) is what one block's forward pass runs, 2 FLOPs a multiply-add."""
    kind = cfg.layer_kinds[0]
    block = decoder.DecoderBlock(cfg, kind, generator=torch.Generator().manual_seed(0))
    B, T = 3, 10
    x = torch.randn(B, T, cfg.d_model, generator=torch.Generator().manual_seed(1))
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        block(x)
    assert fc.get_total_flops() == B * counting.layer_flops(cfg, kind, T, T)


def test_training_step_is_three_forward_passes():
    """The backward pass runs two products per forward product: training = 3 x forward."""
    cfg = small()
    model = decoder.Decoder(cfg, generator=torch.Generator().manual_seed(0))
    x = torch.randint(0, cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(x)
    assert counting.measure_training_flops(model, x) == 3 * fc.get_total_flops()
    assert counting.training_flops(cfg, 12, 2) == 3 * counting.forward_flops(cfg, 12, 2)


def test_measured_over_6nd_is_linear_with_the_derived_intercept_and_slope():
    """measured / 6ND = (N_mm + d V) / N + (2 L d / N) T: the head sets the intercept, attention
    the slope (N non-embedding, N_mm the weights in matrix products)."""
    cfg = small(n_layers=3)
    model = decoder.Decoder(cfg, generator=torch.Generator().manual_seed(0))
    d, L, V = cfg.d_model, cfg.n_layers, cfg.vocab_size
    n = counting.count_parameters(cfg, embeddings=False)
    n_mm = L * counting.block_parameters(d, cfg.d_ff)
    lengths = [4, 8, 16, 32]
    ratios = []
    for T in lengths:
        x = torch.randint(0, V, (1, T), generator=torch.Generator().manual_seed(T))
        ratios.append(
            counting.measure_training_flops(model, x) / counting.approx_training_flops(n, T)
        )
    slope, intercept = np.polyfit(lengths, ratios, 1)
    assert intercept == pytest.approx((n_mm + d * V) / n, rel=1e-9)
    assert slope == pytest.approx(2 * L * d / n, rel=1e-9)


def test_gpt2_small_training_flops_match_transformers_on_meta():
    """GPT-2 small (d = 768, L = 12, V = 50257, tied head) at T = 1024, measured on HF's model."""
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config())
        x = torch.randint(0, 50257, (1, 1024))
    with FlopCounterMode(display=False) as fc:
        logits = model(x).logits
        F.cross_entropy(logits.flatten(0, 1), x.flatten()).backward()
    assert fc.get_total_flops() == counting.training_flops(gpt2_config(), 1024)


def test_llama_7b_forward_flops_match_transformers_on_meta():
    transformers = pytest.importorskip("transformers")
    c = LLAMA2_7B
    cfg = transformers.LlamaConfig(
        hidden_size=c.d_model,
        intermediate_size=c.d_ff,
        num_attention_heads=c.n_heads,
        num_key_value_heads=c.n_kv_heads,
        num_hidden_layers=c.n_layers,
        vocab_size=c.vocab_size,
        tie_word_embeddings=False,
    )
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
        x = torch.randint(0, c.vocab_size, (1, 64))
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(x)
    assert fc.get_total_flops() == counting.forward_flops(c, 64)
