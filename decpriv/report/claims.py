"""The claim a preset reproduces, beside the numbers a run or sweep measured (``decpriv report``).

A preset (``decpriv/conf/experiment/*.yaml``) states the paper's claim as a top-level ``claim`` entry::

    claim:
      source: "El Mrini et al. 2024, Fig. 2"          # authors, year, figure or table
      statement: "the fraction of reconstructed nodes grows with n p"
      figure: {x: topology.n, y: fraction_reconstructed, hue: [adversary.count]}   # the paper's axes
      metrics: [fraction_reconstructed]               # optional: the headline of a run without a figure
      tune: {over: [protocol.lr, defense.clip], best: min}   # optional: the paper tuned these per cell

``x``, ``y`` and ``hue`` are summary.csv columns (``y`` a metric, ``x`` and ``hue`` usually config keys).
The report opens with a "Claim" section: the source, the statement, ``y`` aggregated by ``hue`` and ``x``
(mean, std over the seeds, count) and that figure drawn as ``report/plots/claim.png``. With ``tune``, each
(``hue``, ``x``) cell keeps only the combination of the ``over`` keys whose mean ``y`` over seeds is the
lowest (``best: min``, the default) or highest (``max``), as papers report a method at its tuned
hyperparameters; the table names the chosen values. A run without a
figure shows its headline metrics and the pictures it drew itself (graphs coloured by outcome, privacy vs
distance).
"""

import difflib
import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from omegaconf import OmegaConf

from decpriv.errors import bad_value
from decpriv.report.aggregate import load_sweep, mean_std_count
from decpriv.report.plots import graph_figure
from decpriv.report.run_folder import read_status, read_table
from decpriv.report.sweep_plots import is_numeric, plot
from decpriv.report.text import DETAIL, print_frame

CLAIM_PNG = "plots/claim.png"
ATTACKERS = "adversary.nodes"
KEYS = ("source", "statement", "figure", "metrics", "tune")
FIGURE_KEYS = ("x", "y", "hue")
TUNE_KEYS = ("over", "best")
MAX_HEADLINE = 8
NETWORK_FACTS = ("nodes", "edges", "spectral_gap", "graph_tries")  # the graph's, whatever the claim
OWN_PICTURES_SKIPPED = ("training",)  # loss/accuracy curves bear on no paper claim


@dataclass(frozen=True)
class Claim:
    source: str
    statement: str
    x: str | None = None
    y: str | None = None
    hue: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    tune: tuple[str, ...] = ()  # config keys tuned per (hue, x) cell
    best: str = "min"  # which mean y the tuning keeps

    @property
    def has_figure(self) -> bool:
        return self.y is not None


@dataclass
class ClaimSection:
    claim: Claim
    caption: str  # what the table holds
    table: pd.DataFrame  # the measured numbers that bear on the claim
    notes: list[str] = field(default_factory=list)
    figures: dict[str, Figure] = field(default_factory=dict)  # drawn here, keyed report-relative
    pictures: list[Path] = field(default_factory=list)  # pictures the run drew itself


def _strings(key: str, value: Any) -> tuple[str, ...]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise bad_value(key, value, "expected a column name or a list of them", f"e.g. {key}=[topology]")
    return tuple(values)


def parse_claim(node: Any) -> Claim | None:
    """A ``claim`` config entry as a :class:`Claim` (None when absent); a malformed one is refused."""
    if node is None:
        return None
    if not isinstance(node, dict):
        raise bad_value(
            "claim", node, "expected a mapping", "give {source: ..., statement: ..., figure: ...}"
        )
    unknown = [k for k in node if k not in KEYS]
    if unknown:
        raise bad_value(
            f"claim.{unknown[0]}", node[unknown[0]], "unknown claim key", f"use {', '.join(KEYS)}"
        )
    for key in ("source", "statement"):
        if not isinstance(node.get(key), str) or not node[key].strip():
            raise bad_value(
                f"claim.{key}", node.get(key), "a claim needs it as text", "quote the paper's words"
            )
    figure = node.get("figure") or {}
    if not isinstance(figure, dict):
        raise bad_value("claim.figure", figure, "expected a mapping", "give {x: <config key>, y: <metric>}")
    unknown = [k for k in figure if k not in FIGURE_KEYS]
    if unknown:
        raise bad_value(
            f"claim.figure.{unknown[0]}", figure[unknown[0]], "unknown figure key", "use x, y, hue"
        )
    if figure and not (isinstance(figure.get("x"), str) and isinstance(figure.get("y"), str)):
        missing = "x" if not isinstance(figure.get("x"), str) else "y"
        raise bad_value(
            f"claim.figure.{missing}", figure.get(missing), "a figure needs x and y", "name a column"
        )
    tune = node.get("tune") or {}
    if not isinstance(tune, dict) or any(k not in TUNE_KEYS for k in tune):
        raise bad_value(
            "claim.tune", tune, "expected {over: [keys], best: min|max}", "e.g. {over: [protocol.lr]}"
        )
    if tune and not figure:
        raise bad_value("claim.tune", tune, "tuning selects cells of a figure", "give claim.figure too")
    if tune.get("best", "min") not in ("min", "max"):
        raise bad_value(
            "claim.tune.best", tune["best"], "the tuned value is the lowest or highest", "use min or max"
        )
    return Claim(
        source=node["source"],
        statement=" ".join(node["statement"].split()),
        x=figure.get("x"),
        y=figure.get("y"),
        hue=_strings("claim.figure.hue", figure.get("hue") or []),
        metrics=_strings("claim.metrics", node.get("metrics") or []),
        tune=_strings("claim.tune.over", tune.get("over") or []),
        best=tune.get("best", "min"),
    )


