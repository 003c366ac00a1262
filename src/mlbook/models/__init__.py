"""The book's one decoder-only language model (chapters 22-24; fine-tuned, aligned, quantised
and served in the later chapters), configured, not copied.

    config      DecoderConfig: Llama and GPT-2 forms, GQA/MQA, windows, MoE, SSM hybrids (22)
    decoder     norms, attention, SSM mixer, feed-forward and MoE blocks, caches, Decoder (22-24)
    counting    exact parameter counts, FLOPs (2 per multiply-add), cache bytes (22, 24)
    generate    the one generate: greedy, temperature, top-k, top-p, with or without cache (23-24)
    training    next-token loss, batches, evaluation, the training loop with warmup (23)
    hf          weights to and from transformers' LlamaForCausalLM and GPT2LMHeadModel (22-23)
    checkpoints decoders pretrained by scripts/pretrain_decoders.py, stored in the package (33-44)

One forward pass, module by module: token ids (B, T) index the embedding E (V, d), plus a learned
position table in the GPT-2 form. Each of the L blocks (``decoder.DecoderBlock``) normalises the
residual stream (``Norm``: RMSNorm or LayerNorm), mixes tokens, adds the result back; normalises
again, runs the feed-forward branch, adds again. The mixer is causal attention (``Attention``:
queries, keys and values, RoPE on q and k, new keys and values appended to the KV cache,
H query heads over G key/value heads) or, in the layers a hybrid pattern marks "S", a Mamba-style
selective SSM (``SSMMixer``: a short causal convolution and a selective scan whose state is the
cache). The feed-forward branch is SwiGLU, GELU or a routed mixture of experts (``FeedForward``,
``MoEFeedForward``). A final norm, then the head: h E^T when it is tied to the embedding, h W
otherwise, gives the logits (B, T, V).
"""
