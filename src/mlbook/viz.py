"""The book's plotting style and the figure helpers that several chapters share.

Figures are drawn for a 700 px wide page: 7 inches at 100 dpi, font sizes readable at that
width, a colour-blind-safe palette (Okabe-Ito), axes always labelled and titled.

:class:`Schematic` draws the data-flow diagrams of the chapters (boxes for tensors and
operations, arrows between them, dashed groups for repeated blocks) in the text's notation, so a
chapter's schematic is code in the notebook and regenerates with it.

Shape legend
    M      (R, C) a matrix drawn as a heat map (attention weights, joint tables)
    Ms     (N, R, C) N matrices drawn as small multiples on one colour scale (attention heads)
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

from .validation import integer, nonempty, one_of, positive, positive_int, shape_is

__all__ = [
    "PALETTE",
    "use_book_style",
    "subplots",
    "heatmap",
    "attention_grid",
    "finish",
    "Schematic",
]

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


class Schematic:
    """A data-flow diagram: named boxes (tensors, operations, notes), arrows, dashed groups.

    Coordinates are in grid units on a ``width`` x ``height`` canvas drawn 7 inches wide;
    ``xy`` is a box's centre. Text may use mathtext (``r"$\\mathbf{Q}$"``).

        s = Schematic(8, 3, title="Scaled dot-product attention")
        s.tensor("Q", (1, 2), r"$\\mathbf{Q}$", shape="(T, d_k)")
        s.op("S", (4, 2), r"$\\mathbf{Q}\\mathbf{K}^\\top/\\sqrt{d_k}$")
        s.arrow("Q", "S")
        s.show()
    """

    KINDS = ("tensor", "op", "note")

    def __init__(self, width: float, height: float, *, title: str | None = None) -> None:
        self.width, self.height = positive(width, "width"), positive(height, "height")
        self.fig, self.ax = plt.subplots(figsize=(7.0, 7.0 * height / width), layout="constrained")
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(0, height)
        self.ax.set_aspect("equal")
        self.ax.axis("off")
        if title:
            self.ax.set_title(title)
        self.boxes: dict[str, mpl.patches.FancyBboxPatch] = {}

    def _units(self, inches: float) -> float:
        return inches * self.width / 7.0

    def node(
        self,
        name: str,
        xy,
        text: str,
        *,
        kind: str = "tensor",
        color: int = 0,
        w: float | None = None,
        h: float | None = None,
    ):
        """Add a box called ``name`` centred at ``xy``; its size fits the text unless given."""
        one_of(kind, "kind", self.KINDS)
        integer(color, "color", 0, len(PALETTE) - 1)
        if name in self.boxes:
            raise ValueError(f"name {name!r} is already a box of this schematic")
        label = self.ax.text(
            xy[0],
            xy[1],
            text,
            ha="center",
            va="center",
            fontsize=10,
            zorder=3,
            color="black" if kind != "note" else "0.3",
        )
        ext = label.get_window_extent(self.fig.canvas.get_renderer())  # pixels
        w = w if w is not None else self._units(ext.width / self.fig.dpi + 0.25)
        h = h if h is not None else self._units(ext.height / self.fig.dpi + 0.16)
        c = PALETTE[color]
        style = {
            "tensor": dict(facecolor=mpl.colors.to_rgba(c, 0.15), edgecolor=c, lw=1.4),
            "op": dict(facecolor="white", edgecolor=c, lw=1.4),
            "note": dict(facecolor="none", edgecolor="none", lw=0),
        }[kind]
        box = mpl.patches.FancyBboxPatch(
            (xy[0] - w / 2, xy[1] - h / 2),
            w,
            h,
            boxstyle="round,pad=0,rounding_size=" + str(0.25 * min(w, h) if kind == "op" else 0.02),
            **style,
        )
        self.ax.add_patch(box)
        self.boxes[name] = box
        return box

    def tensor(self, name: str, xy, text: str, *, shape: str | None = None, color: int = 0, **kw):
        """A tensor: a tinted box with its symbol and, below it, its shape."""
        return self.node(
            name, xy, text + (f"\n{shape}" if shape else ""), kind="tensor", color=color, **kw
        )

    def op(self, name: str, xy, text: str, *, color: int = 1, **kw):
        """An operation: a white rounded box with a coloured edge."""
        return self.node(name, xy, text, kind="op", color=color, **kw)

    def note(self, name: str, xy, text: str, **kw):
        """Free text (an annotation) that arrows can point to or from."""
        return self.node(name, xy, text, kind="note", **kw)

    def arrow(
        self,
        src: str,
        dst: str,
        text: str | None = None,
        *,
        bend: float = 0.0,
        color: str = "0.25",
        dashed: bool = False,
    ) -> None:
        """An arrow from box ``src`` to box ``dst``, clipped at their edges; ``text`` at its
        middle; ``bend`` curves it (radians-like, e.g. 0.3)."""
        for n, v in (("src", src), ("dst", dst)):
            if v not in self.boxes:
                raise ValueError(f"{n} {v!r} is not a box of this schematic")
        a, b = self.boxes[src], self.boxes[dst]
        ca = (a.get_x() + a.get_width() / 2, a.get_y() + a.get_height() / 2)
        cb = (b.get_x() + b.get_width() / 2, b.get_y() + b.get_height() / 2)
        self.ax.annotate(
            "",
            xy=cb,
            xytext=ca,
            arrowprops=dict(
                arrowstyle="-|>",
                color=color,
                lw=1.3,
                patchA=a,
                patchB=b,
                shrinkA=2,
                shrinkB=2,
                linestyle="--" if dashed else "-",
                connectionstyle=f"arc3,rad={bend}",
            ),
        )
        if text:
            mid = ((ca[0] + cb[0]) / 2, (ca[1] + cb[1]) / 2)
            self.ax.text(
                mid[0],
                mid[1],
                text,
                ha="center",
                va="center",
                fontsize=9,
                color="0.2",
                bbox=dict(facecolor="white", edgecolor="none", pad=1),
            )

    def group(self, names, label: str, *, pad: float = 0.25, color: int = 7) -> None:
        """A dashed frame around the boxes ``names`` (a block, a repeated layer), labelled."""
        names = list(names)
        if not names or any(n not in self.boxes for n in names):
            raise ValueError(f"names must be boxes of this schematic, got {names!r}")
        bs = [self.boxes[n] for n in names]
        x0 = min(b.get_x() for b in bs) - pad
        y0 = min(b.get_y() for b in bs) - pad
        x1 = max(b.get_x() + b.get_width() for b in bs) + pad
        y1 = max(b.get_y() + b.get_height() for b in bs) + pad
        self.ax.add_patch(
            mpl.patches.Rectangle(
                (x0, y0), x1 - x0, y1 - y0, fill=False, ls="--", lw=1.0, edgecolor=PALETTE[color]
            )
        )
        self.ax.text(
            x0 + 0.05, y1 + 0.05, label, ha="left", va="bottom", fontsize=9, color=PALETTE[color]
        )

    def show(self) -> None:
        """Check that every box lies on the canvas, then show the figure."""
        for name, b in self.boxes.items():
            if (
                b.get_x() < 0
                or b.get_y() < 0
                or b.get_x() + b.get_width() > self.width
                or (b.get_y() + b.get_height() > self.height)
            ):
                raise ValueError(
                    f"box {name!r} does not fit on the {self.width} x "
                    f"{self.height} canvas; move it or enlarge the canvas"
                )
        plt.show()
