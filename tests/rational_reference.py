"""Rational-arithmetic references for the network-DP accountant, in plain Python ``Fraction``s.

Independent of decpriv's exact path (FLINT, block Krylov cut at its first stagnant block, projector from the
reduced row echelon basis): here every row is kept, the row space is described by its KERNEL, and the
projector is I - N (N^T N)^-1 N^T. Slow (pure Python): for a handful of observers on small graphs.
"""

from fractions import Fraction

import networkx as nx


def metropolis_hastings_fractions(graph: nx.Graph) -> list[list[Fraction]]:
    """W[u][v] = 1 / (1 + max(d_u, d_v)) on edges, the diagonal completing each row to one."""
    n = graph.number_of_nodes()
    degree = dict(graph.degree())
    W = [[Fraction(0)] * n for _ in range(n)]
    for u, v in graph.edges():
        W[u][v] = W[v][u] = Fraction(1, 1 + max(degree[u], degree[v]))
    for u in range(n):
        W[u][u] = 1 - sum(W[u])
    return W


def row_times(row: list[Fraction], W: list[list[Fraction]]) -> list[Fraction]:
    n = len(W)
    return [sum((row[i] * W[i][j] for i in range(n) if row[i]), Fraction(0)) for j in range(n)]


def echelon(rows: list[list[Fraction]]) -> tuple[list[list[Fraction]], list[int]]:
    """Reduced row echelon form (non-zero rows) and pivot columns, by Gauss-Jordan over Q."""
    rows = [list(r) for r in rows]
    pivots, basis = [], []
    n = len(rows[0]) if rows else 0
    for col in range(n):
        pick = next((i for i, r in enumerate(rows) if r[col] != 0), None)
        if pick is None:
            continue
        pivot = rows.pop(pick)
        pivot = [x / pivot[col] for x in pivot]
        rows = [[a - r[col] * b for a, b in zip(r, pivot, strict=True)] if r[col] else r for r in rows]
        basis = [[a - r[col] * b for a, b in zip(r, pivot, strict=True)] if r[col] else r for r in basis]
        basis.append(pivot)
        pivots.append(col)
    return basis, pivots


def solve(M: list[list[Fraction]], b: list[Fraction]) -> list[Fraction]:
    """M x = b for a square invertible M, by Gauss-Jordan on [M | b]."""
    k = len(M)
    reduced, _ = echelon([[*row, rhs] for row, rhs in zip(M, b, strict=True)])
    return [row[k] for row in reduced]


def projector(rows: list[list[Fraction]]) -> list[list[Fraction]]:
    """Orthogonal projector onto the row space, as I - N (N^T N)^-1 N^T with N a kernel basis."""
    n = len(rows[0])
    basis, pivots = echelon(rows)
    free = [c for c in range(n) if c not in pivots]
    kernel = []  # one vector per free column: x_free = e, x_pivot = -R[:, free]
    for f in free:
        x = [Fraction(0)] * n
        x[f] = Fraction(1)
        for row, p in zip(basis, pivots, strict=True):
            x[p] = -row[f]
        kernel.append(x)
    eye = [[Fraction(int(i == j)) for j in range(n)] for i in range(n)]
    if not kernel:
        return eye
    gram = [[sum((a * b for a, b in zip(x, y, strict=True)), Fraction(0)) for y in kernel] for x in kernel]
    # column j of N (N^T N)^-1 N^T is N (N^T N)^-1 (N^T e_j)
    P = [row[:] for row in eye]
    for j in range(n):
        coeffs = solve(gram, [x[j] for x in kernel])
        for i in range(n):
            P[i][j] -= sum((c * x[i] for c, x in zip(coeffs, kernel, strict=True)), Fraction(0))
    return P


def gossip_leverage(graph: nx.Graph, steps: int, observer: int) -> list[Fraction]:
    """Muffliato gossip (noise once, ``steps`` gossip steps): Pi_v[u, u] for every u, Pi_v the projector onto
    the rows e_w^T W^k, w in N[v], k < steps (every row kept)."""
    W = metropolis_hastings_fractions(graph)
    n = len(W)
    rows = []
    for w in [observer, *graph.neighbors(observer)]:
        row = [Fraction(int(j == w)) for j in range(n)]
        for _ in range(steps):
            rows.append(row)
            row = row_times(row, W)
    P = projector(rows)
    return [P[u][u] for u in range(n)]


def sgd_view_quadratic(graph: nx.Graph, steps: int, rounds: int, observer: int, source: int):
    """Muffliato-SGD: Q_uv (T x T), the projector onto v's explicit whole-view matrix G (rows: messages of
    round t, step k, node w in N[v]; columns: contributions of round r <= t) restricted to u's T columns."""
    W = metropolis_hastings_fractions(graph)
    n = len(W)
    powers = [[[Fraction(int(i == j)) for j in range(n)] for i in range(n)]]
    for _ in range(steps * rounds):
        powers.append([row_times(row, W) for row in powers[-1]])
    hood = [observer, *graph.neighbors(observer)]
    G = []
    for t in range(rounds):
        for k in range(steps):
            for w in hood:
                row = [Fraction(0)] * (n * rounds)
                for r in range(t + 1):
                    row[r * n : (r + 1) * n] = powers[steps * (t - r) + k][w]
                G.append(row)
    P = projector(G)
    index = [r * n + source for r in range(rounds)]
    return [[P[a][b] for b in index] for a in index]


def inverse_diagonal(M: list[list[Fraction]]) -> list[Fraction]:
    """diag(M^-1) of a square invertible rational matrix, column by column."""
    n = len(M)
    return [solve(M, [Fraction(int(i == j)) for i in range(n)])[j] for j in range(n)]
