"""The knowledge-matrix attack beside the authors' released code: decAttack's ``Reconstruct`` (El Mrini,
Cyffers, Bellet, "Privacy attacks in decentralized learning", ICML 2024; github.com/AbdellahElmrini/decAttack,
``src/consensus.py``) at a pinned commit, fetched on demand into decpriv's cache and never copied into
this repository. Offline (or without git) the comparison is skipped in one line.

The same problem on both sides: an Erdos-Renyi graph (p = 2 ln n / n), 2% attackers (nodes 0..k-1),
T = 20 gossip steps, and the authors' own gossip matrix (their ``HamiltonGossipMatrix``, Metropolis-Hastings
with self-loops), handed to decpriv as a sparse matrix.

- kernel: build K_T and decide which nodes are reconstructible. Reference: ``Reconstruct(G, T, A)`` (dense
  powers of W) then their ``compute_rref`` and their rule (an RREF row with one entry above 1e-6 names a
  reconstructed node). decpriv: ``float_knowledge`` (sparse powers into a streaming QR, certified
  margins). Both answers are compared node by node.
- whole command: ``decpriv run protocol=gossip attack=knowledge_matrix ...`` (the user's command, with the
  simulation, the attack, scoring and tables, ``plots=false``; its own draw of the same ER law and its
  own Metropolis-Hastings W) against the reference kernel alone.
"""

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import networkx as nx
import numpy as np
import scipy.sparse as sp

from benchmarks.bench_end_to_end import DECPRIV, ENV, knowledge_overrides
from benchmarks.bench_knowledge import er_graph
from decpriv.attacks.knowledge.matrix import float_knowledge

REPOSITORY = "https://github.com/AbdellahElmrini/decAttack"
COMMIT = "d99697d99dac3e9be8f4b7673877335c84333998"  # the newest on 2026-11-27; pinned so ratios reproduce
SIZES = (300, 1000)
STEPS = 20


def cache() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "decpriv" / f"decAttack-{COMMIT[:12]}"


def fetch() -> Path | None:
    """The authors' ``src`` folder at ``COMMIT`` (cloned once into the cache), None when it cannot be had."""
    folder = cache()
    if (folder / "src" / "consensus.py").is_file():
        return folder / "src"
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        for command in (
            ["git", "clone", "--quiet", REPOSITORY, str(partial)],
            ["git", "-C", str(partial), "checkout", "--quiet", COMMIT],
        ):
            subprocess.run(command, check=True, capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError):
        shutil.rmtree(partial, ignore_errors=True)
        return None
    partial.rename(folder)
    return folder / "src"


def reference_kernel(consensus, rref, graph: nx.Graph, attackers: list[int]) -> tuple[np.ndarray, int]:
    """The authors' reconstructible nodes (their RREF rule) and the rows of their K_T."""
    attack = consensus.Reconstruct(graph, STEPS, attackers)
    _, _, U = rref.compute_rref(attack.knowledge_matrix)
    U[np.abs(U) < 1e-6] = 0
    found = np.zeros(graph.number_of_nodes(), dtype=bool)
    for row in U:
        nonzero = np.flatnonzero(row)
        if len(nonzero) == 1:
            found[nonzero[0]] = True
    return found, attack.knowledge_matrix.shape[0]


def whole_command(n: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        command = [*DECPRIV, "run", *knowledge_overrides(n), "adversary.strategy=first", "plots=false"]
        begin = time.perf_counter()
        subprocess.run([*command, f"hydra.run.dir={folder}/r"], check=True, capture_output=True, env=ENV)
        return time.perf_counter() - begin


def main() -> None:
    source = fetch()
    if source is None:
        print(f"decAttack reference skipped: {REPOSITORY} @ {COMMIT[:12]} could not be fetched (offline?)")
        return
    sys.path.insert(0, str(source))  # their modules import each other by bare name
    consensus, rref = importlib.import_module("consensus"), importlib.import_module("rref")
    print(f"ER graphs, p = 2 ln n / n, 2% attackers, T = {STEPS}; decAttack {COMMIT[:12]}; seconds, one run")
    print("    n  |A|  rows  recon  agree  reference_s  decpriv_s  kernel_x  whole_s  whole_x")
    for n in SIZES:
        graph = er_graph(n, seed=n)
        attackers = list(range(max(1, n // 50)))
        W = sp.csr_array(consensus.HamiltonGossipMatrix(graph.copy()))  # theirs adds self-loops in place
        begin = time.perf_counter()
        theirs, rows = reference_kernel(consensus, rref, graph.copy(), attackers)
        reference_s = time.perf_counter() - begin
        begin = time.perf_counter()
        ours = float_knowledge(W, np.array(attackers), STEPS)
        decpriv_s = time.perf_counter() - begin
        whole_s = whole_command(n)
        agree = int((theirs == ours.reconstructible).sum())
        print(
            f"{n:5d} {len(attackers):4d} {rows:5d} {int(ours.reconstructible.sum()):6d} {agree:4d}/{n}"
            f" {reference_s:12.2f} {decpriv_s:10.3f} {reference_s / decpriv_s:9.0f}"
            f" {whole_s:8.2f} {reference_s / whole_s:8.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
