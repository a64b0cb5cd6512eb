"""Picture primitives shared by attacks, accountants and sweeps. Each returns a matplotlib Figure; the
run folder writer saves it as PNG (Agg backend: no screen needed). matplotlib is imported by the first
drawing, not with this module: a run without pictures (``plots=false``), a refused command and the
attack's sealed process, which imports the attack's module, never load it (0.3 s; docs/speed.md)."""

from collections.abc import Sequence
from typing import TYPE_CHECKING

import networkx as nx
import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def subplots(*args, **kwargs):
    """``matplotlib.pyplot.subplots`` on the Agg backend (matplotlib imported here, on first use)."""
    import matplotlib

    matplotlib.use("Agg")
    # a title set at y = 1 is not moved above the axes' tick labels: no text measured before the drawing
    matplotlib.rcParams["axes.titley"] = 1.0
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def place(
    fig: "Figure",
    left: float = 0.75,
    right: float = 0.2,
    bottom: float = 0.55,
    top: float = 0.45,
    wspace: float = 0.6,
    hspace: float = 0.5,
) -> None:
    """Lay out the figure's grid of axes by margins and gaps in inches, fixed for its texts. Fitting them
    to the measured texts (``tight_layout``, or saving with ``bbox_inches="tight"``) draws the figure once
    more each time: two of a small figure's three drawings (docs/speed.md)."""
    width, height = fig.get_size_inches()
    rows, columns = fig.axes[0].get_subplotspec().get_gridspec().get_geometry()
    axis_width = (width - left - right - (columns - 1) * wspace) / columns
    axis_height = (height - bottom - top - (rows - 1) * hspace) / rows
    fig.subplots_adjust(
        left=left / width,
        right=1 - right / width,
        bottom=bottom / height,
        top=1 - top / height,
        wspace=wspace / axis_width,
        hspace=hspace / axis_height,
    )


SPRING_LAYOUT_MAX = 200  # nodes; the spring layout costs O(n^2) per iteration
GRAPH_FIGURE_MAX = 5000  # nodes; past this a drawing is a blot and the figure only says it was left out


def radial_layout(graph: nx.Graph, roots: Sequence[int]) -> np.ndarray:
    """(n, 2) positions in O(|roots| * edges): ring d holds the nodes at hop distance d from ``roots``
    (unreachable nodes on the outermost ring); on each ring, nodes are ordered by the mean direction of
    their neighbours on the ring inside, so edges between rings stay short."""
    from scipy.sparse.csgraph import shortest_path

    n = graph.number_of_nodes()
    adjacency = nx.to_scipy_sparse_array(graph, nodelist=range(n), format="csr")
    hops = shortest_path(adjacency, unweighted=True, directed=False, indices=np.asarray(roots, dtype=int))
    hops = np.atleast_2d(hops).min(0)
    finite = np.isfinite(hops)
    ring = np.where(finite, hops, hops[finite].max() + 1).astype(int)
    direction, spread = np.zeros((n, 2)), np.zeros(n)
    for d in range(ring.max() + 1):
        members = np.flatnonzero(ring == d)
        if d == 0:
            order = members
        else:
            pull = adjacency[members][:, ring == d - 1] @ direction[ring == d - 1]
            order = members[np.argsort(np.arctan2(pull[:, 1], pull[:, 0]), kind="stable")]
        angle = 2 * np.pi * (np.arange(len(order)) + 0.5) / len(order)
        direction[order] = np.column_stack([np.cos(angle), np.sin(angle)])
        if len(order) > 60:  # a golden-ratio spread across the band: an annulus, not overlapping dots
            spread[order] = 0.7 * ((np.arange(len(order)) * 0.618034) % 1)
    radius = ring + spread + (0.5 if len(roots) > 1 else 0.0)
    return direction * radius[:, None]


def graph_layout(graph: nx.Graph, roots: Sequence[int] | None = None) -> np.ndarray:
    """(n, 2) node positions, row v for node v: the ``pos`` attribute when present (random geometric
    graphs), a seeded spring layout up to ``SPRING_LAYOUT_MAX`` nodes, else :func:`radial_layout` around
    ``roots`` (default: the node of highest degree)."""
    n = graph.number_of_nodes()
    pos = nx.get_node_attributes(graph, "pos")
    if not pos and n <= SPRING_LAYOUT_MAX:
        pos = nx.spring_layout(graph, seed=0)
    if not pos:
        if roots is None or len(roots) == 0:
            roots = [max(range(n), key=graph.degree)]
        return radial_layout(graph, roots)
    return np.array([pos[v] for v in range(n)], dtype=float).reshape(-1, 2)


