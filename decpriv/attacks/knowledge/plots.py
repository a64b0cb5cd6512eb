"""Pictures of the knowledge-matrix attacks: the graph coloured by outcome (El Mrini et al., Fig. 1 style) and
true vs recovered inputs ordered by distance to the attackers (Fig. 4 style)."""

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from decpriv.graphs.network import Network
from decpriv.metrics.images import psnr_text
from decpriv.report.plots import graph_figure, image_grid

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PALETTE = {"attacker": "tab:red", "reconstructed": "tab:purple", "other": "tab:green"}


def outcome_graph(network: Network, table: pd.DataFrame, title: str) -> "Figure":
    """Attackers red, reconstructed purple, the rest green (the paper's colours); on big graphs, rings of
    hop distance from the attackers."""
    categories = np.where(
        table.attacker.to_numpy(),
        "attacker",
        np.where(table.reconstructed.to_numpy(), "reconstructed", "other"),
    )
    attackers = np.flatnonzero(table.attacker.to_numpy())
    return graph_figure(network.graph, list(categories), PALETTE, title, roots=attackers)


def reconstruction_grid(
    true: np.ndarray, recovered: np.ndarray, distance: np.ndarray, psnr: np.ndarray, title: str
) -> "Figure":
    """(k, C, H, W) images already in [0, 1], ordered by hop distance; captions d=<hops>, PSNR."""
    order = np.argsort(distance, kind="stable")
    captions = [f"d={distance[i]}\n{psnr_text(psnr[i])}" for i in order]
    return image_grid([("true", true[order]), ("recovered", recovered[order])], captions, title)
