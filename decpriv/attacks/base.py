"""The attack interface the pipeline calls: prepare(AttackContext) -> plan, run(View) -> findings,
evaluate(findings, Truth, View) -> Findings.

An attack sees an :class:`~decpriv.adversary.view.AttackContext` before the run (the network, its
adversary, its own nodes' data, the data's public facts, the protocol's declared hyperparameters, streams
named ``attack.*``) and the :class:`~decpriv.adversary.view.View` after it; what ``prepare`` decides is its
plan, handed back as ``view.plan`` (and to ``behaviour``), so ``run`` depends on nothing set on ``self``.
``prepare``, ``kept_links``, ``behaviour`` and ``run`` execute in the run's sealed process
(:mod:`decpriv.seal.process`): an attack object must pickle, and what these methods return must be plain data
(:mod:`decpriv.seal.plain`: numbers, strings, containers, numpy arrays, torch tensors, pandas frames, decpriv's
own result types) to come back; a plan that is not stays in the sealed process, out of ``evaluate``'s reach.
"""

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from decpriv.adversary.behaviour import Behaviour
from decpriv.adversary.view import AttackContext, View
from decpriv.report.findings import Findings
from decpriv.report.headline import Headline
from decpriv.seal.truth import Truth


class Attack(ABC):
    name = "attack"
    active = False  # true for attacks that forge messages: behaviour() then returns the forgery
    needs_adversary = True  # refuse to run without corrupt nodes or an eavesdropper
    # what the attack is read by, each beside its no-attack baseline (decpriv/report/headline.py): every
    # view of a run opens with these; a new attack declares its own
    headline: tuple[Headline, ...] = ()

    def prepare(self, context: AttackContext) -> Any:
        """Refuse configurations the attack does not apply to (raise ConfigError) before any computation,
        and return the plan ``run`` reads as ``view.plan`` (None when there is nothing to decide)."""
        return None

    def behaviour(self, context: AttackContext, plan: Any) -> Behaviour | None:
        """Active attacks return the message forgery the protocol applies; passive ones None."""
        return None

    def kept_links(self, context: AttackContext, plan: Any, observed: np.ndarray) -> np.ndarray:
        """Of the (L, 2) directed edges whose per-edge messages the adversary observes, those the recorder
        stores (all by default). An attack that reads some links only keeps those: it sees no less, and a
        long per-edge transcript (PDMM: rounds x 2E x p) fits in memory."""
        return observed

    @abstractmethod
    def run(self, view: View) -> Any:
        """The attack itself: sees the View only."""

    @abstractmethod
    def evaluate(self, findings: Any, truth: Truth, view: View) -> Findings:
        """Score ``findings`` against the truth: attack.csv rows, summary metrics, pictures."""
