"""One attack cannot reach the next (issue 53): each sealed attack process has its own /tmp, /dev/shm and
System V IPC, no folder on its import path is writable, and the zygote that forks every session never
runs a plugin's code. The payload (tests/isolation_attacks.py) is shown to work where it is on decpriv's
import path (the control), then shown to reach no later attack process.
"""

import os
import subprocess
from pathlib import Path

import isolation_attacks
import pandas as pd
import pytest
import sandbox_attacks
from conftest import DECPRIV, run_cli

from decpriv import api
from decpriv.seal import zygote

TESTS = Path(__file__).parent
MIA = ["attack=mia", "protocol.rounds=3", "plots=false"]
sealed = pytest.mark.skipif(zygote.seal_kind() != "bubblewrap", reason="no bubblewrap here: the process seal")


@pytest.fixture
def planter_conf(tmp_path, monkeypatch):
    """``attack=planter`` as a user adds it: ./conf/attack/planter.yaml."""
    (tmp_path / "conf" / "attack").mkdir(parents=True)
    (tmp_path / "conf" / "attack" / "planter.yaml").write_text("_target_: isolation_attacks.Planter\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def auc(folder: Path) -> float:
    return float(pd.read_csv(folder / "summary.csv").mia_received_auc.iloc[0])


def planted(folder: Path) -> dict[str, str]:
    table = pd.read_csv(folder / "planter.csv", keep_default_na=False)
    return dict(zip(table.place, table.outcome, strict=True))


def test_the_payload_changes_decpriv_mia_where_it_is_imported(tmp_path):
    """The control: the planter's files, on decpriv's import path as the old seal's /tmp was, make
    ``attack=mia`` test zeroed models: AUC 0.5 (every score a tie) where the honest run finds 0.7+."""
    payload = tmp_path / "payload"
    assert isolation_attacks.plant_payload(str(payload)) == "ok"
    runs = {}
    for name, path in (("honest", [str(TESTS)]), ("planted", [str(payload), str(TESTS)])):
        run_cli("run", *MIA, f"hydra.run.dir={name}", cwd=tmp_path, check=True, pythonpath=path)
        runs[name] = auc(tmp_path / name)
    assert runs["honest"] > 0.7 and runs["planted"] == 0.5


@sealed
def test_an_attack_plants_nothing_for_the_next_job(planter_conf):
    """Jobs one after the other in one process (a sweep's basic launcher, a parallel launcher's worker)
    share one zygote: the planter's payload, written into its /tmp, /dev/shm and user site, reaches
    neither the next planter nor decpriv's MIA after it, whose AUC is the honest one to the bit; every
    folder of its import path, and /dev, refuse the write."""
    api.run(MIA, out_dir=planter_conf / "honest")
    api.run(["attack=planter", "protocol.rounds=3"], out_dir=planter_conf / "first")
    api.run(MIA, out_dir=planter_conf / "after")
    api.run(["attack=planter", "protocol.rounds=3"], out_dir=planter_conf / "second")
    first, second = planted(planter_conf / "first"), planted(planter_conf / "second")
    assert first["/tmp"] == "ok" and first["/dev/shm"] == "ok" and first["shm"] == "ok"  # its own
    own = ("found", "shm", "/tmp", "/dev/shm")  # and its user site, under its own /tmp (HOME)
    elsewhere = {p: o for p, o in first.items() if p not in own and not p.startswith("/tmp/.local/")}
    assert str(TESTS) in elsewhere and "/dev" in elsewhere  # the import path's folders, /dev
    assert set(elsewhere.values()) == {"refused EROFS"}, elsewhere
    assert second["found"] == "nothing", second["found"]
    assert auc(planter_conf / "after") == auc(planter_conf / "honest")


@sealed
def test_a_plugins_import_runs_in_no_later_attack_process(planter_conf):
    """A sweep ``attack=patcher,mia`` in one process: the patcher's module patches the MIA as it is
    imported, in the pipeline and in its own sealed process, never in the zygote that forks the next
    job's: job 1's AUC is the honest one to the bit (the control above: the same payload, imported there,
    makes it 0.5)."""
    api.run(MIA, out_dir=planter_conf / "honest")
    (planter_conf / "conf" / "attack" / "patcher.yaml").write_text("_target_: isolation_patcher.Patcher\n")
    line = ["run", "-m", "attack=patcher,mia", *MIA[1:], "hydra.sweep.dir=sweep"]
    run_cli(*line, cwd=planter_conf, check=True, pythonpath=[str(TESTS)])
    assert planted(planter_conf / "sweep" / "0")["found"] == "nothing"
    assert auc(planter_conf / "sweep" / "1") == auc(planter_conf / "honest")


@sealed
def test_a_symlink_on_the_import_path_binds_no_run_folder(tmp_path):
    """``cd project && PYTHONPATH=. decpriv run attack=escape``, the plugin beside ./conf, with a symlink
    to ``.`` in the project: the sealed process sees the project's modules, by their names, and neither
    the symlink nor the runs, the data or the conf behind it. Control: here, the link reaches them all."""
    project = tmp_path / "project"
    (project / "conf" / "attack").mkdir(parents=True)
    (project / "conf" / "attack" / "escape.yaml").write_text("_target_: mine.Escape\nways: []\nwhen: run\n")
    (project / "mine.py").write_text("from sandbox_attacks import Escape  # noqa: F401\n")
    (project / "data").mkdir()
    (project / "data" / "private.csv").write_text("secret\n")
    (project / "link").symlink_to(".")
    ways = [f"list:{project}", f"list:{project}/link", f"list:{project}/runs", f"list:{project}/link/data"]
    control = {way: sandbox_attacks.listing(way.partition(":")[2]) for way in ways}
    assert control[f"list:{project}/link"] == "conf data link mine.py"
    assert control[f"list:{project}/link/data"] == "private.csv"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([".", str(TESTS)]), "HYDRA_FULL_ERROR": "0"}
    listed = ",".join(f"'{way}'" for way in ways)
    done = subprocess.run(
        [str(DECPRIV), "run", "attack=escape", "protocol.rounds=2", f"attack.ways=[{listed}]",
         "hydra.run.dir=runs/now"],
        cwd=project, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    table = pd.read_csv(project / "runs" / "now" / "escape.csv", keep_default_na=False)
    seen = dict(zip(table.way, table.outcome, strict=True))
    assert seen == {
        f"list:{project}": "mine.py",
        f"list:{project}/link": "missing",
        f"list:{project}/runs": "missing",
        f"list:{project}/link/data": "missing",
    }
