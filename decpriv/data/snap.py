"""The SNAP Facebook ego networks (McAuley and Leskovec, NeurIPS 2012), downloaded on first use: the
social graph of El Mrini et al. 2024's Fig. 3 (ego 414). SNAP publishes no checksum, so none is checked;
a file that is not an edge list is refused when read."""

import networkx as nx

from decpriv.data.datasets import data_folder, offline_error
from decpriv.errors import bad_value
from decpriv.graphs.topologies import edgelist

SNAP_URL = "https://snap.stanford.edu/data/facebook.tar.gz"
EGOS = (0, 107, 348, 414, 686, 698, 1684, 1912, 3437, 3980)


def facebook_ego(
    ego: int = 414, root: str | None = None, url: str = SNAP_URL, largest_component: bool = True
) -> nx.Graph:
    """The friendships among ego ``ego``'s friends (``facebook/<ego>.edges`` of SNAP's archive, the ego
    itself not in it), read as :func:`~decpriv.graphs.topologies.edgelist` reads a user's file."""
    from urllib.error import URLError

    from torchvision.datasets.utils import download_and_extract_archive

    path = data_folder(root, "snap", "topology.root")
    edges = path / "facebook" / f"{ego}.edges"
    if not edges.is_file():
        try:
            download_and_extract_archive(url, str(path), filename="facebook.tar.gz")
        except (RuntimeError, URLError, OSError) as error:
            raise offline_error(
                "the SNAP Facebook ego networks",
                path,
                error,
                f"facebook/{ego}.edges from {url}",
                "topology.root",
            ) from None
    if not edges.is_file():
        raise bad_value(
            "topology.ego", ego, f"SNAP's archive has no facebook/{ego}.edges", f"pick one of {EGOS}"
        )
    return edgelist(str(edges), largest_component)
