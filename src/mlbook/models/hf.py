"""Weights to and from Hugging Face ``transformers``: ``LlamaForCausalLM`` and ``GPT2LMHeadModel``.

A :class:`~mlbook.models.decoder.Decoder` in the Llama form (RMSNorm, RoPE, SwiGLU, any G) maps
onto ``LlamaForCausalLM``; one in the GPT-2 form (LayerNorm, learned positions, GELU, biases,
tied head, G = H) onto ``GPT2LMHeadModel``. The models are built from a configuration, nothing
is downloaded. Layouts: ``nn.Linear`` (Llama) stores a weight as (out, in), so every matrix is
transposed; GPT-2's ``Conv1D`` stores (in, out) like this package, and its fused ``c_attn`` is
[W_q | W_k | W_v], concatenated along the output axis.

Shape legend
    V vocabulary;  d model width;  G d_h key/value width;  h feed-forward width;  T positions
"""

from __future__ import annotations

import torch

from ..validation import one_of
from .config import DecoderConfig, gpt2_config, llama_config
from .decoder import Decoder

__all__ = ["hf_family", "hf_config", "to_hf_state_dict", "from_hf_state_dict", "to_hf", "from_hf"]

_LLAMA = {"norm": "rms", "positions": "rope", "mlp": "swiglu", "post_norm": False}
_GPT2 = {"norm": "layer", "positions": "learned", "mlp": "gelu", "post_norm": False}
_GPT2.update(bias=True, tie_embeddings=True)
_PLAIN = {"n_experts": 0, "layer_pattern": "A", "window": None}


def hf_family(config: DecoderConfig) -> str:
    """``"llama"`` or ``"gpt2"``: the transformers model of this architecture (else ValueError)."""
    for family, form in (("llama", _LLAMA), ("gpt2", _GPT2)):
        if all(getattr(config, k) == v for k, v in {**form, **_PLAIN}.items()):
            if family == "gpt2" and config.n_kv_heads != config.n_heads:
                raise ValueError("GPT-2 has no grouped-query attention: need n_kv_heads = n_heads")
            return family
    raise ValueError(
        f"config has no transformers twin: the Llama form needs {_LLAMA}, the GPT-2 form "
        f"{_GPT2}, both {_PLAIN}"
    )


def hf_config(config: DecoderConfig, **overrides):
    """The ``transformers`` ``LlamaConfig`` or ``GPT2Config`` of the same model (eager attention,
    no dropout); keywords override its fields."""
    import transformers

    c = config
    if hf_family(c) == "llama":
        kw = dict(
            vocab_size=c.vocab_size,
            hidden_size=c.d_model,
            intermediate_size=c.d_ff,
            num_hidden_layers=c.n_layers,
            num_attention_heads=c.n_heads,
            num_key_value_heads=c.n_kv_heads,
            head_dim=c.head_dim,
            max_position_embeddings=c.max_seq_len,
            rms_norm_eps=c.norm_eps,
            rope_theta=c.rope_base,
            attention_bias=c.bias,
            mlp_bias=c.bias,
            tie_word_embeddings=c.tie_embeddings,
        )
        return transformers.LlamaConfig(**{"attn_implementation": "eager", **kw, **overrides})
    kw = dict(
        vocab_size=c.vocab_size,
        n_positions=c.max_seq_len,
        n_embd=c.d_model,
        n_layer=c.n_layers,
        n_head=c.n_heads,
        n_inner=c.d_ff,
        activation_function="gelu_new",  # the tanh GELU
        layer_norm_epsilon=c.norm_eps,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=True,
        bos_token_id=None,  # GPT-2's 50256 need not exist in a small vocabulary
        eos_token_id=None,
    )
    return transformers.GPT2Config(**{"attn_implementation": "eager", **kw, **overrides})


def _pairs(config: DecoderConfig) -> list[tuple[str, str, bool]]:
    """(our name, transformers' name, transpose?) for every tensor but GPT-2's fused c_attn."""
    if hf_family(config) == "llama":
        out = [("embedding", "model.embed_tokens.weight", False)]
        out += [("final_norm.weight", "model.norm.weight", False)]
        out += [] if config.tie_embeddings else [("head", "lm_head.weight", True)]
        per_layer = [("attn_norm.weight", "input_layernorm.weight", False)]
        per_layer += [("ffn_norm.weight", "post_attention_layernorm.weight", False)]
        for ours, theirs in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "o")):
            per_layer += [(f"attn.W{ours}", f"self_attn.{theirs}_proj.weight", True)]
            if config.bias:
                per_layer += [(f"attn.b{ours}", f"self_attn.{theirs}_proj.bias", False)]
        for ours, theirs in (("W", "gate"), ("V", "up"), ("W2", "down")):
            per_layer += [(f"ffn.{ours}", f"mlp.{theirs}_proj.weight", True)]
            if config.bias:
                per_layer += [(f"ffn.b{ours}", f"mlp.{theirs}_proj.bias", False)]
        prefix = "model.layers"
    else:
        out = [("embedding", "transformer.wte.weight", False)]
        out += [("pos_embedding", "transformer.wpe.weight", False)]
        out += [(f"final_norm.{p}", f"transformer.ln_f.{p}", False) for p in ("weight", "bias")]
        per_layer = [(f"attn_norm.{p}", f"ln_1.{p}", False) for p in ("weight", "bias")]
        per_layer += [(f"ffn_norm.{p}", f"ln_2.{p}", False) for p in ("weight", "bias")]
        per_layer += [
            ("attn.Wo", "attn.c_proj.weight", False),
            ("attn.bo", "attn.c_proj.bias", False),
        ]
        per_layer += [("ffn.W", "mlp.c_fc.weight", False), ("ffn.bW", "mlp.c_fc.bias", False)]
        per_layer += [("ffn.W2", "mlp.c_proj.weight", False), ("ffn.bW2", "mlp.c_proj.bias", False)]
        prefix = "transformer.h"
    for i in range(config.n_layers):
        out += [(f"blocks.{i}.{a}", f"{prefix}.{i}.{b}", t) for a, b, t in per_layer]
    return out


