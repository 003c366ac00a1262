"""Neural networks (chapters 11–16): activations, softmax, losses, MLPs, optimisers, normalisation.

activations     activations, their derivatives, SwiGLU and GELU FFNs (11)
softmax         stable softmax, log-softmax, Jacobian, cross-entropy, z-loss (12)
losses          regression, robust, classification and distillation losses (13)
mlp             a two-layer network by hand: forward, backward, init, depth (14)
optim           SGD, momentum, Adam, AdamW, gradient clipping (15)
schedules       warmup, cosine and warmup-stable-decay learning-rate schedules (15)
normalization   LayerNorm, RMSNorm, BatchNorm by hand; residual stacks (16)
dropout         inverted dropout and its exact moments (16)
precision       float formats, rounding, loss scaling, gradient accumulation (16)
fit             a classifier trained with autograd; linear-probe and k-NN accuracy (30–48)
"""
