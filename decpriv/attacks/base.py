"""The attack interface the pipeline calls: check -> run(View) -> evaluate(findings, Truth)."""

from abc import ABC, abstractmethod
from typing import Any

from decpriv.adversary.behaviour import Behaviour
from decpriv.adversary.view import View
from decpriv.report.findings import Report
from decpriv.setup import Setup
from decpriv.truth import Truth


class Attack(ABC):
    name = "attack"
    active = False  # true for attacks that forge messages: behaviour() then returns the forgery
    needs_adversary = True  # refuse to run without corrupt nodes or an eavesdropper
    oracle = False  # true only for a paper's oracle shortcut: run() then also gets the ground truth

    def check(self, setup: Setup) -> None:
        """Refuse configurations the attack does not apply to (raise ConfigError), before any computation."""

    def behaviour(self, setup: Setup) -> Behaviour | None:
        """Active attacks return the message forgery the protocol applies; passive ones None."""
        return None

    @abstractmethod
    def run(self, view: View) -> Any:
        """The attack itself: sees the View only."""

    @abstractmethod
    def evaluate(self, findings: Any, truth: Truth, view: View) -> Report:
        """Score ``findings`` against the truth: attack.csv rows, summary metrics, pictures."""
