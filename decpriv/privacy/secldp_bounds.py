"""SecLDP / SecRDP accounting of DECOR (Allouah et al., ICML 2024, Sec. 4, Theorem 1).

Per step, the messages of the honest set H carry noise of covariance
Sigma_H = sigma_cdp^2 I + sigma_cor^2 L_H (L_H: Laplacian of the induced subgraph G[H]); with user-level
sensitivity Delta = 2C the Renyi loss of node i at order alpha is 2 alpha C^2 [Sigma_H^-1]_ii, so the
per-step slope is c = 2 C^2 max_i [Sigma_H^-1]_ii. Over T steps eps_RDP(alpha) = T alpha c, converted with
eps = T c + 2 sqrt(T c log(1/delta)) (the optimal order alpha* = 1 + sqrt(log(1/delta) / (T c))).
"""

import itertools
import math
from fractions import Fraction
from typing import Literal

import numpy as np
import scipy.sparse as sp
from scipy.optimize import brentq
from scipy.sparse.linalg import splu

from decpriv.errors import bad_value

Threat = Literal["eavesdropper", "curious", "collusion"]
MAX_COALITIONS = 20000
EXACT_LIMIT = 400  # users: past this, an ill-conditioned covariance is refused rather than inverted over Q


def laplacian(adjacency: sp.sparray) -> sp.csc_array:
    """L = D - A of an undirected graph (degrees recounted on the given adjacency)."""
    A = sp.csr_array(adjacency, dtype=np.float64)
    return sp.csc_array(sp.diags_array(np.asarray(A.sum(axis=1)).ravel()) - A)


def algebraic_connectivity(adjacency: sp.sparray) -> float:
    """Second smallest eigenvalue of the Laplacian (Fiedler value a(G))."""
    L = laplacian(adjacency).toarray()
    return float(np.linalg.eigvalsh(L)[1]) if len(L) > 1 else 0.0


def precision_diagonal(adjacency: sp.sparray, sigma_cdp: float, sigma_cor: float) -> np.ndarray:
    """Upper bounds on diag((sigma_cdp^2 I + sigma_cor^2 L)^-1), within 1e-9 (relative) of the exact values.

    One sparse LU factorisation solved against every e_i, plus an a-posteriori bound on each column's
    error: Sigma >= sigma_cdp^2 I (L is PSD), so the exact column x_i and the computed one differ by
    Sigma^-1 r_i, |x_i - x^_i| <= ||r_i|| / sigma_cdp^2, with r_i = e_i - Sigma x^_i evaluated in float64 and
    widened by its own rounding (2 (m + 2) eps |Sigma| |x^_i|, m the most non-zeros in a row, which also
    covers the rounding of Sigma itself). Where that bound is looser than 1e-9 or the factorisation fails
    (sigma_cor^2 lambda_max(L) / sigma_cdp^2 past ~1e12), Sigma is inverted over Q instead."""
    n = adjacency.shape[0]
    cov = sp.csc_array(sigma_cdp**2 * sp.eye_array(n) + sigma_cor**2 * laplacian(adjacency))
    try:
        inverse = splu(cov).solve(np.eye(n))
    except RuntimeError:  # exactly singular in float64: sigma_cdp^2 vanished beside sigma_cor^2 L
        return exact_precision_diagonal(adjacency, sigma_cdp, sigma_cor)
    residual = np.eye(n) - cov @ inverse
    width = int(np.diff(sp.csr_array(cov).indptr).max())
    rounding = 2 * (width + 2) * np.finfo(np.float64).eps * (abs(cov) @ np.abs(inverse))
    error = (np.linalg.norm(residual, axis=0) + np.linalg.norm(rounding, axis=0)) / sigma_cdp**2
    diagonal = np.diag(inverse)
    if np.any(error > 1e-9 * np.abs(diagonal)):
        return exact_precision_diagonal(adjacency, sigma_cdp, sigma_cor)
    return diagonal + error


def exact_precision_diagonal(adjacency: sp.sparray, sigma_cdp: float, sigma_cor: float) -> np.ndarray:
    """diag(Sigma^-1) over Q (FLINT) from the floats' exact values, each rounded up to the next float64."""
    n = adjacency.shape[0]
    if n > EXACT_LIMIT:
        raise bad_value(
            "defense.sigma_cdp",
            sigma_cdp,
            f"with sigma_cor={sigma_cor:g} the covariance sigma_cdp^2 I + sigma_cor^2 L is too ill-conditioned "
            f"for float64 and {n} users are too many for exact arithmetic (at most {EXACT_LIMIT})",
            "raise defense.sigma_cdp or lower the correlated noise",
        )
    import flint

    cdp, cor = (flint.fmpq(*Fraction(x).as_integer_ratio()) for x in (sigma_cdp**2, sigma_cor**2))
    L = laplacian(adjacency).toarray().astype(np.int64).tolist()
    cov = flint.fmpq_mat([[cdp * int(i == j) + cor * L[i][j] for j in range(n)] for i in range(n)])
    inverse = cov.inv()
    return np.nextafter(np.array([float(inverse[i, i]) for i in range(n)]), np.inf)


def node_slopes(adjacency: sp.sparray, sigma_cdp: float, sigma_cor: float, clip: float) -> np.ndarray:
    """Per-node slope 2 C^2 [Sigma^-1]_ii (eps_step / alpha) against an observer of every message of G."""
    return 2.0 * clip**2 * precision_diagonal(adjacency, sigma_cdp, sigma_cor)


def coalitions(n: int, threat: str, collusion: int) -> list[tuple[int, ...]]:
    """The observer sets Q the threat model ranges over (removed from the graph before accounting)."""
    if threat == "eavesdropper":
        return [()]
    size = 1 if threat == "curious" else collusion
    return list(itertools.combinations(range(n), size))


