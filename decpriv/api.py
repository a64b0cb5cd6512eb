"""Python entry point for notebooks: the same pipeline as ``decpriv run``, from a list of overrides.

>>> from decpriv.api import run
>>> result = run(["topology=torus", "protocol.rounds=20"])
>>> result.summary, result.history
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from hydra import compose, initialize_config_module
from omegaconf import DictConfig, OmegaConf, open_dict

from decpriv.config.user_conf import USER_CONF, check_not_shadowed, unreadable_yaml
from decpriv.errors import ConfigError, bad_value

if TYPE_CHECKING:  # pandas loads when tables are read: composing a config (a refusal) does without it
    import pandas as pd


@dataclass(eq=False)
class RunResult:
    path: Path
    status: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def summary(self) -> pd.Series:
        return self.tables["summary"].iloc[0]

    def __getattr__(self, name: str) -> pd.DataFrame:
        tables = self.__dict__.get("tables", {})
        if name in tables:
            return tables[name]
        raise AttributeError(name)


def load(path: Path | str) -> RunResult:
    """Read a run folder's status and every CSV table in it; a sweep's folder: its table built from its
    jobs' folders (as ``show``, ``report`` and ``diff`` build it, not its summary.csv, a copy), with the
    status its jobs share (``completed``) or ``mixed``."""
    path = Path(path)
    from decpriv.report.ledger import has_plan
    from decpriv.report.run_folder import read_intact, read_table

    if has_plan(path):
        return _load_sweep(path)
    meta = read_intact(path)  # a damaged run, or one whose run.json is gone, is refused
    tables = {file.stem: read_table(file) for file in sorted(path.glob("*.csv"))}
    return RunResult(path, meta.get("status", "unknown"), tables)


def _load_sweep(path: Path) -> RunResult:
    """A sweep whose jobs include a damaged or lost one is refused, as every reader refuses it."""
    from decpriv.report.ledger import refuse_untrusted_jobs
    from decpriv.report.sweep import collect

    table = collect(path)
    refuse_untrusted_jobs(path, table)
    statuses = set(table["status"]) if "status" in table else set()
    status = statuses.pop() if len(statuses) == 1 else "mixed" if statuses else "unknown"
    return RunResult(path, status, {"summary": table})


def compose_job(overrides: list[str] | tuple[str, ...] = ()) -> tuple[DictConfig, dict, DictConfig]:
    """Compose decpriv's config with Hydra overrides once; returns (config without ``hydra``, group
    choices, the ``hydra`` node: run and sweep folders, launcher, sweeper params)."""
    with initialize_config_module("decpriv.conf", version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
        hydra = cfg.hydra
        choices = {
            k: v
            for k, v in OmegaConf.to_container(hydra.runtime.choices).items()
            if not k.startswith("hydra")
        }
        _refuse_dropped_option(cfg, choices, overrides)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, choices, hydra


def _refuse_dropped_option(cfg: DictConfig, choices: dict, overrides: list[str] | tuple[str, ...]) -> None:
    """An option of an optional group (``attack``) that does not exist: Hydra drops the group without a
    word, so ``attack=diffgrd`` would train and record ``attack=none``. Refused with the close matches, as
    Hydra refuses a missing option of any other group. The default ``${protocol}_default`` alone may be
    absent (a protocol with no default attack), unless the user named it."""
    from hydra.core.global_hydra import GlobalHydra

    typed = {o.split("=", 1)[0].lstrip("+") for o in overrides if "=" in o}
    loader = GlobalHydra.instance().config_loader()
    for group, choice in choices.items():
        if not isinstance(choice, str) or OmegaConf.select(cfg, group.replace("/", ".")) is not None:
            continue
        if group not in typed and choice == f"{choices.get('protocol')}_default":
            continue
        options = loader.get_group_options(group)  # decpriv's own: ./conf joins the search path at compose
        options += sorted(f.stem for f in (USER_CONF / group).glob("*.yaml"))
        if choice in options:
            continue
        near = difflib.get_close_matches(choice, options, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(near)}?" if near else f"`decpriv list {group}` shows its options"
        raise ConfigError(
            f"{group}={choice}: {group} has no option {choice}, and Hydra would drop this optional group "
            f"without a word (a run with no {group}); {hint}"
        )


def compose_config(overrides: list[str] | tuple[str, ...] = ()) -> tuple[DictConfig, dict]:
    """Compose decpriv's config with Hydra overrides; returns (config without ``hydra``, group choices)."""
    cfg, choices, _ = compose_job(overrides)
    return cfg, choices


