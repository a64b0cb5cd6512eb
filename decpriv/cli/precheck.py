"""``decpriv run``'s check of every job before any job starts (and before any folder exists): each job's
config composed and built, no training; the launcher's options that would fail only once it started."""

import gc
import json
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from decpriv.api import compose_or_refuse, explain_composition
from decpriv.errors import ConfigError, bad_value


@dataclass
class Plan:
    """What the precheck found: the job count and swept keys, the first job's ``hydra`` node (its folders,
    launcher and sweeper), whether every job was checked (not so for a preset's own sweep: Fig. 2 alone has
    1200 jobs, counted, composed by the sweeper, built by each job), whether it resumes, each checked
    job's config digest (when resuming) and a single run's build (``experiment.Prebuilt``)."""

    count: int
    swept: list[str]
    hydra: DictConfig
    every_job_checked: bool
    resuming: bool
    digests: list[str | None] = field(default_factory=list)
    prebuilt: Any = None

    def kept_jobs(self, sweep: Path) -> list[int]:
        """Jobs whose folder holds a completed run of the same config: a resumed sweep keeps them."""
        from decpriv.report.resume import already_completed

        if not self.every_job_checked:  # the digests are the command line's jobs, not the preset's grid
            return []
        return [
            num
            for num, digest in enumerate(self.digests)
            if digest and already_completed(sweep / str(num), digest)
        ]


def check_job(
    cfg: DictConfig, choices: dict, overrides: list[str], multirun: bool, keep: bool = False
) -> Any:
    """One job's whole build, no training. Returns the build kept for the run (``keep``), else the job's
    config digest when it resumes (its folder is then read to decide whether it must run), else None. A
    refused key that the experiment preset set names the preset."""
    from decpriv.config.validation import traced

    try:
        return _check_job(cfg, choices, overrides, multirun, keep)
    except ConfigError as error:
        raise traced(error, choices, overrides) from None


def _check_job(cfg: DictConfig, choices: dict, overrides: list[str], multirun: bool, keep: bool) -> Any:
    from decpriv.config.validation import check_adversary_read, check_choices, check_unread, validate

    validate(
        cfg, recorded_only=True
    )  # a bad value refused before torch loads (decpriv/config/declarations.py)
    check_choices(cfg, choices)
    _torch_free_checks(cfg)
    from decpriv import experiment
    from decpriv.report.resume import check_fixed_folder, take_resume

    digest = None
    if take_resume(cfg):
        check_fixed_folder(overrides, multirun)
        digest = experiment.config_digest(experiment.flatten_config(cfg, choices))
    check_unread(cfg, overrides, choices)
    check_adversary_read(choices, overrides)
    prebuilt = experiment.precheck(cfg, choices)
    return prebuilt if keep else digest


# Checks of several keys at once that a plugin keeps in a module without torch, run before the build
# (which imports torch: seconds): CKKS's parameters as SEAL would refuse them mid-run.
TORCH_FREE_CHECKS = {"decpriv.defenses.homomorphic.Homomorphic": "decpriv.defenses.ckks.check_config"}


def _torch_free_checks(cfg: DictConfig) -> None:
    from hydra.utils import get_method

    for group in ("defense",):
        node = cfg.get(group)
        check = TORCH_FREE_CHECKS.get(str(node.get("_target_"))) if node is not None else None
        if check is not None:
            get_method(check)(node)


def _check_in_worker(job: list[str], overrides: list[str]) -> tuple[str | None, str | None]:
    """A sweep job's refusal as one sentence (or None) and its digest: composed and built in a worker."""
    try:
        cfg, choices, _ = compose_or_refuse(job)
        return None, check_job(cfg, choices, overrides, True)
    except ConfigError as error:
        return str(error), None
    finally:
        _freeze_imports()
        from decpriv.cli.job import idle_until_next_job

        idle_until_next_job()  # the worker waits for its first job: Ctrl-C is the sweep process's


def _freeze_imports() -> None:
    """Move the objects alive now (torch's, pandas', matplotlib's modules, once imported) out of the
    garbage collector's reach: its full collections, and the last one at exit, stop walking them, so a
    joblib worker shuts down sooner (docs/speed.md)."""
    if not gc.get_freeze_count():
        gc.collect()  # the garbage of the build just checked is not kept alive
        gc.freeze()


