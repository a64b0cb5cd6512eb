"""Scale beyond the anchors: time and peak memory against n, each point in a fresh process (its own peak
resident memory, ru_maxrss), with the growth exponent between consecutive sizes (time ~ n^k).

- D-SGD, softmax regression (p = 650): Gaussian classes in 64 dimensions, 10 classes, 4 samples per node,
  batch 1, random 4-regular graph, 100 rounds, evaluated at the first and last round; the time is
  ``experiment.build`` (data, graph, partition) plus ``simulate``, as the CLI runs them; eval_s is one
  evaluation (history row) alone; rounds/s is the round alone: 900 extra rounds over the difference between
  a 1000-round and the 100-round run (the same two evaluations in both).
- Knowledge-matrix attack on gossip (El Mrini et al. 2024): ER graphs with mean degree 2 ln n, 1% attackers,
  T = 20, 64-dimensional private values: build K_T, decide which nodes are determined (certified) and solve
  their values (:func:`decpriv.attacks.knowledge.matrix.gossip_row_space`, the attack's core).

- Graph families: ring, torus, Erdos-Renyi (mean degree 2 ln n) and random geometric (radius
  sqrt(ln n / n), mean degree pi ln n) graphs from n = 10^3 to 10^5, gossip averaging and D-SGD (softmax, 4 samples per
  node), ``GRAPH_ROUNDS`` rounds, no attack: wall time and the process's peak memory after each phase
  (build: graph, gossip matrix, data, partition; simulate; spectral_gap), one fresh process a point, given
  ``LIMIT_S`` seconds; a family stops growing at its first point over the limit (the largest n finishing
  within a minute is the row before).

Run: ``.venv/bin/python -m benchmarks scale`` (``python -m benchmarks.bench_scale one dsgd 10000`` runs
one point; ``python -m benchmarks.bench_scale graphs`` the graph families alone).
"""

import json
import math
import resource
import subprocess
import sys
import time

import numpy as np

DSGD_SIZES = (1250, 2500, 5000, 10000)
KNOWLEDGE_SIZES = (625, 1250, 2500, 5000)
ROUNDS, STEPS, SHARE, DIM = 100, 20, 0.01, 64
REPEATS = 2
GRAPH_SIZES = (1_000, 3_000, 10_000, 30_000, 100_000)
GRAPHS = ("ring", "torus", "erdos_renyi", "random_geometric")
GRAPH_ROUNDS, LIMIT_S = 10, 60.0


def _graph_overrides(topology: str, protocol: str, n: int) -> list[str]:
    size = {"torus": f"topology.n={math.isqrt(n) ** 2}"}.get(topology, f"topology.n={n}")
    shape = {
        "erdos_renyi": [f"topology.p={min(1.0, 2 * math.log(n) / n):.6g}"],
        "random_geometric": [f"topology.radius={math.sqrt(math.log(n) / n):.6g}"],
    }.get(topology, [])
    model = ["model=softmax", "protocol.batch_size=1"] if protocol == "dsgd" else []
    return [
        f"topology={topology}",
        size,
        *shape,
        f"protocol={protocol}",
        *model,
        "data=gaussian_classes",
        f"data.size={math.ceil(4 * n / 0.75) + 1}",
        "partition.per_node=4",
        f"protocol.rounds={GRAPH_ROUNDS}",
        f"protocol.eval_every={GRAPH_ROUNDS}",
        "~attack",
    ]


def graph_point(topology: str, protocol: str, n: int) -> dict:
    """Wall time and peak resident memory (MB, the process's so far) after each phase of one run."""
    from decpriv import experiment
    from decpriv.api import compose_config

    def peak() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    found = {"baseline_mb": peak()}
    cfg = compose_config(_graph_overrides(topology, protocol, n))[0]
    begin = time.perf_counter()
    setup = experiment.build(cfg)
    found.update(build_s=time.perf_counter() - begin, build_mb=peak(), nodes=setup.network.n)
    begin = time.perf_counter()
    experiment.simulate(setup)
    found.update(simulate_s=time.perf_counter() - begin, simulate_mb=peak())
    begin = time.perf_counter()
    gap = setup.network.spectral_gap
    found.update(gap_s=time.perf_counter() - begin, gap_mb=peak(), gap=gap.value, gap_method=gap.method)
    found["seconds"] = found["build_s"] + found["simulate_s"] + found["gap_s"]
    return found


