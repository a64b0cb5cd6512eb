"""Shared fixtures and helpers: run the real CLI in a subprocess, or the pipeline through the Python API
(build a setup from overrides, run its protocol with a chosen recorder)."""

import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from decpriv import experiment
from decpriv.adversary.recorder import Recorder
from decpriv.api import compose_config
from decpriv.built import Setup
from decpriv.graphs.gossip_matrix import metropolis_hastings
from decpriv.protocols.base import Outcome, Simulation

# pytest -n N: each worker (and each `decpriv` it starts) gets its share of the cores for torch's and BLAS's
# threads. With the default (every core per process), 2 workers on 2 cores run 4+ spinning OpenMP threads
# on 2 cores, and small tensor ops wait on each other's barriers: tests/test_inversion_engine.py,
# test_pdmm_solver.py and test_pdmm_newton.py took 424 s at -n 2 on a loaded 2-core machine, 31 s with one
# thread each. Numbers asserted are the same: no test compares results across thread counts (but
# tests/test_same_tables.py, which sets them itself). A variable the caller set is kept.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _THREADS = str(max(1, (os.cpu_count() or 1) // _WORKERS))
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_name, _THREADS)
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

ROOT = Path(__file__).resolve().parents[1]
DECPRIV = Path(sys.executable).with_name("decpriv")

# Pasquini et al.'s D-PSGD: an MLP trained by D-SGD with uniform gossip weights
DPSGD = ("gossip_matrix=uniform", "model=mlp", "protocol=dsgd", "data=digits")  # the full digits
# their neighbour discovery by an eavesdropper on a 16-node torus: 16 victims x 2 rounds with a previous round
NEIGHBOUR_DISCOVERY = (
    "topology=torus",
    "topology.n=16",
    *DPSGD,
    "attack=neighbour_discovery",
    "adversary.eavesdropper=true",
    "protocol.rounds=3",
    "protocol.batch_size=8",
)
# the pdmm_leak attack on a quadratic (least squares), node 0 attacking and eavesdropping; callers add
# "protocol=pdmm" and their own protocol keys
PDMM_QUADRATIC = (
    "topology=random_geometric",
    "topology.n=8",
    "topology.radius=0.6",
    "data=least_squares",
    "data.dim=3",
    "partition=contiguous",
    "model=linear_regression",
    "adversary.nodes=[0]",
    "adversary.eavesdropper=true",
    "attack=pdmm_leak",
    "protocol.z_std=0",  # plain PDMM unless a test perturbs the subspace
)


def run_cli(
    *args: str, cwd: Path | None = None, check: bool = False, pythonpath: list[str] | None = None
) -> subprocess.CompletedProcess:
    """``decpriv ARGS`` in a subprocess (with ``pythonpath``: a user's plugins importable); returns the
    completed process (stdout/stderr as text)."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "COLUMNS": "200"}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    proc = subprocess.run(
        [str(DECPRIV), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"decpriv {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


QUICK = ["protocol.rounds=2", "topology.n=4", "~attack", "plots=false"]  # a run of about a second


def refused(capsys, *argv: str) -> str:
    """The one line ``decpriv ARGV`` refuses with (exit status 2), in the process."""
    from decpriv.cli import main

    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return " ".join(err.split())


def build(*overrides: str) -> Setup:
    """The setup ``decpriv run OVERRIDES`` would build, not yet run."""
    return experiment.build(compose_config(list(overrides))[0])


def mh(graph: nx.Graph) -> sp.csr_array:
    """The graph's Metropolis-Hastings gossip matrix as a sparse array."""
    return sp.csr_array(metropolis_hastings(graph))


def protocol_run(setup: Setup, recorder: Recorder) -> Outcome:
    """The setup's protocol run with ``recorder`` taking down what it observes: unlike experiment.simulate,
    which records only the adversary's view and only when an attack will read it."""
    sim = Simulation(
        setup.network,
        setup.dataset,
        setup.local,
        setup.model,
        setup.defense,
        setup.adversary,
        recorder,
        setup.seeds,
        setup.device,
    )
    return setup.protocol.run(sim)


@pytest.fixture
def cli(tmp_path):
    """Call ``cli("run", "topology=ring", ...)``; runs inside a temporary working directory."""

    def call(*args: str, check: bool = False) -> subprocess.CompletedProcess:
        return run_cli(*args, cwd=tmp_path, check=check)

    return call


def explicit_view_matrix(W: np.ndarray, A: np.ndarray, K: int, T: int, v: int) -> np.ndarray:
    """Observer v's view of Muffliato-SGD as an explicit matrix G (rows: what v and its neighbours send at
    every round t and gossip step k; columns: every node's private contribution of every round r <= t),
    built entry by entry from powers of W: the dense reference the accountants are checked against."""
    n = len(W)
    powers = [np.linalg.matrix_power(W, j) for j in range(K * T)]
    hood = [v, *np.flatnonzero(A[v])]
    G = np.zeros((T * K * len(hood), n * T))
    row = 0
    for t in range(T):
        for k in range(K):
            for w in hood:
                for r in range(t + 1):
                    G[row, r * n : (r + 1) * n] = powers[K * (t - r) + k][w]
                row += 1
    return G
