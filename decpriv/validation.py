"""Config validation before any work: every plugin's keys are checked against the signature of the
callable its ``_target_`` names (unknown keys, wrong types), and top-level keys against their allowed
values. Each problem is one sentence naming the key, the value and the fix.
"""

import difflib
import inspect
import math
import re
import types
import typing
from functools import cache
from importlib import resources
from typing import Any

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf

from decpriv.errors import ConfigError, bad

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


def _accepts(annotation: Any, value: Any) -> bool:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(a, value) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if origin in (tuple, list) or annotation in (tuple, list):
        return isinstance(value, list | tuple | ListConfig)
    if origin is dict or annotation is dict:
        return isinstance(value, dict | DictConfig)
    return True


def _describe(annotation: Any) -> str:
    text = str(annotation).replace("typing.", "").replace("<class '", "").replace("'>", "")
    return text.replace("NoneType", "null")


def check_plugin(group: str, node: DictConfig) -> None:
    """Check one plugin's keys against its ``_target_``'s signature."""
    target = node.get("_target_")
    if target is None:
        raise ConfigError(
            f"{group}: the config has no _target_; every {group} yaml names the callable it builds."
        )
    try:
        obj = get_object(target)
    except Exception:
        raise bad(f"{group}._target_", target, "cannot be imported", "check the module path") from None
    params = inspect.signature(obj).parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    hints = typing.get_type_hints(obj.__init__ if inspect.isclass(obj) else obj)
    for key in node:
        if key.startswith("_"):
            continue
        if key not in params:
            if takes_kwargs:
                continue
            known = ", ".join(k for k in params if k not in INJECTED and k != "self")
            raise bad(
                f"{group}.{key}", node[key], f"{obj.__name__} has no such parameter", f"known keys: {known}"
            )
        value = OmegaConf.to_object(node[key]) if OmegaConf.is_config(node[key]) else node[key]
        annotation = hints.get(key, params[key].annotation)
        if not _accepts(annotation, value):
            raise bad(
                f"{group}.{key}", value, f"expected {_describe(annotation)}", "give a value of that type"
            )


@cache
def top_level_keys() -> frozenset[str]:
    """Keys config.yaml defines at the top (seed, device, name ...), plus the config groups."""
    base = OmegaConf.load(resources.files("decpriv") / "conf" / "config.yaml")
    keys = {k for k in base if k not in ("defaults", "hydra")}
    return frozenset(keys | set(PLUGIN_GROUPS) | {"claim"})  # claim: what a preset reproduces (report)


def _non_finite(node: Any, prefix: str) -> tuple[str, float] | None:
    """The first nan or inf number anywhere in the config (dotted key, value)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, float) and not math.isfinite(value):
            return name, value
        found = _non_finite(value, name)
        if found:
            return found
    return None


SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=,+-]*")


def validate(cfg: DictConfig) -> None:
    """Refuse a bad config in one sentence (ConfigError), before anything is built."""
    unknown = sorted(str(k) for k in cfg if k not in top_level_keys())
    if unknown:
        near = difflib.get_close_matches(unknown[0], sorted(top_level_keys()), n=1)
        hint = f"did you mean {near[0]}?" if near else "`decpriv run --cfg job` shows the keys"
        raise bad(unknown[0], cfg[unknown[0]], "no part of decpriv reads this key", f"remove it ({hint})")
    found = _non_finite(OmegaConf.to_container(cfg, resolve=True), "")
    if found:
        raise bad(found[0], found[1], "numbers in a config must be finite", "give a finite number")
    name = cfg.get("name")
    if name is not None and (not SAFE_NAME.fullmatch(str(name)) or ".." in str(name)):
        raise bad(
            "name",
            name,
            "the name becomes part of the run folder's name and may not contain '/', '..' or spaces",
            "use letters, digits, '-', '_' and '.'",
        )
    if not isinstance(cfg.get("seed"), int) or isinstance(cfg.get("seed"), bool):
        raise bad("seed", cfg.get("seed"), "the seed is an integer", "use e.g. seed=0")
    for flag in ("plots", "debug"):
        if not isinstance(cfg.get(flag), bool):
            raise bad(flag, cfg.get(flag), f"{flag} is true or false", f"use {flag}=true or {flag}=false")
    if cfg.get("device") not in DEVICES:
        raise bad("device", cfg.get("device"), "unknown device", f"use one of {', '.join(DEVICES)}")
    claim = cfg.get("claim")
    if claim is not None:  # read by `decpriv report`; its shape is checked now, its columns then
        from decpriv.report.claims import parse_claim

        parse_claim(OmegaConf.to_container(claim) if OmegaConf.is_config(claim) else claim)
    for group in PLUGIN_GROUPS:
        node = cfg.get(group)
        if node is not None:
            check_plugin(group, node)
