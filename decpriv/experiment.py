"""One run, top to bottom (docs/ARCHITECTURE.md): build -> simulate -> attack -> evaluate -> account -> write.

Nothing before ``write`` touches the disk except run.json's ``running`` marker. Callers run
:func:`precheck` (the whole build, no training) before they create the run folder, so a refused config
leaves nothing behind.
"""

import hashlib
import inspect
import json
import math
import pickle
import time
import warnings
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from decpriv.adversary.recorder import Recorder
from decpriv.adversary.view import AttackContext, DataSpec, PublicProtocol, View
from decpriv.attacks.base import Attack
from decpriv.built import Setup
from decpriv.config.validation import PLUGIN_GROUPS, blocked_target, validate
from decpriv.data.datasets import cache_folder
from decpriv.data.partition import LocalData
from decpriv.defenses.base import Defense, Mechanism
from decpriv.device import device_name, resolve_device
from decpriv.errors import ConfigError, Diverged, bad_value
from decpriv.graphs.network import Network
from decpriv.protocols.base import Outcome, Simulation
from decpriv.random.streams import ScopedSeeds, Seeds, scoped
from decpriv.report import progress
from decpriv.report.findings import Findings
from decpriv.report.headline import resolve
from decpriv.report.plots import training_curves
from decpriv.report.run_folder import RunFolder, error_text
from decpriv.seal import sandbox, zygote
from decpriv.seal.process import Sealed
from decpriv.seal.truth import Truth


