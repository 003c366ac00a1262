"""Architectures (chapters 27–32): sparse experts, token routing, linear attention, state spaces,
scaling laws, contrastive learning, vision transformers and vision-language models.

moe                 routers, top-k gating, routed vs dense experts, balancing (27)
mixture_of_depths   top-k token routing per layer and the FLOPs it saves (27)
linear_attention    kernelised attention, running state, delta rule (28)
ssm                 discretisation, FFT convolution, scans, selective scan, SSD (28)
scaling             C = 6ND, parametric loss fits, compute-optimal allocation (29)
contrastive         pair, triplet, InfoNCE and sigmoid losses; the mutual-information bound (30)
vit                 patch embedding, position-embedding interpolation, a small ViT (31)
vlm                 zero-shot scores, projectors, query resampling, gated cross-attention (32)
"""
