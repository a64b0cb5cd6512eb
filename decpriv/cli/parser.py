"""The one parser of the ``decpriv`` command: a subcommand each (run, list, show, diff, report, plot, runs),
each with ``--help``. ``run`` takes Hydra's own flags and overrides, which it hands to Hydra as typed."""

import argparse
from pathlib import Path

EXAMPLES = """examples:
  decpriv run topology=torus protocol.rounds=50
  decpriv run -m topology=ring,complete seed=0,1 hydra/launcher=parallel
  decpriv run -m topology=ring,complete seed=0,1 hydra.sweep.dir=sw resume=true
  decpriv report sw
  decpriv plot sw x=protocol.lr y=test_accuracy hue=topology
  decpriv list runs   (the same as decpriv runs)"""

PLOT_USAGE = """decpriv plot SWEEP|RUN x=KEY y=METRIC [hue=KEY[,KEY]] [table=NAME]
                    [logx=true|false] [logy=true|false] [out=FILE]"""

PLOT_DESCRIPTION = """A metric against a key, mean and std over seeds. A sweep's attack headline
metric is drawn with its baseline (the 95% band of a shuffled null, or the
baseline's line); text x (topology) as categories, integer x (seed) with integer
ticks. table=NAME plots a run's NAME.csv (default history).

  x, y      columns of the sweep's summary (or of the table)
  hue       one line per value (several keys: one per combination)
  logx/logy log axes (logx defaults to true for positive x spanning two decades)
  out       the PNG to write (default SWEEP/plots/<y>_vs_<x>.png)

Example: decpriv plot runs/multirun/sw x=topology y=mia_received_auc hue=seed"""


def _add_hydra_flags(run: argparse.ArgumentParser) -> None:
    """Hydra's own command line (``hydra.main``'s flags), parsed here only to know what ``run`` does: Hydra
    reads the same arguments again and prints its help (``decpriv run --help``) itself."""
    run.add_argument(
        "overrides", nargs="*", help="key=value, group=option, ~group, +key=value; a=1,2 with -m"
    )
    run.add_argument("-h", "--help", action="store_true", help="the application's help (Hydra's)")
    run.add_argument("--hydra-help", action="store_true", help="Hydra's own help")
    run.add_argument("--version", action="store_true", help="Hydra's version")
    run.add_argument(
        "-c", "--cfg", choices=("job", "hydra", "all"), help="print the composed config, run nothing"
    )
    run.add_argument("--resolve", action="store_true", help="resolve interpolations in the printed config")
    run.add_argument("-p", "--package", help="the config package to print with --cfg")
    run.add_argument("-r", "--run", action="store_true", help="run one job (the default)")
    run.add_argument("-m", "--multirun", action="store_true", help="a sweep: one job per combination")
    run.add_argument("-sc", "--shell-completion", action="store_true", help="install or uninstall completion")
    run.add_argument("-cp", "--config-path", help="the primary config's folder, or pkg://module")
    run.add_argument("-cn", "--config-name", help="the primary config's name")
    run.add_argument("-cd", "--config-dir", help="a folder added to the config search path")
    run.add_argument("--experimental-rerun", help="rerun a job from its pickled config")
    run.add_argument("-i", "--info", const="all", nargs="?", choices=INFOS, help="Hydra's information")


# Hydra's flags that take a value (-i's is optional: one of its choices when given)
VALUED = {"-c", "--cfg", "-p", "--package", "-cp", "--config-path", "-cn", "--config-name", "-cd"}
VALUED |= {"--config-dir", "--experimental-rerun"}
INFOS = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")


