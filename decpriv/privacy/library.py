"""The same compositions accounted by Google's dp-accounting (public API): its RDP accountant, to check
decpriv's own (:mod:`decpriv.privacy.sampled_gaussian`), and its privacy-loss-distribution (PLD) accountant,
the tighter value reported beside it (Koskela, Jalko, Honkela, AISTATS 2020; Doroshenko et al., PETS 2022).

dp-accounting's PLD covers the Poisson-subsampled and the full Gaussian; it has no event for a fixed-size
batch drawn without replacement, so that sampler gets no PLD value (NaN), only the RDP cross-check.
"""

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager

import dp_accounting
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from decpriv.privacy.sampled_gaussian import ORDERS

NeighborRel = dp_accounting.NeighboringRelation


def step_event(sampler: str, q: float, sigma: float, size: int | None = None) -> dp_accounting.DpEvent:
    """One step as a dp-accounting event; ``size`` (the local set) for sampling without replacement."""
    gaussian = dp_accounting.GaussianDpEvent(sigma)
    if sampler == "gaussian" or q >= 1.0:
        return gaussian
    if sampler == "poisson":
        return dp_accounting.PoissonSampledDpEvent(q, gaussian)
    return dp_accounting.SampledWithoutReplacementDpEvent(size, round(q * size), gaussian)


def relation(sampler: str) -> NeighborRel:
    return NeighborRel.REPLACE_ONE if sampler == "without_replacement" else NeighborRel.ADD_OR_REMOVE_ONE


class _Fallbacks(logging.Filter):
    """dp-accounting's RDP accountant, at noise so large that its Renyi divergence rounds below zero,
    returns epsilon 0 and says so only in an absl warning: the warnings are kept here instead."""

    def __init__(self) -> None:
        super().__init__()
        self.said: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if "Negative Renyi divergence" in record.getMessage():
            self.said.append(record.getMessage())
            return False
        return True


@contextmanager
def _numerical_fallbacks() -> Iterator[_Fallbacks]:
    fallbacks, logger = _Fallbacks(), logging.getLogger("absl")
    logger.addFilter(fallbacks)
    try:
        yield fallbacks
    finally:
        logger.removeFilter(fallbacks)


def library_rdp_epsilon(
    sampler: str, q: float, sigma: float, steps: int, delta: float, size: int | None = None
):
    """dp-accounting's RDP epsilon at decpriv's integer orders (so that the two are comparable); NaN where
    its divergence went negative numerically and it would return its fallback, 0."""
    if sigma == 0:
        return math.inf
    accountant = RdpAccountant(orders=list(ORDERS), neighboring_relation=relation(sampler))
    accountant.compose(dp_accounting.SelfComposedDpEvent(step_event(sampler, q, sigma, size), steps))
    with _numerical_fallbacks() as fallbacks:
        epsilon = float(accountant.get_epsilon(delta))
    if fallbacks.said:  # its numerical fallback (0), not a bound: no value, so it is never a headline
        return math.nan
    if sampler == "without_replacement":  # as decpriv's own: the unsampled Gaussian bounds it too
        return min(epsilon, library_rdp_epsilon("gaussian", 1.0, sigma, steps, delta))
    return epsilon


PLD_INTERVAL = 1e-3  # the privacy loss's discretisation step
# the most points one step's discretised loss may take: its range, about 1/(2 sigma^2) + 10/sigma, over the
# interval; 10^6 (sigma about 0.03) took 12 s for 3 steps, and the time grows as 1/sigma^2 below (sigma
# 1e-4, a target epsilon of 1e9, did not end in 5 minutes)
PLD_MAX_POINTS = 1e6


def pld_epsilon(sampler: str, q: float, sigma: float, steps: int, delta: float) -> float:
    """dp-accounting's PLD epsilon (pessimistic discretisation: an upper estimate); NaN where not covered,
    and where its discretised loss would be too large to compute (noise multiplier below about 0.03,
    epsilons in the thousands: the RDP values stand alone there)."""
    if sigma == 0:
        return math.inf
    if sampler == "without_replacement" and q < 1.0:
        return math.nan
    if (1 / (2 * sigma**2) + 10 / sigma) / PLD_INTERVAL > PLD_MAX_POINTS:
        return math.nan
    accountant = PLDAccountant(value_discretization_interval=PLD_INTERVAL)
    accountant.compose(step_event(sampler, q, sigma), steps)
    return float(accountant.get_epsilon(delta))
