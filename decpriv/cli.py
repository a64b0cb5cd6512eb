"""The ``decpriv`` command: run | list | show | diff.

``decpriv run`` hands its arguments to Hydra (overrides, ``-m`` sweeps, ``--cfg``, ``--info``,
``hydra.run.dir=...``) after checking every job's config, so bad input fails in one sentence with exit
status 2 before any job starts.
"""

import argparse
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig
from rich.console import Console

from decpriv import experiment
from decpriv.errors import ConfigError

console = Console()
USAGE = """usage: decpriv COMMAND [...]

  run [OVERRIDES] [-m]     run the pipeline (Hydra overrides; -m sweeps: a=1,2 b=x,y)
  list                     config groups and their options
  show RUN                 a run's status, summary and tables
  diff A B [--rtol R]      compare two runs, sweeps or CSV tables (exit 1 when they differ)

Examples:  decpriv run topology=torus protocol.rounds=50
           decpriv run -m topology=ring,complete seed=0,1 hydra/launcher=parallel"""


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def _hydra_job(cfg: DictConfig) -> None:
    # Parallel launchers pickle this function by value: it must not close over module state (locks).
    runtime = HydraConfig.get()
    out = Path(runtime.runtime.output_dir)
    choices = {k: v for k, v in runtime.runtime.choices.items() if not k.startswith("hydra")}
    multirun = runtime.mode == RunMode.MULTIRUN
    try:
        experiment.run(cfg, out, choices, show_progress=sys.stderr.isatty() and not multirun)
    except Exception as error:
        if not multirun:
            experiment.error_exit(error, bool(cfg.get("debug")))
        Console(stderr=True).print(
            f"[red]job {runtime.job.num} failed:[/] {type(error).__name__}: {error}", highlight=False
        )
        return
    from decpriv.report.show import print_headline

    print_headline(out, Console())


def _compose_or_refuse(overrides: list[str]) -> DictConfig:
    from decpriv.api import compose_config

    try:
        return compose_config(overrides)[0]
    except Exception as error:  # Hydra's composition errors: unknown option, bad override syntax
        first = str(error).strip().splitlines()[0]
        raise ConfigError(f"{first} (`decpriv list` shows the groups and options)") from None


def _precheck(overrides: list[str], multirun: bool) -> None:
    """Compose and check every job of the (possibly swept) command line before any job runs."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from decpriv.experiment import precheck

    jobs = [overrides]
    if multirun:
        try:
            parsed = OverridesParser.create().parse_overrides(overrides)
        except Exception as error:
            raise ConfigError(str(error).strip().splitlines()[0]) from None
        jobs = BasicSweeper.split_arguments(parsed, None)[0]
    for job in jobs:
        precheck(_compose_or_refuse(job))


def _run(args: list[str]) -> int:
    from hydra._internal.utils import get_args_parser

    parsed = get_args_parser().parse_args(args)
    inspecting = parsed.cfg or parsed.info or parsed.help or parsed.hydra_help or parsed.shell_completion
    if not inspecting:
        try:
            _precheck(list(parsed.overrides), bool(parsed.multirun))
        except ConfigError as error:
            Console(stderr=True).print(f"[bold red]error:[/] {error}", highlight=False)
            return 2
    sys.argv = ["decpriv run", *args]
    from decpriv.report.sweep import SweepSummary

    SweepSummary.failed = 0
    _hydra_job()
    if parsed.multirun and SweepSummary.failed:
        Console(stderr=True).print(
            f"[red]{SweepSummary.failed} job(s) failed[/] (see the sweep's summary.csv)"
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "run":
        return _run(rest)
    if command == "list":
        from decpriv.report.show import print_groups

        print_groups(console)
        return 0
    if command == "show":
        parser = argparse.ArgumentParser(prog="decpriv show")
        parser.add_argument("run", type=Path)
        parser.add_argument("--rows", type=int, default=10, help="rows shown per table")
        ns = parser.parse_args(rest)
        from decpriv.report.show import show_run

        return show_run(ns.run, console, ns.rows)
    if command == "diff":
        parser = argparse.ArgumentParser(
            prog="decpriv diff", description="exit 0 when equal within tolerance, 1 when not"
        )
        parser.add_argument("a", type=Path)
        parser.add_argument("b", type=Path)
        parser.add_argument(
            "--rtol", type=float, default=1e-9, help="relative tolerance for numbers (default 1e-9)"
        )
        parser.add_argument(
            "--atol", type=float, default=0.0, help="absolute tolerance for numbers (default 0)"
        )
        ns = parser.parse_args(rest)
        from decpriv.report.show import print_diff

        return print_diff(ns.a, ns.b, ns.rtol, ns.atol, console)
    Console(stderr=True).print(
        f"[bold red]error:[/] unknown command {command!r}; use run, list, show or diff."
    )
    return 2


def entry() -> None:
    sys.exit(main())
