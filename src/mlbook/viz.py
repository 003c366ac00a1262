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
    if nrows < 1 or ncols < 1:
        raise ValueError(f"need at least one row and one column, got {nrows}x{ncols}")
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
    """Draw N square matrices (e.g. the heads of one layer) as small multiples on one scale.

    Args:
        maps: (N, T, T) values, e.g. ``attn[layer]`` of shape (H, T, T).
        labels: T tick labels (tokens) for both axes; drawn on the left column and bottom row.
        titles: N panel titles (default "0", "1", ...).
        ncols: panels per row.
        highlight: index of a panel to frame (e.g. the head the text discusses).
        highlight_row: index of a row to outline in every panel (e.g. the query token).
        vmin, vmax: the shared colour scale (default: 0 to the largest value).
        panel_height: inches per row of panels.

    Returns:
        (fig, axes) with axes of shape (ceil(N / ncols), ncols); unused panels are hidden.
    """
    m = np.asarray(maps, dtype=float)
    if m.ndim != 3 or m.shape[0] == 0:
        raise ValueError(f"attention_grid needs (N, T, T) maps with N >= 1, got shape {m.shape}")
    n, r, c = m.shape
    if isinstance(ncols, bool) or not isinstance(ncols, int) or ncols < 1:
        raise ValueError(f"ncols must be a positive int, got {ncols!r}")
    if labels is not None and not len(labels) == r == c:
        raise ValueError(f"{len(labels)} labels for maps of shape {(r, c)} (need square maps)")
    if titles is not None and len(titles) != n:
        raise ValueError(f"{len(titles)} titles for {n} maps")
    if highlight is not None and not 0 <= highlight < n:
        raise ValueError(f"highlight={highlight} outside [0, {n})")
    if highlight_row is not None and not 0 <= highlight_row < r:
        raise ValueError(f"highlight_row={highlight_row} outside [0, {r})")
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
