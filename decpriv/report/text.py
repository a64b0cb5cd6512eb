"""Numbers and tables as text, for the terminal (rich) and for Markdown pages: one formatting rule."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table

DETAIL = re.compile(
    r"(_min|_max|_median|_tpr_at_0\.1pct_fpr|_max_advantage)(_null_\w+|_p_value|_above_null)?$"
    r"|_null_mean$|_null_lo$|_p_value$|_above_null$|_fpr_null_hi$"
)  # kept in the tables, not in a sweep's columns (a statistic shows beside its null's 97.5th percentile)


def without_details(names: list[str]) -> list[str]:
    """The metrics worth a column of their own: not the statistics' details (:data:`DETAIL`), nor the
    attack's verdict, which prints on a line of its own."""
    return [name for name in names if not DETAIL.search(name) and name != "verdict"]


def fmt(value: object) -> str:
    """Six significant digits for floats, ``true``/``false`` for flags (as in an override), an empty
    cell for a missing value."""
    if value is None or value is pd.NA or (isinstance(value, float) and pd.isna(value)):
        return ""
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, float | np.floating):
        return f"{value:.6g}"
    return str(value)


GAP = 2  # characters between two columns of a table (rich's SIMPLE_HEAD box, no outer edge)
CELL = 48  # characters: a longer cell (a verdict in a table) ends in "…"; the header is never cut


def fitting_columns(frame: pd.DataFrame, width: int, rows: int) -> list[str]:
    """The leading columns of ``frame`` that fit side by side in ``width`` characters, each cell whole.

    A rich table squeezes every column to fit the terminal, so 80 columns of a sweep's summary become a
    grid of empty cells; dropping the trailing columns keeps the ones shown readable (the first is kept
    whatever its width)."""
    used, kept = 0, []
    for column in frame.columns:
        cells = [min(len(fmt(v)), CELL) for v in frame[column].head(rows)]
        need = max([len(str(column)), *cells]) + (GAP if kept else 0)
        if kept and used + need > width:
            break
        used += need
        kept.append(column)
    return kept


def print_frame(
    frame: pd.DataFrame, title: str, console: Console, rows: int = 50, more: str = "--format csv"
) -> None:
    """``frame``'s first ``rows`` rows and the leading columns that fit the terminal; the caption says how
    many columns were left out and where to find them (``more``)."""
    columns = fitting_columns(frame, console.width, rows)
    # the title and caption on lines of their own: as a table's title rich wraps them to its width
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for column in columns:
        table.add_column(
            str(column), no_wrap=True, overflow="ellipsis", max_width=max(CELL, len(str(column)))
        )
    for _, row in frame[columns].head(rows).iterrows():
        table.add_row(*[fmt(v) for v in row])
    hidden = len(frame.columns) - len(columns)
    notes = [_more(len(frame) - rows, "row")] if len(frame) > rows else []
    notes += [_more(hidden, "column")] if hidden else []
    console.print(title, highlight=False)
    console.print(table)
    if notes:
        console.print(f"{' and '.join(notes)}: {more}", highlight=False)


def _more(count: int, what: str) -> str:
    return f"{count} more {what}{'s' if count > 1 else ''}"


def markdown_table(table: pd.DataFrame) -> str:
    def cells(values) -> str:
        return "| " + " | ".join(fmt(v).replace("|", "\\|") for v in values) + " |"

    lines = [cells(table.columns), "|" + "---|" * len(table.columns)]
    lines += [cells(row) for row in table.itertuples(index=False)]
    return "\n".join(lines)


def shown_path(path: Path) -> Path:
    """``path`` as a user reads it: relative to the working directory when under it (as Hydra's default
    run and sweep folders are), else as given."""
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return Path(path)