def worst_slopes(
    adjacency: sp.sparray, sigma_cdp: float, sigma_cor: float, clip: float, threat: str, collusion: int = 1
) -> np.ndarray:
    """Per-node slope maximised over the threat model's coalitions Q (honest nodes H = V \\ Q; a node in Q
    is not at risk from that coalition). Curious users: every single j; collusion: every q-subset."""
    A = sp.csr_array(adjacency, dtype=np.float64)
    n = A.shape[0]
    worst = np.zeros(n)
    for Q in coalitions(n, threat, collusion):
        honest = np.setdiff1d(np.arange(n), np.asarray(Q, dtype=np.int64))
        slopes = node_slopes(A[honest][:, honest], sigma_cdp, sigma_cor, clip)
        worst[honest] = np.maximum(worst[honest], slopes)
    return worst


def theorem1_bound(n_honest: int, connectivity, sigma_cdp: float, sigma_cor: float, clip: float):
    """Closed-form slope bound (Theorem 1): (2 C^2 / n_H)[1/sigma_cdp^2 + (n_H - 1)/(sigma_cdp^2 + a sigma_cor^2)]."""
    return (2.0 * clip**2 / n_honest) * (
        1.0 / sigma_cdp**2 + (n_honest - 1) / (sigma_cdp**2 + connectivity * sigma_cor**2)
    )


def honest_connectivities(adjacency: sp.sparray, threat: str, collusion: int = 1) -> tuple[int, np.ndarray]:
    """(n_H, a(G[H]) for every coalition Q of the threat model): the inputs of Theorem 1 on the honest
    subgraph, which is what the curious and colluding observers leave (a = 0 when G[H] is disconnected)."""
    A = sp.csr_array(adjacency, dtype=np.float64)
    n = A.shape[0]
    sizes, values = set(), []
    for Q in coalitions(n, threat, collusion):
        honest = np.setdiff1d(np.arange(n), np.asarray(Q, dtype=np.int64))
        sizes.add(len(honest))
        values.append(max(0.0, algebraic_connectivity(A[honest][:, honest])))
    return sizes.pop(), np.asarray(values)


def threat_bound(
    adjacency: sp.sparray,
    sigma_cdp: float,
    sigma_cor: float,
    clip: float,
    threat: str,
    collusion: int = 1,
    connectivities: tuple[int, np.ndarray] | None = None,
) -> float:
    """Theorem 1 under the threat model: its bound on each honest subgraph G[H] (n_H nodes, connectivity
    a(G[H])), worst coalition. Every node's slope is at most its honest subgraph's bound, so the maximum
    bounds the worst slope of :func:`worst_slopes` (the eavesdropper form on G itself is smaller than the
    curious slope, e.g. ring n=16, sigma_cdp=3, sigma_cor=300)."""
    n_honest, a = connectivities or honest_connectivities(adjacency, threat, collusion)
    return float(np.max(theorem1_bound(n_honest, a, sigma_cdp, sigma_cor, clip)))


def epsilon_from_slope(slope: float, steps: int, delta: float) -> float:
    """(eps, delta)-DP of T steps of slope c at the optimal order: T c + 2 sqrt(T c log(1/delta))."""
    total = steps * slope
    return total + 2.0 * math.sqrt(total * math.log(1.0 / delta))


def optimal_order(slope: float, steps: int, delta: float) -> float:
    return 1.0 + math.sqrt(math.log(1.0 / delta) / (steps * slope))


def slope_for_epsilon(epsilon: float, steps: int, delta: float) -> float:
    """Inverse of :func:`epsilon_from_slope`: c* = (sqrt(log(1/delta) + eps) - sqrt(log(1/delta)))^2 / T."""
    log_inv = math.log(1.0 / delta)
    return (math.sqrt(log_inv + epsilon) - math.sqrt(log_inv)) ** 2 / steps


def calibrate_sigma_cor(
    adjacency: sp.sparray,
    sigma_cdp: float,
    clip: float,
    target_slope: float,
    threat: str,
    collusion: int,
    high: float = 1e6,
) -> float:
    """The sigma_cor whose worst slope equals ``target_slope`` at fixed sigma_cdp (eps is non-increasing in
    sigma_cor, DECOR Fig. 2), by Brent's method on log sigma_cor."""

    def excess(log_cor: float) -> float:
        cor = math.exp(log_cor)
        return math.log(worst_slopes(adjacency, sigma_cdp, cor, clip, threat, collusion).max() / target_slope)

    if excess(math.log(1e-9 * clip)) <= 0:
        return 0.0
    if excess(math.log(high * clip)) > 0:
        raise bad_value(
            "defense.sigma_cdp",
            round(sigma_cdp, 6),
            f"no sigma_cor up to {high:g} C reaches the target under threat={threat}: correlated noise only "
            "hides a node among the others, the private part must cover the rest",
            "raise defense.sigma_cdp (or leave it null to calibrate it), or raise the epsilon target",
        )
    return math.exp(brentq(excess, math.log(1e-9 * clip), math.log(high * clip), xtol=1e-12))


def check_threat(threat: str, collusion: int, n: int) -> None:
    if threat == "collusion":
        if not 1 <= collusion < n - 1:
            raise bad_value(
                "accountant.collusion",
                collusion,
                f"q colluders must leave at least two honest nodes among {n}",
                f"use 1 <= accountant.collusion <= {n - 2}",
            )
        if math.comb(n, collusion) > MAX_COALITIONS:
            raise bad_value(
                "accountant.collusion",
                collusion,
                f"the worst case over C({n},{collusion}) = {math.comb(n, collusion)} coalitions is out of reach",
                "use a smaller accountant.collusion",
            )