def graph_families() -> None:
    print(
        f"graph families: {GRAPH_ROUNDS} rounds, no attack, one fresh process a point, {LIMIT_S:.0f} s each"
    )
    print(
        f"{'graph':>16} {'protocol':>8} {'n':>7} {'seconds':>8} {'build_s':>8} {'sim_s':>7} {'gap_s':>6}"
        f" {'build_MB':>8} {'sim_MB':>7} {'gap_MB':>7} gap (method)"
    )
    for protocol in ("gossip", "dsgd"):
        for topology in GRAPHS:
            for n in GRAPH_SIZES:
                try:
                    out = subprocess.run(
                        [sys.executable, "-m", "benchmarks.bench_scale", "graph", topology, protocol, str(n)],
                        capture_output=True,
                        text=True,
                        check=True,
                        timeout=LIMIT_S,
                    )
                except subprocess.TimeoutExpired:
                    print(f"{topology:>16} {protocol:>8} {n:7d} {'> ' + str(int(LIMIT_S)):>8}", flush=True)
                    break
                r = json.loads(out.stdout.strip().splitlines()[-1])
                print(
                    f"{topology:>16} {protocol:>8} {r['nodes']:7d} {r['seconds']:8.1f} {r['build_s']:8.1f}"
                    f" {r['simulate_s']:7.1f} {r['gap_s']:6.2f} {r['build_mb']:8.0f} {r['simulate_mb']:7.0f}"
                    f" {r['gap_mb']:7.0f} {r['gap']:.3g} ({r['gap_method']})",
                    flush=True,
                )


def dsgd_point(n: int) -> dict:
    from decpriv import experiment
    from decpriv.api import compose_config
    from decpriv.metrics.training import Evaluator

    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def configured(rounds: int):
        overrides = [
            "data=gaussian_classes",
            f"data.size={math.ceil(4 * n / 0.75) + 1}",
            f"data.dim={DIM}",
            "data.num_classes=10",
            "partition.per_node=4",
            "topology=random_regular",
            f"topology.n={n}",
            "topology.d=4",
            "model=softmax",
            "protocol.batch_size=1",
            f"protocol.rounds={rounds}",
            f"protocol.eval_every={rounds}",
        ]
        return experiment.build(compose_config(overrides)[0])

    begin = time.perf_counter()
    setup = configured(ROUNDS)
    built = time.perf_counter()
    outcome = experiment.simulate(setup)[0]
    done = time.perf_counter()
    evaluate = Evaluator(setup.model, setup.dataset, setup.local, setup.device)
    evaluate(outcome.final)
    evaluation = time.perf_counter() - done
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the CLI-like run's, before the next
    # the round alone: 10x the rounds with the same two evaluations, less a second (warm, like it) run of
    # the short one, over the extra rounds
    start = time.perf_counter()
    experiment.simulate(setup)
    short = time.perf_counter() - start
    longer = configured(10 * ROUNDS)
    start = time.perf_counter()
    experiment.simulate(longer)
    extra = time.perf_counter() - start - short
    return {
        "seconds": done - begin,
        "build_s": built - begin,
        "eval_s": evaluation,
        "rounds_per_s": 9 * ROUNDS / max(extra, 1e-9),
        "baseline_mb": baseline,
        "peak_mb": peak,
        "p": setup.model.p,
        "test_accuracy": float(outcome.summary["test_accuracy"]),
    }


def knowledge_point(n: int) -> dict:
    import networkx as nx
    import scipy.sparse as sp

    from decpriv.attacks.knowledge.matrix import gossip_row_space, knowledge_blocks
    from decpriv.graphs.gossip_matrix import metropolis_hastings

    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    seed = n
    while not nx.is_connected(graph := nx.gnp_random_graph(n, 2 * np.log(n) / n, seed=seed)):
        seed += 1000
    W = sp.csr_array(metropolis_hastings(graph))
    attackers = np.arange(max(1, round(SHARE * n)))
    X = np.random.default_rng(0).normal(size=(n, DIM))
    begin = time.perf_counter()
    blocks = ((K_t, K_t @ X) for _, K_t in knowledge_blocks(W, attackers, STEPS))
    k = gossip_row_space(W, attackers, STEPS, blocks, None, 1e-6)
    seconds = time.perf_counter() - begin
    error = np.abs(k.estimate[k.reconstructible] - X[k.reconstructible]).max(initial=0.0)
    return {
        "seconds": seconds,
        "rows": k.rows,
        "rank": k.rank,
        "reconstructed": int(k.reconstructible.sum()),
        "decided_by": k.numerics["decided_by"],
        "certified_steps": k.numerics.get("certified_steps", "-"),
        "max_value_error": float(error),
        "baseline_mb": baseline,
    }


