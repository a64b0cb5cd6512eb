"""Privacy accounting and DP-SGD speed against straightforward baselines, same process.

1. Muffliato pairwise network DP: decpriv's all-pairs matrix (sparse W @ dense M_k, A @ R_k) against the
   sum written pair by pair (the loop is timed on small n and checked equal).
   Whole view of Muffliato gossip with row spaces decided over Q against the float64 SVD it replaced (time,
   and the share of pairs the float path under-reports).
   Whole view of Muffliato-SGD (Kalman, batched over observers) against the explicit view matrix and a
   pseudo-inverse per observer, and its cost at n = 256 / 1024 where ``auto`` falls back to the reach bound.
2. SecLDP diag(Sigma^-1): one sparse LU solved against all e_i against one sparse solve per node.
3. DP-SGD clipped per-example gradients: nested vmap against autograd example by example.
Run: ``.venv/bin/python -m benchmarks privacy``.
"""

import time

import networkx as nx
import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import shortest_path
from scipy.sparse.linalg import spsolve

from decpriv.defenses.dp import DPSGD
from decpriv.graphs.gossip_matrix import metropolis_hastings
from decpriv.graphs.network import Network
from decpriv.models.architectures import softmax
from decpriv.privacy.linear_view import exact_cost, float_bases, reach_bound, whole_view_loss
from decpriv.privacy.network_dp import pairwise_loss
from decpriv.privacy.secldp_bounds import laplacian, precision_diagonal


def timed(fn, *args):
    begin = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - begin


def loop_pairwise(W: np.ndarray, A: np.ndarray, K: int) -> np.ndarray:
    n = len(W)
    powers = [np.linalg.matrix_power(W, k) for k in range(K)]
    F = np.zeros((n, n))
    for u in range(n):
        for v in range(n):
            if u != v:
                F[u, v] = min(
                    1.0, sum(M[w, u] ** 2 / np.sum(M[w] ** 2) for M in powers for w in np.flatnonzero(A[v]))
                )
    return F


def per_node_solves(cov: sp.csc_array) -> np.ndarray:
    eye = np.eye(cov.shape[0])
    return np.array([spsolve(cov, eye[:, i])[i] for i in range(cov.shape[0])])