def graph_figure(
    graph: nx.Graph,
    categories: Sequence[str],
    palette: dict[str, str],
    title: str = "",
    values: Sequence[float] | None = None,
    value_label: str = "",
    roots: Sequence[int] | None = None,
) -> "Figure":
    """The graph with each node coloured by its category (``palette``), or by ``values`` on a colour map.

    Nodes are 0..n-1 (row v of ``categories`` / ``values`` is node v); positions from :func:`graph_layout`
    (rings of hop distance from ``roots`` above ``SPRING_LAYOUT_MAX`` nodes, said under the picture).
    Above ``GRAPH_FIGURE_MAX`` nodes the figure holds only a note saying the graph was not drawn.
    """
    from matplotlib.collections import LineCollection

    n = graph.number_of_nodes()
    fig, ax = subplots(figsize=(6.5, 6))
    place(fig, left=0.15, right=0.15, bottom=0.3, top=0.45)
    ax.set_title(title)
    ax.axis("off")
    if n > GRAPH_FIGURE_MAX:
        ax.text(0.5, 0.5, f"graph of {n} nodes not drawn (above {GRAPH_FIGURE_MAX})", ha="center")
        return fig
    xy = graph_layout(graph, roots)
    small = n <= SPRING_LAYOUT_MAX or bool(nx.get_node_attributes(graph, "pos"))
    if not small:
        where = "the attackers" if roots is not None and len(roots) else "the node of highest degree"
        ax.text(
            0.5, -0.02, f"ring d: nodes d hops from {where}", transform=ax.transAxes, ha="center", fontsize=8
        )
    edges = np.array(graph.edges, dtype=int).reshape(-1, 2)
    alpha = 0.35 if n <= SPRING_LAYOUT_MAX else 0.06
    ax.add_collection(LineCollection(xy[edges], colors="k", alpha=alpha, linewidths=0.8, zorder=1))
    size = max(30, 3000 // max(n, 1)) if n <= SPRING_LAYOUT_MAX else 10
    if values is not None:
        drawn = ax.scatter(*xy.T, s=size, c=np.asarray(values, dtype=float), cmap="viridis", zorder=2)
        fig.colorbar(drawn, ax=ax, label=value_label)
    else:
        labels = np.asarray(categories)
        # the most common category first: a few red or purple dots stay visible on a big graph
        for category, colour in sorted(palette.items(), key=lambda item: -(labels == item[0]).sum()):
            members = labels == category
            if members.any():
                ax.scatter(*xy[members].T, s=size, c=colour, zorder=2, label=f"{category} ({members.sum()})")
        ax.legend(loc="best", fontsize=8)
    if n <= 40:
        for v, (x, y) in enumerate(xy):
            ax.text(x, y, str(v), fontsize=7, ha="center", va="center", zorder=3)
    ax.autoscale_view()
    return fig


MAX_COLUMNS = 16
MAX_IMAGES = 64


def _tile(images: Sequence[np.ndarray], width: int, gap: int = 2) -> np.ndarray:
    """(H, width * (w + gap), 3) strip of RGB images in [0, 1], white gaps and white past the last image."""
    shaped = []
    for image in images:
        img = np.clip(np.asarray(image, dtype=float), 0, 1)
        img = np.repeat(img, 3, axis=0) if img.shape[0] == 1 else img
        shaped.append(np.transpose(img, (1, 2, 0)))
    h, w = shaped[0].shape[:2]
    strip = np.ones((h, width * (w + gap) - gap, 3))
    for c, img in enumerate(shaped):
        strip[:, c * (w + gap) : c * (w + gap) + w] = img
    return strip


def image_grid(
    rows: Sequence[tuple[str, np.ndarray]], captions: Sequence[str] | None = None, title: str = ""
) -> "Figure":
    """Rows of images (e.g. ("true", X), ("recovered", Xhat)), each X of shape (k, C, H, W) in [0, 1].

    Long rows wrap into bands of at most ``MAX_COLUMNS`` columns, each band showing every row's images of
    those columns (true directly above recovered); past ``MAX_IMAGES`` columns the rest are left out and
    the title says how many are shown. Each row of a band is drawn as one tiled image (one axis, not one
    per image: a 64-image grid draws and saves in a fraction of the time).
    """
    total = max(len(images) for _, images in rows)
    k = min(total, MAX_IMAGES)
    width = min(k, MAX_COLUMNS)
    bands = -(-k // width)
    if k < total:
        title = f"{title} (first {k} of {total})"
    height = len(rows) * bands
    fig, axes = subplots(height, 1, figsize=(1.1 * width + 1, 1.2 * height + 0.5), squeeze=False)
    place(fig, left=0.45, right=0.1, bottom=0.35, top=0.45 if title else 0.1, hspace=0.35)
    for band in range(bands):
        shown = range(band * width, min((band + 1) * width, k))
        for r, (label, images) in enumerate(rows):
            ax = axes[band * len(rows) + r, 0]
            ax.set_xticks([])
            ax.set_yticks([])
            for side in ax.spines.values():
                side.set_visible(False)
            ax.set_ylabel(label, fontsize=8)
            present = [images[i] for i in shown if i < len(images)]
            if not present:
                continue
            strip = _tile(present, width)
            ax.imshow(strip, vmin=0, vmax=1, interpolation="nearest")
            cell = (strip.shape[1] + 2) / width
            if r == len(rows) - 1 and captions is not None:
                # plain texts under the strip, not tick labels: a tick is five artists
                for c, i in enumerate(shown):
                    if i < len(captions):
                        ax.text(
                            (c + 0.5) * cell - 1,
                            strip.shape[0],
                            captions[i],
                            fontsize=7,
                            ha="center",
                            va="top",
                        )
    fig.suptitle(title)
    return fig


def metric_plot(
    table: pd.DataFrame,
    x: str,
    y: str,
    hue: str | None = None,
    logx: bool = False,
    logy: bool = False,
    title: str = "",
    band: tuple[str | float, str | float] | None = None,
    band_label: str = "baseline",
) -> "Figure":
    """``y`` against ``x``, one line per ``hue`` value, mean with std error bars over repeated rows (seeds).

    A numeric ``x`` is a line (integer ticks when every value is an integer, e.g. seeds); a text ``x``
    (``ring``, ``torus``) is drawn as categories: points side by side, no line between them. ``band``:
    the baseline the metric is read against, (low, high) columns or constants (the same for a line), drawn
    per ``hue`` value as a shaded band (a dashed line when low and high are the same)."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = subplots(figsize=(6.5, 4.2))
    place(fig, left=0.9, top=0.4)
    categorical = not pd.api.types.is_numeric_dtype(table[x])
    order = sorted(table[x].unique(), key=str) if categorical else None
    groups = list(table.groupby(hue, sort=True)) if hue else [(None, table)]
    shift = 0.08 * (np.arange(len(groups)) - (len(groups) - 1) / 2) if categorical else np.zeros(len(groups))
    for offset, (label, part) in zip(shift, groups, strict=True):
        stats = part.groupby(x)[y].agg(["mean", "std"]).reset_index()
        where = stats[x].map({v: i for i, v in enumerate(order)}) + offset if categorical else stats[x]
        drawn = ax.errorbar(
            where,
            stats["mean"],
            yerr=stats["std"].fillna(0),
            marker="o",
            capsize=3,
            linestyle="none" if categorical else "-",
            label=str(label) if hue else None,
        )
        if band is not None:
            _band(ax, part, x, band, where, stats[x], drawn.lines[0].get_color(), categorical)
    if band is not None:
        ax.plot([], [], color="grey", alpha=0.4, linewidth=6, label=band_label)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if categorical:
        ax.set_xticks(range(len(order)), [str(v) for v in order])
    elif pd.api.types.is_integer_dtype(table[x]) or (table[x] == table[x].round()).all():
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if logx and not categorical:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if hue or band is not None:
        ax.legend(title=hue, fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    return fig


def _band(ax, part, x, band, where, keys, colour, categorical) -> None:
    """The baseline of one line: the mean over seeds of its low and high columns (or constants) at each x."""
    low, high = (
        part.groupby(x)[b].mean().reindex(keys).to_numpy() if isinstance(b, str) else np.full(len(keys), b)
        for b in band
    )
    where = np.asarray(where, dtype=float)
    if categorical:  # a short band under each point: categories are not joined
        for w, lo, hi in zip(where, low, high, strict=True):
            ax.fill_between([w - 0.15, w + 0.15], lo, max(hi, lo), color=colour, alpha=0.18, linewidth=0)
            ax.hlines(hi, w - 0.15, w + 0.15, colors=colour, linestyles="--", linewidth=1)
        return
    ax.fill_between(where, low, np.maximum(high, low), color=colour, alpha=0.18, linewidth=0)
    ax.plot(where, high, color=colour, linestyle="--", linewidth=1)


TRAINING_PANELS = (
    ("loss", ("train_loss", "optimality_gap", "mse")),
    ("accuracy", ("test_accuracy", "train_accuracy", "local_test_accuracy_mean")),
    ("consensus distance", ("consensus_distance",)),
)


def training_curves(history: pd.DataFrame, title: str) -> "Figure | None":
    """One panel per kind of training metric present in history.csv, against the round (None if none)."""
    panels = [(name, [c for c in cols if c in history]) for name, cols in TRAINING_PANELS]
    panels = [(name, cols) for name, cols in panels if cols]
    if not panels or len(history) < 2:
        return None
    fig, axes = subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    place(fig, left=0.6, top=0.75, wspace=0.65)
    for ax, (name, cols) in zip(axes[0], panels, strict=True):
        for c in cols:
            ax.plot(history["round"], history[c], marker=".", label=c)
        if name == "loss" and (history[cols] > 0).all().all():
            ax.set_yscale("log")
        ax.set_xlabel("round")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    return fig
