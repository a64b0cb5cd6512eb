"""Config validation before any work: every plugin's keys are checked against the signature of the
callable its ``_target_`` names (unknown keys, wrong types, and the ranges and choices each key declares:
:mod:`decpriv.config.types`), and top-level keys against their allowed values. Each problem is one
sentence naming the key, the value and the fix.
"""

import difflib
import importlib
import inspect
import math
import re
from functools import cache
from importlib import resources
from typing import Any

from omegaconf import DictConfig, OmegaConf

from decpriv.config.declarations import UNRECORDED, Declaration, known, remember
from decpriv.config.types import declared, refusal
from decpriv.errors import ConfigError, bad_value
from decpriv.seal import sandbox

PLUGIN_GROUPS = (
    "topology",
    "gossip_matrix",
    "data",
    "partition",
    "model",
    "protocol",
    "defense",
    "adversary",
    "attack",
    "accountant",
)
DEVICES = ("auto", "cpu", "cuda")
INJECTED = {
    "seeds",
    "labels",
    "n",
    "rng",
    "input_shape",
    "num_classes",
    "graph",
    "network",
}  # filled in by the pipeline


def locate(target: str) -> Any:
    """The object a dotted ``_target_`` names, imported as Hydra's ``get_object`` does (the longest module
    prefix, then attributes), without Hydra's logged lines: a plugin module that fails to import raises
    its own error (a SyntaxError names its file and line), not "is it installed?"."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            found = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name is not None and (name == error.name or name.startswith(f"{error.name}.")):
                continue  # this prefix is no module: a shorter one may be, with attributes after it
            raise
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(f"no module named {parts[0]!r}", name=parts[0])


def _unimportable(group: str, target: str, error: Exception) -> ConfigError:
    """One sentence for a ``_target_`` that does not import: the syntax error's file and line, the missing
    module, the attribute not there, or the error its module raised."""
    key = f"{group}._target_"
    if isinstance(error, SyntaxError):
        where = f"{error.filename}, line {error.lineno}"
        return bad_value(key, target, f"its module does not parse: {where}: {error.msg}", "fix that line")
    if isinstance(error, ModuleNotFoundError) and error.name != target.split(".")[0]:
        return bad_value(
            key, target, f"its module imports {error.name!r}, which is not installed", f"install {error.name}"
        )
    if isinstance(error, ModuleNotFoundError):
        return bad_value(
            key,
            target,
            f"cannot be imported: no module named {error.name!r}",
            "check the module path (a module of the working folder needs it on PYTHONPATH)",
        )
    if isinstance(error, AttributeError):
        return bad_value(key, target, f"cannot be found: {error}", "check the name after the module")
    return bad_value(
        key, target, f"its module raised {type(error).__name__} on import: {error}", "fix the module"
    )


def import_target(group: str, target: str) -> Any:
    try:
        return locate(target)
    except Exception as error:  # whatever importing a user's module raises: said in one sentence
        raise _unimportable(group, target, error) from None


def declaration(group: str, target: str) -> Declaration:
    """The keys ``target`` accepts, read from its signature (importing it) and remembered for the next
    command line (:mod:`decpriv.config.declarations`)."""
    obj = import_target(group, target)
    params = inspect.signature(obj).parameters
    hints = declared(obj.__init__ if inspect.isclass(obj) else obj)
    found = Declaration(
        obj.__name__,
        {
            k: hints.get(k, p.annotation)
            for k, p in params.items()
            if p.kind is not inspect.Parameter.VAR_KEYWORD
        },
        any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()),
    )
    remember({target: found})
    return found


def check_plugin(group: str, node: DictConfig, recorded_only: bool = False) -> None:
    """Check one plugin's keys against its ``_target_``'s signature (``recorded_only``: only when an
    earlier check recorded it, so that nothing is imported)."""
    target = node.get("_target_")
    given = next((key for key in node if not str(key).startswith("_")), None)
    if target is None and given is not None:  # +defense.f=1 beside no defense: a node of one key, no plugin
        raise bad_value(
            f"{group}.{given}",
            node[given],
            f"no {group} is chosen, so nothing reads it",
            f"choose one that reads it first ({group}=NAME; `decpriv list {group}` shows their keys)",
        )
    if target is None:
        raise ConfigError(
            f"{group}: the config has no _target_; every {group} yaml names the callable it builds."
        )
    found = known(target) if recorded_only else declaration(group, target)
    if found is None:
        return
    for key in node:
        if key.startswith("_"):
            continue
        if key not in found.params:
            if found.takes_kwargs:
                continue
            known_keys = ", ".join(k for k in found.params if k not in INJECTED and k != "self")
            if not known_keys:  # defense=none after a preset that set a key of its own defense
                raise bad_value(
                    f"{group}.{key}",
                    node[key],
                    f"the {group} chosen takes no keys, and this one was set by a preset or the command "
                    "line for another",
                    f"drop {group}.{key}, or choose a {group} that reads it (decpriv list {group})",
                )
            near = difflib.get_close_matches(str(key), known_keys.split(", "), n=1)
            raise bad_value(
                f"{group}.{key}",
                node[key],
                f"{found.name} has no such parameter",
                f"did you mean {group}.{near[0]}? (known keys: {known_keys})"
                if near
                else f"known keys: {known_keys}",
            )
        if found.params[key] == UNRECORDED:
            continue
        value = OmegaConf.to_object(node[key]) if OmegaConf.is_config(node[key]) else node[key]
        error = refusal(f"{group}.{key}", found.params[key], value)
        if error is not None:
            error.plugin = group  # a default attack's refusal gets its hint (experiment.build_explained)
            raise error


@cache
def top_level_keys() -> frozenset[str]:
    """Keys config.yaml defines at the top (seed, device, name ...), plus the config groups."""
    base = OmegaConf.load(resources.files("decpriv") / "conf" / "config.yaml")
    keys = {k for k in base if k not in ("defaults", "hydra")}
    return frozenset(keys | set(PLUGIN_GROUPS) | {"claim"})  # claim: what a preset reproduces (report)


FLOAT32_MAX = 3.4028234663852886e38  # models and messages compute in 32-bit floats
INT64 = 2**63


def _unfit(node: Any, prefix: str, finite_only: bool = False) -> tuple[str, Any, str] | None:
    """The first number anywhere in the config that no computation can hold: nan, inf, a float beyond
    32-bit range, an integer beyond 64 bits (dotted key, value, why); ``finite_only``: nan and inf alone
    (checked before the declarations, whose ranges cannot order them; the others after, so that a key
    declared an integer refuses 1e100 for not being one)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, float) and not math.isfinite(value):
            return name, value, "numbers in a config must be finite"
        if not finite_only and isinstance(value, float) and abs(value) > FLOAT32_MAX:
            return name, value, "the value overflows the 32-bit floats the models compute in (max 3.4e38)"
        if (
            not finite_only
            and isinstance(value, int)
            and not isinstance(value, bool)
            and not -INT64 <= value < INT64
        ):
            return name, value, "the integer does not fit in 64 bits"
        found = _unfit(value, name, finite_only)
        if found:
            return found
    return None