def did_you_mean(word: str, known: list[str]) -> str:
    near = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f"did you mean {near[0]}?" if near else ""


def _known_keys(key: str, overrides: list[str]) -> list[str]:
    """The keys beside ``key`` (``protocol.lrr``: those of ``protocol``) in the config composed without it."""
    parent = key.rpartition(".")[0]
    others = [o for o in overrides if not f"{o.split('=', 1)[0].lstrip('+~')}.".startswith(f"{key}.")]
    try:
        cfg = compose_config(others)[0]
    except Exception:
        return []
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return [str(k) for k in node] if node is not None and hasattr(node, "keys") else []


def explain_composition(error: Exception, overrides: list[str]) -> str:
    """Hydra's first line, with a did-you-mean from the known keys or options when one is close."""
    text = str(error).strip()
    unreadable = _unparsable(overrides)
    empty = _empty_item(unreadable) if unreadable is not None else None
    if empty is not None:
        return empty
    if unreadable is not None:
        return (
            f"{unreadable}: Hydra's override grammar cannot read this (characters such as é, 日, $, "
            "parentheses or spaces need quotes: key='value'); quote the value or use letters, digits, "
            "'-', '_' and '.'"
        )
    # Hydra names no file for a yaml it cannot parse or decode
    unreadable_file = unreadable_yaml() if "while " in text or "codec can't decode" in text else None
    if unreadable_file is not None:
        return unreadable_file
    first = text.splitlines()[0]
    hint = ""
    missing = re.search(r"Could not find '(.+)/([^/']+)'", text)
    override = re.search(r"Could not override '([^']+)'", text)
    nulled = [o.split("=", 1)[0] for o in overrides if re.fullmatch(r"[\w/]+=null", o)]
    if first.startswith("Ambiguous value for argument"):
        hint = "a list of values is a sweep: add -m, one job a value"
    elif "Got NoneType" in first and nulled:
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
        head, _, rest = key.partition(".")
        near = did_you_mean(head, _known_keys(head, overrides)) if not hint and rest else ""
        if near and near != f"did you mean {head}?":
            hint = near.replace("?", f".{rest}?")  # protocl.rounds: protocol.rounds?
        elif rest and not hint:  # a key of another option of the group: gossip_matrix.function is hook's
            hint = _option_with(head, rest)
        if not hint and parent:  # a plain node's keys (sandbox.mem: sandbox's limits)
            keys = _known_keys(key, overrides)
            hint = (
                f"{parent} has the keys {', '.join(k for k in keys if not k.startswith('_'))}" if keys else ""
            )
    return f"{first} ({hint or '`decpriv list` shows the groups and options'})"


def _option_with(group: str, key: str) -> str:
    """``choose gossip_matrix=hook (it reads gossip_matrix.function)``: decpriv's options of ``group``
    whose yaml declares ``key``, "" when none does."""
    from importlib import resources

    import yaml

    folder = resources.files("decpriv.conf").joinpath(group)
    options = []
    for file in sorted(folder.iterdir(), key=lambda f: f.name) if folder.is_dir() else []:
        node = yaml.safe_load(file.read_text()) if file.name.endswith(".yaml") else None
        if isinstance(node, dict) and key in node:
            options.append(file.name[:-5])
    return f"choose {group}={' or '.join(options)} (it reads {group}.{key})" if options else ""


def _empty_item(override: str) -> str | None:
    """``seed=0,1,``, ``seed=,0``, ``seed=0,,1``: a list of values with an empty one, in one sentence."""
    key, sep, value = override.partition("=")
    items = value.split(",")
    if not sep or len(items) < 2 or all(items) or any(c in value for c in "'\"[]{}()"):
        return None
    given = ",".join(item for item in items if item)
    where = (
        "ends with a comma"
        if not items[-1]
        else "starts with a comma"
        if not items[0]
        else "has two commas in a row"
    )
    return f"{override}: the list of values {where}, so one value is empty; write {key}={given}" + (
        "" if given else " with a value"
    )


