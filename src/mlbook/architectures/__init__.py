"""Architectures (chapters 27–32): sparse experts, token routing, linear attention, state spaces.

moe                 routers, top-k gating, routed vs dense experts, balancing (27)
mixture_of_depths   top-k token routing per layer and the FLOPs it saves (27)
linear_attention    kernelised attention, running state, delta rule (28)
ssm                 discretisation, FFT convolution, scans, selective scan, SSD (28)
"""
