"""What the attack, evaluate and account steps hand to the writer."""

from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from matplotlib.figure import Figure


@dataclass(eq=False)
class Report:
    """Tables (written as ``<name>.csv``), headline metrics (merged into summary.csv) and figures
    (written as PNG under the run folder, keyed by relative path, e.g. ``plots/graph.png``)."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Figure] = field(default_factory=dict)

    def merge(self, other: "Report") -> "Report":
        for name, table in other.tables.items():
            if name in self.tables:
                raise ValueError(f"two steps produced the table {name!r}")
            self.tables[name] = table
        self.summary.update(other.summary)
        self.figures.update(other.figures)
        return self
