"""Attention (chapters 19–26): the mechanism, its heads and positions, caching and fast kernels.

dot_product     scaled dot-product attention, masks, its hand-written backward (19)
pretrained      a pretrained encoder (hub or offline package) and its attention maps (19, 20)
multihead       split/merge heads, multi-head and cross-attention, costs (20)
head_taxonomy   scores and classes of attention heads from their maps (20)
positional      sinusoidal and learned positions, ALiBi (21)
rope            rotary position embeddings and context-extension scalings (21)
kv_cache        KV caches for MHA, MQA, GQA; sliding windows with sinks (24)
mla             multi-head latent attention, absorbed weights, latent cache (25)
online_softmax  streaming max/sum statistics and their merge (26)
tiled           tiled attention in plain torch and its memory accounting (26)
counting        the matrix products (and their FLOPs) that torch code performs (26)
flash_triton    Triton FlashAttention forward (26; import it explicitly, it compiles a kernel)
"""
