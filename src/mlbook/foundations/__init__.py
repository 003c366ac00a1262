"""Foundations (chapters 6–10, appendices A–C): probability, information, statistics, learning
from data, autodiff, numerics and the matrix calculus.

probability     probability rules, gradient estimators, Gumbel-max (6)
information     entropy, cross-entropy, KL, mutual information, perplexity (7)
hypothesis      proportions, intervals, p-values, McNemar, sample sizes (8)
linear_models   empirical risk, least squares, logistic regression (9)
autodiff        forward- and reverse-mode automatic differentiation (10)
numerics        broadcasting, finite differences, machine epsilon (appendix B)
matrix_calculus the cookbook of gradient rules, the linear layer's backward pass (appendices A, C)
"""
