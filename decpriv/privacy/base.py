"""The accountant interface the pipeline calls after the attack."""

from abc import ABC, abstractmethod

from decpriv.built import Setup
from decpriv.report.findings import Findings


class Accountant(ABC):
    name = "accountant"

    def check(self, setup: Setup) -> None:
        """Refuse configurations the accountant cannot account (raise ConfigError)."""

    @abstractmethod
    def account(self, setup: Setup) -> Findings:
        """privacy.csv rows (per node / per pair) and, for summary.csv, the headline ``epsilon`` (the tightest
        sound value), ``delta``, ``epsilon_method`` and the neighbouring relation (decpriv/report/guarantee.py)."""
