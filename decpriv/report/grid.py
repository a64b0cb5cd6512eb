"""A sweep's grid: the jobs of a command line and a sweeper's ``params``, expanded as decpriv's sweeper
expands them (Hydra's public override parser), the keys they sweep, and the jobs an earlier sweep ran."""

import fnmatch
import itertools
from pathlib import Path
from typing import Any

from hydra.core.override_parser.types import ValueType
from omegaconf import OmegaConf

from decpriv.errors import ConfigError


def comparable(overrides: list[str]) -> list[str]:
    """A job's overrides that make the experiment: not Hydra's own (folders, launcher) nor ``resume``."""
    kept = []
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if not (key == "resume" or key.startswith("hydra.") or key.startswith("hydra/")):
            kept.append(override)
    return kept


def expand(overrides: list[str]) -> list[list[str]]:
    """The jobs of a command line (``a=1,2 b=x,y`` -> four override lists), as decpriv's sweeper runs them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return job_overrides(OverridesParser.create().parse_overrides(overrides))


def per_job_keys(overrides: list[str]) -> list[str]:
    """The command line as Hydra should compose a sweep's base config: Hydra composes it without the sweeps,
    so after ``defense=ldp,cdp`` a fixed ``defense.sigma=2`` finds no defense there ("Key 'defense' is not
    in struct") although every job composes. A key under a swept key is handed over as a one-value sweep,
    ``defense.sigma=choice(2)``, which Hydra applies per job, as it applies the group."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType

    parsed = OverridesParser.create().parse_overrides(overrides)
    swept = {override.get_key_element() for override in parsed if override.is_sweep_override()}
    kept = []
    for text, override in zip(overrides, parsed, strict=True):
        key = override.get_key_element()
        under = any(key.startswith(f"{group}.") for group in swept)
        if under and override.type == OverrideType.CHANGE and not override.is_sweep_override():
            text = f"{key}=choice({override.get_value_element_as_str()})"
        kept.append(text)
    return kept


def job_overrides(parsed: list) -> list[list[str]]:
    """The jobs of overrides parsed by Hydra's ``OverridesParser``: the cartesian product of each key's
    values (``range(3)``, ``a,b``, ``[0],[1]``), the first key varying slowest, as Hydra's basic sweeper
    forms it. A key given twice keeps its first place and its last values (``seed=0`` after a preset's
    ``seed: range(10)`` fixes the seed)."""
    values: dict[str, list[str]] = {}
    for override in parsed:
        key = override.get_key_element()
        if override.is_sweep_override() and not override.is_discrete_sweep():
            raise ConfigError(
                f"{key}: an interval() is a search space for an optimising sweeper; "
                "decpriv sweeps lists of values (a=1,2,3 or a=range(1,4))"
            )
        if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
            raise _glob_refusal(override)
        if override.is_sweep_override():
            values[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
            if not values[key]:
                raise ConfigError(
                    f"{override.input_line}: this sweep has no value, so the sweep would have no job; "
                    "give at least one (e.g. seed=range(3) or seed=0,1)"
                )
        else:
            values[key] = [f"{key}={override.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*values.values())]


def _glob_refusal(override: Any) -> ConfigError:
    """``topology=glob(ri*)`` refused in one sentence naming the options it matches among decpriv's own."""
    from importlib import resources

    group, pattern = override.key_or_group, override.value()
    folder = resources.files("decpriv.conf").joinpath(group)
    options = (
        sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml")) if folder.is_dir() else []
    )
    matched = [o for o in options if any(fnmatch.fnmatch(o, i) for i in pattern.include)]
    matched = [o for o in matched if not any(fnmatch.fnmatch(o, e) for e in pattern.exclude)]
    fix = f"write {group}={','.join(matched)}" if matched else f"list them (decpriv list {group})"
    return ConfigError(f"{override.input_line}: decpriv sweeps listed options, not glob(); {fix}")


def sweep_plan(task: list[str], params: Any = None) -> tuple[int, list[str]]:
    """Number of jobs and swept keys of a multirun, as decpriv's sweeper expands it.

    A sweep is the sweeper's ``params`` (``hydra.sweeper.params`` of an experiment preset, such as
    ``adversary.nodes: "[0],[1],..."`` and ``seed: range(10)``) followed by the command line overrides
    (``task``); a command line override of the same key replaces that parameter (``seed=0`` fixes a swept
    seed). Counting the command line alone misses every parameter the preset sweeps.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(with_params(task, params))
    return len(job_overrides(parsed)), swept_keys(parsed)


def swept_keys(parsed: list) -> list[str]:
    """The keys a parsed sweep varies (two values or more: ``per_job_keys``' one-value sweeps vary nothing);
    the last override of a key wins, in its first place."""
    final = {o.get_key_element(): o for o in parsed}
    return [
        o.key_or_group.lstrip("+~")
        for o in final.values()
        if o.is_sweep_override() and len(list(o.sweep_string_iterator())) > 1
    ]


def with_params(task: list[str], params: Any) -> list[str]:
    """The sweeper's ``params`` as overrides, before the command line's (which replace them)."""
    return [f"{k}={v}" for k, v in (params or {}).items()] + list(task)


def sweeper_params(hydra: Any) -> Any:
    """``hydra.sweeper.params`` of a composed ``hydra`` node (or of multirun.yaml's): the sweep an
    experiment preset declares, ``{}`` without one."""
    sweeper = hydra.get("sweeper") or {}
    return sweeper.get("params") or {}


def swept_overrides(sweep: Path) -> list[str]:
    """Swept keys of the sweep in ``multirun.yaml``, the sweeper's params included (``[]`` without one)."""
    file = Path(sweep) / "multirun.yaml"
    if not file.is_file():
        return []
    hydra = OmegaConf.load(file).hydra
    return sweep_plan(list(hydra.overrides.task), sweeper_params(hydra))[1]


def earlier_jobs(sweep: Path) -> list[list[str]]:
    """The jobs of the sweep a folder's ``multirun.yaml`` describes (a sweep made before the ledger), each
    without Hydra's own settings; ``[]`` without one."""
    file = Path(sweep) / "multirun.yaml"
    if not file.is_file():
        return []
    hydra = OmegaConf.load(file).hydra
    return [comparable(job) for job in expand(with_params(list(hydra.overrides.task), sweeper_params(hydra)))]