def check_choices(cfg: DictConfig, choices: dict[str, Any]) -> None:
    """A group option the config does not build is refused: a preset that builds its own ``topology``
    (``experiment=elmrini_fig2``) ignores ``topology=ring``, which the run would record as if used."""
    root = resources.files("decpriv") / "conf"
    for group in PLUGIN_GROUPS:
        choice, node = choices.get(group), cfg.get(group)
        option = root / group / f"{choice}.yaml"
        if choice is None or not isinstance(node, DictConfig) or not option.is_file():
            continue
        chosen = OmegaConf.load(option).get("_target_")
        if chosen is not None and chosen != node.get("_target_"):
            preset = f"experiment={choices['experiment']}" if choices.get("experiment") else "the config"
            raise bad_value(
                group,
                choice,
                f"{preset} builds its own {group} ({node.get('_target_')}), so this choice would be "
                "recorded but not used",
                f"drop {group}={choice}, or set that {group}'s keys ({group}.KEY=VALUE)",
            )


def check_adversary_read(choices: dict[str, Any], overrides: list[str]) -> None:
    """An adversary key set on the command line while the run has no adversary (``adversary=none``, as
    ``attack=audit`` selects: it observes through the accountant) is refused: it would be recorded as if
    it shaped the run."""
    if choices.get("adversary") != "none":
        return
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        if sep and key.startswith("adversary."):
            by = f"attack={choices['attack']} runs" if choices.get("attack") else "the run has"
            raise bad_value(
                key,
                value,
                f"{by} no adversary (adversary=none: every node honest), so no adversary key is read",
                "drop it, or choose an attack that has an adversary",
            )


