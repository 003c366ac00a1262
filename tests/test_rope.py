"""mlbook.attention.rope vs independent references: Hugging Face's Llama RoPE, explicit rotation
matrices, complex numbers, closed forms."""

import math

import pytest
import torch

from mlbook.attention import rope

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb  # noqa: E402


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_apply_rope_matches_hugging_face_llama(gen, dtype, atol):
    q = torch.randn(2, 4, 12, 32, generator=gen, dtype=dtype)
    pos = torch.arange(100, 112)
    freqs = rope.rope_frequencies(32)
    angles = pos.double()[:, None] * freqs  # (T, d/2)
    emb = torch.cat([angles, angles], -1)  # (T, d) as HF builds it
    ref, _ = apply_rotary_pos_emb(q, q, emb.cos().to(dtype)[None], emb.sin().to(dtype)[None])
    out = rope.apply_rope(q, pos, freqs)
    assert out.dtype == dtype
    torch.testing.assert_close(out, ref, atol=atol, rtol=0)


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_complex_form_and_rotation_matrix_agree(gen, dtype, atol):
    x = torch.randn(3, 9, 16, generator=gen, dtype=dtype)
    pos = torch.arange(9) * 3.5  # fractional positions are allowed
    freqs = rope.rope_frequencies(16, base=500.0)
    fast = rope.apply_rope(x, pos, freqs)
    torch.testing.assert_close(rope.apply_rope_complex(x, pos, freqs), fast, atol=atol, rtol=0)
    for t in (0, 4, 8):
        r = rope.rope_rotation_matrix(pos[t].item(), freqs)
        torch.testing.assert_close(fast[:, t].double(), x[:, t].double() @ r.T, atol=atol, rtol=0)


def test_pairings_differ_by_a_permutation(gen):
    x = torch.randn(2, 5, 12, generator=gen, dtype=torch.float64)
    pos, freqs = torch.arange(5), rope.rope_frequencies(12)
    perm = rope.interleave_permutation(12)
    inter = rope.apply_rope_complex(x, pos, freqs, pairing="interleaved")
    torch.testing.assert_close(
        inter,
        rope.apply_rope(x[..., perm], pos, freqs)[..., torch.argsort(perm)],
        atol=1e-14,
        rtol=0,
    )
    assert (inter - rope.apply_rope(x, pos, freqs)).abs().max() > 1e-2  # but they are not equal
    assert perm.tolist() == [0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11]


def test_relative_property_and_broadcast_positions(gen):
    d = 32
    freqs = rope.rope_frequencies(d)
    q, k = torch.randn(2, d, generator=gen, dtype=torch.float64)
    m = torch.randint(0, 5000, (50,), generator=gen)
    for offset in (0, 3, 700):
        qs = rope.apply_rope(q.expand(50, 1, d), m[:, None], freqs)
        ks = rope.apply_rope(k.expand(50, 1, d), (m + offset)[:, None], freqs)
        scores = (qs * ks).sum(-1).squeeze(1)
        ref = q @ rope.rope_rotation_matrix(offset, freqs) @ k
        torch.testing.assert_close(scores, ref.expand(50), atol=1e-10, rtol=0)


def test_frequency_scalings(gen):
    d, s = 64, 4.0
    base = rope.rope_frequencies(d)
    torch.testing.assert_close(
        rope.rope_frequencies(d, scale=s, method="pi"), base / s, atol=0, rtol=1e-15
    )
    ntk = rope.rope_frequencies(d, scale=s, method="ntk")
    assert ntk[0].item() == 1.0
    assert ntk[-1].item() == pytest.approx(base[-1].item() / s, rel=1e-12)
    for method in ("pi", "ntk"):
        torch.testing.assert_close(
            rope.rope_frequencies(d, scale=1.0, method=method), base, atol=0, rtol=1e-15
        )


@pytest.mark.parametrize("factor, orig, theta", [(4.0, 2048, 10000.0), (8.0, 4096, 500000.0)])
def test_yarn_matches_hugging_face(factor, orig, theta):
    cfg = LlamaConfig(
        hidden_size=1024,
        num_attention_heads=8,
        max_position_embeddings=int(orig * factor),
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": theta,
            "factor": factor,
            "original_max_position_embeddings": orig,
        },
    )
    inv_freq, attn_factor = ROPE_INIT_FUNCTIONS["yarn"](cfg)
    mine = rope.rope_frequencies(128, theta, factor, method="yarn", original_max_len=orig)
    torch.testing.assert_close(mine, inv_freq.double(), atol=0, rtol=1e-6)  # HF is float32
    assert rope.yarn_attention_factor(factor) == pytest.approx(attn_factor, rel=1e-12)
    assert rope.yarn_attention_factor(1.0) == 1.0