def joblib_options(launcher: DictConfig) -> dict[str, Any]:
    """The joblib launcher's options as it hands them to ``joblib.Parallel``: the loky backend, and the
    counts a yaml gives as text (``batch_size: "2"``) as numbers; ``auto`` and ``2*n_jobs`` stay joblib's."""
    options = {k: v for k, v in OmegaConf.to_container(launcher, resolve=True).items() if k != "_target_"}
    options["backend"] = "loky"
    for key in ("pre_dispatch", "batch_size", "max_nbytes"):
        with suppress(ValueError, TypeError):
            options[key] = int(options[key]) if options.get(key) else options.get(key)
    return options


def _check_in_workers(jobs: list[list[str]], overrides: list[str], launcher: DictConfig) -> list[str | None]:
    """Check every job in worker processes started with the joblib launcher's own options: joblib keeps
    those loky workers and the launcher reuses them for the jobs, which start with torch imported; the
    parent neither imports torch nor builds the jobs one after another. Returns the jobs' digests."""
    from joblib import Parallel, delayed

    parallel = Parallel(**joblib_options(launcher), return_as="generator")
    checked = parallel(delayed(_check_in_worker)(job, overrides) for job in jobs)
    found = list(_with_progress(checked, len(jobs)))
    refusal = next((refusal for refusal, _ in found if refusal is not None), None)
    if refusal is not None:
        raise ConfigError(refusal)
    return [digest for _, digest in found]


def _jobs_of(overrides: list[str], multirun: bool) -> list[list[str]]:
    if not multirun:
        return [overrides]
    from decpriv.report.grid import expand

    try:
        jobs = expand(overrides)  # glob() and interval() refused first, in their own words
        refuse_repeated(overrides)
        return jobs
    except ConfigError:
        raise
    except Exception as error:  # Hydra's override grammar
        raise ConfigError(explain_composition(error, overrides)) from None


def refuse_repeated(overrides: list[str]) -> None:
    """A swept key that lists one value twice (``seed=0,0``) would run the same job twice, and the sweep's
    tables would count it twice (two seeds): refused in one sentence before any job starts."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    _refuse_twice_given(parsed)
    final = {o.get_key_element(): o for o in parsed}
    for key, override in final.items():
        if not override.is_sweep_override() or not override.is_discrete_sweep():
            continue
        seen: dict[Any, str] = {}
        for value, text in zip(override.sweep_iterator(), override.sweep_string_iterator(), strict=True):
            same = _comparable_value(value)
            if same in seen:
                also = f" (as {text})" if text != seen[same] else ""
                raise ConfigError(
                    f"{override.input_line}: {key} lists {seen[same]} twice{also}, so the sweep would run the "
                    "same job twice and count it twice; give each value once"
                )
            seen[same] = text


def _refuse_twice_given(parsed: list[Any]) -> None:
    """A key given twice in a sweep, once swept (``seed=0,1 seed=2,3``, ``seed=range(0,3) seed=1``):
    Hydra keeps the last one alone, so the sweep would silently run fewer jobs than the line reads."""
    first: dict[str, Any] = {}
    for override in parsed:
        key = override.get_key_element().lstrip("+~")
        earlier = first.setdefault(key, override)
        if earlier is not override and (earlier.is_sweep_override() or override.is_sweep_override()):
            raise ConfigError(
                f"{earlier.input_line} and {override.input_line} both set {key}, and Hydra keeps the last one "
                f"alone, so the sweep would run {override.input_line} only; give {key} once, with every "
                "value it should take"
            )


def _comparable_value(value: Any) -> Any:
    """A swept value as a set member: ``0`` and ``0.0`` equal (Python's), quoted and bare text equal."""
    value = getattr(value, "text", value)  # Hydra's QuotedString
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, list | dict) else value


