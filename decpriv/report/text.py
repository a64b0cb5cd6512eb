"""Numbers and tables as text, for the terminal (rich) and for Markdown pages: one formatting rule."""

import re

import pandas as pd
from rich.console import Console
from rich.table import Table

DETAIL = re.compile(
    r"(_min|_max|_median|_tpr_at_0\.1pct_fpr|_max_advantage)(_null_\w+|_p_value|_above_null)?$"
    r"|_null_mean$|_null_lo$|_p_value$|_above_null$|_fpr_null_hi$"
)  # kept for the table, not the headline (a statistic shows beside its null's 97.5th percentile)


def fmt(value: object) -> str:
    """Six significant digits for floats; an empty cell for a missing value."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def print_frame(frame: pd.DataFrame, title: str, console: Console, rows: int = 50) -> None:
    table = Table(title=title)
    for column in frame.columns:
        table.add_column(str(column))
    for _, row in frame.head(rows).iterrows():
        table.add_row(*[fmt(v) for v in row])
    console.print(table)


def markdown_table(table: pd.DataFrame) -> str:
    def cells(values) -> str:
        return "| " + " | ".join(fmt(v).replace("|", "\\|") for v in values) + " |"

    lines = [cells(table.columns), "|" + "---|" * len(table.columns)]
    lines += [cells(row) for row in table.itertuples(index=False)]
    return "\n".join(lines)
