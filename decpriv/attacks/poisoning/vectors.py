"""What a Byzantine node sends, from the honest vectors it knows (model poisoning; ByzFL's attacks, Allouah
et al. 2025, on the same inputs: ``tests/test_poisoning_rules.py``). ``mean`` and ``std`` are (A, p): per
attacker, the coordinate-wise mean and (sample) standard deviation of the honest messages it reads.

- sign flipping: -scale * mean (Allen-Zhu et al., ICLR 2021; ByzFL's SignFlipping at scale 1);
- inner product manipulation (Xie, Koyejo, Gupta, UAI 2020, Sec. 3): -eps * mean, whose inner product with
  the honest mean is negative, so an aggregate near the mean of all messages points the wrong way;
- a little is enough (Baruch, Baruch, Goldberg, NeurIPS 2019, Alg. 3): mean + z * std, each coordinate
  moved by z standard deviations, inside the spread a median or Krum accepts; z defaults to the paper's
  z_max = Phi^{-1}((n - s) / n), s = floor(n / 2 + 1) - f, where it is positive (:func:`alie_z`);
- Gaussian: N(mu, sigma^2) per coordinate, whatever the honest vectors (ByzFL's Gaussian).
"""

from statistics import NormalDist

import torch

from decpriv.random import streams as rng


def alie_z(n: int, f: int) -> float | None:
    """Baruch et al. (2019, Alg. 3, lines 1-2): the attackers need s = floor(n/2 + 1) - f honest
    supporters among n, so they may move z_max = Phi^{-1}((n - s) / n) standard deviations. None where the
    formula gives no positive z: s <= 0 (the f attackers are a majority alone: (n - s)/n >= 1, no finite
    quantile) or (n - s)/n <= 1/2 (one attacker beside an even n: s = n/2, z_max = 0, the honest mean)."""
    s = n // 2 + 1 - f
    if s <= 0 or 2 * (n - s) <= n:
        return None
    return NormalDist().inv_cdf((n - s) / n)


def sign_flip(mean: torch.Tensor, std: torch.Tensor, scale: float) -> torch.Tensor:
    return -scale * mean


def ipm(mean: torch.Tensor, std: torch.Tensor, epsilon: float) -> torch.Tensor:
    return -epsilon * mean


def alie(mean: torch.Tensor, std: torch.Tensor, z: float) -> torch.Tensor:
    return mean + z * std


def gaussian(shape: tuple[int, ...], mu: float, sigma: float, generator: torch.Generator) -> torch.Tensor:
    return mu + sigma * rng.normal(shape, generator, dtype=torch.float64)


def masked_moments(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, p) mean and sample std (n - 1 in the denominator, as ByzFL) over the rows of ``values`` (S, p)
    that ``mask`` (A, S) selects; the std is 0 for a single row. Two passes: the mean, then the squared
    deviations from it summed over the selected (attacker, row) pairs (one-pass E[x^2] - mean^2 cancels
    when the honest models nearly agree)."""
    weight = mask.to(values.dtype)
    count = weight.sum(1, keepdim=True).clamp_min(1)
    mean = weight @ values / count
    reader, row = mask.nonzero(as_tuple=True)
    spread = torch.zeros_like(mean).index_add_(0, reader, (values[row] - mean[reader]).square())
    return mean, (spread / (count - 1).clamp_min(1)).sqrt()
