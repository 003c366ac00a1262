"""mlbook: the executable ML book's package. Every equation of the book, implemented and checked.

How the code is organised
-------------------------
One subpackage per part of the book, one module per concept inside it, named by the concept
(the chapter that derives it in brackets; each subpackage's docstring lists its modules):

    mlbook.foundations    probability, information, hypothesis, linear_models, autodiff (6–10)
    mlbook.nn             activations, softmax, losses, mlp, optim, schedules, normalization,
                          dropout, precision (11–16)
    mlbook.language       tokenizer, embedding, language_model, corpora (17–18)
    mlbook.attention      dot_product, pretrained, multihead, head_taxonomy, positional, rope,
                          kv_cache, mla, online_softmax, tiled, flash_triton (19–26)
    mlbook.architectures  moe, mixture_of_depths, linear_attention, ssm, scaling, contrastive,
                          vit, vlm (27–32)
    mlbook.models         the book's one decoder-only language model (22–24, and all later),
                          its stored pretrained weights (checkpoints)
    mlbook.posttraining   task, sft, lora, rl, rlhf, dpo, grpo, distillation, reasoning (33–38)
    mlbook.systems        decoding, quantization, distributed, agents, retrieval, capstone (39–44)
    mlbook.beyond         convolution, recurrent, graph, self_supervised, generalisation,
                          classic, diffusion (45–51)
    mlbook.datasets       small real data sets that ship with the dependencies (digits)
    mlbook.teaching       checks, self-checking exercises, notebook setup, curriculum, assignments
    mlbook.viz            the book's plotting style and figure helpers
    mlbook.validation     the one module of argument checks (the rule below)

Notebooks import concept modules from their subpackage (``from mlbook.attention import rope``)
and the book's tools from ``mlbook.teaching`` (``setup``, ``show_source``, the ``check_*``
functions, ``check_exercise``).

Every optimised function has its naive reference beside it, named ``<name>_naive``, and a test
that the two agree.

Argument checks (``mlbook.validation``): check where bad input would otherwise give a silent
wrong result (NaN, a broadcast that hides a shape mismatch, an empty batch, a probability vector
that does not sum to one) or an error deep inside torch that does not name the argument; do not
restate a check that torch already makes with a clear message. Each distinct check is written
once, in ``mlbook.validation``, and reused.
"""

from . import (
    architectures,
    attention,
    beyond,
    datasets,
    foundations,
    language,
    models,
    nn,
    posttraining,
    systems,
    teaching,
    validation,
    viz,
)

__version__ = "0.1.0"

__all__ = [
    "architectures",
    "attention",
    "beyond",
    "datasets",
    "foundations",
    "language",
    "models",
    "nn",
    "posttraining",
    "systems",
    "teaching",
    "validation",
    "viz",
]
