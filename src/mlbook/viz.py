"""The book's plotting style and the figure helpers that several chapters share.

Figures are drawn for a 700 px wide page: 7 inches at 100 dpi, font sizes readable at that
width, a colour-blind-safe palette (Okabe-Ito), axes always labelled and titled.

Shape legend
    M      (R, C) a matrix drawn as a heat map (attention weights, joint tables)
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

__all__ = ["PALETTE", "use_book_style", "subplots", "heatmap", "finish"]

#: Okabe-Ito colours: distinguishable with every common colour-vision deficiency.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]

_STYLE = {
    "figure.figsize": (7.0, 3.4),
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "figure.constrained_layout.use": True,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "lines.linewidth": 1.8,
    "image.cmap": "viridis",
}


def use_book_style() -> None:
    """Apply the book's matplotlib style (idempotent; call once in every setup cell)."""
    mpl.rcParams.update(_STYLE)
    mpl.rcParams["axes.prop_cycle"] = mpl.cycler(color=PALETTE)


def subplots(nrows: int = 1, ncols: int = 1, *, height: float | None = None, **kwargs):
    """``plt.subplots`` at the page width; ``height`` in inches (default: 3.4 per row)."""
    if nrows < 1 or ncols < 1:
        raise ValueError(f"need at least one row and one column, got {nrows}x{ncols}")
    h = height if height is not None else 3.4 * nrows if nrows > 1 else 3.4
    return plt.subplots(nrows, ncols, figsize=(7.0, h), squeeze=False, **kwargs)


def heatmap(ax, matrix, *, xlabels: Sequence[str] | None = None,
            ylabels: Sequence[str] | None = None, title: str = "", xlabel: str = "",
            ylabel: str = "", highlight_row: int | None = None, annotate: bool = False,
            fmt: str = ".2f", vmin: float | None = None, vmax: float | None = None,
            cmap: str = "viridis", colorbar: bool = True):
    """Draw a matrix as a heat map with labelled ticks.

    Args:
        ax: a matplotlib Axes.
        matrix: (R, C) values.
        xlabels, ylabels: C and R tick labels.
        highlight_row: index of a row to outline (e.g. the query token of an attention map).
        annotate: write each value in its cell with ``fmt``.

    Returns:
        The image artist.
    """
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2:
        raise ValueError(f"heatmap needs a 2-D matrix, got shape {m.shape}")
    r, c = m.shape
    if xlabels is not None and len(xlabels) != c:
        raise ValueError(f"{len(xlabels)} x labels for {c} columns")
    if ylabels is not None and len(ylabels) != r:
        raise ValueError(f"{len(ylabels)} y labels for {r} rows")
    if highlight_row is not None and not 0 <= highlight_row < r:
        raise ValueError(f"highlight_row={highlight_row} outside [0, {r})")
    im = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.grid(False)
    if xlabels is not None:
        ax.set_xticks(range(c), xlabels, rotation=45 if max(map(len, xlabels)) > 3 else 0,
                      ha="right" if max(map(len, xlabels)) > 3 else "center")
    if ylabels is not None:
        ax.set_yticks(range(r), ylabels)
    if annotate:
        lo, hi = np.nanmin(m), np.nanmax(m)
        mid = (lo + hi) / 2
        for i in range(r):
            for j in range(c):
                ax.text(j, i, format(m[i, j], fmt), ha="center", va="center", fontsize=8,
                        color="white" if m[i, j] < mid else "black")
    if highlight_row is not None:
        ax.add_patch(mpl.patches.Rectangle((-0.5, highlight_row - 0.5), c, 1, fill=False,
                                           edgecolor=PALETTE[3], linewidth=2.5))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, shrink=0.85)
    return im


def finish(fig, title: str | None = None) -> None:
    """Give a figure its overall title (if any) and show it."""
    if title:
        fig.suptitle(title)
    plt.show()