def _config_claim(folder: Path) -> Any:
    file = folder / ".hydra" / "config.yaml"
    if not file.is_file():
        return None
    node = OmegaConf.load(file).get("claim")
    return OmegaConf.to_container(node, resolve=False) if OmegaConf.is_config(node) else node


def claim_of(target: Path) -> tuple[Claim | None, int]:
    """The claim of a run folder, or of a sweep's jobs, and how many distinct claims the jobs state."""
    folders = [target] if (target / "run.json").is_file() else sorted(target.glob("*/"))
    found: list[Any] = []
    for folder in folders:
        node = _config_claim(folder)
        if node is not None and node not in found:
            found.append(node)
    return (parse_claim(found[0]) if found else None), len(found)


def _check_column(key: str, name: str, table: pd.DataFrame, where: str, metrics: list[str]) -> None:
    if name in table.columns:
        return
    near = difflib.get_close_matches(name, list(table.columns), n=3)
    hint = f"did you mean {' or '.join(near)}?" if near else "metrics: " + ", ".join(metrics[:10])
    raise bad_value(key, name, f"is not a column of {where}", f"name a summary.csv column ({hint})")


def check_figure(claim: Claim, table: pd.DataFrame, where: str, metrics: list[str]) -> None:
    """Refuse, in one sentence, a figure whose columns the run or sweep does not have."""
    keys = [("figure.x", claim.x), ("figure.y", claim.y), *[("figure.hue", h) for h in claim.hue]]
    for key, name in keys + [("tune.over", t) for t in claim.tune]:
        _check_column(f"claim.{key}", str(name), table, where, metrics)
    if not is_numeric(table[claim.y].dropna()) or table[claim.y].isna().all():
        raise bad_value("claim.figure.y", claim.y, f"is not a numeric column of {where}", "name a metric")


def _cells(claim: Claim) -> list[str]:
    return [*[h for h in claim.hue if h != claim.x], claim.x]


def tuned(claim: Claim, done: pd.DataFrame) -> pd.DataFrame:
    """The jobs of each (hue, x) cell's best ``tune`` combination: the one whose mean ``y`` over its jobs
    (the seeds) is the lowest (``best: min``) or highest; every job when the claim tunes nothing. Ties keep
    the first combination in sorted order."""
    if not claim.tune or done.empty:
        return done
    combo = done[[*_cells(claim), *claim.tune]].astype(str).agg("|".join, axis=1)
    cell = done[_cells(claim)].astype(str).agg("|".join, axis=1)
    means = pd.to_numeric(done[claim.y], errors="coerce").groupby([cell, combo]).mean().dropna()
    pick = means.groupby(level=0).idxmin if claim.best == "min" else means.groupby(level=0).idxmax
    return done[combo.isin([c for _, c in pick()])]


def measured(claim: Claim, done: pd.DataFrame) -> pd.DataFrame:
    """``y`` by ``hue`` and ``x`` over the completed jobs (of the tuned combinations): mean, std (over seeds)
    and count, then the tuned keys' chosen values."""
    return _measured(claim, tuned(claim, done))