def test_score_kernel_is_the_isotropic_expectation():
    freqs = rope.rope_frequencies(8, base=100.0)
    dist = torch.tensor([0.0, 1.0, 7.0, 50.0])
    exact = torch.stack([torch.trace(rope.rope_rotation_matrix(k.item(), freqs)) / 8 for k in dist])
    torch.testing.assert_close(rope.rope_score_kernel(dist, freqs), exact, atol=1e-14, rtol=0)
    assert rope.rope_score_kernel(torch.tensor([0.0]), freqs).item() == 1.0


def test_rotate_half_is_a_quarter_turn():
    x = torch.arange(6.0)
    assert rope.rotate_half(x).tolist() == [-3.0, -4.0, -5.0, 0.0, 1.0, 2.0]
    torch.testing.assert_close(rope.rotate_half(rope.rotate_half(x)), -x, atol=0, rtol=0)


def test_bad_input_raises():
    x = torch.zeros(4, 8)
    freqs = rope.rope_frequencies(8)
    with pytest.raises(ValueError, match="even"):
        rope.apply_rope(torch.zeros(4, 7), torch.arange(4), freqs)
    with pytest.raises(ValueError, match="positions .* does not broadcast"):
        rope.apply_rope(x, torch.arange(5), freqs)
    with pytest.raises(ValueError, match="positions .* does not broadcast"):  # would enlarge x
        rope.apply_rope(x, torch.arange(4)[:, None, None], freqs)
    with pytest.raises(ValueError, match=r"freqs must have shape \(4\)"):
        rope.apply_rope(x, torch.arange(4), rope.rope_frequencies(6))
    with pytest.raises(ValueError, match="at least 2 axes"):
        rope.apply_rope(torch.zeros(8), torch.arange(1), freqs)
    with pytest.raises(TypeError, match="floating-point"):
        rope.apply_rope(x.long(), torch.arange(4), freqs)
    with pytest.raises(TypeError, match="positions must be a torch.Tensor"):
        rope.apply_rope(x, [0, 1, 2, 3], freqs)
    with pytest.raises(TypeError, match="freqs must be a torch.Tensor"):
        rope.apply_rope(x, torch.arange(4), freqs.tolist())
    with pytest.raises(ValueError, match="pairing"):
        rope.apply_rope_complex(x, torch.arange(4), freqs, pairing="odd")
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        rope.apply_rope_complex(x.numpy(), torch.arange(4), freqs)
    with pytest.raises(ValueError, match="scale"):
        rope.rope_frequencies(8, scale=0.5)
    with pytest.raises(TypeError, match="scale"):
        rope.rope_frequencies(8, scale="2")
    with pytest.raises(TypeError, match="original_max_len"):
        rope.rope_frequencies(8, scale=2.0, method="yarn")
    with pytest.raises(ValueError, match="method"):
        rope.rope_frequencies(8, scale=2.0, method="dynamic")
    with pytest.raises(ValueError, match="beta_slow < beta_fast"):
        rope.rope_frequencies(8, scale=2.0, method="yarn", original_max_len=64, beta_fast=0.5)
    with pytest.raises(ValueError, match="d must be even"):
        rope.rope_frequencies(9)
    with pytest.raises(ValueError, match="scale"):
        rope.yarn_attention_factor(0.0)
    with pytest.raises(ValueError, match="even"):
        rope.rotate_half(torch.zeros(3))
    with pytest.raises(ValueError, match="d must be even"):
        rope.interleave_permutation(5)
    with pytest.raises(TypeError, match="position"):
        rope.rope_rotation_matrix("1", freqs)
    with pytest.raises(ValueError, match="freqs must have 1 axes"):
        rope.rope_rotation_matrix(1, torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"distances must have shape \(\*\)"):
        rope.rope_score_kernel(torch.zeros(2, 2), freqs)
    with pytest.raises(ValueError, match="distances must not be empty"):
        rope.rope_score_kernel(torch.zeros(0), freqs)
    assert math.isfinite(rope.yarn_attention_factor(2.0))
