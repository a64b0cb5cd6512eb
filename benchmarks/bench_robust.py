"""Robust aggregation: decpriv's rules vectorised over every node's neighbourhood (one (n, M, p) tensor)
against ByzFL's aggregators (Allouah et al. 2025) called once per node, on the same messages: n = 1000
nodes of a random 8-regular graph (9 senders each, itself included), p = 650 (the softmax model on the
digits), f = 1 tolerated. Prints each rule's time both ways, the speed-up and the largest difference;
then a whole robust D-SGD round at 10^4 nodes (``decpriv run`` with ``defense=median``), with its peak
memory. Run: ``.venv/bin/python -m benchmarks robust``.
"""

import resource
import time

import networkx as nx
import numpy as np
import torch

from decpriv import experiment
from decpriv.api import compose_config
from decpriv.defenses import robust_rules as rules
from decpriv.defenses.neighbourhoods import Inbox
from decpriv.graphs.gossip_matrix import metropolis_hastings

N, DEGREE, P, F = 1000, 8, 650, 1


def decpriv_rules(hood: Inbox, x: torch.Tensor) -> dict:
    (received,), valid = hood.received(x), hood.groups[0].valid  # a regular graph: one group
    trim = torch.full((len(x),), F)
    zero = torch.zeros_like(x)
    return {
        "median": lambda: rules.median(received, valid),
        "trimmed_mean": lambda: rules.trimmed_mean(received, valid, trim),
        "krum": lambda: rules.krum(received, valid, F),
        "multi_krum": lambda: rules.multi_krum(received, valid, F),
        "centred_clipping": lambda: rules.centred_clipping(received, valid, zero, 1.0, 1),
    }


def byzfl_rules(hood: Inbox, x: torch.Tensor) -> dict:
    import byzfl

    (group,) = hood.groups  # its rows are the nodes in order
    rows = [x[group.index[v][group.valid[v]]] for v in range(len(x))]
    made = {
        "median": byzfl.Median,
        "trimmed_mean": lambda: byzfl.TrMean(f=F),
        "krum": lambda: byzfl.Krum(f=F),
        "multi_krum": lambda: byzfl.MultiKrum(f=F),
        "centred_clipping": lambda: byzfl.CenteredClipping(tau=1.0, L=1),
    }
    # a fresh aggregator per node: ByzFL's centred clipping keeps its centre between calls
    return {name: (lambda make=make: torch.stack([make()(r) for r in rows])) for name, make in made.items()}


def best(fn, repeats: int = 3) -> tuple[float, torch.Tensor]:
    times, out = [], None
    for _ in range(repeats):
        begin = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - begin)
    return min(times), out


def rule_table() -> None:
    graph = nx.random_regular_graph(DEGREE, N, seed=0)
    W = torch.as_tensor(metropolis_hastings(graph).toarray()).to_sparse_csr()
    hood = Inbox.of(W)
    x = torch.as_tensor(np.random.default_rng(0).normal(size=(N, P)), dtype=torch.float32)
    ours, theirs = decpriv_rules(hood, x), byzfl_rules(hood, x)
    print(f"n={N} nodes, {DEGREE + 1} senders each, p={P}, f={F}")
    print(f"{'rule':18s} {'decpriv s':>10s} {'ByzFL s':>10s} {'speed-up':>9s} {'max diff':>9s}")
    for name in ours:
        t_ours, a = best(ours[name])
        t_theirs, b = best(theirs[name], repeats=1)
        diff = float((a - b.to(a.dtype)).abs().max())
        print(f"{name:18s} {t_ours:10.4f} {t_theirs:10.4f} {t_theirs / t_ours:8.0f}x {diff:9.1e}")


def scale_round(n: int = 10_000) -> None:
    overrides = [
        "data=gaussian_classes",
        f"data.size={4 * n // 3 + 1}",  # a training split of n samples
        "data.dim=64",  # the digits' shape: p = 650 for the softmax model
        "data.num_classes=10",
        "model=softmax",
        "topology=random_regular",
        f"topology.n={n}",
        "topology.d=8",
        "partition=iid",
        "protocol.batch_size=null",
        "protocol.rounds=2",
        "protocol.eval_every=2",
        "defense=median",
        "~attack",
        "adversary=none",
    ]
    cfg = compose_config(overrides)[0]
    setup = experiment.build(cfg)
    begin = time.perf_counter()
    experiment.simulate(setup)
    took = time.perf_counter() - begin
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"robust D-SGD (median), n={n}, degree 8, softmax p=650: 2 rounds + 2 evaluations {took:.2f} s, peak RSS {peak:.0f} MB"
    )


def main() -> None:
    torch.manual_seed(0)
    rule_table()
    scale_round()


if __name__ == "__main__":
    main()