def _unparsable(overrides: list[str]) -> str | None:
    """The first override Hydra's grammar cannot parse (an unquoted ``name=héllo``), None when all parse."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_override(override)
        except Exception:  # Hydra's OverrideParseException and the grammar's own lexer errors
            return override
    return None


# groups every run builds (the rest, defense, accountant and attack, may be dropped with ~GROUP)
REQUIRED_GROUPS = ("topology", "gossip_matrix", "data", "partition", "model", "protocol", "adversary")


def refuse_dropped_required(overrides: list[str] | tuple[str, ...]) -> None:
    """``~topology``: the run would fail later on a missing key ("not in struct"); said now."""
    for override in overrides:
        group = override[1:].split("=", 1)[0] if override.startswith("~") else None
        if group in REQUIRED_GROUPS:
            fix = "adversary=none (every node honest)" if group == "adversary" else f"{group}=OPTION"
            article = "an" if group[0] in "aeiou" else "a"
            raise ConfigError(
                f"{override}: every run builds {article} {group}, so it cannot be dropped; choose one "
                f"instead, {fix} (`decpriv list {group}` shows them)."
            )


def compose_or_refuse(overrides: list[str]) -> tuple[DictConfig, dict, DictConfig]:
    """:func:`compose_job`, refusing Hydra's composition errors in one sentence, and a chosen option
    whose ./conf yaml decpriv's own option of that name hides."""
    refuse_dropped_required(overrides)
    try:
        composed = compose_job(overrides)
    except ConfigError:
        raise
    except Exception as error:  # Hydra's composition errors: unknown option, bad override syntax
        raise ConfigError(explain_composition(error, overrides)) from None
    check_not_shadowed(composed[1])
    return composed


def run(overrides: list[str] | tuple[str, ...] = (), out_dir: Path | str | None = None) -> RunResult:
    """Run one experiment and load its tables.

    The config is checked in full (every plugin, cross-plugin checks) before any folder is created; the
    folder is ``out_dir`` when given, else a new ``runs/<date>/<time>`` (``-2``, ``-3`` ... when taken)."""
    from decpriv import experiment  # torch: imported by running, not by composing
    from decpriv.config.validation import traced

    cfg, choices = compose_or_refuse(_one_job(overrides))[:2]
    try:
        _check_typed(cfg, choices, list(overrides))
        prebuilt = experiment.precheck(cfg, choices)
    except ConfigError as error:
        raise traced(error, choices, list(overrides)) from None
    from decpriv.report.run_folder import claim_folder, claim_named_folder

    if out_dir is None:
        out = claim_folder(Path("runs") / datetime.now().strftime("%Y-%m-%d/%H-%M-%S"))
    else:
        try:
            out = claim_named_folder(out_dir)  # a folder holds one run: the CLI's rule
        except ConfigError as error:
            raise bad_value(
                "out_dir", str(out_dir), f"a run folder holds one run, and {error}", "give a new folder"
            ) from None
    (out / ".hydra").mkdir(parents=True, exist_ok=True)
    (out / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (out / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(list(overrides)))
    experiment.run(cfg, out, choices, prebuilt=prebuilt)
    return load(out)


def _check_typed(cfg: DictConfig, choices: dict, overrides: list[str]) -> None:
    """What the CLI's precheck refuses of the values a user typed, refused here too: an override is typed
    by the user whether it comes from a shell or a script (a value set is used or refused, never replaced).
    A ``_target_`` set beside a group's option stays the API's way to run one's own class."""
    from decpriv.config.validation import check_adversary_read, check_unread

    check_unread(cfg, overrides, choices)
    check_adversary_read(choices, overrides)


def _one_job(overrides: object) -> list[str]:
    """The overrides of one job as a list of strings: a single string (iterated letter by letter) and a
    command-line flag (``-m``: the API runs one job) are refused in one sentence."""
    if isinstance(overrides, str) or not all(isinstance(o, str) for o in overrides):
        raise bad_value(
            "overrides", overrides, "is a list of strings, one override each", f"use run([{overrides!r}])"
        )
    flags = [o for o in overrides if o.startswith("-")]
    if flags:
        raise bad_value(
            "overrides",
            flags[0],
            "is a command-line flag, and decpriv.api.run runs one job",
            "call run() once per job, or sweep with decpriv run -m",
        )
    return list(overrides)
