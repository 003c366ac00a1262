"""The configuration of the book's one decoder-only language model (chapters 22-24, 27-28).

One frozen dataclass describes every model the book builds: the Llama form (RMSNorm, RoPE, SwiGLU,
no biases), the GPT-2 form (LayerNorm, learned positions, GELU, biases, tied embeddings), grouped-
and multi-query attention (``n_kv_heads``), sliding windows with sink tokens, mixture-of-experts
feed-forward blocks (``n_experts``, ``top_k``) and hybrids that interleave attention with
Mamba-style state-space layers (``layer_pattern``), as Jamba, Hymba and Granite 4 do.
:func:`llama_config` and :func:`gpt2_config` are the two named forms; :data:`LLAMA2_7B`,
:data:`LLAMA2_70B` and :data:`MISTRAL_7B` are published shapes (their ``config.json``).

Shape legend
    V vocabulary;  d = d_model;  L = n_layers;  H = n_heads;  G = n_kv_heads;  d_h = d / H
    h = d_ff (hidden width of the feed-forward block, of each expert);  N experts, k per token
    E = ssm_expand d (SSM channels);  n = ssm_state;  K = ssm_conv (causal convolution width)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..nn.activations import swiglu_hidden_dim
from ..validation import divides, integer, number, one_of, positive, positive_int

__all__ = ["DecoderConfig", "llama_config", "gpt2_config", "LLAMA2_7B", "LLAMA2_70B", "MISTRAL_7B"]

#: Letters of ``layer_pattern``: A = attention layer, S = state-space (Mamba-style) layer.
LAYER_KINDS = {"A": "attention", "S": "ssm"}


@dataclass(frozen=True)
class DecoderConfig:
    """Hyperparameters of the decoder; ``None`` fields are resolved when it is built.

    n_kv_heads: G key/value heads (None: G = H, MHA; 1: MQA), G divides H. d_ff: None gives
    ``swiglu_hidden_dim(d)`` ~ 8d/3 for SwiGLU, 4d for GELU. norm: ``"rms"`` or ``"layer"``;
    positions: ``"rope"`` or ``"learned"`` (a table of max_seq_len rows); mlp: ``"swiglu"`` or
    ``"gelu"`` (the tanh form, GPT-2's ``gelu_new``). init_std: None draws every matrix
    N(0, 1/fan_in); a number draws N(0, init_std^2), the residual output projections
    init_std / sqrt(2L) (GPT-2). window, sinks: the sliding window W and sink tokens S of
    eq. 24.4. n_experts > 0 makes every feed-forward block a routed SwiGLU MoE with top_k experts
    per token. layer_pattern: letters A/S repeated over the layers ("A": all attention,
    "SSSA": one attention layer in four).
    """

    vocab_size: int
    d_model: int
    n_layers: int = 1
    n_heads: int = 1
    n_kv_heads: int | None = None
    d_ff: int | None = None
    max_seq_len: int = 512
    norm: str = "rms"
    norm_eps: float = 1e-6
    positions: str = "rope"
    rope_base: float = 10000.0
    mlp: str = "swiglu"
    bias: bool = False
    tie_embeddings: bool = True
    post_norm: bool = False
    init_std: float | None = None
    window: int | None = None
    sinks: int = 0
    n_experts: int = 0
    top_k: int = 2
    layer_pattern: str = "A"
    ssm_state: int = 16
    ssm_expand: int = 2
    ssm_conv: int = 4
    name: str = ""

    def __post_init__(self) -> None:
        for field in ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len"):
            positive_int(getattr(self, field), field)
        for field in ("ssm_state", "ssm_expand", "ssm_conv"):
            positive_int(getattr(self, field), field)
        one_of(self.norm, "norm", ("rms", "layer"))
        one_of(self.positions, "positions", ("rope", "learned"))
        one_of(self.mlp, "mlp", ("swiglu", "gelu"))
        for field in ("bias", "tie_embeddings", "post_norm"):
            one_of(getattr(self, field), field, (False, True))
        divides(self.n_heads, "n_heads", self.d_model, "d_model")
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        divides(positive_int(self.n_kv_heads, "n_kv_heads"), "n_kv_heads", self.n_heads, "n_heads")
        if self.d_ff is None:
            d_ff = swiglu_hidden_dim(self.d_model) if self.mlp == "swiglu" else 4 * self.d_model
            object.__setattr__(self, "d_ff", d_ff)
        positive_int(self.d_ff, "d_ff")
        if self.positions == "rope" and self.head_dim % 2:
            raise ValueError(f"RoPE rotates pairs: the head width {self.head_dim} must be even")
        number(self.rope_base, "rope_base", 1.0, open_low=True)
        number(self.norm_eps, "norm_eps", 0.0)
        if self.init_std is not None:
            positive(self.init_std, "init_std")
        if self.window is not None:
            positive_int(self.window, "window")
        integer(self.sinks, "sinks", low=0)
        if integer(self.n_experts, "n_experts", low=0):
            integer(self.top_k, "top_k", low=1, high=self.n_experts)
            if self.mlp != "swiglu" or self.bias:
                raise ValueError("n_experts > 0 needs mlp='swiglu' and bias=False (the experts)")
        if not self.layer_pattern or set(self.layer_pattern) - set(LAYER_KINDS):
            raise ValueError(f"layer_pattern must be letters A and S, got {self.layer_pattern!r}")

    @property
    def head_dim(self) -> int:
        """d_h = d_model / n_heads."""
        return self.d_model // self.n_heads

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """The kind of each of the L layers, "attention" or "ssm" (layer_pattern repeated)."""
        p = self.layer_pattern
        return tuple(LAYER_KINDS[p[i % len(p)]] for i in range(self.n_layers))

    @property
    def d_inner(self) -> int:
        """E = ssm_expand d_model, the channels of an SSM layer."""
        return self.ssm_expand * self.d_model


def llama_config(vocab_size: int, d_model: int, n_layers: int, n_heads: int, **kw) -> DecoderConfig:
    """The Llama form: RMSNorm, RoPE, SwiGLU, no biases, an untied head (keywords override)."""
    form = dict(norm="rms", positions="rope", mlp="swiglu", bias=False, tie_embeddings=False)
    return DecoderConfig(vocab_size, d_model, n_layers, n_heads, **{**form, **kw})


def gpt2_config(
    vocab_size: int = 50257,
    d_model: int = 768,
    n_layers: int = 12,
    n_heads: int = 12,
    max_seq_len: int = 1024,
    **kw,
) -> DecoderConfig:
    """The GPT-2 form: LayerNorm (eps 1e-5), learned positions, GELU MLP of width 4d, biases,
    tied embeddings, N(0, 0.02^2) initialisation. Defaults: GPT-2 small; keywords override."""
    form = dict(
        norm="layer",
        norm_eps=1e-5,
        positions="learned",
        mlp="gelu",
        bias=True,
        tie_embeddings=True,
        init_std=0.02,
    )
    form.update(kw)
    return DecoderConfig(vocab_size, d_model, n_layers, n_heads, max_seq_len=max_seq_len, **form)


# Published configurations (the models' config.json on the Hugging Face Hub).
LLAMA2_7B = llama_config(
    32000, 4096, 32, 32, d_ff=11008, max_seq_len=4096, norm_eps=1e-5, name="Llama-2-7B"
)
LLAMA2_70B = llama_config(
    32000,
    8192,
    80,
    64,
    n_kv_heads=8,
    d_ff=28672,
    max_seq_len=4096,
    norm_eps=1e-5,
    name="Llama-2-70B",
)
MISTRAL_7B = llama_config(
    32000,
    4096,
    32,
    32,
    n_kv_heads=8,
    d_ff=14336,
    max_seq_len=32768,
    norm_eps=1e-5,
    window=4096,
    name="Mistral-7B",
)
