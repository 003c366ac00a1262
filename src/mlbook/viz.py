"""The book's plotting style and the figure helpers that several chapters share.

Figures are drawn for a 700 px wide page: 7 inches at 100 dpi, font sizes readable at that
width, a colour-blind-safe palette (Okabe-Ito), axes always labelled and titled.

Shape legend
    M      (R, C) a matrix drawn as a heat map (attention weights, joint tables)
    Ms     (N, R, C) N matrices drawn as small multiples on one colour scale (attention heads)
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

from .validation import integer, nonempty, positive_int, shape_is

__all__ = ["PALETTE", "use_book_style", "subplots", "heatmap", "attention_grid", "finish"]

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
    positive_int(nrows, "nrows")
    positive_int(ncols, "ncols")
    h = height if height is not None else 3.4 * nrows if nrows > 1 else 3.4
    return plt.subplots(nrows, ncols, figsize=(7.0, h), squeeze=False, **kwargs)


def heatmap(
    ax,
    matrix,
    *,
    xlabels: Sequence[str] | None = None,
    ylabels: Sequence[str] | None = None,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    highlight_row: int | None = None,
    annotate: bool = False,
    fmt: str = ".2f",
    vmin: float | None = None,
    vmax: float | None = None,
    cmap: str = "viridis",
    colorbar: bool = True,
):
    """Draw a matrix (R, C) on ``ax`` as a heat map; returns the image artist.

    xlabels, ylabels: C and R tick labels; highlight_row: a row to outline (e.g. the query);
    annotate: write each value in its cell with ``fmt``.
    """
    m = shape_is(np.asarray(matrix, dtype=float), "matrix", (None, None))
    r, c = m.shape
    if highlight_row is not None:
        integer(highlight_row, "highlight_row", 0, r - 1)
    im = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.grid(False)
    if xlabels is not None:
        ax.set_xticks(
            range(c),
            xlabels,
            rotation=45 if max(map(len, xlabels)) > 3 else 0,
            ha="right" if max(map(len, xlabels)) > 3 else "center",
        )
    if ylabels is not None:
        ax.set_yticks(range(r), ylabels)
    if annotate:
        lo, hi = np.nanmin(m), np.nanmax(m)
        mid = (lo + hi) / 2
        for i in range(r):
            for j in range(c):
                ax.text(
                    j,
                    i,
                    format(m[i, j], fmt),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if m[i, j] < mid else "black",
                )
    if highlight_row is not None:
        ax.add_patch(
            mpl.patches.Rectangle(
                (-0.5, highlight_row - 0.5), c, 1, fill=False, edgecolor=PALETTE[3], linewidth=2.5
            )
        )
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, shrink=0.85)
    return im


def attention_grid(
    maps,
    *,
    labels: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
    ncols: int = 4,
    highlight: int | None = None,
    highlight_row: int | None = None,
    vmin: float = 0.0,
    vmax: float | None = None,
    cmap: str = "viridis",
    title: str = "",
    panel_height: float = 1.9,
    colorbar_label: str = "attention weight",
):
    """Draw N matrices (e.g. the heads of a layer) as small multiples on one colour scale.

    maps: (N, T, T); labels: T tokens for both axes; titles: N panel titles (default "0", ...);
    highlight: a panel to frame; highlight_row: a row to outline in every panel; vmin, vmax:
    the shared scale (default 0 to the maximum). Returns (fig, axes (ceil(N / ncols), ncols)).
    """
    m = shape_is(np.asarray(maps, dtype=float), "maps", (None, None, None))
    n, r, c = nonempty(m, "maps").shape
    positive_int(ncols, "ncols")
    if titles is not None:
        shape_is(np.asarray(titles), "titles", (n,))  # a title per map, none left over
    if highlight is not None:
        integer(highlight, "highlight", 0, n - 1)
    if highlight_row is not None:
        integer(highlight_row, "highlight_row", 0, r - 1)
    ncols = min(ncols, n)
    nrows = -(-n // ncols)
    fig, axes = subplots(nrows, ncols, height=panel_height * nrows + 0.7)
    vmax = float(np.nanmax(m)) if vmax is None else vmax
    im = None
    for idx, ax in enumerate(axes.flat):
        if idx >= n:
            ax.set_visible(False)
            continue
        im = ax.imshow(
            m[idx], cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest"
        )
        ax.grid(False)
        ax.set_title(titles[idx] if titles is not None else str(idx), fontsize=9)
        left, bottom = idx % ncols == 0, idx + ncols >= n
        if labels is not None and left:
            ax.set_yticks(range(r), labels, fontsize=7)
        else:
            ax.set_yticks([])
        if labels is not None and bottom:
            ax.set_xticks(range(c), labels, fontsize=7, rotation=90)
        else:
            ax.set_xticks([])
        if highlight_row is not None:
            ax.add_patch(
                mpl.patches.Rectangle(
                    (-0.5, highlight_row - 0.5),
                    c,
                    1,
                    fill=False,
                    edgecolor=PALETTE[3],
                    linewidth=1.5,
                )
            )
        if idx == highlight:
            for spine in ax.spines.values():
                spine.set_visible(True)
                spine.set_edgecolor(PALETTE[3])
                spine.set_linewidth(3)
            ax.set_title(ax.get_title(), fontsize=9, color=PALETTE[3], fontweight="bold")
    fig.colorbar(im, ax=axes, shrink=0.8, label=colorbar_label)
    if title:
        fig.suptitle(title)
    return fig, axes


def finish(fig, title: str | None = None) -> None:
    """Give a figure its overall title (if any) and show it."""
    if title:
        fig.suptitle(title)
    plt.show()
