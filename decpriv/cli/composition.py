"""Composing a job's config from its overrides, with Hydra's errors turned into decpriv's one sentence."""

import difflib
import re

from omegaconf import DictConfig, OmegaConf

from decpriv.errors import ConfigError


def did_you_mean(word: str, known: list[str]) -> str:
    near = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f"did you mean {near[0]}?" if near else ""


def _known_keys(key: str, overrides: list[str]) -> list[str]:
    """The keys beside ``key`` (``protocol.lrr``: those of ``protocol``) in the config composed without it."""
    from decpriv.api import compose_config

    parent = key.rpartition(".")[0]
    others = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    try:
        cfg = compose_config(others)[0]
    except Exception:
        return []
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return [str(k) for k in node] if node is not None and hasattr(node, "keys") else []


def explain_composition(error: Exception, overrides: list[str]) -> str:
    """Hydra's first line, with a did-you-mean from the known keys or options when one is close."""
    text = str(error).strip()
    first = text.splitlines()[0]
    hint = ""
    missing = re.search(r"Could not find '(.+)/([^/']+)'", text)
    override = re.search(r"Could not override '([^']+)'", text)
    nulled = [o.split("=", 1)[0] for o in overrides if re.fullmatch(r"[\w/]+=null", o)]
    foreign = [o for o in overrides if not o.isascii() and "'" not in o and '"' not in o and "=" in o]
    if "LexerNoViableAlt" in first and foreign:
        key, _, value = foreign[0].partition("=")
        return (
            f"{foreign[0]}: Hydra's override grammar reads only ASCII outside quotes; quote the value: "
            f"{key}='{value}' (in a shell: \"{key}='{value}'\")."
        )
    if "Got NoneType" in first and nulled:
        hint = f"to drop a config group write ~{nulled[0]}, not {nulled[0]}=null"
    elif "submitit" in first:
        hint = "the slurm launcher needs Hydra's submitit plugin: make slurm, or pip install -e '.[slurm]'"
    elif missing:
        options = re.findall(r"^\t(\S+)$", text.split("Config search path")[0], flags=re.M)
        hint = did_you_mean(missing.group(2), options)
    elif override:
        key = override.group(1)
        parent, _, leaf = key.rpartition(".")
        found = did_you_mean(leaf, _known_keys(key, overrides))
        hint = found.replace("mean ", f"mean {parent}.") if parent and found else found
    return f"{first} ({hint or '`decpriv list` shows the groups and options'})"


def compose_or_refuse(overrides: list[str]) -> tuple[DictConfig, dict, DictConfig]:
    """``decpriv.api.compose_job``, refusing Hydra's composition errors in one sentence."""
    from decpriv.api import compose_job

    try:
        return compose_job(overrides)
    except Exception as error:  # Hydra's composition errors: unknown option, bad override syntax
        raise ConfigError(explain_composition(error, overrides)) from None
