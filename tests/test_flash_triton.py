"""Unit tests of the Triton FlashAttention kernel (chapter 26).

On a machine without CUDA the kernel runs under Triton's interpreter on CPU tensors (the module
sets TRITON_INTERPRET=1 itself before importing Triton); sizes are tiny and odd on purpose:
lengths that no block size divides, causal and not, fp32 and fp16.
"""

import importlib.util
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from mlbook.attention import flash_triton as ft
from mlbook.attention import tiled as ta

pytestmark = pytest.mark.skipif(not ft.TRITON_AVAILABLE, reason="Triton is not installed")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def qkv(B, H, T_q, T_k, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(B, H, T, d, generator=g).to(dtype=dtype, device=DEVICE) for T in (T_q, T_k, T_k)
    )


def reference(q, k, v, causal, scale=None):
    """float64 naive attention, the ground truth for both dtypes."""
    return ta.tiled_attention_naive(
        q.double().cpu(), k.double().cpu(), v.double().cpu(), causal, scale
    )


def max_err(x, ref):
    return (x.double().cpu() - ref).abs().max().item()


CASES = [  # (T_q, T_k, d, block_m, block_n)
    (1, 1, 16, 16, 16),
    (17, 17, 32, 16, 16),
    (45, 45, 64, 32, 16),
    (45, 45, 40, 16, 32),  # d not a power of two: the kernel pads to 64 and masks
    (13, 45, 32, 16, 16),  # fewer queries than keys: the causal mask is bottom-right aligned
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("T_q, T_k, d, block_m, block_n", CASES)
def test_fp32_matches_naive_and_sdpa(causal, T_q, T_k, d, block_m, block_n):
    q, k, v = qkv(2, 2, T_q, T_k, d, torch.float32, seed=T_q + d)
    out, lse = ft.flash_attention(
        q, k, v, causal, block_m=block_m, block_n=block_n, return_lse=True
    )
    ref = reference(q, k, v, causal)
    assert out.dtype == torch.float32 and out.shape == q.shape
    assert max_err(out, ref) < 5e-6
    mask = torch.ones(T_q, T_k, dtype=torch.bool, device=DEVICE).tril(T_k - T_q)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask if causal else None)
    assert max_err(out, sdpa.double().cpu()) < 5e-6
    s = (q.double() @ k.double().transpose(-2, -1)) / d**0.5
    if causal:
        s = s.masked_fill(~mask, float("-inf"))
    assert max_err(lse, torch.logsumexp(s, -1).cpu()) < 5e-6


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("T_q, T_k, d, block_m, block_n", CASES[1:4])
def test_fp16_error_no_worse_than_naive_fp16(causal, T_q, T_k, d, block_m, block_n):
    q, k, v = qkv(1, 2, T_q, T_k, d, torch.float16, seed=T_q + d)
    ref = reference(q, k, v, causal)
    out = ft.flash_attention(q, k, v, causal, block_m=block_m, block_n=block_n)
    naive16 = ta.tiled_attention_naive(q, k, v, causal)  # everything in fp16, the full score matrix
    assert out.dtype == torch.float16
    err_flash, err_naive = max_err(out, ref), max_err(naive16, ref)
    assert err_flash <= 2 * err_naive + 2**-14, (err_flash, err_naive)
    assert err_flash < 2e-3


def test_non_contiguous_inputs_and_custom_scale():
    q, k, v = qkv(2, 3, 21, 21, 16, torch.float32, seed=5)
    # (B, T, H, d) memory viewed as (B, H, T, d): strides that are not the contiguous ones
    qt, kt, vt = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v))
    assert not qt.is_contiguous()
    out = ft.flash_attention(
        qt, kt, vt, causal=True, scale=0.7, block_m=16, block_n=16, num_warps=4, num_stages=2
    )  # GPU launch options; interpreter: ignored
    assert max_err(out, reference(q, k, v, True, scale=0.7)) < 5e-6


def test_negative_control_no_causal_mask_differs():
    q, k, v = qkv(1, 1, 17, 17, 16, torch.float32)
    out = ft.flash_attention(q, k, v, causal=False, block_m=16, block_n=16)
    assert max_err(out, reference(q, k, v, True)) > 0.1


def test_interpreter_flag_is_consistent():
    q, k, v = qkv(1, 1, 9, 9, 16, torch.float32)
    torch.testing.assert_close(
        ft.flash_forward(q, k, v, block_m=16, block_n=16),
        ft.flash_attention(q, k, v, block_m=16, block_n=16),
    )
    if DEVICE == "cpu":
        assert ft.INTERPRETED and os.environ.get("TRITON_INTERPRET") == "1"
        assert "interpreter" in ft.TRITON_MESSAGE
        # Triton's own helpers are interpretable, whoever imported Triton first; idempotent.
        assert type(ft.tl.zeros).__name__ == "InterpretedFunction"
        assert type(ft.tl.standard._elementwise_max).__name__ == "InterpretedFunction"
        assert ft._interpret_triton_stdlib() == 0


def test_import_without_triton_does_not_fail(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # makes `import triton` fail
    monkeypatch.setitem(sys.modules, "triton.language", None)
    spec = importlib.util.spec_from_file_location("mlbook.attention._flash_no_triton", ft.__file__)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.TRITON_AVAILABLE is False and "tiled_attention" in mod.TRITON_MESSAGE
    q = torch.zeros(1, 1, 4, 16)
    with pytest.raises(RuntimeError, match="not installed"):
        mod.flash_attention(q, q, q)
    assert mod.BACKEND == "torch-tiled"
    k, v = qkv(1, 1, 17, 17, 16, torch.float16)[1:]
    out = mod.flash_forward(k, k, v, causal=True, block_m=16, block_n=16)  # the torch twin
    assert out.dtype == torch.float16 and max_err(out, reference(k, k, v, True)) < 2e-3
    with pytest.raises(ValueError, match="block_m"):
        mod.flash_forward(k, k, v, block_m=3)


def test_bad_input_raises():
    # The kernel reads through raw pointers: a wrong shape or dtype would read garbage.
    q, k, v = qkv(1, 1, 5, 6, 16, torch.float32)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        ft.flash_attention(q.cpu().numpy(), k, v)
    with pytest.raises(ValueError, match="q.dtype"):
        ft.flash_attention(q.double(), k.double(), v.double())
    with pytest.raises(ValueError, match="k.dtype"):
        ft.flash_attention(q, k.half(), v)
    with pytest.raises(ValueError, match="4 axes"):
        ft.flash_attention(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="k must have shape"):
        ft.flash_attention(q, k[..., :8], v[..., :8])
    with pytest.raises(ValueError, match="v must have shape"):
        ft.flash_attention(q, k, v[:, :, :3])
    with pytest.raises(ValueError, match="T_q <= T_k"):
        ft.flash_attention(k, q, q, causal=True)  # T_q = 6 > T_k = 5
    with pytest.raises(ValueError, match="block_m must be a power of two"):
        ft.flash_attention(q, k, v, block_m=24)
    with pytest.raises(ValueError, match="block_n"):
        ft.flash_attention(q, k, v, block_n=8)
    with pytest.raises(ValueError, match="scale"):
        ft.flash_attention(q, k, v, scale=0.0)
    with pytest.raises(ValueError, match="num_warps"):
        ft.flash_attention(q, k, v, num_warps=0)
    big = torch.zeros(1, 1, 2, 512, device=DEVICE)
    with pytest.raises(ValueError, match="head width d"):
        ft.flash_attention(big, big, big)
    with pytest.raises(ValueError, match="q must not be empty"):
        ft.flash_attention(q[:, :, :0], k, v)