def refuse_two_options(overrides: list[str]) -> None:
    """``defense=[homomorphic,ledger]``: Hydra merges the options' yamls into one node (one ``_target_``,
    both options' keys), which no plugin reads; a run has one option a group."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from decpriv.config.validation import PLUGIN_GROUPS

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # Hydra's grammar: refused in its own words when composed
        return
    for override in parsed:
        group = override.get_key_element().lstrip("+~")
        if group in PLUGIN_GROUPS and not override.is_sweep_override() and isinstance(override.value(), list):
            options = ",".join(map(str, override.value()))
            raise ConfigError(
                f"{override.input_line}: a run has one {group}, and Hydra would merge these options' settings "
                f"into one {group} that neither reads; choose one, or sweep them: -m {group}={options}"
            )


def start_up_done() -> None:
    """The command's imports are done (a job's config is built): what they made is kept out of every
    later collection, and collections resume (the console script paused them, decpriv.cli.entry)."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def precheck(overrides: list[str], multirun: bool) -> Plan:
    """Compose and check every job of the (possibly swept) command line before any job runs."""
    refuse_two_options(overrides)
    jobs = _jobs_of(overrides, multirun)
    cfg, choices, hydra = compose_or_refuse(jobs[0])
    plan = Plan(1, [], hydra, True, cfg.get("resume") is True)
    if cfg.get("attack") is not None:
        refuse_visible_output(hydra, multirun)
    if multirun:
        from decpriv.report.grid import sweep_plan, sweeper_params, with_params

        check_launcher(hydra.launcher)
        check_sweeper(hydra.sweeper)
        params = sweeper_params(hydra)  # a preset's own sweep is counted, its first job composed
        plan.count, plan.swept = sweep_plan(overrides, params)
        plan.every_job_checked = not params
        if params:  # a key the preset misspelt: one sentence now, not Hydra's six lines once it runs
            compose_or_refuse(_jobs_of(with_params(overrides, params), True)[0])
    if len(jobs) > 1 and str(hydra.launcher.get("_target_", "")).endswith(".JoblibLauncher"):
        plan.digests = _check_in_workers(jobs, overrides, hydra.launcher)
    elif not multirun:
        plan.prebuilt = check_job(cfg, choices, overrides, False, keep=True)
        if plan.resuming:  # the folder's run must be this config's (cli/output_folder.check_resumable)
            from decpriv import experiment

            plan.digests = [experiment.config_digest(experiment.flatten_config(cfg, choices))]
    else:
        plan.digests = [check_job(cfg, choices, overrides, True)]
        start_up_done()  # the other jobs' builds make garbage: collected as it comes
        rest = (check_job(*compose_or_refuse(job)[:2], overrides, True) for job in jobs[1:])
        plan.digests += list(_with_progress(rest, len(jobs), done=1))
    return plan


SHOWN_FROM = 50  # a sweep of this many jobs says that it is checking them (about 30 ms a job, 2 cores)


def _with_progress(checked: Iterator[Any], count: int, done: int = 0) -> Iterator[Any]:
    """The jobs' checks as they come, with a line saying so and, at a terminal, a bar (rich) on stderr:
    a sweep of 5000 jobs is checked for minutes before any starts."""
    if count < SHOWN_FROM:
        yield from checked
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from decpriv.stderr import print_stderr

    print_stderr(f"checking each of the {count} jobs before any starts (nothing runs until all pass)")
    console = Console(stderr=True)
    if not console.is_terminal:  # a log file gets the line alone, not a bar's last frame
        yield from checked
        return
    columns = (TextColumn("checking jobs"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("check", total=count, completed=done)
        for found in checked:
            bar.advance(task)
            yield found


def refuse_visible_output(hydra: DictConfig, multirun: bool) -> None:
    """The run (or sweep) folder must not lie inside what the attack's sandbox binds (a folder of modules
    on the import path): refused now, before any folder exists."""
    from decpriv.seal import sandbox, zygote

    if zygote.seal_kind() != "bubblewrap":
        return
    try:
        folder = str(hydra.sweep.dir if multirun else hydra.run.dir)
    except Exception:  # an interpolation only the launch resolves: checked when the run starts
        return
    sandbox.refuse_visible((str(Path(folder).resolve()),))


def check_launcher(launcher: DictConfig) -> None:
    """The launcher's own options that would fail only once the sweep started, with an exception's text."""
    target = str(launcher.get("_target_", ""))
    if target.endswith("submitit_launcher.LocalLauncher") and "partition" in launcher:
        raise bad_value(
            "hydra.launcher._target_",
            target,
            "the slurm launcher's options (partition, array_parallelism ...) are Slurm's, not the local "
            "executor's",
            "use hydra/launcher=submitit_local for submitit's local executor (no cluster needed)",
        )
    n_jobs = launcher.get("n_jobs")
    if target.endswith(".JoblibLauncher") and (
        not isinstance(n_jobs, int) or isinstance(n_jobs, bool) or n_jobs == 0
    ):
        raise bad_value(
            "hydra.launcher.n_jobs",
            n_jobs,
            "is the number of parallel jobs: -1 for one a core, or a positive count",
            "use hydra.launcher.n_jobs=-1 or e.g. 2",
        )


def check_sweeper(sweeper: DictConfig) -> None:
    """The sweeper's batch size, which the sweeper would refuse only once Hydra started (a traceback)."""
    size = sweeper.get("max_batch_size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size <= 0):
        raise bad_value(
            "hydra.sweeper.max_batch_size",
            size,
            "is how many jobs the launcher is handed at once",
            "give a positive count, or null for all",
        )
