"""Odd inputs a probe of new users' commands found: each refused in one sentence naming what to change
(exit status 2, nothing written), or said where it was silent."""

import re
from pathlib import Path

import pytest
from conftest import QUICK, refused

from decpriv import NO_USER_CONF
from decpriv.cli import main

pytestmark = pytest.mark.filterwarnings(f"ignore:{NO_USER_CONF}")


@pytest.mark.parametrize(
    "override, says",
    [
        ("name=", "name='': an empty name adds nothing to the run folder's name; give one or drop name="),
        ("name=héllo", "name=héllo: Hydra's override grammar cannot read this"),
        ("name=日本語", "quote the value or use letters, digits"),
        ("name=$(touch x)", "name=$(touch x): Hydra's override grammar cannot read this"),
        ("name=" + "a" * 250, "the run folder's name takes at most 100 characters; shorten it"),
    ],
)
def test_a_run_name_is_refused_for_what_it_is(tmp_path, monkeypatch, capsys, override, says):
    monkeypatch.chdir(tmp_path)
    assert says in refused(capsys, "run", override, *QUICK)
    assert not list(tmp_path.iterdir())  # no runs/<date>/ left behind, no file x made


def test_sweeps_that_would_have_no_job_or_a_glob(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    said = refused(capsys, "run", "-m", "seed=range(0)", *QUICK)
    assert said.startswith("error: seed=range(0): this sweep has no value")
    said = refused(capsys, "run", "-m", "topology=glob(ri*)", *QUICK)
    assert said.endswith("decpriv sweeps listed options, not glob(); write topology=ring")
    said = refused(capsys, "run", "-m", "topology=glob(*,exclude=[r*,e*,f*,k*,l*,d*,h*,s*,c*])", *QUICK)
    assert said.endswith("write topology=torus")
    assert not list(tmp_path.iterdir())


def test_the_users_conf_folder_says_which_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    experiments = Path("conf/experiment")
    experiments.mkdir(parents=True)
    (experiments / "broken.yaml").write_text("# @package _global_\nprotocol: {rounds: [\n")
    said = refused(capsys, "run", "experiment=broken", *QUICK)
    assert said.startswith("error: conf/experiment/broken.yaml: not valid YAML (") and "line 3" in said
    (experiments / "broken.yaml").unlink()

    Path("conf/topology").mkdir()
    Path("conf/topology/ring.yaml").write_text("_target_: networkx.cycle_graph\nn: 5\n")
    said = refused(capsys, "run", *QUICK)  # topology=ring is the default: the package's ring would run
    assert "conf/topology/ring.yaml: decpriv's own topology=ring comes first" in said
    assert "rename it (e.g. conf/topology/my_ring.yaml) and choose topology=my_ring" in said
    Path("conf/topology/ring.yaml").unlink()

    sweep = "# @package _global_\nhydra:\n  sweeper:\n    params:\n      protocl.rounds: 2,3\n"
    (experiments / "typo.yaml").write_text(sweep)
    said = refused(capsys, "run", "-m", "experiment=typo", *QUICK)
    assert said == "error: Could not override 'protocl.rounds'. (did you mean protocol.rounds?)"
    (experiments / "sweep.yaml").write_text(sweep.replace("protocl", "protocol"))
    assert main(["run", "experiment=sweep", *QUICK]) == 0  # without -m: one run, and a note says so
    assert (
        "declares a sweep of 2 jobs over protocol.rounds (hydra.sweeper.params); without -m it runs once"
        in (" ".join(capsys.readouterr().err.split()))
    )


def test_readers_say_what_a_folder_is_not(tmp_path, monkeypatch, capsys):
    import json
    import socket

    monkeypatch.chdir(tmp_path)
    assert main(["run", *QUICK, "hydra.run.dir=done"]) == 0
    capsys.readouterr()
    said = refused(capsys, "diff", "done/history.csv", "done")
    assert "done/history.csv is one CSV table and done a folder, which have nothing to pair" in said
    Path("live").mkdir()  # a run that started and has written no table yet
    meta = {"status": "running", "pid": 1, "host": socket.gethostname(), "started": "2999-01-01T00:00:00"}
    Path("live/run.json").write_text(json.dumps({**meta, "heartbeat": "2999-01-01T00:00:00"}))
    assert "live: the run is still running (process 1 on" in refused(capsys, "report", "live")
    assert main(["diff", "--brief", "done", "live"]) == 1  # different, said without a traceback
    assert "differ" in capsys.readouterr().out
    said = refused(capsys, "runs", "seed=0", "seed=1")
    assert said == "error: seed='1': seed is filtered twice (seed=0 too), and a run has one seed; give one."


def test_data_files_that_are_not_the_data_set_and_a_refused_root_leaves_nothing(
    tmp_path, monkeypatch, capsys
):
    from decpriv.data.datasets import _kept_only_when_read

    monkeypatch.chdir(tmp_path)
    raw = Path("m/MNIST/raw")
    raw.mkdir(parents=True)
    for part in ("train-images-idx3", "train-labels-idx1", "t10k-images-idx3", "t10k-labels-idx1"):
        (raw / f"{part}-ubyte").write_text("garbage\n")
    said = refused(capsys, "run", "data=mnist", "data.root=m", *QUICK)
    assert said.startswith("error: data.root='m': the mnist files there do not read as mnist (AssertionError")
    Path("a").mkdir()
    Path("a/a9a").write_text("garbage line\n")
    Path("a/a9a.t").write_text("1 1:1\n")
    said = refused(capsys, "run", "data=libsvm", "data.root=a", *QUICK)
    assert "the a9a files there do not read as a9a (ValueError: could not convert string to float" in said
    with pytest.raises(OSError), _kept_only_when_read(Path("new/deep/root")):
        Path("new/deep/root/MNIST/raw").mkdir(parents=True)  # what a download makes before it fails
        raise OSError("offline")
    assert not Path("new").exists()


def test_a_resumed_preset_sweep_keeps_its_completed_jobs(tmp_path, monkeypatch, capsys):
    """A preset's own sweep is not built job by job before it runs: its jobs find their completed runs
    themselves, and the ledger keeps them (not 'never started')."""
    import json

    monkeypatch.chdir(tmp_path)
    Path("conf/experiment").mkdir(parents=True)
    sweep = "# @package _global_\nhydra:\n  sweeper:\n    params:\n      protocol.rounds: 2,3\n"
    Path("conf/experiment/sweep.yaml").write_text(sweep)
    line = ["run", "-m", "experiment=sweep", "topology.n=4", "~attack", "plots=false", "hydra.sweep.dir=ps"]
    assert main(line) == 0
    files = [p for p in sorted(Path("ps").rglob("*")) if p.is_file()]
    runs = [(p.read_bytes(), p.stat().st_mtime_ns) for p in files]
    # nothing to do: no job launched, and not a byte written (ledger, multirun.yaml, summary.csv: issue 54)
    assert main([*line, "resume=true"]) == 0
    assert [(p.read_bytes(), p.stat().st_mtime_ns) for p in files] == runs
    Path("ps/1/nodes.csv").unlink()
    assert main([*line, "resume=true"]) == 0  # job 1 damaged: rerun; job 0 found completed by the sweeper
    assert json.loads(Path("ps/ledger.json").read_text())["kept"] == [0]
    assert Path("ps/summary.csv").read_text().splitlines()[1].startswith("0,completed,2,")
    assert Path("ps/summary.csv").read_text().splitlines()[2].startswith("1,completed,3,")


def test_a_key_of_another_option_and_a_hook_that_takes_no_graph(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    said = refused(capsys, "run", "gossip_matrix.function=os.getcwd", *QUICK)
    assert said.endswith("(choose gossip_matrix=hook (it reads gossip_matrix.function))")
    said = refused(capsys, "run", "gossip_matrix=hook", "gossip_matrix.function=os.getcwd", *QUICK)
    assert "'os.getcwd': the function is called with the graph alone and does not take it" in said
    said = refused(capsys, "run", "gossip_matrix=hook", "gossip_matrix.function=builtins.str", *QUICK)
    assert "'builtins.str': its result is not an (n, n) matrix" in said


@pytest.mark.parametrize("model", ["softmax", "mlp"])
def test_a_classifier_on_regression_data(tmp_path, monkeypatch, capsys, model):
    monkeypatch.chdir(tmp_path)
    said = refused(capsys, "run", "data=least_squares", f"model={model}", "protocol.batch_size=null", *QUICK)
    assert said == (
        f"error: model='{model}': this model classifies, and the data has 0 classes (a regression task); "
        "use model=linear_regression for regression data, or classification data (data=digits)."
    )


def test_an_adversary_key_where_the_run_has_no_adversary(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    said = refused(capsys, "run", "attack=audit", "adversary.count=3", "protocol.rounds=2", "topology.n=4")
    assert said == (
        "error: adversary.count='3': attack=audit runs no adversary (adversary=none: every node honest), "
        "so no adversary key is read; drop it, or choose an attack that has an adversary."
    )


def test_every_node_corrupt_is_refused_without_naming_a_key_not_set(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    nodes = "adversary.nodes=[" + ",".join(map(str, range(16))) + "]"
    said = refused(capsys, "run", nodes, "protocol.rounds=2")
    assert "adversary='16 corrupt nodes of 16': no honest node neighbours the corrupt ones" in said
    assert "(adversary.count <= 15, or fewer adversary.nodes)" in said


@pytest.mark.parametrize(
    "argv, says",
    [
        (["run", "attack=diffgrd"], "attack=diffgrd: attack has no option diffgrd"),
        (["run", "attack=signflip"], "did you mean sign_flip?"),
        (["run", "-m", "attack=mia,diffgrd"], "did you mean diffgrad?"),
        (["run", "protocol=pdmm", "attack=gausian"], "did you mean gaussian?"),
    ],
)
def test_a_misspelt_option_of_an_optional_group_is_refused(tmp_path, monkeypatch, capsys, argv, says):
    """Hydra drops an optional group whose option it cannot find: the run trained with no attack."""
    monkeypatch.chdir(tmp_path)
    assert says in refused(capsys, *argv, "protocol.rounds=2", "topology.n=4")
    assert not list(tmp_path.iterdir())


def test_a_key_added_to_a_group_with_no_option_chosen_is_named(tmp_path, monkeypatch, capsys):
    """``+defense.f=1`` beside the default defense=none made a defense of one key and no plugin; it was
    refused naming neither the key nor the fix ("defense: the config has no _target_")."""
    monkeypatch.chdir(tmp_path)
    said = refused(capsys, "run", "+defense.f=1", "protocol.rounds=2")
    assert said == (
        "error: defense.f=1: no defense is chosen, so nothing reads it; choose one that reads it first "
        "(defense=NAME; `decpriv list defense` shows their keys)."
    )
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("plus", ["+", "++"])
def test_a_misspelt_key_added_with_plus_gets_its_close_match(tmp_path, monkeypatch, capsys, plus):
    """``++protocol.rouns=3`` reaches the plugin's own check (Hydra adds the key): it lists the keys, and
    names the close one as Hydra's refusal of ``protocol.rouns=3`` does."""
    monkeypatch.chdir(tmp_path)
    said = refused(capsys, "run", f"{plus}protocol.rouns=3")
    assert (
        "protocol.rouns=3: DSGD has no such parameter; did you mean protocol.rounds? (known keys: rounds,"
        in said
    )


def test_a_protocol_without_a_default_attack_still_runs_none():
    from decpriv.api import compose_config

    cfg, choices = compose_config(["protocol=pdmm"])
    assert choices["attack"] == "pdmm_default" and cfg.get("attack") is None


DECOR = ["defense=decor", "protocol.rounds=2", "topology.n=4", "~attack", "plots=false"]


@pytest.mark.parametrize(
    "overrides, says",
    [
        (
            ["defense.sigma_cor=1.0"],
            "defense.sigma_cor=1.0: with a privacy target (defense.epsilon=10) the accountant calibrates "
            "sigma_cor to meet it, so this value would be replaced",
        ),
        (
            ["defense.sigma_cdp=1", "defense.cdp_excess=3"],
            "defense.cdp_excess=3: is not read beside defense.sigma_cdp=1, which it would have set",
        ),
        (
            ["defense.epsilon=null", "defense.sigma_cdp=1", "defense.sigma_cor=2", "defense.cdp_excess=3"],
            "defense.cdp_excess=3: is not read while defense.epsilon=null",
        ),
        (
            ["accountant=secldp", "defense.sigma_cdp=1", "accountant.cdp_excess=3"],
            "accountant.cdp_excess=3: it sets sigma_cdp when the accountant calibrates it, and "
            "defense.sigma_cdp=1 is given, so it would do nothing",
        ),
    ],
)
def test_a_decor_noise_the_user_set_is_never_replaced(tmp_path, monkeypatch, capsys, overrides, says):
    monkeypatch.chdir(tmp_path)
    assert says in refused(capsys, "run", *DECOR, *overrides)
    assert not list(tmp_path.iterdir())


def test_an_ldp_sigma_beside_a_target_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    said = refused(capsys, "run", *DECOR, "defense=ldp", "defense.epsilon=5", "defense.sigma=2")
    assert "defense.sigma=2: is not read while defense.epsilon=5 is set" in said


def test_a_presets_sigma_beside_its_target_is_refused_naming_the_preset(tmp_path, monkeypatch, capsys):
    """A user's experiment preset that sets both defense.sigma and defense.epsilon would run the calibrated
    sigma and record its own as if used: refused as the command line's would be, naming the preset's file;
    the same preset without sigma runs past the check."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    preset = "# @package _global_\ndefaults:\n  - override /defense: ldp\ndefense:\n  epsilon: 5\n"
    (tmp_path / "conf" / "experiment" / "mine.yaml").write_text(preset + "  sigma: 2\n")
    said = refused(capsys, "run", *DECOR[1:], "experiment=mine")
    assert "defense.sigma=2: is not read while defense.epsilon=5 is set" in said
    assert "drop defense.sigma from experiment=mine (conf/experiment/mine.yaml)" in said
    (tmp_path / "conf" / "experiment" / "mine.yaml").write_text(preset)
    from decpriv.api import compose_config
    from decpriv.config.validation import check_unread

    cfg, choices = compose_config(["experiment=mine"])
    check_unread(cfg, [], choices)
    # a key no plugin of the preset's reads: named with the preset that set it, not the command line's
    (tmp_path / "conf" / "experiment" / "mine.yaml").write_text(preset + "  f: 2\n")
    said = refused(capsys, "run", *DECOR[1:], "experiment=mine")
    assert "defense.f=2: LocalDP has no such parameter" in said
    assert said.endswith("(experiment=mine (conf/experiment/mine.yaml) sets defense.f).")
    said = refused(capsys, "run", *DECOR[1:], "experiment=mine", "defense.f=3")
    assert "defense.f=3" in said and "sets defense.f" not in said


def test_a_decor_excess_the_accountants_replaces_is_refused(tmp_path, monkeypatch, capsys):
    """accountant.cdp_excess replaces defense.cdp_excess: both given, the run used 5 and recorded 3."""
    monkeypatch.chdir(tmp_path)
    said = refused(
        capsys, "run", *DECOR, "accountant=secldp", "defense.cdp_excess=3", "accountant.cdp_excess=5"
    )
    assert said == (
        "error: defense.cdp_excess=3: is not read beside accountant.cdp_excess=5, which replaces it; "
        "drop defense.cdp_excess."
    )
    assert not list(tmp_path.iterdir())


def test_a_target_at_a_large_delta_is_calibrated_not_a_math_error():
    """At delta = 0.01 a strong noise's RDP epsilon is 0, whose log stopped the calibration (ValueError:
    math domain error, exit 1); the root is where epsilon meets the target, as at a small delta."""
    from decpriv.privacy.rdp import calibrate_noise_multiplier, gaussian_epsilon

    sigma = calibrate_noise_multiplier(2.0, 0.01, 3, [1.0], 2.0)
    assert gaussian_epsilon(sigma / 2.0, 3, 0.01, 1.0, "poisson")[0] == pytest.approx(2.0, rel=1e-6)


def test_random_walks_fix_names_a_level_only_where_the_defense_has_one(tmp_path, monkeypatch, capsys):
    """DP-SGD is example-level and has no defense.level: its fix named one, which Hydra then refused."""
    monkeypatch.chdir(tmp_path)
    line = ["accountant=random_walk", "protocol.rounds=2", "~attack", "plots=false"]
    dpsgd = refused(capsys, "run", "defense=dpsgd", *line)
    assert dpsgd.endswith("use defense.sigma=4 or a smaller accountant.alpha.")
    assert "use defense.sigma=4 defense.level=example" in refused(capsys, "run", "defense=ldp", *line)


def test_a_run_without_noise_reads_epsilon_inf_in_every_listing(tmp_path, monkeypatch, capsys):
    """defense.sigma=0: epsilon inf, whose four significant digits stopped `decpriv runs` and the sweep's
    show (OverflowError) for every run beside it."""
    monkeypatch.chdir(tmp_path)
    line = ["run", "-m", "defense=dpsgd", "defense.sigma=0,1", "protocol.rounds=2", "~attack", "plots=false"]
    assert main([*line, "hydra.sweep.dir=sw"]) == 0
    capsys.readouterr()
    assert main(["show", "sw"]) == 0 and main(["runs", "--root", "."]) == 0
    assert "epsilon=inf" in capsys.readouterr().out


def test_dp_accountings_numerical_fallback_is_no_value(caplog):
    """At noise 2.8e8 a step, dp-accounting's RDP of a sampled Gaussian rounds below zero and it returns
    epsilon 0 with an absl warning: no value (NaN), never a headline; its genuine 0 (the KL bound at an
    unsampled Gaussian: total variation below delta) stays."""
    import math

    from decpriv.privacy.library import library_rdp_epsilon

    assert math.isnan(library_rdp_epsilon("poisson", 0.3, 2.8e8, 2, 1e-5))
    assert "Negative Renyi" not in caplog.text
    assert library_rdp_epsilon("gaussian", 1.0, 1e6, 2, 1e-5) == 0.0
    assert library_rdp_epsilon("poisson", 0.3, 1e2, 2, 1e-5) == pytest.approx(0.0218055, rel=1e-5)


def test_dash_m_works_anywhere_on_the_line(tmp_path, monkeypatch, capsys):
    """``-m`` after the overrides: Hydra's parser read decpriv's own sweeper override after the flag as an
    unrecognized argument (exit 1, an empty sweep folder)."""
    monkeypatch.chdir(tmp_path)
    assert main(["run", "seed=0,1", *QUICK, "hydra.sweep.dir=sw", "-m"]) == 0
    assert main(["run", "seed=0,1", "-m", *QUICK, "hydra.sweep.dir=sw2"]) == 0
    capsys.readouterr()
    for sweep in ("sw", "sw2"):
        assert sorted(p.name for p in Path(sweep).iterdir() if p.name.isdigit()) == ["0", "1"]


@pytest.mark.parametrize(
    "override, says",
    [
        (
            "seed=0,1,",
            "seed=0,1,: the list of values ends with a comma, so one value is empty; write seed=0,1",
        ),
        ("seed=,0", "seed=,0: the list of values starts with a comma, so one value is empty; write seed=0"),
        ("seed=0,,1", "seed=0,,1: the list of values has two commas in a row"),
    ],
)
def test_an_empty_value_in_a_sweep_is_named(tmp_path, monkeypatch, capsys, override, says):
    monkeypatch.chdir(tmp_path)
    assert says in refused(capsys, "run", "-m", override, *QUICK)
    assert not list(tmp_path.iterdir())


def test_a_large_sweep_says_it_is_checking_its_jobs(monkeypatch, capsys):
    """5000 jobs are checked for minutes before the first starts: a line says so (a bar at a terminal)."""
    from decpriv.cli import precheck

    monkeypatch.setattr(precheck, "SHOWN_FROM", 3)
    plan = precheck.precheck(["seed=range(3)", *QUICK], True)
    assert plan.count == 3 and len(plan.digests) == 3
    assert "checking each of the 3 jobs before any starts" in capsys.readouterr().err


def test_a_signal_after_every_job_ended_says_so(tmp_path, monkeypatch, capsys):
    from decpriv.cli.run import _interrupted

    monkeypatch.chdir(tmp_path)
    assert main(["run", "-m", "seed=0,1", *QUICK, "hydra.sweep.dir=sw"]) == 0
    capsys.readouterr()
    stop = KeyboardInterrupt()
    assert _interrupted(stop, True, Path("sw"), 2) == 130
    said = " ".join(capsys.readouterr().err.split())
    assert "after every job had ended: all 2 jobs of the sweep in sw completed; nothing to rerun" in said
    assert "did not complete" not in said


def test_a_report_that_cannot_be_written_whole_leaves_none_or_the_earlier(tmp_path, monkeypatch, capsys):
    """A full disk while the report is written: exit 1 in one line, and the report folder is the earlier
    one (or absent), never aggregate.csv and plots without report.html."""
    import errno
    import shutil

    from decpriv.report import document

    monkeypatch.chdir(tmp_path)
    assert main(["run", *QUICK, "hydra.run.dir=r"]) == 0
    real = document.write_atomic

    def full(path, text):
        if path.name == "report.html":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, text)

    monkeypatch.setattr(document, "write_atomic", full)
    assert main(["report", "r"]) == 1
    assert not Path("r/report").exists() and not list(Path("r").glob(".report.*"))
    assert "No space left on device" in capsys.readouterr().err
    monkeypatch.setattr(document, "write_atomic", real)
    assert main(["report", "r"]) == 0
    earlier = sorted(p.name for p in Path("r/report").rglob("*"))
    monkeypatch.setattr(document, "write_atomic", full)
    assert main(["report", "r"]) == 1
    capsys.readouterr()
    assert sorted(p.name for p in Path("r/report").rglob("*")) == earlier
    shutil.rmtree("r")


def test_a_plugin_module_that_does_not_parse_is_named_with_its_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    Path("conf/topology").mkdir(parents=True)
    Path("conf/topology/mine.yaml").write_text("_target_: broken_graphs.graph\nn: 4\n")
    Path("broken_graphs.py").write_text("def graph(n):\n    return (\n")
    said = refused(capsys, "run", "topology=mine", *QUICK)
    assert said.startswith("error: topology._target_='broken_graphs.graph': its module does not parse: ")
    assert "broken_graphs.py, line 2: '(' was never closed; fix that line." in said


def test_a_binary_yaml_names_its_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("conf/topology").mkdir(parents=True)
    Path("conf/topology/bin.yaml").write_bytes(b"\x00\x01\x02\xff\xfe")
    said = refused(capsys, "run", "topology=bin", *QUICK)
    assert said.startswith("error: conf/topology/bin.yaml: not valid YAML ('utf-8' codec can't decode")


@pytest.mark.parametrize(
    "argv, says",
    [
        (["~topology"], "error: ~topology: every run builds a topology, so it cannot be dropped; choose one"),
        (["~adversary"], "choose one instead, adversary=none (every node honest)"),
        (["~protocol"], "error: ~protocol: every run builds a protocol"),
        (["seed=0,1"], "(a list of values is a sweep: add -m, one job a value)"),
    ],
)
def test_a_probe_of_odd_command_lines_gets_one_sentence_each(tmp_path, monkeypatch, capsys, argv, says):
    """Found by the issue-54 probe: ~GROUP of a group every run builds failed mid-build (exit 1, "not in
    struct"); a list without -m got Hydra's "Ambiguous value" alone."""
    monkeypatch.chdir(tmp_path)
    assert says in refused(capsys, "run", *argv)
    assert not list(tmp_path.iterdir())


def test_a_process_limit_above_the_systems_is_refused(tmp_path, monkeypatch, capsys):
    """sandbox.processes=100000 passed the hard RLIMIT_NPROC, and the sealed attack died starting
    (a ConnectionResetError named as the attack's result)."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard process limit here")
    monkeypatch.chdir(tmp_path)
    said = refused(capsys, "run", f"sandbox.processes={hard}", *QUICK)
    assert f"more than this machine lets one user start ({hard}, RLIMIT_NPROC)" in said
    assert f"use sandbox.processes={max(hard - 1024, 0)} or fewer" in said


def test_a_pld_too_large_to_discretise_is_no_value_not_a_hang():
    """defense=dpsgd defense.epsilon=1e9 calibrated a noise multiplier near 1e-4, whose PLD (10^10 points a
    step) ran past 5 minutes in the account step; it is now no value, at once, and RDP's stands."""
    import math
    import time

    from decpriv.privacy.library import pld_epsilon

    began = time.perf_counter()
    assert math.isnan(pld_epsilon("poisson", 0.5, 1e-4, 3, 1e-5))
    assert time.perf_counter() - began < 1
    assert pld_epsilon("poisson", 0.5, 0.3, 3, 1e-5) == pytest.approx(35.6162, rel=1e-4)


def test_a_flag_argparse_refuses_is_one_sentence(capsys):
    """``decpriv run --cfg jobb`` printed argparse's seven-line usage before the error."""
    said = refused(capsys, "run", "--cfg", "jobb")
    assert said == (
        "error: decpriv run: argument -c/--cfg: invalid choice: 'jobb' (choose from 'job', 'hydra', 'all'); "
        "decpriv run --help shows its arguments."
    )


def test_a_parallel_sweeps_idle_workers_leave_ctrl_c_to_the_sweep(tmp_path, monkeypatch):
    """A Ctrl-C landing in an idle loky worker (between jobs, or after the last) printed loky's traceback
    under the sweep's one line: the workers that checked the jobs now ignore it until a job starts
    (cli/job.py restores it there; a job that completes ignores it again)."""
    import signal

    from joblib import Parallel, delayed

    from decpriv.cli.precheck import joblib_options, precheck

    monkeypatch.chdir(tmp_path)
    line = ["seed=0,1", *QUICK, "hydra/launcher=parallel", "hydra.launcher.n_jobs=2"]
    plan = precheck(line, True)
    handlers = Parallel(**joblib_options(plan.hydra.launcher))(
        delayed(lambda: signal.getsignal(signal.SIGINT))() for _ in range(4)
    )
    assert handlers == [signal.SIG_IGN] * 4


@pytest.mark.parametrize(
    "typed, said",
    [
        (["defense=ldp", "defense.epsilon=5", "defense.sigma=2"], "defense.sigma=2: is not read while"),
        (
            ["defense=decor", "defense.sigma_cdp=1.0", "defense.cdp_excess=2.0"],
            "defense.cdp_excess=2.0: is not read",
        ),
    ],
)
def test_the_python_api_refuses_a_typed_value_it_would_not_use(tmp_path, monkeypatch, typed, said):
    """decpriv.api.run takes overrides as the CLI does: a value it would replace or ignore is refused there
    too, before any folder exists."""
    from decpriv import api
    from decpriv.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=re.escape(said)):
        api.run([*QUICK, *typed], out_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()
