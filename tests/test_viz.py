"""The plotting helpers and the notebook setup: style applied, shapes validated, seeds fixed."""

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from mlbook.teaching import setup, show_source
from mlbook import viz


def test_style_and_subplots():
    viz.use_book_style()
    assert mpl.rcParams["figure.figsize"] == [7.0, 3.4]
    fig, axes = viz.subplots(2, 3)
    assert axes.shape == (2, 3) and fig.get_figwidth() == 7.0
    plt.close(fig)
    with pytest.raises(ValueError, match="at least one row"):
        viz.subplots(0, 1)


def test_heatmap_labels_and_validation():
    fig, axes = viz.subplots()
    im = viz.heatmap(
        axes[0, 0],
        np.eye(3),
        xlabels=list("abc"),
        ylabels=list("xyz"),
        highlight_row=1,
        annotate=True,
        title="t",
    )
    assert im.get_array().shape == (3, 3)
    assert [t.get_text() for t in axes[0, 0].get_xticklabels()] == list("abc")
    with pytest.raises(ValueError, match="2-D"):
        viz.heatmap(axes[0, 0], np.ones(3))
    with pytest.raises(ValueError, match="x labels"):
        viz.heatmap(axes[0, 0], np.ones((2, 2)), xlabels=["a"])
    with pytest.raises(ValueError, match="highlight_row"):
        viz.heatmap(axes[0, 0], np.ones((2, 2)), highlight_row=5)
    plt.close(fig)


def test_setup_seeds_everything():
    a = setup(seed=3).random(), torch.rand(1).item()
    b = setup(seed=3).random(), torch.rand(1).item()
    assert a == b
    assert torch.get_num_threads() == 1
    with pytest.raises(ValueError, match="seed"):
        setup(seed=-1)
    with pytest.raises(ValueError, match="threads"):
        setup(threads=0)


def test_show_source_rejects_non_functions():
    with pytest.raises(TypeError, match="functions and classes"):
        show_source(42)
    with pytest.raises(ValueError, match="at least one"):
        show_source()