def build_plugin(node: DictConfig, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate`` that lets a plugin's ConfigError through unwrapped (exit status 2).

    Pipeline objects go in through a partial call: instantiate would turn a dataclass keyword into a config.
    """
    try:
        return instantiate(node, _partial_=True)(**kwargs) if kwargs else instantiate(node)
    except InstantiationException as error:
        cause = error.__cause__
        while cause is not None and not isinstance(cause, ConfigError):
            cause = cause.__cause__
        if cause is not None:
            raise cause from None
        raise


@contextmanager
def errors_attributed_to(plugin: str):
    """Tag a ConfigError raised inside with the plugin it comes from (hints name only the real cause)."""
    try:
        yield
    except ConfigError as error:
        error.plugin = getattr(error, "plugin", None) or plugin
        raise


def check_enough_data(data: DictConfig, train: int, n: int) -> None:
    """A node holds at least one training sample: refused otherwise, naming a data set that has enough
    (this one's ``data.size``, or Gaussian classes of the size whose training split has n samples)."""
    if train >= n:
        return
    fraction = float(data.get("test_fraction", 0.25)) if "size" in data else 0.25
    size = math.ceil(n / (1 - fraction))
    size += size - int(round(fraction * size)) < n  # the split rounds the test count
    more = f"data.size={size}" if "size" in data else f"data=gaussian_classes data.size={size}"
    raise bad_value(
        "topology.n",
        n,
        f"the data's training split has {train} samples, fewer than the nodes, so some node would hold no data",
        f"use topology.n <= {train}, or more data: {more} (a training split of {n})",
    )


def build(cfg: DictConfig, sealed: bool = False) -> Setup:
    """Step 1: validate, then build network, data, model, protocol, defense, adversary, attack, accountant.

    ``sealed`` (the command line's and :func:`decpriv.api.run`'s build): the attack's ``prepare`` (its
    refusals included) runs in a sealed process (:mod:`decpriv.seal.process`), never here; without it (the
    Python API's in-process experiments) it runs in this process, beside the data."""
    validate(cfg)
    device = resolve_device(cfg.device)
    if sealed and isinstance(cfg.get("attack"), DictConfig):  # its imports overlap the build
        module = str(cfg.attack.get("_target_", "")).rpartition(".")[0] or None
        zygote.warm(module, device.type == "cuda")
    seeds = Seeds(cfg.seed)
    with errors_attributed_to("attack"):  # its module, constructor and pickling run before any data exists
        attack = build_plugin(cfg.attack) if cfg.get("attack") else None
        sealed_attack = sealable(attack)  # as built from its config, before any of its methods ran
    network = Network.build(build_plugin(cfg.topology), build_plugin(cfg.gossip_matrix))
    dataset = build_plugin(cfg.data, seeds=seeds)
    check_enough_data(cfg.data, len(dataset.y_train), network.n)
    parts = build_plugin(
        cfg.partition, labels=dataset.y_train.numpy(), n=network.n, rng=seeds.numpy("partition")
    )
    local = LocalData.stack(dataset.x_train, dataset.y_train, parts)
    model = build_plugin(cfg.model, input_shape=dataset.input_shape, num_classes=dataset.num_classes)
    protocol = build_plugin(cfg.protocol)
    if model.reduction is None:
        model.reduction = protocol.reduction
    defense = build_plugin(cfg.defense) if cfg.get("defense") else Defense()
    adversary = build_plugin(cfg.adversary, network=network, seeds=seeds)
    if adversary.graph is not None:  # Sybils that chose their own edges (adversary.rewire)
        network = Network.build(adversary.graph, build_plugin(cfg.gossip_matrix))
    accountant = build_plugin(cfg.accountant) if cfg.get("accountant") else default_accountant(defense)
    setup = Setup(
        cfg=cfg,
        seeds=seeds,
        device=device,
        network=network,
        dataset=dataset,
        local=local,
        model=model,
        protocol=protocol,
        defense=defense,
        adversary=adversary,
        attack=attack,
        accountant=accountant,
        sealed_attack=sealed_attack,
        oracle=declared_oracle(cfg),
    )
    protocol.fit(local.counts)  # batch_size=auto follows the local sets
    protocol.check(network, dataset, model)
    defense.bind(setup)
    if attack is not None:
        setup.attack_context = attack_context(setup)
        with errors_attributed_to("attack"):
            refuse_unfit(setup)
            setup.plan = sealed_prepare(setup) if sealed else attack.prepare(setup.attack_context)
    if accountant is not None:
        accountant.check(setup)
    if audits(attack):  # after check: the accountant may have calibrated the noise
        with errors_attributed_to("attack"):
            # the auditor reruns the protocol and defense itself (no data) and checks the accountant
            setup.plan = attack.plan_trials(setup.attack_context, protocol, setup.defense, accountant)
    return setup


def declared(attack: Attack, key: str, default: Any) -> Any:
    """The attack's class attribute ``key``, read without running its code (a property would run here,
    beside the data): a plain value (bool, str, tuple, None), else ``default``."""
    value = inspect.getattr_static(attack, key, default)
    return value if type(value) in (bool, str, tuple, type(None)) else default


def audits(attack: Attack | None) -> bool:
    """decpriv's audit (its plan built here, by its own ``plan_trials``: the mechanism, never the data)."""
    trials = inspect.getattr_static(type(attack), "plan_trials", None)
    own = str(getattr(trials, "__module__", "")).startswith("decpriv.attacks.")
    return attack is not None and declared(attack, "audits", False) is True and own


def sealable(attack: Any) -> bytes | None:
    """The attack serialised for its sealed process (:mod:`decpriv.seal.process`)."""
    if attack is None:
        return None
    try:
        return pickle.dumps(attack, pickle.HIGHEST_PROTOCOL)
    except Exception as error:
        raise bad_value(
            "attack",
            attack.name,
            f"the attack object cannot be pickled for its sealed process ({error})",
            "keep only picklable values (numbers, strings, arrays, tensors) on the attack",
        ) from None


def declared_oracle(cfg: DictConfig) -> bool:
    """``attack.oracle=true``: the one door to ground truth for an attack's run (a paper's own shortcut,
    e.g. Yu 2023's released script), opened by the pipeline from the config, never by the attack."""
    return isinstance(cfg.get("attack"), DictConfig) and cfg.attack.get("oracle", False) is True


def default_accountant(defense: Defense) -> Any:
    """The accountant option the defense names (``Defense.accountant``), built from its packaged yaml."""
    if defense.accountant is None:
        return None
    node = OmegaConf.load(Path(__file__).parent / "conf" / "accountant" / f"{defense.accountant}.yaml")
    node.pop("defaults", None)  # the defense an accountant picks when named alone: this one is chosen
    return build_plugin(node)


def data_spec(setup: Setup) -> DataSpec:
    """The data's public facts (shape, classes, range, split sizes, each node's sample count)."""
    d = setup.dataset
    sizes = setup.local.counts.numpy().copy()
    return DataSpec(d.input_shape, d.num_classes, d.data_range, d.task, d.name, len(d.x_test), sizes)


def attack_context(setup: Setup) -> AttackContext:
    """What the attack may know before the run: public facts, its adversary, its own nodes' data."""
    own = torch.as_tensor(setup.adversary.nodes, device="cpu")
    protocol = setup.protocol
    return AttackContext(
        network=setup.network,
        adversary=setup.adversary,
        protocol=PublicProtocol(protocol.name, protocol.recorder_kind, protocol.hyper()),
        model=setup.model,
        data=data_spec(setup),
        own_x=setup.local.x[own],
        own_y=setup.local.y[own],
        own_mask=setup.local.mask[own],
        seeds=ScopedSeeds(scoped(setup.seeds, "attack."), "attack."),
        choices={
            group: str(setup.cfg[group].get("_target_", "?")).rsplit(".", 1)[-1]
            for group in PLUGIN_GROUPS
            if isinstance(setup.cfg.get(group), DictConfig)
        },
    )


def refuse_unfit(setup: Setup) -> None:
    """The pipeline's own refusals of an attack: no adversary, or a defense it cannot forge through."""
    attack, adversary, defense = setup.attack, setup.adversary, setup.defense
    name, active = declared(attack, "name", "attack"), declared(attack, "active", False) is True
    if declared(attack, "needs_adversary", True) is not False and not adversary.present:
        raise bad_value(
            "adversary.count",
            0,
            f"attack={name} needs corrupt nodes",
            "set adversary.count or adversary.nodes",
        )
    if active and defense.robust:  # a robust rule reads each forged message: within what it tolerates
        defense.check_byzantine(setup.network.W, adversary.nodes)
    if active and defense.own_aggregation and not defense.robust:
        raise bad_value(
            "defense",
            defense.name,
            f"attack={name} forges messages for the plain gossip average W x, which this defense "
            "replaces by its own aggregation rule",
            "drop the defense or use a passive attack",
        )
    if active and defense.hides_updates and declared(attack, "clean_baseline", False) is True:
        raise bad_value(  # a poisoning attack: its forgeries are for a rule that reads each message
            "defense",
            defense.name,
            f"attack={name}'s Byzantine messages are filtered, if at all, by a robust rule that reads each "
            f"received update, which {defense.name} hides (decpriv does not simulate poisoning inside it)",
            "drop the defense, or pick a robust rule (defense=clipped_gossip, median, ...) in its place",
        )
    if active and defense.hides_updates:  # Pasquini et al. 2023, Sec. 6.1
        raise bad_value(
            "defense",
            defense.name,
            f"attack={name} must cancel the victim's neighbours' individual updates, which secure "
            "aggregation hides from every single node",
            "drop the defense, or recover one victim's update with two Sybils (attack=sybil_evasion "
            "adversary.sybils=<victim>)",
        )


def sealed_prepare(setup: Setup) -> Any:
    """The attack's ``prepare`` in a sealed process of its own, for its refusals before any folder exists:
    its plan comes back as plain data, and the process ends here (the run starts its own)."""
    with seal_of(setup) as sealed:
        return sealed.prepare(setup.attack_context)


def seal_of(setup: Setup, folder: RunFolder | None = None) -> Sealed:
    """A sealed process for the setup's attack, as it was built from its config, under the config's
    ``sandbox`` limits, on the run's device where it can use it; refused where the run folder, decpriv's
    cache or ``data.root`` would be visible inside its sandbox."""
    attack, streams = setup.attack, scoped(setup.seeds, "attack.")
    name = declared(attack, "name", "attack")
    if zygote.seal_kind() == "bubblewrap":
        sandbox.refuse_visible(hidden_folders(setup.cfg, folder))
    limits = sandbox.Limits.of(setup.cfg.get("sandbox"))
    return Sealed(setup.sealed_attack, name, type(attack).__module__, streams, limits, str(setup.device))


def hidden_folders(cfg: DictConfig, folder: RunFolder | None) -> tuple[str, ...]:
    """What the sealed process must not read: the run folder, decpriv's data cache and ``data.root``."""
    root = cfg.data.get("root") if isinstance(cfg.get("data"), DictConfig) else None
    folders = [
        *([folder.path] if folder else []),
        cache_folder(""),
        *([Path(str(root)).expanduser()] if root else []),
    ]
    return tuple(str(Path(f).resolve()) for f in folders)


def build_explained(cfg: DictConfig, choices: dict[str, Any]) -> Setup:
    """:func:`build`, naming the protocol's default attack when it is the one that refuses the config."""
    try:
        return build(cfg, sealed=True)
    except InstantiationException as error:
        refused = blocked_target(error, cfg, choices)
        if refused is None:
            raise
        raise refused from None
    except ConfigError as error:
        default = choices.get("attack")
        is_default = default == f"{choices.get('protocol')}_default" and cfg.get("attack") is not None
        if not is_default or getattr(error, "plugin", None) != "attack":
            raise
        raise ConfigError(
            f"{error} (attack={default} is what protocol={choices['protocol']} runs by default: "
            "add ~attack to run without it, or pick another attack)"
        ) from None


@dataclass(eq=False)
class Prebuilt:
    """A precheck's setup kept for the run of the same config: building again would load the data and
    construct every plugin a second time, for the same result (the build is deterministic in the config)."""

    config: Any  # OmegaConf.to_container of the config it was built from
    setup: Setup
    seconds: float  # the build's wall time, run.json's ``build`` phase
    warnings: list[warnings.WarningMessage]  # raised while building; the run shows and keeps them


def precheck(cfg: DictConfig, choices: dict[str, Any] | None = None) -> Prebuilt:
    """Everything that can be decided without training: the whole :func:`build` (every plugin and
    cross-plugin check, the device, data.root). Called for every job of a sweep before any folder exists;
    a single run passes the returned build on to :func:`run` (it builds once)."""
    begin = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # recorded, not shown: the run itself reports them
        setup = build_explained(cfg, choices or {})
    return Prebuilt(OmegaConf.to_container(cfg), setup, time.perf_counter() - begin, caught)


GROWTH = 1e3  # a loss that ends this many times above where it started has diverged


def check_finite(outcome: Outcome, noise: Mechanism | None = None) -> None:
    """Stop a run whose training diverged (a loss column or the final parameters not finite), for
    protocols that do not call ``Simulation.guard`` each round, and warn when a loss ends ``GROWTH`` times
    above its first value (finite, but diverging), naming the defense's noise when there is one (a
    smaller learning rate does not train through noise that swamps the gradients). Other history columns
    may be undefined (nan) at some rounds by design."""
    history = outcome.history
    fix = "lower protocol.lr"
    if noise is not None and noise.sigma:
        keys = "defense.sigma_cdp and defense.sigma_cor" if noise.correlated else "defense.sigma"
        what = "private std" if noise.correlated else "std"
        fix = (
            f"lower protocol.lr, or add less noise (the defense's {what} is {noise.sigma:.3g} x its clip "
            f"{noise.clip:g}: a larger defense.epsilon or a smaller {keys})"
        )
        if noise.on == "gradients" and noise.level == "user":  # a batch's sum bears the same noise
            fix += ", or defense.level=example (the noise lands on a clipped batch sum, b times smaller per gradient)"
    for column in [c for c in history.columns if "loss" in str(c)]:
        values = pd.to_numeric(history[column], errors="coerce").to_numpy(dtype=float)
        bad_rows = ~np.isfinite(values)
        if bad_rows.any():
            first = int(history["round"].to_numpy()[bad_rows.argmax()]) if "round" in history else -1
            raise Diverged(first, column)
        if len(values) > 1 and values[-1] > GROWTH * max(abs(values[0]), 1e-12):
            warnings.warn(  # diverging below the overflow: finite, yet no model
                f"{column} grew from {values[0]:.3g} to {values[-1]:.3g} over the run: training diverged; "
                f"{fix}",
                stacklevel=2,
            )
    if not bool(torch.isfinite(outcome.final).all()):
        last = int(history["round"].max()) if "round" in history and len(history) else -1
        raise Diverged(last, "the final node parameters")


def simulate(
    setup: Setup, show_progress: bool = False, sealed: Sealed | None = None, plan: Any = None
) -> tuple[Outcome, View | None]:
    """Step 2: run the protocol over all nodes; record what the adversary sees. ``sealed``: the run's
    sealed attack process, which decides the kept links and forges (with its ``plan``); without one (the
    Python API's tests), the attack object itself with ``setup.plan``."""
    adv, network = setup.adversary, setup.network
    recording = setup.attack is not None
    attack, plan = (sealed, plan) if sealed is not None else (setup.attack, setup.plan)
    if setup.protocol.recorder_kind == "edges":
        edges = adv.observed_edges(network)
        if recording:
            edges = attack.kept_links(setup.attack_context, plan, edges)
        recorder = Recorder(edges[:, 0], edges[:, 1], recording)
    else:
        recorder = Recorder.broadcast(adv.observed_senders(network), recording)
    sim = Simulation(
        network=network,
        dataset=setup.dataset,
        local=setup.local.to(setup.device),
        model=setup.model.on(setup.device),
        defense=setup.defense,
        adversary=adv,
        recorder=recorder,
        seeds=setup.seeds,
        device=setup.device,
        behaviour=attack.behaviour(setup.attack_context, plan) if recording else None,
        show_progress=show_progress,
    )
    outcome = setup.protocol.run(sim).cpu()
    if not recording:
        return outcome, None
    if declared(setup.attack, "clean_baseline", False) is True:
        outcome.truth["clean_final_states"] = clean_run(setup, sim)
    context = setup.attack_context
    view = View(
        network=network,
        attackers=adv.nodes,
        eavesdropper=adv.eavesdropper,
        transcript=recorder.transcript(),
        model=setup.model,
        data_spec=context.data,
        hyper=context.protocol.hyper,
        own_x=context.own_x,
        own_y=context.own_y,
        own_mask=context.own_mask,
        public=outcome.public,
        seeds=context.seeds,
        plan=plan,
        sybils=adv.sybils,
        oracle_declared=setup.oracle,
    )
    return outcome, view


def clean_run(setup: Setup, attacked: Simulation) -> torch.Tensor:
    """(n, p) the final states of the same run (seeds, data, defense) with every node honest: the baseline a
    poisoning attack is read against (``Attack.clean_baseline``); for scoring only, never in the view."""
    recorder = Recorder.broadcast(np.zeros(0, dtype=np.int64), False)
    sim = replace(attacked, recorder=recorder, behaviour=None, show_progress=False)
    return setup.protocol.run(sim).cpu().final


def flatten_config(cfg: DictConfig, choices: dict[str, Any]) -> dict[str, Any]:
    """Config as summary.csv columns: group choices (``topology``) then dotted leaves (``topology.n``)."""
    out: dict[str, Any] = {  # an optional group whose choice has no yaml (gossip_default) is absent: none
        group: ("none" if choice is None or (group in PLUGIN_GROUPS and cfg.get(group) is None) else choice)
        for group, choice in sorted(choices.items())
    }
    for group in PLUGIN_GROUPS:  # a preset's own builder (no option chosen) is recorded by its name
        target = cfg[group].get("_target_") if isinstance(cfg.get(group), DictConfig) else None
        if choices.get(group) is None and target:  # not an option chosen as none (defense=none)
            out[group] = str(target).rsplit(".", 1)[-1]

    def walk(node: Any, prefix: str) -> None:
        for key, value in node.items():
            name = f"{prefix}{key}"
            if str(key).startswith("_"):
                continue
            if isinstance(value, dict):
                walk(value, name + ".")
            else:
                out[name] = json.dumps(value) if isinstance(value, list) else value

    config = OmegaConf.to_container(cfg, resolve=True)
    walk({k: v for k, v in config.items() if k != "claim"}, "")  # the paper's words, not a setting
    return out


def config_digest(config_columns: dict[str, Any]) -> str:
    """A short hash of the flattened config: equal digests mean the same experiment (resuming sweeps)."""
    text = json.dumps(
        {k: config_columns[k] for k in sorted(config_columns) if k not in ("name", "debug", "plots")},
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run(
    cfg: DictConfig,
    out_dir: Path | str,
    choices: dict[str, Any] | None = None,
    show_progress: bool = False,
    prebuilt: Prebuilt | None = None,
) -> Path:
    """Run the whole pipeline into ``out_dir``; returns it. Re-raises errors after marking run.json failed.

    ``prebuilt``: the :func:`precheck` of this very config, used instead of building."""
    folder = RunFolder(out_dir)
    config_columns = flatten_config(cfg, choices or {})
    folder.start(
        int(cfg.seed) if isinstance(cfg.get("seed"), int) else -1,
        str(cfg.get("device")),
        config_digest(config_columns),
    )
    with warnings.catch_warnings(), _recording(folder), progress.job_log(folder.path):
        return _pipeline(cfg, folder, config_columns, choices or {}, show_progress, prebuilt)


@contextmanager
def _recording(folder: RunFolder):
    """Warnings raised during the run are shown as usual and kept (distinct messages) for run.json."""
    shown = warnings.showwarning

    def record(message, category, filename, lineno, file=None, line=None):
        folder.warn(str(message))
        progress.log.warning("%s", message)
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = record
    yield


def _pipeline(
    cfg: DictConfig,
    folder: RunFolder,
    config_columns: dict[str, Any],
    choices: dict[str, Any],
    show_progress: bool,
    prebuilt: Prebuilt | None,
) -> Path:
    """Steps 1-6 into ``folder``; any failure marks run.json and summary.csv failed and is re-raised.
    The attack's own code runs in its sealed process (:mod:`decpriv.seal.process`), closed at the end."""
    sealed, plan = None, None
    try:
        setup = _built(cfg, folder, choices, show_progress, prebuilt)
        record_settled(cfg, setup, folder, config_columns)
        early = setup.attack is not None and acts_during_run(setup.attack)
        if setup.attack is not None:
            sealed = seal_of(setup, folder)
            # bubblewrap | process, and the device the attack computes on: said by a failed run too
            folder.meta.update(seal=sealed.seal, attack_device=sealed.device)
        if early:
            with progress.phase(folder, "prepare", show_progress, sealed.name):
                plan = sealed_plan(setup, sealed)
        with progress.phase(folder, "simulate", show_progress, setup.protocol.name):
            outcome, view = simulate(setup, show_progress, sealed if early else None, plan)
            check_finite(outcome, setup.defense.mechanism())
        report = _training_findings(setup, outcome)
        _attack_and_account(setup, folder, report, outcome, view, sealed, show_progress)
        with progress.phase(folder, "write", show_progress):
            _write(setup, folder, report, config_columns, plots=cfg.plots)
        attack = setup.attack
        folder.complete(
            {
                "metrics": list(report.summary),
                "attack": attack.name if attack is not None else "none",
                "attack_oracle": setup.oracle,
                "headline": resolve(attack.headline if attack is not None else (), list(report.summary)),
                # what a privacy number holds for: the batch sampler and the accountant's adjacency
                **{key: report.summary[key] for key in ("sampler", "adjacency") if key in report.summary},
                **repeatability(setup.defense),
            }
        )
    except BaseException as error:
        folder.fail(error)
        failed = {"status": "failed", "error": error_text(error), **config_columns}
        with suppress(OSError):  # a full disk: run.json, written first, already says failed
            folder.write_table("summary", pd.DataFrame([failed]))
        raise
    finally:
        if sealed is not None:
            sealed.close()
    return folder.path


def repeatability(defense: Any) -> dict[str, Any]:
    """run.json's ``repeatable_within`` where the defense draws noise the seed does not fix (CKKS):
    ``decpriv diff`` compares two such runs within it."""
    within = defense.repeatable_within()
    return {} if within is None else {"repeatable_within": within}


def acts_during_run(attack: Attack) -> bool:
    """Whether the attack's code runs during the simulation (it forges, or it picks the links to record):
    its plan is then needed before the run. Otherwise the base class's defaults run here (they read
    nothing) and ``prepare`` runs in the sealed process after the simulation."""
    kind = type(attack)  # read statically: a metaclass's attribute lookup is the attack's code too
    own = ("behaviour", "kept_links")
    return any(inspect.getattr_static(kind, name) is not inspect.getattr_static(Attack, name) for name in own)


def sealed_plan(setup: Setup, sealed: Sealed) -> Any:
    """The plan the attack's ``prepare`` returns in its sealed process (the precheck's plan, computed
    in this process for its refusals, is not used: code that ran beside the truth hands nothing on). The
    audit's plan is the pipeline's own (``plan_trials``: the mechanism, built here, no data)."""
    with errors_attributed_to("attack"):
        plan = sealed.prepare(setup.attack_context)
    return setup.plan if audits(setup.attack) else plan


def record_settled(cfg: DictConfig, setup: Setup, folder: RunFolder, config_columns: dict[str, Any]) -> None:
    """Values the build settles are recorded as what ran: the device (``cpu`` or ``cuda``, never ``auto``)
    with its name, an unset accountant as the defense's own that ran, and ``protocol.batch_size=auto`` as
    the number (min(16, the smallest local set); a
    Dirichlet split can drive it to 1), in summary.csv and run.json, with run.json's ``settled`` naming the
    request beside what ran. The config digest stays the request's (resume compares it)."""
    device = setup.device
    config_columns.update(device=device.type, device_name=device_name(device))
    folder.meta.update(device=device.type, device_name=config_columns["device_name"])
    settled = {}
    if cfg.get("device") != device.type:
        settled["device"] = {"requested": cfg.get("device"), "ran": device.type}
    if not cfg.get("accountant") and setup.accountant is not None:  # the defense's own accountant ran
        settled["accountant"] = {"requested": None, "ran": setup.accountant.name}
        config_columns["accountant"] = setup.accountant.name
    if OmegaConf.select(cfg, "protocol.batch_size") == "auto":
        settled["protocol.batch_size"] = {"requested": "auto", "ran": setup.protocol.batch_size}
        config_columns["protocol.batch_size"] = setup.protocol.batch_size
    if settled:
        folder.meta["settled"] = settled


def _built(
    cfg: DictConfig,
    folder: RunFolder,
    choices: dict[str, Any],
    show_progress: bool,
    prebuilt: Prebuilt | None,
) -> Setup:
    """Step 1: build, or take the precheck's setup of this config (its warnings shown again here)."""
    if prebuilt is None:
        with progress.phase(folder, "build", show_progress):
            return build_explained(cfg, choices)
    for caught in prebuilt.warnings:
        warnings.warn_explicit(caught.message, caught.category, caught.filename, caught.lineno)
    folder.timings["build"] = round(prebuilt.seconds, 4)
    progress.log.info("build: %.2f s (before the run folder was made)", prebuilt.seconds)
    return prebuilt.setup


def _training_findings(setup: Setup, outcome: Outcome) -> Findings:
    """The training's history and summary, the graph's facts, the defense's summary, the training curves."""
    report = Findings(tables={"history": outcome.history}, summary=dict(outcome.summary))
    network = setup.network
    report.summary.update(
        nodes=network.n,
        edges=len(network.edges),
        spectral_gap=network.spectral_gap.value,
        spectral_gap_method=network.spectral_gap.method,
        spectral_gap_tolerance=network.spectral_gap.tolerance,
    )
    if "tries" in network.graph.graph:
        report.summary["graph_tries"] = network.graph.graph["tries"]
    report.summary.update(setup.defense.summary())
    report.figures["plots/training.png"] = partial(
        training_curves, outcome.history, f"{setup.protocol.name} on {network.n} nodes"
    )
    return report


def _attack_and_account(
    setup: Setup,
    folder: RunFolder,
    report: Findings,
    outcome: Outcome,
    view: View | None,
    sealed: Sealed | None,
    show_progress: bool,
) -> None:
    """Steps 3-5: the attack on its view in its sealed process, then the truth for scoring; the
    accountant; the audit's bounds reconciled with the accountant's."""
    attack = setup.attack
    if attack is not None:
        truth = ground_truth(setup, outcome)  # in this process only: it crosses as a declared oracle
        with progress.phase(folder, "attack", show_progress, sealed.name):
            if not acts_during_run(attack):  # its prepare had not run yet
                view = replace(view, plan=sealed_plan(setup, sealed))
            # the one door to ground truth, declared in the config (marked everywhere)
            findings = sealed.run(replace(view, oracle=truth if setup.oracle else None))
            sealed.close()  # the attack's process, and all it started, end with its phase
        with progress.phase(folder, "evaluate", show_progress):
            report.merge(attack.evaluate(findings, truth, view))
            report.summary["attack_oracle"] = setup.oracle
            report.summary["attack_device"] = sealed.device
            report.summary["attack_seal"] = sealed.seal
    if setup.accountant is not None:
        with progress.phase(folder, "account", show_progress):
            report.merge(setup.accountant.account(setup))
    if audits(attack):
        with progress.phase(folder, "reconcile", show_progress):
            attack.reconcile(report, setup.plan)


def ground_truth(setup: Setup, outcome: Outcome) -> Truth:
    """What scoring needs: the data set, every node's private data, the final states, the protocol's
    truths (true gradients ...)."""
    return Truth(setup.dataset, setup.local, outcome.final.detach().cpu(), outcome.truth)


def _write(
    setup: Setup, folder: RunFolder, report: Findings, config_columns: dict[str, Any], plots: bool
) -> None:
    """Step 6: pictures first (a drawing that fails leaves no table behind that looks complete), then
    the nodes, the findings' tables and summary.csv."""
    for relative, drawing in report.figures.items() if plots else ():
        figure = drawing()
        if figure is not None:
            folder.write_figure(relative, figure)
    network = setup.network
    nodes = pd.DataFrame({"node": np.arange(network.n), "name": network.names, "degree": network.degrees})
    folder.write_table("nodes", nodes)
    for name, table in report.tables.items():
        folder.write_table(name, table)
    folder.write_table("summary", pd.DataFrame([{"status": "completed", **report.summary, **config_columns}]))
