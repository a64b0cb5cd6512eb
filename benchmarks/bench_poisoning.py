"""Robust aggregation at scale: decpriv's rules as a run calls them (``RobustAggregation.receive``: receivers
in degree groups, blocks gathered from the messages) against ByzFL's aggregators (Allouah et al. 2025,
byzfl 0.0.11) called once per node on that node's received vectors, side by side in one process, float32,
one thread: n = 10^4 and 10^3 nodes of a random 8-regular graph (9 senders each), p = 1000, f = 1. ByzFL is
timed on whichever input is faster for it (numpy arrays or torch tensors, gathered beforehand and not
timed); decpriv's time includes its gather. Then memory: every rule on a star of 10^4 (Krum excepted: a
leaf hears 2 senders, refused) and on a Barabasi-Albert graph of 10^4 (m = 5), p = 1000, each in a fresh
process, its peak RSS. Run: ``make bench`` or ``.venv/bin/python -m benchmarks poisoning``.
"""

import multiprocessing
import time

import networkx as nx
import torch
from threadpoolctl import threadpool_limits

from benchmarks.bench_robust import best
from decpriv.defenses.norm_bounding import NormBounding
from decpriv.defenses.robust import (
    CentredClipping,
    ClippedGossip,
    CoordinateMedian,
    Krum,
    MultiKrum,
    TrimmedMean,
)
from decpriv.graphs.gossip_matrix import metropolis_hastings

P, F = 1000, 1


def csr(W) -> torch.Tensor:
    return torch.sparse_csr_tensor(
        torch.as_tensor(W.indptr),
        torch.as_tensor(W.indices),
        torch.as_tensor(W.data, dtype=torch.float32),
        W.shape,
    )


def rules() -> dict:
    """decpriv's rule and ByzFL's maker per rule (trimmed fraction 1/9: one of 9 trimmed each side, f = 1)."""
    import byzfl

    return {
        "median": (CoordinateMedian(), byzfl.Median),
        "trimmed_mean": (TrimmedMean(fraction=1 / 9 + 1e-9), lambda: byzfl.TrMean(f=F)),
        "krum": (Krum(f=F), lambda: byzfl.Krum(f=F)),
        "multi_krum": (MultiKrum(f=F), lambda: byzfl.MultiKrum(f=F)),
        "centred_clipping": (CentredClipping(tau=1.0), lambda: byzfl.CenteredClipping(tau=1.0, L=1)),
    }


def byzfl_time(make, rows_np, rows_t, centres) -> tuple[float, torch.Tensor]:
    """ByzFL once per node, on numpy and on torch input: the faster. Centred clipping from each node's own
    model (as decpriv's gossip rule): a fresh aggregator per node with its centre set."""
    results = []
    for rows in (rows_np, rows_t):

        def call(rows=rows):
            out = []
            for v, r in enumerate(rows):
                agg = make()
                if hasattr(agg, "m"):  # its constructor refuses any m (byzfl 0.0.11): set after
                    agg.m = centres[v] if isinstance(r, torch.Tensor) else centres[v].numpy()
                out.append(torch.as_tensor(agg(r)))
            return torch.stack(out)

        results.append(best(call, 3))
    return min(results, key=lambda t: t[0])


def rule_table(n: int) -> None:
    W = csr(metropolis_hastings(nx.random_regular_graph(8, n, seed=0)))
    x = torch.randn(n, P, generator=torch.Generator().manual_seed(0))
    received = [torch.nonzero(W[v].to_dense()).flatten() for v in range(n)] if n <= 1000 else None
    if received is None:  # the 9 senders of each node, in CSR order, without a densified row per node
        crow, col = W.crow_indices(), W.col_indices()
        received = [col[crow[v] : crow[v + 1]] for v in range(n)]
    rows_t = [x[i] for i in received]
    rows_np = [r.numpy() for r in rows_t]
    print(f"n={n} nodes, 9 senders each, p={P}, f={F}, float32, one thread")
    print(f"{'rule':18s} {'decpriv s':>10s} {'ByzFL s':>10s} {'speed-up':>9s} {'max diff':>9s}")
    for name, (ours, make) in rules().items():
        ours.neighbourhoods(W)  # built once per run, not per round
        t_ours, a = best(lambda ours=ours: ours.receive(W, x, None), 5)
        t_theirs, b = byzfl_time(make, rows_np, rows_t, x)
        diff = float((a - b.to(a.dtype)).abs().max())
        print(f"{name:18s} {t_ours:10.3f} {t_theirs:10.3f} {t_theirs / t_ours:8.1f}x {diff:9.1e}", flush=True)


def peak_mb() -> float:
    """This process's peak resident memory (VmHWM: reset at exec, where ru_maxrss keeps the parent's)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def memory_case(graph: str, name: str, queue) -> None:
    torch.set_num_threads(1)
    n = 10_000
    g = nx.star_graph(n - 1) if graph == "star" else nx.barabasi_albert_graph(n, 5, seed=0)
    W = csr(metropolis_hastings(g))
    x = torch.randn(n, P)
    made = {
        "median": CoordinateMedian(),
        "trimmed_mean": TrimmedMean(fraction=0.2),
        "krum": Krum(f=1),
        "multi_krum": MultiKrum(f=1),
        "centred_clipping": CentredClipping(),
        "clipped_gossip": ClippedGossip(),
        "norm_bounding": NormBounding(sigma=0.0),
    }[name]
    before = peak_mb()
    made.receive(W, x, None)  # the first step builds the groups
    begin = time.perf_counter()
    made.receive(W, x, None)
    took = time.perf_counter() - begin
    queue.put((took, before, peak_mb()))


def memory_table() -> None:
    print(
        f"\nn=10^4, p={P}, float32: one robust gossip step (the second), each in a fresh process (peak RSS)"
    )
    print(f"{'graph':6s} {'rule':18s} {'s':>7s} {'RSS before MB':>14s} {'peak MB':>8s}")
    ctx = multiprocessing.get_context("spawn")
    for graph in ("star", "power_law"):
        for name in ("median", "trimmed_mean", "krum", "multi_krum", "centred_clipping", "clipped_gossip"):
            if graph == "star" and "krum" in name:
                continue  # refused: a leaf hears 2 senders, Krum needs more than 2f + 2
            queue = ctx.Queue()
            proc = ctx.Process(target=memory_case, args=(graph, name, queue))
            proc.start()
            took, before, peak = queue.get()
            proc.join()
            print(f"{graph:6s} {name:18s} {took:7.2f} {before:14.0f} {peak:8.0f}", flush=True)


def main(tables=("rules", "memory")) -> None:
    """One thread for torch and for BLAS (threadpoolctl: numpy is loaded before this module under
    ``make bench``), given back to the next benchmark after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            if "rules" in tables:
                for n in (10_000, 1000):
                    rule_table(n)
            if "memory" in tables:
                memory_table()
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:] or ("rules", "memory"))
