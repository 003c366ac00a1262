"""The plotting helpers and the notebook setup: style applied, shapes validated, seeds fixed."""

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from mlbook import viz
from mlbook.teaching import setup, show_source


def test_style_and_subplots():
    viz.use_book_style()
    assert mpl.rcParams["figure.figsize"] == [7.0, 3.4]
    fig, axes = viz.subplots(2, 3)
    assert axes.shape == (2, 3) and fig.get_figwidth() == 7.0
    plt.close(fig)
    with pytest.raises(ValueError, match="nrows must be a positive int"):
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
    with pytest.raises(ValueError, match=r"matrix must have shape \(\*, \*\)"):
        viz.heatmap(axes[0, 0], np.ones(3))
    with pytest.raises(ValueError, match=r"highlight_row must be in \[0, 1\]"):
        viz.heatmap(axes[0, 0], np.ones((2, 2)), highlight_row=5)  # would outline nothing
    plt.close(fig)


def test_attention_grid_panels_and_validation():
    maps = np.random.default_rng(0).random((3, 4, 4))
    fig, axes = viz.attention_grid(
        maps, labels=list("abcd"), ncols=2, highlight=1, titles=list("xyz")
    )
    assert axes.shape == (2, 2) and not axes[1, 1].get_visible()
    plt.close(fig)
    with pytest.raises(ValueError, match=r"maps must have shape \(\*, \*, \*\)"):
        viz.attention_grid(maps[0])
    with pytest.raises(ValueError, match="maps must not be empty"):
        viz.attention_grid(maps[:0])
    with pytest.raises(ValueError, match=r"titles must have shape \(3\)"):
        viz.attention_grid(maps, titles=["a", "b", "c", "d"])  # a title left over
    with pytest.raises(ValueError, match=r"highlight must be in \[0, 2\]"):
        viz.attention_grid(maps, highlight=3)  # would frame no panel
    plt.close("all")


def test_setup_seeds_everything():
    a = setup(seed=3).random(), torch.rand(1).item()
    b = setup(seed=3).random(), torch.rand(1).item()
    assert a == b
    assert torch.get_num_threads() == 1
    with pytest.raises(ValueError, match=r"seed must be in \[0, inf\]"):
        setup(seed=-1)
    with pytest.raises(ValueError, match="threads must be a positive int"):
        setup(threads=0)


def test_show_source_rejects_non_functions():
    with pytest.raises(TypeError, match="got int"):
        show_source(42)


def test_schematic_boxes_arrows_and_validation():
    s = viz.Schematic(8, 3, title="t")
    s.tensor("Q", (1, 1.5), r"$\mathbf{Q}$", shape="(T, d)")
    s.op("S", (5, 1.5), "softmax")
    s.arrow("Q", "S", "(T, T)")
    s.group(["Q", "S"], "block")
    assert set(s.boxes) == {"Q", "S"} and s.boxes["S"].get_width() > s.boxes["Q"].get_width() / 3
    with pytest.raises(ValueError, match="already a box"):
        s.op("S", (5, 1.5), "again")
    with pytest.raises(ValueError, match="dst 'X' is not a box"):
        s.arrow("Q", "X")
    with pytest.raises(ValueError, match="kind must be one of"):
        s.node("N", (1, 1), "n", kind="circle")
    s.note("far", (7.9, 2.9), "off the edge")
    with pytest.raises(ValueError, match="box 'far' does not fit"):
        s.show()
    plt.close(s.fig)
