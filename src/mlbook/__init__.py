"""mlbook: the executable ML refresher's package. One module per concept:

- :mod:`mlbook.check`        numerical checks that print one line and raise on failure
- :mod:`mlbook.viz`          the book's plotting style and shared figure helpers
- :mod:`mlbook.notebook`     notebook setup (seeds, style) and showing package source
- :mod:`mlbook.probability`  probability rules, estimators and sampling (chapter 6)
- :mod:`mlbook.information`  entropy, cross-entropy, KL, mutual information, perplexity (chapter 7)
- :mod:`mlbook.hypothesis`   proportions, intervals, p-values, McNemar, sample sizes (chapter 8)
- :mod:`mlbook.losses`       regression, robust, classification and distillation losses (ch. 13)
- :mod:`mlbook.autodiff`     forward- and reverse-mode autodiff from scratch (chapter 10)
"""

from . import autodiff, check, hypothesis, information, losses, notebook, probability, viz
from .check import CheckFailed, check_close, check_interval, check_mc_mean, check_true
from .notebook import setup, show_source

__version__ = "0.1.0"

__all__ = [
    "autodiff",
    "check",
    "hypothesis",
    "information",
    "losses",
    "notebook",
    "probability",
    "viz",
    "CheckFailed",
    "check_close",
    "check_interval",
    "check_mc_mean",
    "check_true",
    "setup",
    "show_source",
]