def check_unread(cfg: DictConfig, overrides: list[str], choices: dict[str, Any] | None = None) -> None:
    """A key set on the command line, or by the experiment preset chosen, that the plugin's chosen mode
    never reads is refused: a plugin declares them with an ``unread(node) -> {key: why}`` attribute on its
    ``_target_`` (a dotted key: another group's, which this plugin replaces)."""
    given = {o.split("=", 1)[0].lstrip("+~"): "" for o in overrides if "=" in o}
    given = {**preset_keys(choices or {}), **given}
    for group in PLUGIN_GROUPS:
        node = cfg.get(group)
        if not isinstance(node, DictConfig) or node.get("_target_") is None:
            continue
        unread = getattr(import_target(group, str(node._target_)), "unread", None)
        for key, why in (unread(node) if unread else {}).items():
            full = key if "." in key else f"{group}.{key}"  # a key of another group this one replaces
            where = given.get(full)
            if where is not None:
                fix = f"drop {full}" + (f" from {where}" if where else "")
                raise bad_value(full, OmegaConf.select(cfg, full), f"is not read {why}", fix)


def traced(error: ConfigError, choices: dict[str, Any], overrides: list[str]) -> ConfigError:
    """A refusal of a key the experiment preset set, not the command line, with the preset's file named:
    a user reading "defense.f=2: LocalDP has no such parameter" looks for it on their command line."""
    said, key = str(error), error.key
    typed = {o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o}
    where = preset_keys(choices).get(key) if key else None
    if where is None or key in typed or where in said:
        return error
    return ConfigError(f"{said[:-1]} ({where} sets {key}).", key)


def preset_keys(choices: dict[str, Any]) -> dict[str, str]:
    """The plugin keys the chosen experiment preset sets itself (``defense: {epsilon: 10}``), each with
    the preset's file: values its author typed, as a command line's are (a defaults entry sets none)."""
    from decpriv.config.user_conf import USER_CONF

    name = choices.get("experiment")
    if not name:
        return {}
    own = USER_CONF / "experiment" / f"{name}.yaml"
    shipped = resources.files("decpriv") / "conf" / "experiment" / f"{name}.yaml"
    file = own if own.is_file() else shipped
    if not file.is_file():
        return {}
    return {key: f"experiment={name} ({file})" for key in _keys_set_in(str(file), file.stat().st_mtime_ns)}


@cache
def _keys_set_in(file: str, mtime_ns: int) -> tuple[str, ...]:
    """The plugin keys a preset file sets, read once per version of the file (every job of a sweep asks)."""
    preset = OmegaConf.load(file)
    return tuple(
        f"{group}.{key}"
        for group in PLUGIN_GROUPS
        if isinstance(preset.get(group), DictConfig)
        for key in preset[group]
    )


def blocked_target(error: Exception, cfg: DictConfig, choices: dict[str, Any]) -> ConfigError | None:
    """Hydra's refusal to call a ``_target_`` it blocklists (``os.system``, ``subprocess.run`` ...: config
    data that would run commands), which it words over four lines naming no key, as one sentence naming
    the key and the file that set it; None for any other instantiation error."""
    found = re.match(r"Target '([^']+)'.*? is blocklisted", " ".join(str(error).split()))
    if found is None:
        return None
    target = found.group(1)
    group = next(
        (g for g in PLUGIN_GROUPS if isinstance(cfg.get(g), DictConfig) and cfg[g].get("_target_") == target),
        None,
    )
    key = f"{group}._target_" if group else "_target_"
    return bad_value(
        key,
        target,
        f"Hydra refuses to call it from a config (its blocklist: config data may not run commands), and "
        f"{_set_by(group, choices)} names it",
        f"name a plugin's class or function ({f'decpriv list {group}' if group else 'decpriv list'} shows "
        "decpriv's own)",
    )


