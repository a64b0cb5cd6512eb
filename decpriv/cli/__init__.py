"""The ``decpriv`` command: run | list | show | diff | report | plot | runs.

``decpriv run`` hands its arguments to Hydra (overrides, ``-m`` sweeps, ``--cfg``, ``--info``,
``hydra.run.dir=...``) after checking every job's config, so bad input fails in one sentence with exit
status 2 before any job starts.
"""

import gc
import os
import sys
import warnings

from rich.console import Console
from rich.markup import escape

from decpriv.cli.parser import build_parser, flags_first
from decpriv.errors import ConfigError
from decpriv.stderr import print_error, print_stderr

console = Console()
COMMANDS = ("run", "list", "show", "diff", "report", "plot", "runs")


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def _one_line_warnings() -> None:
    """Warnings print as ``warning: <message>`` on stderr, each distinct message once."""
    seen: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = str(message).strip()
        if text not in seen:
            seen.add(text)
            print_stderr(f"[yellow]warning:[/] {escape(text)}")

    warnings.showwarning = show


def _check_working_folder() -> None:
    """A working folder deleted under the shell: every relative path (the run folder, ./conf) is gone."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise ConfigError(
            "the working folder no longer exists (deleted after this shell entered it), and decpriv run "
            "writes its run folders and reads ./conf there; cd into an existing folder and run again."
        ) from None


def _dispatch(argv: list[str], shown: Console) -> int:
    """Parse ``argv`` and run its command (``shown``: the console its tables and figures go to)."""
    from decpriv.cli import plot, reading

    if argv[:1] == ["run"]:  # -m, --cfg ... anywhere on the line
        argv = ["run", *flags_first(argv[1:])]
    try:
        ns = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help (0), or argparse's own refusal (2), already printed
        return int(stop.code or 0)
    if ns.command == "run":
        from decpriv.seal import zygote

        _check_working_folder()  # before the zygote starts there
        zygote.warm()  # the sealed attack's interpreter imports torch beside ours (decpriv/seal/process.py)
        from decpriv.cli.run import run_command

        return run_command(ns, argv[1:], shown)
    handlers = {
        "list": reading.list_command,
        "show": reading.show_command,
        "diff": reading.diff_command,
        "report": reading.report_command,
        "runs": reading.runs_command,
        "plot": plot.plot_command,
    }
    return handlers[ns.command](ns, shown)


def _report_failure(error: Exception) -> int:
    """An error no command turned into a refusal: one line, exit status 1 (2 for decpriv's own)."""
    if isinstance(error, OSError) and error.errno is None:  # decpriv's own "no such run folder"
        print_error(str(error))
        return 2
    if isinstance(
        error, OSError
    ):  # a folder that cannot be written: read-only, a path under a file, full disk
        where = f"{error.filename}: " if error.filename else ""
        print_stderr(
            f"[bold red]error:[/] {where}{error.strerror or error}; check that the folder is writable and the disk not full."
        )
        return 1
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise error
    print_stderr(
        f"[bold red]error:[/] {type(error).__name__}: {escape(_first_line(error))} (HYDRA_FULL_ERROR=1 shows the traceback)"
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] == ["list", "runs"]:
        argv = ["runs", *argv[2:]]
    if not argv or argv[0] in ("-h", "--help", "help"):
        build_parser().print_help()
        return 0
    if argv[0] not in COMMANDS:
        print_error(f"unknown command {argv[0]!r}; use run, list, show, diff, report, plot or runs.")
        return 2
    shown = warnings.showwarning
    _one_line_warnings()
    try:
        return _dispatch(argv, console)
    except ConfigError as error:
        print_error(str(error))
        return 2
    except BrokenPipeError:
        raise  # output piped into `head`: entry() stops quietly
    except KeyboardInterrupt as stop:
        from decpriv.cli.run import stop_exit_status

        print_stderr(f"[bold red]interrupted[/] by {stop_exit_status(stop)[0]}.")
        return stop_exit_status(stop)[1]
    except Exception as error:
        return _report_failure(error)
    finally:
        warnings.showwarning = shown


def entry() -> None:
    # start-up's imports (torch, pandas, Hydra) build half a million objects, which automatic collections
    # walk again and again (0.45 s of CPU): none runs until decpriv run has checked its config
    # (decpriv.cli.precheck.start_up_done) or this process ends; the reading commands, which may walk a
    # large sweep, collect as usual
    if sys.argv[1:2] == ["run"]:
        gc.disable()
    from decpriv import scheduler

    scheduler.ENDING[0] = True  # this process exits after main (scheduler.stop_once_on_sigint)
    try:
        code = main()
        gc.freeze()  # exit without a last collection over every object of torch & co. (docs/speed.md)
        sys.exit(code)
    except BrokenPipeError:
        # Output piped into `head`: stop quietly, as the Python docs advise for this signal.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