def to_hf_state_dict(model: Decoder) -> dict[str, torch.Tensor]:
    """The model's weights under transformers' names, transposed where ``nn.Linear`` needs it.

    GPT-2: ``c_attn`` = [W_q | W_k | W_v] and its bias [b_q | b_k | b_v]; ``lm_head.weight`` is
    the tied embedding.
    """
    if not isinstance(model, Decoder):
        raise TypeError(f"model must be a Decoder, got {type(model).__name__}")
    ours = dict(model.named_parameters())
    sd = {theirs: ours[name].T if t else ours[name] for name, theirs, t in _pairs(model.config)}
    if hf_family(model.config) == "gpt2":
        for i in range(model.config.n_layers):
            a = f"blocks.{i}.attn."
            sd[f"transformer.h.{i}.attn.c_attn.weight"] = torch.cat(
                [ours[a + w] for w in ("Wq", "Wk", "Wv")], 1
            )
            sd[f"transformer.h.{i}.attn.c_attn.bias"] = torch.cat(
                [ours[a + b] for b in ("bq", "bk", "bv")]
            )
        sd["lm_head.weight"] = ours["embedding"]
    if model.config.tie_embeddings and hf_family(model.config) == "llama":
        sd["lm_head.weight"] = ours["embedding"]
    return {k: v.detach().clone() for k, v in sd.items()}


def from_hf_state_dict(config: DecoderConfig, state_dict: dict) -> dict[str, torch.Tensor]:
    """The inverse of :func:`to_hf_state_dict`: transformers' tensors under this package's names."""
    sd = {
        name: state_dict[theirs].T if t else state_dict[theirs]
        for name, theirs, t in _pairs(config)
    }
    if hf_family(config) == "gpt2":
        widths = [config.d_model] * 3
        for i in range(config.n_layers):
            h = f"transformer.h.{i}.attn.c_attn."
            for p, names in (("weight", ("Wq", "Wk", "Wv")), ("bias", ("bq", "bk", "bv"))):
                parts = state_dict[h + p].split(widths, dim=-1)
                sd.update({f"blocks.{i}.attn.{n}": t for n, t in zip(names, parts, strict=True)})
    return {k: v.detach().clone().contiguous() for k, v in sd.items()}


def to_hf(model: Decoder, **overrides):
    """A ``LlamaForCausalLM`` or ``GPT2LMHeadModel`` holding the model's weights, in eval mode
    and the model's dtype; keywords override fields of :func:`hf_config`."""
    import transformers

    cls = {"llama": transformers.LlamaForCausalLM, "gpt2": transformers.GPT2LMHeadModel}
    hf = cls[hf_family(model.config)](hf_config(model.config, **overrides))
    hf = hf.to(model.embedding.dtype).eval()
    hf.load_state_dict(to_hf_state_dict(model), strict=True)
    return hf


def from_hf(hf_model, **config_fields) -> Decoder:
    """A :class:`Decoder` with the weights of a ``LlamaForCausalLM`` or ``GPT2LMHeadModel``.

    The configuration is read from ``hf_model.config``; keywords add fields (e.g. ``name``).
    """
    hc = hf_model.config
    family = one_of(hc.model_type, "hf_model.config.model_type", ("llama", "gpt2"))
    if family == "llama":
        config = llama_config(
            hc.vocab_size,
            hc.hidden_size,
            hc.num_hidden_layers,
            hc.num_attention_heads,
            n_kv_heads=hc.num_key_value_heads,
            d_ff=hc.intermediate_size,
            max_seq_len=hc.max_position_embeddings,
            norm_eps=hc.rms_norm_eps,
            rope_base=float(hc.rope_parameters["rope_theta"]),
            bias=hc.attention_bias,
            tie_embeddings=hc.tie_word_embeddings,
            **config_fields,
        )
    else:
        config = gpt2_config(
            hc.vocab_size,
            hc.n_embd,
            hc.n_layer,
            hc.n_head,
            hc.n_positions,
            d_ff=hc.n_inner or 4 * hc.n_embd,
            norm_eps=hc.layer_norm_epsilon,
            **config_fields,
        )
    dtype = next(hf_model.parameters()).dtype
    model = Decoder(config, dtype=dtype)
    model.load_state_dict(from_hf_state_dict(config, hf_model.state_dict()), strict=True)
    return model
