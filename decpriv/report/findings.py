"""What the attack, evaluate and account steps hand to the writer."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Drawing = Callable[[], "Figure | None"]


def keyed(table: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """``table`` with the columns that identify a row declared (``t_max, round, node``): the run folder
    records them in run.json's ``table_keys`` and ``decpriv diff`` pairs the rows of two runs on them.
    An undeclared table is paired on the usual key names it has (``round``, ``node``, ``victim`` ...)."""
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"declared key column(s) {missing} are not columns of the table")
    table.attrs["keys"] = list(columns)
    return table


@dataclass(eq=False)
class Findings:
    """Tables (written as ``<name>.csv``), headline metrics (merged into summary.csv) and figures
    (written as PNG under the run folder, keyed by relative path, e.g. ``plots/graph.png``).

    A figure is a drawing: a call with no arguments that returns the matplotlib Figure (None: nothing to
    draw), e.g. ``partial(image_grid, rows)``. The writer draws and saves them one at a time, and not at
    all under ``plots=false``: evaluating stays with numbers (drawing costs more than most scoring)."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Drawing] = field(default_factory=dict)

    def merge(self, other: "Findings") -> "Findings":
        for name, table in other.tables.items():
            if name in self.tables:
                raise ValueError(f"two steps produced the table {name!r}")
            self.tables[name] = table
        self.summary.update(other.summary)
        self.figures.update(other.figures)
        return self
