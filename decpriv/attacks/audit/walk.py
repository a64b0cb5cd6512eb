"""Private random-walk SGD (Cyffers, Bellet, Basu, ICML 2024) audited pair by pair.

The token starts at a uniform node and moves along W (the protocol's transition law, drawn for every trial
at once); its holder adds -lr (clipped contribution + the defense's own noise). Observer v holds the model
at its visits and keeps the last one it held. The neighbouring datasets differ at u by +-C, every other
contribution is zero; by linearity of the update the model v last held is -lr (s_u N_u + the noise so
far), N_u the times the token passed u before, so one run with common paths and noise serves every pair
(u, v), each source with its own balanced signs. The path is unseen by v, so the view is a mixture over
paths and no Gaussian shift: only the assumption-free (epsilon, delta) bound is stated.
"""

import numpy as np
import torch

from decpriv.attacks.audit.mechanisms import Canary
from decpriv.random import streams as rng
from decpriv.random.streams import Seeds


class WalkTrials:
    """The walk's ``rounds`` steps for every (source, observer) pair at once."""

    def __init__(self, audited, pairs: tuple[np.ndarray, np.ndarray]):
        self.defense, self.rounds = audited.defense, audited.protocol.rounds
        W = audited.network.W.toarray()
        self.cdf = torch.from_numpy(np.cumsum(W, axis=1) / W.sum(1, keepdims=True))
        self.sources, self.observers = (torch.from_numpy(p) for p in pairs)

    def last_held(self, trials: int, seeds: Seeds) -> tuple[torch.Tensor, torch.Tensor]:
        """(n, D, n) visits of each source before each observer last held the token, (n, D) the noise so far
        then (in units of -lr)."""
        n = len(self.cdf)
        walk, noise = seeds.torch("protocol.walk"), seeds.torch("defense.noise")
        holder = rng.integers(0, n, trials, walk)
        visits = torch.zeros(trials, n, dtype=torch.float64)
        noisy = torch.zeros(trials, dtype=torch.float64)
        seen_visits = torch.zeros(n, trials, n, dtype=torch.float64)
        seen_noise = torch.zeros(n, trials, dtype=torch.float64)
        columns = torch.arange(trials)
        zero = Canary(torch.zeros(1, trials, 1, dtype=torch.float64))
        for t in range(self.rounds):
            seen_visits[holder, columns] = visits
            seen_noise[holder, columns] = noisy
            visits[columns, holder] += 1.0
            noisy += self.defense.gradients(zero, None, None, None, None, t, noise)[0, :, 0]
            u = rng.uniform(trials, walk, dtype=torch.float64)
            holder = (self.cdf[holder] <= u[:, None]).sum(1).clamp(max=n - 1)
        return seen_visits, seen_noise


def walk_draw(trials: WalkTrials, seeds):
    """``draw(name, size, start)`` of :func:`heldout_counts`: per pair the model its observer last held
    (each chunk from its own streams, named after it: ``start`` is not used)."""

    def draw(name: str, size: int, start: int):
        n = len(trials.cdf)
        rng = seeds.numpy(f"attack.audit.signs.{name}")
        signs = torch.from_numpy(rng.permuted(np.tile(np.repeat([-1.0, 1.0], size // 2), (n, 1)), axis=1))
        visits, noise = trials.last_held(size, Seeds(seeds.seed(f"attack.audit.noise.{name}")))
        u, v = trials.sources, trials.observers
        t = signs[u] * trials.defense.clip * visits[v, :, u] + noise[v]
        return t, signs[u]

    return draw
