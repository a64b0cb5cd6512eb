"""Declared key constraints (decpriv.config.types): one annotation in a plugin's signature refuses a bad
value before anything is built, with the sentence key=value: why; fix; guards Python callers; and is what
``decpriv list GROUP`` shows."""

import subprocess
import sys
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pytest
from omegaconf import OmegaConf

from decpriv import NO_USER_CONF, experiment
from decpriv.api import compose_config
from decpriv.cli import main
from decpriv.config.types import Range, checked, describe, refusal
from decpriv.config.validation import PLUGIN_GROUPS, check_plugin, validate
from decpriv.errors import ConfigError
from decpriv.graphs import topologies
from decpriv.protocols.dsgd import DSGD
from decpriv.report.show import _option_node, config_options

pytestmark = pytest.mark.filterwarnings(f"ignore:{NO_USER_CONF}")

# (overrides, the whole refusal sentence): one declared constraint per group
REFUSED = [
    (["protocol.lr=-1"], "protocol.lr=-1: the learning rate must be positive; use e.g. protocol.lr=0.1."),
    (
        ["protocol=pdmm", "protocol.update=newton"],
        "protocol.update='newton': not one of its choices; use one of exact, inexact, qa.",
    ),
    (
        ["protocol.batch_size=0"],
        "protocol.batch_size=0: a batch size (auto: min(16, the smallest local set); null: all) must be at "
        "least 1; "
        "use e.g. protocol.batch_size=16 or null.",
    ),
    (
        ["topology=erdos_renyi", "topology.p=1.5"],
        "topology.p=1.5: an edge probability lies in (0, 1]; use e.g. topology.p=0.3.",
    ),
    (
        ["topology=torus", "topology.n=4"],
        "topology.n=4: the number of nodes lies in [9, 1e+07]; use topology.n in [9, 1e+07].",
    ),
    (
        ["data=digits", "data.test_fraction=1.0"],
        "data.test_fraction=1.0: the held-out share of the samples lies in [0, 1); "
        "use e.g. data.test_fraction=0.25.",
    ),
    (
        ["partition=dirichlet", "partition.alpha=0"],
        "partition.alpha=0: the Dirichlet concentration must be positive; use e.g. partition.alpha=0.5.",
    ),
    (
        ["model=mlp", "model.activation=gelu"],
        "model.activation='gelu': not one of its choices; use one of relu, sigmoid, tanh.",
    ),
    (
        ["defense=ldp", "defense.clip=0"],
        "defense.clip=0: the clipping norm must be positive; use e.g. defense.clip=1.0.",
    ),
    (
        ["defense=secure_aggregation", "defense.precision=60"],
        "defense.precision=60: the number of fractional bits lies in [8, 48]; use e.g. defense.precision=32.",
    ),
    (
        ["adversary.strategy=best"],
        "adversary.strategy='best': not one of its choices; use one of random, max_degree, min_degree, first.",
    ),
    (
        ["defense=ldp", "accountant=rdp", "accountant.delta=2"],
        "accountant.delta=2: delta, a probability, lies in (0, 1); use e.g. accountant.delta=1e-5.",
    ),
    (
        ["defense=muffliato", "protocol=gossip", "accountant=network_dp", "accountant.alpha=1"],
        "accountant.alpha=1: a Renyi order must exceed 1; set accountant.alpha > 1.",
    ),
    (
        ["protocol=dsgd", "attack=mia", "attack.marginalize=maybe"],
        "attack.marginalize='maybe': not one of its choices; use one of true, false, auto.",
    ),
    (
        ["protocol=dsgd", "attack=mia", "attack.permutations=10"],
        "attack.permutations=10: the shuffled-membership draws of a 95% null interval must be at least 40; "
        "use e.g. attack.permutations=200.",
    ),
    (
        ["protocol=dsgd", "attack=echo", "attack.variant=loud"],
        "attack.variant='loud': not one of its choices; use one of marginalised, received.",
    ),
]


