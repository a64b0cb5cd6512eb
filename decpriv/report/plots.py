"""Picture primitives shared by attacks, accountants and sweeps. Each returns a matplotlib Figure; the
run folder writer saves it as PNG (Agg backend: no screen needed)."""

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def graph_figure(
    graph: nx.Graph,
    categories: Sequence[str],
    palette: dict[str, str],
    title: str = "",
    values: Sequence[float] | None = None,
    value_label: str = "",
) -> Figure:
    """The graph with each node coloured by its category (``palette``), or by ``values`` on a colour map.

    Node positions: the ``pos`` attribute when present (random geometric graphs), else a seeded spring layout.
    """
    pos = nx.get_node_attributes(graph, "pos") or nx.spring_layout(graph, seed=0)
    n = graph.number_of_nodes()
    fig, ax = plt.subplots(figsize=(6.5, 6))
    nx.draw_networkx_edges(graph, pos, ax=ax, alpha=0.35, width=0.8)
    size = max(30, 3000 // max(n, 1))
    if values is not None:
        drawn = nx.draw_networkx_nodes(
            graph, pos, ax=ax, node_size=size, node_color=list(values), cmap="viridis"
        )
        fig.colorbar(drawn, ax=ax, label=value_label)
    else:
        for category, colour in palette.items():
            members = [v for v in graph.nodes if categories[v] == category]
            if members:
                nx.draw_networkx_nodes(
                    graph,
                    pos,
                    nodelist=members,
                    node_color=colour,
                    ax=ax,
                    node_size=size,
                    label=f"{category} ({len(members)})",
                )
        ax.legend(loc="best", fontsize=8)
    if n <= 40:
        nx.draw_networkx_labels(graph, pos, ax=ax, font_size=7)
    ax.set_title(title)
    ax.axis("off")
    return fig


MAX_COLUMNS = 16
MAX_IMAGES = 64


def image_grid(
    rows: Sequence[tuple[str, np.ndarray]], captions: Sequence[str] | None = None, title: str = ""
) -> Figure:
    """Rows of images (e.g. ("true", X), ("recovered", Xhat)), each X of shape (k, C, H, W) in [0, 1].

    Long rows wrap into bands of at most ``MAX_COLUMNS`` columns, each band showing every row's images of
    those columns (true directly above recovered); past ``MAX_IMAGES`` columns the rest are left out and
    the title says how many are shown.
    """
    total = max(len(images) for _, images in rows)
    k = min(total, MAX_IMAGES)
    width = min(k, MAX_COLUMNS)
    bands = -(-k // width)
    if k < total:
        title = f"{title} (first {k} of {total})"
    height = len(rows) * bands
    fig, axes = plt.subplots(height, width, figsize=(1.1 * width + 1, 1.2 * height + 0.5), squeeze=False)
    for band in range(bands):
        for r, (label, images) in enumerate(rows):
            for c in range(width):
                i, ax = band * width + c, axes[band * len(rows) + r, c]
                ax.set_xticks([])
                ax.set_yticks([])
                if i < min(len(images), k):
                    img = np.clip(np.asarray(images[i], dtype=float), 0, 1)
                    img = img[0] if img.shape[0] == 1 else np.transpose(img, (1, 2, 0))
                    ax.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0, vmax=1)
                else:
                    ax.axis("off")
                if c == 0:
                    ax.set_ylabel(label, fontsize=8)
                last = r == len(rows) - 1
                if last and captions is not None and i < min(len(captions), k):
                    ax.set_xlabel(captions[i], fontsize=7)
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
) -> Figure:
    """``y`` against ``x``, one line per ``hue`` value, mean with std error bars over repeated rows (seeds)."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    groups = table.groupby(hue, sort=True) if hue else [(None, table)]
    for label, part in groups:
        stats = part.groupby(x)[y].agg(["mean", "std"]).reset_index()
        ax.errorbar(
            stats[x],
            stats["mean"],
            yerr=stats["std"].fillna(0),
            marker="o",
            capsize=3,
            label=str(label) if hue else None,
        )
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if hue:
        ax.legend(title=hue, fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    return fig


TRAINING_PANELS = (
    ("loss", ("train_loss", "optimality_gap", "mse")),
    ("accuracy", ("test_accuracy", "train_accuracy", "local_test_accuracy_mean")),
    ("consensus distance", ("consensus_distance",)),
)


def training_curves(history: pd.DataFrame, title: str) -> Figure | None:
    """One panel per kind of training metric present in history.csv, against the round (None if none)."""
    panels = [(name, [c for c in cols if c in history]) for name, cols in TRAINING_PANELS]
    panels = [(name, cols) for name, cols in panels if cols]
    if not panels or len(history) < 2:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
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
    fig.tight_layout()
    return fig
