"""A FlashAttention forward kernel in Triton, causal or not, fp32 or fp16 (chapter 26).

:func:`mlbook.attention.tiled.tiled_attention` as a GPU kernel (eqs. 26.1-26.4). Without CUDA
(and ``TRITON_INTERPRET`` unset) the import sets ``TRITON_INTERPRET=1``: the kernel runs in
Triton's CPU interpreter. Without Triton, :func:`flash_forward` falls back to the torch tiles.

Shape legend
    q  (B, H, T_q, d)   k, v  (B, H, T_k, d)   out  (B, H, T_q, d)   lse  (B, H, T_q)
    BLOCK_M, BLOCK_N  queries per program, keys per step;  BLOCK_D  d rounded up to 2^n >= 16
"""

from __future__ import annotations

import math
import os

import torch

from ..validation import float_tensor, integer, one_of, positive, positive_int, shape_is

__all__ = [
    "TRITON_AVAILABLE",
    "TRITON_MESSAGE",
    "INTERPRETED",
    "BACKEND",
    "flash_attention",
    "flash_forward",
]

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"  # no GPU: run kernels in Triton's CPU interpreter

#: True when Triton kernels run through its interpreter (on CPU tensors).
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
_DTYPES = (torch.float32, torch.float16)  # what the kernel accepts

try:
    import triton
    import triton.language as tl

    TRITON_AVAILABLE = True
    TRITON_MESSAGE = f"Triton {triton.__version__}: " + (
        "interpreter on the CPU (no CUDA device)" if INTERPRETED else "compiled for the CUDA device"
    )
except ImportError as err:  # pragma: no cover - depends on the platform
    triton = tl = None
    TRITON_AVAILABLE = False
    TRITON_MESSAGE = (
        f"Triton is not installed ({err}); the Triton kernel cannot run here. "
        "Use mlbook.attention.tiled.tiled_attention, the same algorithm in torch."
    )