def _set_by(group: str | None, choices: dict[str, Any]) -> str:
    """The user's yaml that chose ``group``'s target: its option's file, else the preset's, else the
    command line."""
    from decpriv.config.user_conf import USER_CONF

    files = [USER_CONF / group / f"{choices.get(group)}.yaml"] if group else []
    files.append(USER_CONF / "experiment" / f"{choices.get('experiment')}.yaml")
    return next((str(f) for f in files if f.is_file()), "the command line")


SAFE_NAME = re.compile(r"\w[\w.=,+-]*")  # letters of any script: name='héllo_wörld' is a folder name
MAX_NAME = 100  # a run folder's name (date, time and name) stays well under the file systems' 255 bytes


def _unsafe_in(name: str) -> str:
    """Why a run name cannot be part of a folder's name, naming what it holds."""
    why = "the name becomes part of the run folder's name"
    if ".." in name:
        return f"{why} and may not contain '..'"
    if not re.match(r"\w", name):
        return f"{why} and must start with a letter or digit, not {name[0]!r}"
    bad = next(c for c in name if not re.fullmatch(r"[\w.=,+-]", c))
    shown = {" ": "a space", "/": "'/'"}.get(bad, f"{bad!r}")
    return f"{why} and may not contain {shown}"


def validate(cfg: DictConfig, recorded_only: bool = False) -> None:
    """Refuse a bad config in one sentence (ConfigError), before anything is built (``recorded_only``:
    plugins' keys only where their declarations are recorded: nothing imported, torch not loaded)."""
    unknown = sorted(str(k) for k in cfg if k not in top_level_keys())
    if unknown:
        near = difflib.get_close_matches(unknown[0], sorted(top_level_keys()), n=1)
        hint = f"did you mean {near[0]}?" if near else "`decpriv run --cfg job` shows the keys"
        raise bad_value(
            unknown[0], cfg[unknown[0]], "no part of decpriv reads this key", f"remove it ({hint})"
        )
    values = OmegaConf.to_container(cfg, resolve=True)
    found = _unfit(values, "", finite_only=True)
    if found:
        raise bad_value(found[0], found[1], found[2], "give a smaller, finite number")
    name = cfg.get("name")
    if name == "":
        raise bad_value(
            "name", name, "an empty name adds nothing to the run folder's name", "give one or drop name="
        )
    if name is not None and len(str(name)) > MAX_NAME:
        raise bad_value(
            "name",
            f"{str(name)[:20]}...",
            f"the run folder's name takes at most {MAX_NAME} characters",
            "shorten it",
        )
    if name is not None and (not SAFE_NAME.fullmatch(str(name)) or ".." in str(name)):
        raise bad_value("name", name, _unsafe_in(str(name)), "use letters, digits, '-', '_' and '.'")
    if not isinstance(cfg.get("seed"), int) or isinstance(cfg.get("seed"), bool):
        raise bad_value("seed", cfg.get("seed"), "the seed is an integer", "use e.g. seed=0")
    for flag in ("plots", "debug"):
        if not isinstance(cfg.get(flag), bool):
            raise bad_value(
                flag, cfg.get(flag), f"{flag} is true or false", f"use {flag}=true or {flag}=false"
            )
    if cfg.get("device") not in DEVICES:
        raise bad_value("device", cfg.get("device"), "unknown device", f"use one of {', '.join(DEVICES)}")
    limits = cfg.get("sandbox")
    if not isinstance(limits, DictConfig):
        raise bad_value("sandbox", limits, "the sandbox's limits are keys", "use e.g. sandbox.memory_gib=16")
    sandbox.check(OmegaConf.to_container(limits))
    claim = cfg.get("claim")
    if claim is not None:  # read by `decpriv report`; its shape is checked now, its columns then
        from decpriv.report.claims import parse_claim

        parse_claim(OmegaConf.to_container(claim) if OmegaConf.is_config(claim) else claim)
    for group in PLUGIN_GROUPS:
        node = cfg.get(group)
        if node is not None:
            check_plugin(group, node, recorded_only)
    found = None if recorded_only else _unfit(values, "")  # after every declaration was read
    if found:
        raise bad_value(found[0], found[1], found[2], "give a smaller, finite number")
