"""Gradient and data reconstruction in decentralized gradient descent (El Mrini, Cyffers & Bellet, ICML 2024,
Sec. 4; D-GD: full batch, one gossip step per gradient step, one sample per node).

With targets T = V minus A, centred parameters phi = theta - theta^0 (theta^0 the public common initial model;
W 1 = 1 keeps the recursion unchanged) and near-constant steps g_v = -lr grad l(theta_v^t; x_v) (Eq. 6):

    phi_T^{t+1/2} = (sum_{i<=t} W_TT^i) g_T + noise + B_t,   B_0 = 0,   B_{t+1} = W_TT B_t + W_TA phi_A^{t+1/2}.

The attackers see phi_v^{t+1/2} for v in N(A) and know phi_A, so they subtract B_t (their own contribution) and
solve K g = Y_hat with rows K[(t, v)] = (sum_{i<=t} W_TT^i)[v, :] by least squares, or by generalised least
squares with Cov[(t,v),(t',v')] = sigma^2 sum_{s<=min(t,t')} [W_TT^{t+t'-2s}]_{vv'} (sigma^2 cancels).
Which targets are determined is decided by the row-space test of :mod:`.matrix` on K.

Inversion (Geiping et al. 2020, Sec. 3; Phong et al. 2017): for a first layer z = A x + b, the gradient of a
single sample's loss is dA = delta x^T, db = delta, so x = sum_c db_c dA_c / sum_c db_c^2.
"""

from dataclasses import dataclass

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp
import torch

from decpriv.attacks.knowledge.matrix import Knowledge, certifier, observed_nodes, row_space
from decpriv.models.functional import FunctionalModel


@dataclass(frozen=True, eq=False)
class GradientSystem:
    """K (rows (t, v) for t < T, v in N(A)), the centred observations with the attackers' part removed, and
    the GLS noise covariance up to sigma^2."""

    targets: np.ndarray
    seen: np.ndarray
    W_TT: sp.csr_array
    K: np.ndarray
    Y: np.ndarray
    covariance: np.ndarray


def gradient_system(
    W: sp.csr_array, attackers: np.ndarray, senders: np.ndarray, messages: np.ndarray, initial: np.ndarray
) -> GradientSystem:
    """Build the system from the recorded half-step parameters ``messages`` (T, |senders|, d)."""
    n = W.shape[0]
    targets = np.setdiff1d(np.arange(n), attackers)
    seen = observed_nodes(sp.csr_array(W != 0), attackers)
    rows = np.searchsorted(targets, seen)
    W = sp.csr_array(W)
    W_TT = W[targets][:, targets].toarray()
    W_TA = W[targets][:, attackers].toarray()
    order = np.argsort(senders)
    phi = messages - initial
    own = phi[:, order[np.searchsorted(senders[order], attackers)]]
    heard = phi[:, order[np.searchsorted(senders[order], seen)]]
    steps = phi.shape[0]
    power = np.eye(len(targets))[rows]
    total = np.zeros_like(power)
    B = np.zeros((len(targets), phi.shape[2]))
    K, Y, powers = [], [], []
    for t in range(2 * steps - 1):
        powers.append(power[:, rows])
        if t < steps:
            total = total + power
            K.append(total)
            Y.append(heard[t] - B[rows])
            B = W_TT @ B + W_TA @ own[t]
        power = power @ W_TT
    P = np.stack(powers)
    t = np.arange(steps)
    cov = np.zeros((steps, steps, len(seen), len(seen)))
    for s in range(steps):
        live = (s <= np.minimum.outer(t, t)).astype(float)
        k = np.clip(t[:, None] + t[None, :] - 2 * s, 0, 2 * steps - 2)
        cov += live[..., None, None] * P[k]
    covariance = cov.transpose(0, 2, 1, 3).reshape(steps * len(seen), steps * len(seen))
    return GradientSystem(targets, seen, sp.csr_array(W_TT), np.vstack(K), np.vstack(Y), covariance)


def solve_gradients(system: GradientSystem, solver: str, rcond: float | None, tol: float) -> Knowledge:
    """LS or GLS (whitened by the Cholesky factor of the covariance: same row space, so the same targets are
    determined) estimate of the targets' steps g_T, with the row-space decision per target (certified exactly
    when float64's margins are ambiguous)."""
    K, Y = system.K, system.Y
    # rows (sum_{i<=t} W_TT^i)[v, :] span what (W_TT^t)[v, :] span: the gossip certificate with no fixed rows
    rows = np.searchsorted(system.targets, system.seen)
    certify = certifier(system.W_TT, np.zeros(0, dtype=int), rows, K.shape[0] // len(rows))
    if solver == "gls":
        L = la.cholesky(system.covariance, lower=True)
        K = la.solve_triangular(L, K, lower=True)
        Y = la.solve_triangular(L, Y, lower=True)
    return row_space(iter([(K, Y)]), K.shape[1], rcond, tol, certify)


def first_layer(model: FunctionalModel) -> tuple[int, int, tuple[int, int]] | None:
    """Offsets of the first weight matrix (h, D) and of the bias (h,) right after it, or None."""
    offsets = np.cumsum([0, *model.numels])
    for i, shape in enumerate(model.shapes[:-1]):
        if len(shape) == 2 and model.shapes[i + 1] == (shape[0],):
            return int(offsets[i]), int(offsets[i + 1]), shape
        if len(shape) != 1:
            return None
    return None


def invert_linear(model: FunctionalModel, gradients: torch.Tensor) -> torch.Tensor:
    """(k, D) inputs from (k, p) single-sample gradients: x = sum_c db_c dA_c / sum_c db_c^2."""
    start, bias, (h, D) = first_layer(model)
    dA = gradients[:, start:bias].reshape(-1, h, D)
    db = gradients[:, bias : bias + h]
    return torch.einsum("kc,kcd->kd", db, dA) / (db**2).sum(1, keepdim=True).clamp_min(1e-300)