def _measured(claim: Claim, rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`measured` of the tuned combinations' jobs (``rows``: :func:`tuned`'s answer)."""
    data = rows.assign(**{claim.y: pd.to_numeric(rows[claim.y], errors="coerce")})
    table = mean_std_count(data, _cells(claim), claim.y)
    if not claim.tune:
        return table
    chosen = rows.drop_duplicates(_cells(claim))[[*_cells(claim), *claim.tune]]
    return table.merge(chosen, on=_cells(claim), how="left")


def _varying(table: pd.DataFrame, keys: tuple[str, ...]) -> list[str]:
    return [k for k in keys if table[k].astype(str).nunique() > 1]


def claim_figure(claim: Claim, done: pd.DataFrame) -> Figure:
    """The paper's axes: ``y`` against ``x``, one line per varying ``hue`` combination, std error bars."""
    figure = plot(done, claim.x, claim.y, _varying(done, claim.hue) or None)
    fixed = [f"{k}={done[k].iloc[0]}" for k in claim.hue if k not in _varying(done, claim.hue)]
    figure.axes[0].set_title(claim.source + (f" ({', '.join(fixed)})" if fixed else ""), fontsize=10)
    return figure


def _attacker(value: Any) -> int | None:
    """The node of a one-attacker ``adversary.nodes`` value (``[3]`` or ``"[3]"``), else None."""
    try:
        nodes = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return None
    ok = isinstance(nodes, list) and len(nodes) == 1 and isinstance(nodes[0], int)
    return nodes[0] if ok else None


def per_attacker(claim: Claim, done: pd.DataFrame) -> pd.Series | None:
    """Mean ``y`` per attacking node when each job has one attacker (``x`` = adversary.nodes) on one
    graph (every ``topology.*`` column constant): what El Mrini et al.'s Figs. 3 and 5 colour the graph by."""
    if claim.x != ATTACKERS or done.empty:
        return None
    nodes = done[claim.x].map(_attacker)
    topology = [c for c in done.columns if c == "topology" or c.startswith("topology.")]
    if nodes.isna().any() or any(done[c].astype(str).nunique() > 1 for c in topology):
        return None
    return pd.to_numeric(done[claim.y], errors="coerce").groupby(nodes.astype(int).to_numpy()).mean()


def outcome_graph(claim: Claim, values: pd.Series, job: Path) -> Figure:
    """The jobs' graph, rebuilt from the first job's topology config, each node coloured by its ``y`` as
    the attacker (nodes that never attacked are left blank)."""
    from hydra.utils import instantiate

    from decpriv.graphs.network import index_nodes

    graph, _ = index_nodes(instantiate(OmegaConf.load(job / ".hydra" / "config.yaml").topology))
    colours = [float(values.get(v, float("nan"))) for v in range(graph.number_of_nodes())]
    title = f"{claim.source}\n{claim.y} of each node as the single attacker ({len(values)} tried)"
    return graph_figure(graph, [], {}, title, values=colours, value_label=claim.y)


def headline(claim: Claim, metrics: list[str], training: set[str] = frozenset()) -> list[str]:
    """Metrics that bear on a claim without a figure: those it names, else the columns its statement names
    (words with an underscore: ``fraction_reconstructed``, not ``nodes``), else the run's headline metrics
    less the training curves (``training``: history.csv's columns) and the network's facts."""
    if claim.metrics:
        return list(claim.metrics)
    words = set(re.findall(r"[A-Za-z0-9.]*_[A-Za-z0-9_.]*", claim.statement))  # column-like, not "nodes"
    named = [m for m in metrics if m in words]
    if named:
        return named
    shown = [m for m in metrics if not DETAIL.search(m) and m not in training and m not in NETWORK_FACTS]
    return shown[:MAX_HEADLINE]


def _draw(claim: Claim, done: pd.DataFrame, target: Path) -> tuple[Figure | None, list[str]]:
    """The claim's figure: the graph coloured by outcome for a sweep over single attackers, else ``y``
    against ``x``; None (and why) when there is nothing to draw."""
    values = per_attacker(claim, done) if "job" in done else None
    if values is not None:
        try:
            return outcome_graph(claim, values, target / str(done["job"].iloc[0])), []
        except Exception as error:  # the graph cannot be rebuilt here (an edge list moved): draw the curve
            note = f"graph not redrawn ({type(error).__name__}: {error}); {claim.y} per attacker instead"
            return claim_figure(claim, done), [note]
    if done[claim.x].astype(str).nunique() > 1:
        return claim_figure(claim, done), []
    return None, [f"one value of {claim.x} here: the figure needs a sweep over it (decpriv run -m ...)"]


def _figure_section(
    claim: Claim, table: pd.DataFrame, where: str, metrics: list[str], target: Path
) -> ClaimSection:
    check_figure(claim, table, where, metrics)
    done = table[table["status"] == "completed"]
    caption = f"{claim.y}: mean, std over seeds, count of completed jobs"
    rows = tuned(claim, done)
    figure, notes = _draw(claim, rows, target)
    if claim.tune:
        tried = done[list(claim.tune)].astype(str).drop_duplicates()
        caption += f", at the {claim.best} over {', '.join(claim.tune)} of each cell ({len(tried)} tried)"
    section = ClaimSection(claim, caption, _measured(claim, rows), notes)
    if figure is not None:
        section.figures[CLAIM_PNG] = figure
    return section


