"""The capstone's budget (chapter 44): eqs. 44.1-44.3 against instantiated models, published
counts and allocated bytes; pass@k over problems against exact binomials."""

import math

import pytest
import torch

from mlbook.models import checkpoints
from mlbook.models.config import LLAMA2_7B, MISTRAL_7B, gpt2_config, llama_config
from mlbook.models.decoder import Decoder
from mlbook.nn.optim import Optimizer, OptimizerConfig
from mlbook.posttraining import task
from mlbook.systems import capstone as cap


def _tensor_count(config):
    return sum(
        p.numel() for p in Decoder(config, generator=torch.Generator().manual_seed(0)).parameters()
    )


@pytest.mark.parametrize(
    "config",
    [
        llama_config(50, 32, 2, 4),
        llama_config(50, 48, 3, 6, n_kv_heads=2, d_ff=128),
        gpt2_config(61, 24, 2, 3, max_seq_len=16),
    ],
)
def test_formula_plus_gap_is_the_count_of_the_tensors(config):
    n = cap.approx_parameters(config) + sum(cap.parameter_gap(config).values())
    assert n == _tensor_count(config)


def test_formula_by_hand_and_published_count():
    d, L, V = 4096, 32, 32000
    assert cap.approx_parameters(LLAMA2_7B) == L * 12 * d * d + V * d
    # Llama-2-7B's published parameter count (its checkpoint's tensors): 6,738,415,616
    exact = cap.approx_parameters(LLAMA2_7B) + sum(cap.parameter_gap(LLAMA2_7B).values())
    assert exact == 6_738_415_616
    # GQA: 8 of 32 key/value heads shrink W_k and W_v by 4
    kv_full = cap.approx_parameters(llama_config(V, d, L, 32))
    assert kv_full - cap.approx_parameters(MISTRAL_7B) == L * 2 * d * (d - 8 * 128)


def test_compute_optimal_rule():
    n = 70e9  # Chinchilla: 70B parameters, 1.4T tokens
    assert cap.chinchilla_tokens(n) == pytest.approx(1.4e12, rel=1e-12)
    c = 6 * n * 1.4e12
    assert cap.chinchilla_params(c) == pytest.approx(n, rel=1e-12)
    b = cap.budget(LLAMA2_7B)
    assert b["N_opt"] == pytest.approx(b["N"], rel=1e-12)  # on the 20-tokens line
    with pytest.raises(ValueError, match="compute"):
        cap.chinchilla_params(-1.0)


def test_memory_against_allocated_bytes():
    model = checkpoints.load("base")
    opt = Optimizer(list(model.parameters()), OptimizerConfig("adamw", lr=1e-3))
    tokens, mask = task.batch(task.problems()[:8])
    loss = model(tokens[:, :-1]).logsumexp(-1).mean()
    loss.backward()
    opt.step()
    got = cap.measured_training_bytes(model, opt)
    n = sum(p.numel() for p in model.parameters())
    assert sum(got.values()) == cap.training_memory(n) == 16 * n  # fp32: 4 + 4 + 4 + 4
    cache = model.new_cache(3, 40)
    assert cache.nbytes == cap.kv_cache_memory(model.config, 40, batch=3, bytes_per_element=4)
    with pytest.raises(ValueError, match="backward pass"):
        cap.measured_training_bytes(checkpoints.load("draft"), opt)
    with pytest.raises(TypeError, match="config"):
        cap.approx_parameters("Llama-2-7B")
    with pytest.raises(ValueError, match="parameter_gap covers attention layers only"):
        cap.parameter_gap(llama_config(50, 32, 2, 4, layer_pattern="SA"))


def test_pass_at_k_curve_against_exact_binomials():
    model = checkpoints.load("base")
    pairs = task.problems()[:12]
    ks = [1, 2, 5, 8]
    got, c = cap.pass_at_k_curve(model, pairs, 8, ks, torch.Generator().manual_seed(0))
    assert c.shape == (12,) and int(c.min()) >= 0 and int(c.max()) <= 8
    ref = [1 - sum(math.comb(8 - int(ci), k) / math.comb(8, k) for ci in c) / 12 for k in ks]
    assert torch.allclose(got, torch.tensor(ref, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(got, cap.pass_at_k_curve_naive(c, 8, ks), atol=1e-12)
    assert got[0].item() == pytest.approx(c.double().mean().item() / 8, abs=1e-12)  # pass@1
    with pytest.raises(ValueError, match="k"):
        cap.pass_at_k_curve(model, pairs, 4, [5])


def test_perplexity_is_exp_of_the_mean_loss():
    model = checkpoints.load("draft")
    data = cap.heldout_tokens(20, 20)
    T = model.config.max_seq_len
    n = (data.numel() - 1) // T
    x, y = data[: n * T].view(n, T), data[1 : n * T + 1].view(n, T)
    with torch.no_grad():
        nll = torch.nn.functional.cross_entropy(model(x).flatten(0, 1).double(), y.flatten())
    assert cap.perplexity(model, data) == pytest.approx(math.exp(nll.item()), rel=1e-5)
