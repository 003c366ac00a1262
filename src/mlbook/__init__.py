"""mlbook: the executable ML refresher's package. One module per concept, in reading order:

Tools of the book
    :mod:`mlbook.check`         numerical checks that print one line and raise on failure
    :mod:`mlbook.curriculum`    chapter headers, the prerequisite graph, study plans (instructors)
    :mod:`mlbook.exercises`     self-checking exercises: one check per exercise, specific feedback
    :mod:`mlbook.assign`        student/instructor notebooks, an nbgrader bundle (a command:
                                ``python -m mlbook.assign``; import it explicitly)
    :mod:`mlbook.viz`           the book's plotting style and shared figure helpers
    :mod:`mlbook.notebook`      notebook setup (seeds, style) and showing package source
    :mod:`mlbook.datasets`      small text corpora that ship inside the package

Concepts (the chapter that derives them)
    :mod:`mlbook.probability`   probability rules, gradient estimators, Gumbel-max (6)
    :mod:`mlbook.information`   entropy, cross-entropy, KL, mutual information, perplexity (7)
    :mod:`mlbook.hypothesis`    proportions, intervals, p-values, McNemar, sample sizes (8)
    :mod:`mlbook.linear_models` empirical risk, least squares, logistic regression (9)
    :mod:`mlbook.autodiff`      forward- and reverse-mode automatic differentiation (10)
    :mod:`mlbook.activations`   activations, their derivatives, SwiGLU and GELU FFNs (11)
    :mod:`mlbook.softmax`       stable softmax, log-softmax, Jacobian, cross-entropy, z-loss (12)
    :mod:`mlbook.losses`        regression, robust, classification and distillation losses (13)
    :mod:`mlbook.mlp`           a two-layer network by hand: forward, backward, init, depth (14)
    :mod:`mlbook.optim`         SGD, momentum, Adam, AdamW, gradient clipping (15)
    :mod:`mlbook.schedules`     warmup, cosine and warmup-stable-decay learning-rate schedules (15)
    :mod:`mlbook.normalization` LayerNorm, RMSNorm, BatchNorm by hand; residual stacks (16)
    :mod:`mlbook.dropout`       inverted dropout and its exact moments (16)
    :mod:`mlbook.precision`     float formats, rounding, loss scaling, gradient accumulation (16)
    :mod:`mlbook.tokenizer`     UTF-8 and byte-level BPE: train, encode, decode (17)
    :mod:`mlbook.embedding`     embedding lookup, its scatter-add gradient, tied output weights (17)
    :mod:`mlbook.language_model` n-gram and neural (MLP) language models, masked-LM objective (18)
    :mod:`mlbook.attention`     scaled dot-product attention, masks, its hand-written backward (19)
    :mod:`mlbook.pretrained`    a pretrained encoder (hub or offline package) and its attention maps
    :mod:`mlbook.multihead`     split/merge heads, multi-head and cross-attention, costs (20)
    :mod:`mlbook.head_taxonomy` scores and classes of attention heads from their maps (20)
    :mod:`mlbook.positional`    sinusoidal and learned positions, ALiBi (21)
    :mod:`mlbook.rope`          rotary position embeddings and context-extension scalings (21)
    :mod:`mlbook.transformer`   pre-norm decoder block, a small LM, parameter and FLOP counts (22)
    :mod:`mlbook.gpt`           a GPT-2-style LM, its training loop, temperature/top-k sampling (23)
    :mod:`mlbook.kv_cache`      KV caches for MHA, MQA, GQA; sliding windows with sinks (24)
    :mod:`mlbook.mla`           multi-head latent attention, absorbed weights, latent cache (25)
    :mod:`mlbook.online_softmax` streaming max/sum statistics and their merge (26)
    :mod:`mlbook.tiled_attention` tiled attention in plain torch and its memory accounting (26)
    :mod:`mlbook.flash_triton`  Triton FlashAttention forward (26; import it explicitly)
    :mod:`mlbook.moe`           routers, top-k gating, routed vs dense experts, balancing (27)
    :mod:`mlbook.mixture_of_depths` top-k token routing per layer and the FLOPs it saves (27)
    :mod:`mlbook.linear_attention` kernelised attention, running state, delta rule (28)
    :mod:`mlbook.ssm`           discretisation, FFT convolution, scans, selective scan, SSD (28)
"""

from . import (
    activations,
    attention,
    autodiff,
    check,
    curriculum,
    datasets,
    dropout,
    embedding,
    exercises,
    gpt,
    head_taxonomy,
    hypothesis,
    information,
    kv_cache,
    language_model,
    linear_attention,
    linear_models,
    losses,
    mixture_of_depths,
    mla,
    mlp,
    moe,
    multihead,
    normalization,
    notebook,
    online_softmax,
    optim,
    positional,
    precision,
    pretrained,
    probability,
    rope,
    schedules,
    softmax,
    ssm,
    tiled_attention,
    tokenizer,
    transformer,
    viz,
)
from .check import CheckFailed, check_close, check_interval, check_mc_mean, check_true
from .notebook import setup, show_source

__version__ = "0.1.0"

__all__ = [
    "activations",
    "attention",
    "autodiff",
    "check",
    "curriculum",
    "datasets",
    "dropout",
    "embedding",
    "exercises",
    "gpt",
    "head_taxonomy",
    "hypothesis",
    "information",
    "kv_cache",
    "language_model",
    "linear_attention",
    "linear_models",
    "losses",
    "mixture_of_depths",
    "mla",
    "mlp",
    "moe",
    "multihead",
    "normalization",
    "notebook",
    "online_softmax",
    "optim",
    "positional",
    "precision",
    "pretrained",
    "probability",
    "rope",
    "schedules",
    "softmax",
    "ssm",
    "tiled_attention",
    "tokenizer",
    "transformer",
    "viz",
    "CheckFailed",
    "check_close",
    "check_interval",
    "check_mc_mean",
    "check_true",
    "setup",
    "show_source",
]