@pytest.mark.parametrize(("overrides", "sentence"), REFUSED, ids=[o[-1] for o, _ in REFUSED])
def test_a_declared_constraint_refuses_in_one_sentence_before_any_build(overrides, sentence, monkeypatch):
    cfg, _ = compose_config(overrides)
    with pytest.raises(ConfigError) as refused:
        validate(cfg)
    assert str(refused.value) == sentence
    monkeypatch.setattr(experiment, "build_plugin", _never)
    with pytest.raises(ConfigError, match="^" + sentence.split(":")[0]):
        experiment.build(cfg)  # refused by validation, before any plugin (data, graph, model) is built


def _never(*args, **kwargs):
    raise AssertionError("a plugin was built for a config that validation refuses")


def test_cli_refuses_a_declared_bad_value_with_exit_2_before_computation(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(experiment, "build_plugin", _never)
    assert main(["run", "protocol.lr=-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        "error: protocol.lr=-1: the learning rate must be positive; use e.g. protocol.lr=0.1."
    ]
    assert list(tmp_path.iterdir()) == []  # no run folder


def test_the_installed_command_exits_2_on_a_declared_bad_value(tmp_path):
    done = subprocess.run(
        [str(Path(sys.executable).with_name("decpriv")), "run", "defense=ldp", "defense.sigma=-1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert (
        "defense.sigma=-1: a noise multiplier is non-negative; use e.g. defense.sigma=1.0 or null"
        in done.stderr
    )
    assert list(tmp_path.iterdir()) == []


def test_every_packaged_option_satisfies_its_own_declarations():
    checked_options = 0
    for group, option, _ in config_options():
        if group not in PLUGIN_GROUPS:
            continue
        keys = OmegaConf.to_container(_option_node(Path(experiment.__file__).parent / "conf", group, option))
        if "_target_" in keys:  # interpolated keys (${topology.n}) take another group's checked value
            check_plugin(group, OmegaConf.create({k: v for k, v in keys.items() if "${" not in str(v)}))
            checked_options += 1
    assert checked_options > 50


def test_python_callers_meet_the_same_declaration():
    with pytest.raises(ConfigError, match=r"^protocol\.momentum=1\.0: momentum lies in \[0, 1\)"):
        DSGD(momentum=1.0)
    with pytest.raises(ConfigError, match=r"^topology\.n=2: the number of nodes lies in \[3, "):
        topologies.ring(2)
    assert topologies.ring(np.int64(5)).number_of_nodes() == 5  # numpy numbers pass (a config has none)
    assert DSGD(lr=0.5, dtype="float64").lr == 0.5


def test_refusal_reads_unions_literals_and_types():
    Share = Annotated[float, Range(gt=0, le=1, what="a share", eg=0.5)]
    assert refusal("g.k", Share | None, None) is None
    assert refusal("g.k", Share | None, 1) is None  # an int is a float here
    assert str(refusal("g.k", Share | None, 0)) == "g.k=0: a share lies in (0, 1]; use e.g. g.k=0.5 or null."
    assert str(refusal("g.k", Share, "a")) == "g.k='a': expected float in (0, 1]; give a value of that type."
    assert str(refusal("g.k", Literal[1, 2], True)).startswith("g.k=True: not one of its choices")
    assert refusal("g.k", Annotated[int, Range(ge=1)], True) is not None  # a bool is no count
    assert describe(Annotated[int, Range(ge=8, le=48)] | None) == "int in [8, 48] | null"
    assert describe(Literal["sum", "mean"]) == "'sum' | 'mean'"


def test_checked_names_the_group_and_leaves_types_to_python():
    @checked("g")
    def f(x: Annotated[float, Range(ge=0, what="x")] = 0.0, mode: Literal["a", "b"] = "a") -> float:
        return x

    assert f(np.float32(2.0)) == 2.0
    with pytest.raises(ConfigError, match=r"^g\.x=-1: x is non-negative; set g\.x >= 0\.$"):
        f(-1)
    with pytest.raises(ConfigError, match=r"^g\.mode='c'"):
        f(mode="c")


def test_list_shows_each_key_with_its_value_and_declaration(capsys):
    assert main(["list", "protocol"]) == 0
    out = capsys.readouterr().out
    assert "lr=0.5  float > 0" in out
    assert "'exact' | 'inexact' | 'qa'" in out
    admm = OmegaConf.to_container(_option_node(Path(experiment.__file__).parent / "conf", "protocol", "admm"))
    assert admm["theta"] == 0.5 and admm["_target_"].endswith("PDMM")  # an option extending pdmm