def flags_first(args: list[str]) -> list[str]:
    """``run``'s arguments with Hydra's flags (and their values) before the overrides: ``decpriv run
    seed=0,1 -m`` as ``-m seed=0,1``, since both argparse parsers (ours, Hydra's) take the overrides as
    one run of words, and overrides decpriv adds after them would follow a flag."""
    flags, overrides, rest = [], [], list(args)
    while rest:
        word = rest.pop(0)
        if not word.startswith("-"):  # an override (key=value, ~group, +key=value) never starts with -
            overrides.append(word)
            continue
        flags.append(word)
        takes = word in VALUED or (word in ("-i", "--info") and rest and rest[0] in INFOS)
        if takes and rest:
            flags.append(rest.pop(0))
    return flags + overrides


def _add_reading_commands(commands: argparse._SubParsersAction) -> None:
    listing = commands.add_parser(
        "list",
        help="config groups and their options; list GROUP: each described, with its keys (list runs: past runs)",
    )
    listing.add_argument("groups", nargs="*", metavar="GROUP", help="the groups to list (default: all)")
    listing.add_argument(
        "--format", choices=("table", "markdown"), default="table", help="markdown: the README's group table"
    )
    show = commands.add_parser("show", help="a run's status, summary and tables")
    show.add_argument("run", type=Path, help="a run or sweep folder")
    show.add_argument("--rows", type=int, default=10, help="rows shown per table")
    diff = commands.add_parser(
        "diff",
        help="compare two runs, sweeps or CSV tables",
        description="exit 0 when equal within tolerance, 1 when not",
    )
    diff.add_argument("a", type=Path)
    diff.add_argument("b", type=Path)
    diff.add_argument(
        "--rtol",
        type=float,
        default=1e-9,
        help="relative tolerance for numbers (default 1e-9; at the defaults, two runs that recorded a "
        "repeatable_within bound, CKKS's, compare their results within it; a tolerance given is used as is)",
    )
    diff.add_argument("--atol", type=float, default=0.0, help="absolute tolerance for numbers (default 0)")
    diff.add_argument(
        "--format", choices=("table", "csv", "markdown"), default="table", help="csv/markdown for CI"
    )
    diff.add_argument("--brief", action="store_true", help="print only the one-line verdict")
    report = commands.add_parser(
        "report",
        help="aggregated table (mean, std, count over seeds), plots, report.md/.html",
        description="aggregate, plot and write a report",
    )
    report.add_argument("target", type=Path, help="a sweep folder (job folders inside) or a run folder")
    runs = commands.add_parser(
        "runs", help="index of the runs under ./runs", description="index of past runs, filtered by key=value"
    )
    runs.add_argument("filters", nargs="*", help="key=value: a summary column or run.json field")
    runs.add_argument("--root", type=Path, default=Path("runs"), help="folder to search (default ./runs)")
    runs.add_argument("--format", choices=("table", "csv", "markdown"), default="table")


class OneLine(argparse.ArgumentParser):
    """A subcommand's parser whose refusal is one sentence, not its usage dump: the fix is its --help."""

    def error(self, message: str):
        from decpriv.stderr import print_error

        print_error(f"{self.prog}: {message}; {self.prog} --help shows its arguments.")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """``decpriv COMMAND ...``; each subcommand's namespace names it in ``command``."""
    parser = argparse.ArgumentParser(
        prog="decpriv",
        description="Experiments on privacy in decentralized learning: run, sweep, read, compare.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLine)
    run = commands.add_parser(
        "run",
        add_help=False,
        help="run the pipeline (Hydra overrides; -m sweeps: a=1,2 b=x,y); decpriv run --help: its options",
    )
    _add_hydra_flags(run)
    _add_reading_commands(commands)
    plot = commands.add_parser(
        "plot",
        help="a metric against a key: plot SWEEP x=KEY y=METRIC [hue=KEY]",
        usage=PLOT_USAGE,
        description=PLOT_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    plot.add_argument("target", nargs="?", metavar="SWEEP|RUN", help="a sweep folder or a run folder")
    plot.add_argument(
        "arguments", nargs="*", metavar="KEY=VALUE", help="x=, y=, hue=, table=, logx=, logy=, out="
    )
    return parser