def _headline_section(
    claim: Claim, table: pd.DataFrame, where: str, metrics: list[str], target: Path
) -> ClaimSection:
    history = next(
        (f / "history.csv" for f in (target, *sorted(target.glob("*/"))) if (f / "history.csv").is_file()),
        None,
    )
    training = set(pd.read_csv(history, nrows=0).columns) if history is not None else set()
    names = headline(claim, metrics, training)
    for name in names:
        _check_column("claim.metrics", name, table, where, metrics)
    done = table[table["status"] == "completed"]
    if len(table) == 1:
        return ClaimSection(
            claim,
            "headline metrics",
            pd.DataFrame({"metric": names, "value": [done[m].iloc[0] for m in names]}),
        )
    rows = [
        mean_std_count(
            done.assign(metric=name, _v=pd.to_numeric(done[name], errors="coerce")), ["metric"], "_v"
        )
        for name in names
    ]
    table = (
        pd.concat(rows, ignore_index=True)
        if rows
        else pd.DataFrame(columns=["metric", "mean", "std", "count"])
    )
    return ClaimSection(claim, "headline metrics over the completed jobs: mean, std, count", table)


def claim_section(target: Path) -> ClaimSection | None:
    """The report's claim section for a run or sweep folder (None when its config states no claim)."""
    target = Path(target)
    claim, distinct = claim_of(target)
    if claim is None:
        return None
    if (target / "run.json").is_file():
        table = read_table(target / "summary.csv")
        metrics = [m for m in read_status(target).get("metrics", []) if m in table.columns]
        where = f"{target / 'summary.csv'}"
    else:
        sweep = load_sweep(target)
        table, metrics, where = sweep.table, sweep.metrics, f"the summary rows of the sweep {target}"
    build = _figure_section if claim.has_figure else _headline_section
    section = build(claim, table, where, metrics, target)
    if distinct > 1:
        section.notes.append(f"the jobs state {distinct} different claims: the first is shown")
    if (target / "run.json").is_file():
        section.pictures = sorted(
            p for p in (target / "plots").glob("*.png") if p.stem not in OWN_PICTURES_SKIPPED
        )
    return section


def section_images(section: ClaimSection, report_dir: Path) -> list[tuple[str, Path]]:
    """(name, link relative to the report folder) of the section's pictures."""
    images = [(Path(r).stem, Path(r)) for r in section.figures]
    return images + [(p.stem, Path("..") / p.relative_to(report_dir.parent)) for p in section.pictures]


def claim_markdown(section: ClaimSection, images: list[tuple[str, Path]], table_markdown) -> str:
    claim = section.claim
    parts = ["## Claim", "", f"**{claim.source}**: {claim.statement}", ""]
    if claim.has_figure:
        hue = f", one line per {', '.join(claim.hue)}" if claim.hue else ""
        parts += [f"Figure: {claim.y} against {claim.x}{hue}.", ""]
    parts += [f"Measured ({section.caption}):", "", table_markdown(section.table), ""]
    parts += [f"- {note}" for note in section.notes] + ([""] if section.notes else [])
    parts += [f"![{name}]({link.as_posix()})\n" for name, link in images]
    return "\n".join(parts)


def claim_html(section: ClaimSection, images: list[tuple[str, Path]], table_html, figure_html) -> str:
    claim = section.claim
    body = ["<h2>Claim</h2>", f"<p><b>{html.escape(claim.source)}</b>: {html.escape(claim.statement)}</p>"]
    body.append(f"<p>Measured ({html.escape(section.caption)}):</p>{table_html(section.table)}")
    if section.notes:
        body.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in section.notes) + "</ul>")
    return "".join(body + [figure_html(name, link) for name, link in images])


def print_claim(section: ClaimSection, console, report_dir: Path) -> None:
    """The claim and the measured numbers on the terminal (``decpriv report``)."""
    claim = section.claim
    console.print(f"[bold]claim[/] ({claim.source}): {claim.statement}", highlight=False, soft_wrap=True)
    print_frame(section.table, f"measured: {section.caption}", console, more="report.md")
    for note in section.notes:
        console.print(f"note: {note}", highlight=False)
    for name in section.figures:
        console.print(f"claim figure: [bold]{report_dir / name}[/]", highlight=False)
