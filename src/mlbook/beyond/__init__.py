"""Beyond the formula sheets (chapters 45–51): the architectures before and beside transformers.

convolution       convolution as a shared sparse matrix, output sizes, receptive fields, im2col (45)
recurrent         RNN and backpropagation through time, LSTM and GRU cells (46)
graph             message passing, the GCN layer, 1-WL colour refinement, over-smoothing (47)
self_supervised   masked modelling, masked autoencoders, stop-gradient siamese learning (48)
generalisation    bias and variance, minimum-norm interpolation, double descent, bounds (49)
classic           kernels, hidden Markov models, Hopfield networks, RBMs (50)
diffusion         noising, denoising, DiT blocks, Sinkhorn and Schrödinger bridges (51)
"""