def _interpret_triton_stdlib() -> int:
    """Make Triton's own jit'd helpers (``tl.zeros``, ``tl.max``, ``tl.sum``, ...) interpretable."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    wrapped = {}
    for namespace in (tl.standard, tl.core, tl.math, tl, tl.tensor):
        for name, obj in list(vars(namespace).items()):
            if isinstance(obj, JITFunction):
                if id(obj) not in wrapped:
                    wrapped[id(obj)] = InterpretedFunction(obj.fn)
                setattr(namespace, name, wrapped[id(obj)])
    return len(wrapped)


if TRITON_AVAILABLE and INTERPRETED and not torch.cuda.is_available():
    _interpret_triton_stdlib()

#: What :func:`flash_forward` runs here: the Triton kernel (compiled or interpreted) or torch.
BACKEND = (
    ("triton-interpreter" if INTERPRETED else "triton-cuda") if TRITON_AVAILABLE else "torch-tiled"
)


def _flash_forward_kernel(
    Q,
    K,
    V,
    O,
    LSE,  # pointers to the first element
    stride_qb,
    stride_qh,
    stride_qt,  # strides (in elements) of q ...
    stride_kb,
    stride_kh,
    stride_kt,  # ... k ...
    stride_vb,
    stride_vh,
    stride_vt,  # ... v ...
    stride_ob,
    stride_oh,
    stride_ot,  # ... and out; the last axis is unit
    H,
    T_q,
    T_k,
    D,
    qk_scale,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    # Which tile am I? Axis 0 of the launch grid: the query block; axis 1: (batch, head).
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # this program's query rows
    offs_n = tl.arange(0, BLOCK_N)  # key rows within one key block
    offs_d = tl.arange(0, BLOCK_D)  # feature columns
    row_ok = offs_m < T_q  # the last block may hang over T_q
    col_ok = offs_d < D  # BLOCK_D may exceed d
    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :]
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh

    # Load the query block once; it stays in registers for the whole key loop.
    q = tl.load(q_ptrs, mask=row_ok[:, None] & col_ok[None, :], other=0.0)  # (BLOCK_M, BLOCK_D)

    # The running state of eqs. 26.2-26.3, always in float32 (also for fp16 inputs).
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)  # running numerator

    # Keys to visit: all of them, or under the causal mask only up to the last key that the
    # block's last query may see (i + T_k - T_q): the tiles beyond are skipped, not masked.
    offset = T_k - T_q
    if CAUSAL:
        k_end = tl.minimum(T_k, (pid_m + 1) * BLOCK_M + offset)
    else:
        k_end = T_k
    for start_n in range(0, k_end, BLOCK_N):
        cols = start_n + offs_n  # absolute key indices of this block
        key_ok = cols < T_k
        # K is loaded transposed, (BLOCK_D, BLOCK_N), so that q @ k_t is a plain dot.
        k_t = tl.load(
            k_base + cols[None, :] * stride_kt + offs_d[:, None],
            mask=key_ok[None, :] & col_ok[:, None],
            other=0.0,
        )
        v = tl.load(
            v_base + cols[:, None] * stride_vt + offs_d[None, :],
            mask=key_ok[:, None] & col_ok[None, :],
            other=0.0,
        )  # (BLOCK_N, BLOCK_D)
        # Scores in base 2: qk_scale = scale * log2(e), so exp2(s) = exp(scale * q.k).
        # DOT_PRECISION is "ieee" for fp32 inputs: true fp32 products, not the TF32 default
        # of NVIDIA tensor cores (10-bit mantissa), so fp32 results match to ~1e-6.
        s = tl.dot(q, k_t, input_precision=DOT_PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N)
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (cols[None, :] <= offs_m[:, None] + offset)
        s = tl.where(visible, s, float("-inf"))
        # Eq. 26.2: new max, rescale factor for the old state, block sum.
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)  # first block: exp2(-inf) = 0
        p = tl.exp2(s - m_new[:, None])  # masked entries: exp2(-inf) = 0
        l_i = l_i * alpha + tl.sum(p, 1)
        # Eq. 26.3: rescale the numerator and add this block's p @ v (p cast to v's dtype
        # so that fp16 inputs use the fp16 tensor-core dot, still accumulating in fp32).
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    # Eq. 26.4, then write O and the log-sum-exp (natural log) of every query row.
    out = acc / l_i[:, None]
    o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_ot + offs_d[None, :]
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453  # log2 -> natural log: times ln 2
    tl.store(LSE + pid_bh * T_q + offs_m, lse, mask=row_ok)


# ``triton.jit`` turns the Python function above into a kernel: compiled for the GPU, or wrapped
# for the interpreter when TRITON_INTERPRET=1 (decided here, at definition time).
_flash_forward_jit = triton.jit(_flash_forward_kernel) if TRITON_AVAILABLE else None


def _inputs(q, k, v, causal, scale, block_m, block_n) -> float:
    """Check what the kernel reads through raw pointers (a bad shape reads garbage); the scale."""
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        one_of(float_tensor(x, name, ndim=4, not_empty=True).dtype, f"{name}.dtype", _DTYPES)
    B, H, T_q, d = q.shape
    shape_is(k, "k", (B, H, None, d))
    shape_is(v, "v", k.shape)
    one_of(k.dtype, "k.dtype", (q.dtype,))
    one_of(v.dtype, "v.dtype", (q.dtype,))
    one_of(k.device, "k.device", (q.device,))
    one_of(v.device, "v.device", (q.device,))
    integer(d, "head width d", high=256)
    if causal and T_q > k.shape[2]:  # a query without any key: 0/0 = nan
        raise ValueError(f"causal attention needs T_q <= T_k, got {T_q} > {k.shape[2]}")
    for val, name in ((block_m, "block_m"), (block_n, "block_n")):
        if integer(val, name, low=16) & (val - 1):
            raise ValueError(f"{name} must be a power of two >= 16, got {val}")
    return 1.0 / math.sqrt(d) if scale is None else positive(scale, "scale")


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    block_m: int = 64,
    block_n: int = 64,
    return_lse: bool = False,
    num_warps: int | None = None,
    num_stages: int | None = None,
):
    """FlashAttention forward by the Triton kernel. Implements eqs. 26.1-26.4.

    q: (B, H, T_q, d);  k, v: (B, H, T_k, d), float32 or float16;  causal: bottom-right mask;
    block_m, block_n: powers of two >= 16;  num_warps, num_stages: GPU launch options or None.
    Returns out (B, H, T_q, d) in q's dtype, and float32 ``lse`` (B, H, T_q) if ``return_lse``.
    """
    if not TRITON_AVAILABLE:
        raise RuntimeError(TRITON_MESSAGE)
    c = _inputs(q, k, v, causal, scale, block_m, block_n)
    if q.device.type == "cuda" and INTERPRETED:
        raise RuntimeError(
            "TRITON_INTERPRET=1 is set but the tensors are on CUDA: unset it "
            "before importing mlbook.attention.flash_triton to compile the kernel"
        )
    if q.device.type != "cuda" and not INTERPRETED:
        raise RuntimeError(
            f"tensors on {q.device} need Triton's interpreter: set "
            "TRITON_INTERPRET=1 before importing mlbook.attention.flash_triton"
        )
    launch = {}
    for val, name in ((num_warps, "num_warps"), (num_stages, "num_stages")):
        if val is not None:
            launch[name] = positive_int(val, name)
    B, H, T_q, d = q.shape
    T_k = k.shape[2]
    # Any strides work (e.g. a (B, T, H, d) buffer viewed as (B, H, T, d)), except that the
    # kernel assumes consecutive features: copy only if the last axis is not contiguous.
    q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
    out = torch.empty_like(q)
    lse = torch.empty((B, H, T_q), dtype=torch.float32, device=q.device)
    block_d = max(16, triton.next_power_of_2(d))
    grid = (triton.cdiv(T_q, block_m), B * H)  # one program per query block
    _flash_forward_jit[grid](
        q,
        k,
        v,
        out,
        lse,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        v.stride(0),
        v.stride(1),
        v.stride(2),
        out.stride(0),
        out.stride(1),
        out.stride(2),
        H,
        T_q,
        T_k,
        d,
        c * 1.4426950408889634,  # scale * log2(e)
        CAUSAL=bool(causal),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",  # tf32: ignored for fp16
        **launch,
    )
    return (out, lse) if return_lse else out


def flash_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    block_m: int = 64,
    block_n: int = 64,
):
    """The FlashAttention forward that can run here: the Triton kernel, or its torch twin.

    Args and returns as :func:`flash_attention` (without ``return_lse``).
    """
    if TRITON_AVAILABLE:
        return flash_attention(q, k, v, causal, scale, block_m, block_n)
    from .tiled import tiled_attention

    _inputs(q, k, v, causal, scale, block_m, block_n)
    out = tiled_attention(
        q.float(), k.float(), v.float(), causal, scale, block_q=block_m, block_k=block_n
    )
    return out.to(q.dtype)