def one(kind: str, n: int) -> None:
    result = (dsgd_point if kind == "dsgd" else knowledge_point)(n)
    result.setdefault("peak_mb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(result))


def run_point(kind: str, n: int) -> dict:
    """The faster of ``REPEATS`` fresh processes (the shared CPU's load varies from one to the next)."""
    runs = []
    for _ in range(REPEATS):
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.bench_scale", "one", kind, str(n)],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return min(runs, key=lambda r: r["seconds"])


def growth(previous: tuple[int, float] | None, n: int, value: float) -> str:
    if previous is None:
        return "-"
    return f"{math.log(value / previous[1]) / math.log(n / previous[0]):.2f}"


def main() -> None:
    print("each point in a fresh process, the faster of 2; growth: exponent k of time ~ n^k (run_MB ~ n^k)")
    print("peak_MB: the process's peak resident memory; run_MB: peak minus the peak after the imports")
    print("D-SGD: rounds/s and round_k from 1000 against 100 rounds, both with two evaluations (eval_s: one)")
    print(f"D-SGD softmax, {ROUNDS} rounds, batch 1, 4 samples/node, random 4-regular graph")
    print(
        f"{'n':>6} {'seconds':>8} {'build_s':>8} {'eval_s':>7} {'rounds/s':>9} {'peak_MB':>8} {'run_MB':>7}"
        f" {'round_k':>7}"
        f" {'mem_k':>6} {'test_acc':>8}"
    )
    last_t = last_m = None
    for n in DSGD_SIZES:
        r = run_point("dsgd", n)
        print(
            f"{n:6d} {r['seconds']:8.1f} {r['build_s']:8.1f} {r['eval_s']:7.1f} {r['rounds_per_s']:9.1f}"
            f" {r['peak_mb']:8.0f} {r['peak_mb'] - r['baseline_mb']:7.0f}"
            f" {growth(last_t, n, 1 / r['rounds_per_s']):>7} {growth(last_m, n, r['peak_mb'] - r['baseline_mb']):>6}"
            f" {r['test_accuracy']:8.3f}",
            flush=True,
        )
        last_t, last_m = (n, 1 / r["rounds_per_s"]), (n, r["peak_mb"] - r["baseline_mb"])
    print(
        f"knowledge matrix, gossip: ER mean degree 2 ln n, {SHARE:.0%} attackers, T = {STEPS}, {DIM}-dim values"
    )
    print(
        f"{'n':>6} {'seconds':>8} {'peak_MB':>8} {'run_MB':>7} {'time_k':>7} {'mem_k':>6} {'rows':>6} {'rank':>5}"
        f" {'recon':>5} {'decided_by':>10} {'steps':>5} {'max_err':>8}"
    )
    last_t = last_m = None
    for n in KNOWLEDGE_SIZES:
        r = run_point("knowledge", n)
        print(
            f"{n:6d} {r['seconds']:8.1f} {r['peak_mb']:8.0f} {r['peak_mb'] - r['baseline_mb']:7.0f}"
            f" {growth(last_t, n, r['seconds']):>7}"
            f" {growth(last_m, n, r['peak_mb'] - r['baseline_mb']):>6} {r['rows']:6d} {r['rank']:5d} {r['reconstructed']:5d}"
            f" {r['decided_by']:>10} {r['certified_steps']!s:>5} {r['max_value_error']:8.1e}",
            flush=True,
        )
        last_t, last_m = (n, r["seconds"]), (n, r["peak_mb"] - r["baseline_mb"])
    graph_families()


if __name__ == "__main__":
    if sys.argv[1:2] == ["one"]:
        one(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1:2] == ["graph"]:
        print(json.dumps(graph_point(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    elif sys.argv[1:2] == ["graphs"]:
        graph_families()
    else:
        main()