def loop_clipped_gradients(model, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    rows = []
    for v in range(len(theta)):
        acc = torch.zeros(model.p)
        for i in range(x.shape[1]):
            th = theta[v].clone().requires_grad_(True)
            (g,) = torch.autograd.grad(model.loss(th, x[v, i : i + 1], y[v, i : i + 1]), th)
            acc += g * min(1.0, 1.0 / float(g.norm()))
        rows.append(acc / x.shape[1])
    return torch.stack(rows)


def bench_network_dp() -> None:
    print("Muffliato pairwise NDP (hypercube, K=20): vectorised vs pair loop")
    for k in (6, 8, 11):
        net = Network.build(nx.hypercube_graph(k), metropolis_hastings)
        F, fast = timed(pairwise_loss, net.W, net.adjacency, 20, 1.0)
        line = f"  n={net.n:5d}  decpriv {fast:7.3f} s"
        if net.n <= 64:
            G, slow = timed(loop_pairwise, net.W.toarray(), net.adjacency.toarray(), 20)
            line += f"  loop {slow:7.3f} s  speed-up x{slow / fast:7.1f}  max diff {np.abs(F - G).max():.1e}"
        print(line, flush=True)


def dense_whole_view(W: np.ndarray, A: np.ndarray, K: int, T: int) -> np.ndarray:
    """1^T Q_uv 1 observer by observer from the explicit view matrix G and its pseudo-inverse."""
    n = len(W)
    powers = [np.linalg.matrix_power(W, j) for j in range(K * T)]
    out = np.zeros((n, n))
    for v in range(n):
        hood = [v, *np.flatnonzero(A[v])]
        G = np.zeros((T * K * len(hood), n * T))
        for row, (t, k, w) in enumerate((t, k, w) for t in range(T) for k in range(K) for w in hood):
            for r in range(t + 1):
                G[row, r * n : (r + 1) * n] = powers[K * (t - r) + k][w]
        projector = G.T @ np.linalg.pinv(G @ G.T, rcond=1e-12, hermitian=True) @ G
        for u in range(n):
            out[u, v] = projector[u::n, u::n].sum()
    np.fill_diagonal(out, 0.0)
    return out


def bench_whole_view() -> None:
    print(
        "Muffliato-SGD whole view (random 4-regular, K=1): batched Kalman vs explicit view + pinv per observer"
    )
    for n, T in ((16, 10), (32, 20), (32, 100)):
        net = Network.build(nx.random_regular_graph(4, n, seed=0), metropolis_hastings)
        (F, exact, *_), fast = timed(whole_view_loss, net.W, net.adjacency, 1, T)
        line = f"  n={n:4d} T={T:3d}  decpriv {fast:7.3f} s ({exact.mean():.0%} exact)"
        if T <= 20:
            G, slow = timed(dense_whole_view, net.W.toarray(), net.adjacency.toarray(), 1, T)
            diff = np.abs(F - G)[exact].max()
            line += f"  dense {slow:7.3f} s  speed-up x{slow / fast:6.1f}  max diff (exact pairs) {diff:.1e}"
        print(line, flush=True)
    for n in (256, 1024):
        net = Network.build(nx.random_regular_graph(4, n, seed=0), metropolis_hastings)
        cost = exact_cost(n, 1, 100, 5)
        distance = shortest_path(net.adjacency, unweighted=True, directed=False)
        _, fast = timed(reach_bound, distance, 1, 100)
        print(f"  n={n:4d} T=100  exact would cost {cost:.1e} flops; reach bound {fast:.3f} s", flush=True)


def bench_certified_view() -> None:
    print("Muffliato gossip whole view (T = 1): row spaces over Q (decpriv) vs float64 SVD (the old path)")
    cases = (
        ("karate K=20", nx.karate_club_graph(), 20),
        ("path n=30 K=40", nx.path_graph(30), 40),
        ("hypercube 2^6 K=20", nx.hypercube_graph(6), 20),
        ("hypercube 2^8 K=20", nx.hypercube_graph(8), 20),
    )
    for name, graph, K in cases:
        net = Network.build(nx.Graph(nx.convert_node_labels_to_integers(graph).edges()), metropolis_hastings)
        view, exact_time = timed(whole_view_loss, net.W, net.adjacency, K, 1)
        bases, float_time = timed(float_bases, net.W, net.adjacency, K, np.arange(net.n))
        floating = (bases.U**2).sum(2).numpy().T  # the raw float leverage, before any certificate
        np.fill_diagonal(floating, 0.0)
        short = floating < view.loss - 1e-6
        print(
            f"  {name:20s} exact {exact_time:7.2f} s  float {float_time:7.2f} s  "
            f"float below the truth on {short.mean():6.1%} of pairs (worst {np.max(view.loss - floating):.3f} level)",
            flush=True,
        )


def bench_secldp() -> None:
    print("SecLDP diag((s^2 I + c^2 L)^-1) on a torus: one LU, all e_i vs one solve per node")
    for side in (16, 32):
        A = sp.csr_array(nx.to_scipy_sparse_array(nx.grid_2d_graph(side, side, periodic=True)), dtype=float)
        n = A.shape[0]
        fast_diag, fast = timed(precision_diagonal, A, 3.0, 5.0)
        cov = sp.csc_array(9.0 * sp.eye_array(n) + 25.0 * laplacian(A))

        slow_diag, slow = timed(per_node_solves, cov)
        print(
            f"  n={n:5d}  decpriv {fast:7.3f} s  loop {slow:7.3f} s  speed-up x{slow / fast:6.1f}  "
            f"max diff {np.abs(fast_diag - slow_diag).max():.1e}",
            flush=True,
        )


def bench_dpsgd() -> None:
    print("DP-SGD clipped per-example gradients (softmax on 64 features, batch 16): vmap vs loop")
    torch.manual_seed(0)
    model = softmax((64,), 10)
    for n in (16, 64):
        theta = torch.randn(n, model.p)
        x, y = torch.randn(n, 16, 64), torch.randint(0, 10, (n, 16))
        w = torch.ones(n, 16)
        defense = DPSGD(clip=1.0, sigma=0.0)
        defense.gradients(model, theta, x, y, w, 0, torch.Generator())  # warm-up: vmap's first trace
        fast_g, fast = timed(defense.gradients, model, theta, x, y, w, 0, torch.Generator())

        slow_g, slow = timed(loop_clipped_gradients, model, theta, x, y)
        print(
            f"  n={n:4d}  decpriv {fast:7.3f} s  loop {slow:7.3f} s  speed-up x{slow / fast:6.1f}  "
            f"max diff {float((fast_g - slow_g).abs().max()):.1e}",
            flush=True,
        )


def main() -> None:
    bench_network_dp()
    bench_certified_view()
    bench_whole_view()
    bench_secldp()
    bench_dpsgd()
