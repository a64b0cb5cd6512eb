"""Nothing lost, nothing unrecorded: a resumed run never replaces another config's run, a sweep never runs
one job twice, and the run folder records what ran (issue 40's first half)."""

import json
from pathlib import Path

import pytest
from conftest import QUICK, refused

from decpriv import NO_USER_CONF
from decpriv.cli import main

pytestmark = pytest.mark.filterwarnings(f"ignore:{NO_USER_CONF}")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_resume_into_a_run_of_another_config_is_refused_and_touches_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", *QUICK, "hydra.run.dir=r"]) == 0
    capsys.readouterr()
    before = _files(tmp_path / "r")
    assert "summary.csv" in before
    said = refused(capsys, "run", *QUICK, "seed=1", "hydra.run.dir=r", "resume=true")
    assert said == (
        "error: hydra.run.dir='r': resume=true finishes the run this folder holds, and it ran without those "
        "overrides where this command runs seed=1; repeat that run's command line with resume=true, or "
        "choose a new folder for this one."
    )
    said = refused(capsys, "run", *QUICK[:-2], "protocol=gossip", "hydra.run.dir=r", "resume=true")
    assert "it ran ~attack plots=false where this command runs protocol=gossip;" in said
    assert _files(tmp_path / "r") == before
    # its own config, with keys that change no digest: skipped, and nothing rewritten (not even .hydra/)
    assert main(["run", *QUICK, "hydra.run.dir=r", "resume=true", "name=other", "debug=true"]) == 0
    assert "skipped: already completed" in capsys.readouterr().out
    assert _files(tmp_path / "r") == before


@pytest.mark.parametrize(
    "swept, says",
    [
        ("seed=0,0", "seed=0,0: seed lists 0 twice, so the sweep would run the same job twice"),
        ("seed=0,1,0.0", "seed=0,1,0.0: seed lists 0 twice (as 0.0), so"),
        ("topology=ring,torus,ring", "topology lists ring twice"),
    ],
)
def test_a_sweep_that_lists_a_value_twice_is_refused_before_any_job(
    tmp_path, monkeypatch, capsys, swept, says
):
    monkeypatch.chdir(tmp_path)
    assert says in refused(capsys, "run", "-m", swept, *QUICK)
    assert not list(tmp_path.iterdir())


def test_a_preset_sweep_whose_command_line_repeats_a_value_isrefused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("conf/experiment").mkdir(parents=True)
    sweep = "# @package _global_\nhydra:\n  sweeper:\n    params:\n      seed: range(3)\n"
    Path("conf/experiment/seeds.yaml").write_text(sweep)
    said = refused(capsys, "run", "-m", "experiment=seeds", "seed=4,4", *QUICK)
    assert "seed lists 4 twice" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf"]


def test_a_federated_run_records_what_it_read_of_its_topology(tmp_path, monkeypatch, capsys):
    """FedSGD reads of its graph only n (and a star's centre, the server): a ring and a complete graph train
    the same model, and summary.csv says so beside ``topology=ring``."""
    import pandas as pd

    monkeypatch.chdir(tmp_path)
    summaries, histories = {}, {}
    for topology in ("ring", "complete", "star"):
        line = [
            "run",
            "protocol=fedsgd",
            f"topology={topology}",
            "topology.n=6",
            *QUICK[::2],
            f"hydra.run.dir={topology}",
        ]
        assert main(line) == 0
        summaries[topology] = pd.read_csv(f"{topology}/summary.csv").iloc[0]
        histories[topology] = pd.read_csv(f"{topology}/history.csv")
    pd.testing.assert_frame_equal(histories["ring"], histories["complete"])  # the ring's edges unread
    assert summaries["ring"].topology == "ring"
    assert summaries["ring"].topology_read == summaries["complete"].topology_read
    assert summaries["ring"].topology_read == "n only: 6 clients of an implicit server, no edge read"
    assert summaries["star"].topology_read == "star: node 0 the server, 5 clients"
    assert not histories["star"].equals(histories["ring"])  # five clients, not six: another model


def test_batch_size_auto_is_recorded_as_the_size_that_ran(tmp_path, monkeypatch, capsys):
    """``auto`` is min(16, the smallest local set): 40 nodes share the default 270 digits' training split,
    so it settles below 16; summary.csv, run.json and ``show`` give that number, resume still finds the run."""
    import json

    import pandas as pd
    from conftest import build

    monkeypatch.chdir(tmp_path)
    line = ["protocol.rounds=2", "topology.n=40", "~attack", "plots=false"]
    smallest = int(build(*line).local.counts.min())  # the build alone, no run folder
    assert 1 <= smallest < 16
    assert main(["run", *line, "hydra.run.dir=b"]) == 0
    assert pd.read_csv("b/summary.csv").loc[0, "protocol.batch_size"] == smallest
    settled = json.loads(Path("b/run.json").read_text())["settled"]
    assert settled == {"protocol.batch_size": {"requested": "auto", "ran": smallest}}
    capsys.readouterr()
    assert main(["show", "b"]) == 0
    assert f"batch_size={smallest} (auto)" in " ".join(capsys.readouterr().out.split())
    assert main(["run", *line, "hydra.run.dir=b", "resume=true"]) == 0  # the digest is the request's
    assert "skipped: already completed" in capsys.readouterr().out


# --- issue 54 (B): a damaged run is never "completed"; a resume with nothing to do touches nothing ---


def _stamps(folder: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every file's bytes and every entry's mtime (folders too) under ``folder``."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def _cut(folder: Path) -> str:
    data = (folder / "mia.csv").read_bytes()
    (folder / "mia.csv").write_bytes(data[: len(data) // 2])
    return f"its mia.csv is cut ({len(data) // 2} of the {len(data)} bytes the run wrote)"


def _edit_cell(folder: Path) -> str:
    text = (folder / "history.csv").read_text().splitlines()
    cells = text[1].split(",")
    cells[-1] = "0.999"
    (folder / "history.csv").write_text("\n".join([text[0], ",".join(cells), *text[2:]]) + "\n")
    return "its history.csv was changed since the run wrote it"


def _delete_table(folder: Path) -> str:
    (folder / "nodes.csv").unlink()
    return "its nodes.csv is gone"


def _edit_rows(folder: Path) -> str:
    meta = json.loads((folder / "run.json").read_text())
    meta["tables"]["nodes.csv"]["rows"] += 1
    (folder / "run.json").write_text(json.dumps(meta, indent=2))
    return "its run.json was edited since the run wrote it"


def _edit_status(folder: Path) -> str:
    text = (folder / "run.json").read_text()
    (folder / "run.json").write_text(text.replace('"seed": 0', '"seed": 1'))
    return "its run.json was edited since the run wrote it"


def _extra_table(folder: Path) -> str:
    (folder / "extra.csv").write_text("a,b\n1,2\n")  # shown as the run's by show, diff, api.load
    return "its extra.csv is not a table the run wrote"


def _other_runs_run_json(folder: Path) -> str:
    """Another run's run.json (another seed and digest, its own nodes.csv) put in this folder."""
    from decpriv.report.run_folder import sealed_json

    meta = json.loads((folder / "run.json").read_text())
    meta.update(seed=1, config_digest="0123456789abcdef")
    meta["tables"]["nodes.csv"]["sha256"] = "0" * 64
    (folder / "run.json").write_text(sealed_json(meta))
    return "its nodes.csv was changed since the run wrote it"


def _delete_run_json(folder: Path) -> str:
    (folder / "run.json").unlink()
    return "its run.json is gone"


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("whole")
    run = ["run", "protocol.rounds=2", "topology.n=4", "plots=false", f"hydra.run.dir={base / 'r'}"]
    assert main(run) == 0
    return base / "r"


@pytest.mark.parametrize(
    "damage",
    [
        _cut,
        _edit_cell,
        _delete_table,
        _edit_rows,
        _edit_status,
        _extra_table,
        _other_runs_run_json,
        _delete_run_json,
    ],
)
def test_a_damaged_run_is_refused_by_every_reader_and_resume_reruns_it(
    whole_run, tmp_path, monkeypatch, capsys, damage
):
    """A table cut, a cell edited, a table deleted, run.json's mark or a field edited, run.json deleted:
    runs lists it damaged without its headline; show, report, diff, plot and api.load refuse it in one
    sentence (exit 2) naming the damage and the command that reruns it; that command reruns it in place."""
    import shutil

    from decpriv import api
    from decpriv.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    shutil.copytree(whole_run, "r")
    shutil.copytree(whole_run, "whole")
    said = damage(Path("r"))
    rerun = "decpriv run protocol.rounds=2 topology.n=4 plots=false hydra.run.dir=r resume=true"
    for command in (
        ["show", "r"],
        ["report", "r"],
        ["diff", "r", "whole"],
        ["plot", "r", "x=round", "y=test_accuracy"],
    ):
        line = refused(capsys, *command)
        assert line.startswith("error: r: ") and said in line and rerun in line, (command, line)
    with pytest.raises(ConfigError, match=said.split("(")[0]):
        api.load("r")
    assert main(["runs", "--root", ".", "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    listed = {line.split(",")[0]: line for line in out.splitlines()[1:]}
    assert listed["r"].split(",")[1:4] == ["damaged", "", ""]  # status, no value, no baseline
    assert listed["whole"].split(",")[1] == "completed"
    assert said in err and rerun in err
    # the fix it offers works: the run is rerun in place, whole again
    assert main(rerun.split()[1:]) == 0
    assert "skipped" not in capsys.readouterr().out
    assert api.load("r").status == "completed" and not Path("r/extra.csv").exists()
    assert main(["show", "r"]) == 0 and main(["diff", "r", "whole", "--brief"]) == 0


def test_a_damaged_sweep_job_is_named_by_every_reader_and_resume_reruns_it_alone(
    tmp_path, monkeypatch, capsys
):
    """A sweep whose job lost a table: show lists it damaged, report, plot and diff refuse the sweep naming
    the job; resume=true reruns that job only. A job whose run.json is gone is damaged too."""
    import re
    import shutil

    import pandas as pd
    from conftest import run_cli

    from decpriv import api
    from decpriv.errors import ConfigError

    grid = ["seed=0,1,2", "protocol.rounds=2", "topology.n=4", "plots=false", "hydra.sweep.dir=sw"]
    run_cli("run", "-m", *grid, cwd=tmp_path, check=True)
    shutil.copytree(tmp_path / "sw", tmp_path / "whole")
    said = _cut(tmp_path / "sw" / "1")
    (tmp_path / "sw" / "2" / "run.json").unlink()
    kept = (tmp_path / "sw" / "0" / "run.json").read_bytes()
    monkeypatch.chdir(tmp_path)
    assert main(["show", "sw"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"job 1 damaged: {said}" in out and "job 2 damaged: its run.json is gone" in out
    for command in (["report", "sw"], ["plot", "sw", "x=seed", "y=test_accuracy"], ["diff", "sw", "whole"]):
        line = refused(capsys, *command)
        assert f"2 of its 3 jobs no longer hold the result they wrote (job 1, damaged: {said})" in line
        assert "hydra.sweep.dir=sw resume=true" in line
    with pytest.raises(ConfigError, match=re.escape(f"(job 1, damaged: {said})")):
        api.load("sw")  # the Python API read the sweep's own summary.csv: "unknown", job 1 "completed"
    rerun = run_cli("run", "-m", *grid, "resume=true", cwd=tmp_path, check=True)
    assert "1 job(s) kept" in rerun.stdout
    assert (tmp_path / "sw" / "0" / "run.json").read_bytes() == kept
    assert main(["report", "sw"]) == 0 and main(["diff", "sw", "whole", "--brief"]) == 0
    copy = pd.read_csv("sw/summary.csv")  # the ledger's rendering, edited: every reader takes the jobs'
    copy.loc[copy.job == 1, "test_accuracy"] = 0.999
    copy.to_csv("sw/summary.csv", index=False)
    loaded = api.load("sw")
    assert loaded.status == "completed" and list(loaded.summary.index[:2]) == ["job", "status"]
    assert (
        loaded.tables["summary"].test_accuracy.tolist()
        == api.load("whole").tables["summary"].test_accuracy.tolist()
    )
    (tmp_path / "sw" / "summary.csv").unlink()  # the ledger's rendering: made again by every reader
    capsys.readouterr()
    assert main(["show", "sw"]) == 0 and "summary.csv (3 jobs" in capsys.readouterr().out  # was silent
    shutil.rmtree(tmp_path / "sw" / "2")  # a completed job's folder removed: missing, never dropped quietly
    capsys.readouterr()
    line = refused(capsys, "plot", "sw", "x=seed", "y=test_accuracy")
    assert "(job 2, it completed, and its folder sw/2 is gone since; resume=true reruns it)" in line


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_resuming_a_completed_sweep_changes_no_byte_and_no_mtime(tmp_path, launcher):
    """Nothing to do: multirun.yaml, ledger.json, summary.csv, the jobs' files keep their bytes and mtimes
    (on a read-only sweep, then, nothing is written to fail)."""
    from conftest import run_cli

    grid = ["seed=0,1", "protocol.rounds=2", "topology.n=4", "plots=false", "hydra.sweep.dir=sw"]
    grid.append(f"hydra/launcher={launcher}")
    run_cli("run", "-m", *grid, cwd=tmp_path, check=True)
    before = _stamps(tmp_path / "sw")
    again = run_cli("run", "-m", *grid, "resume=true", cwd=tmp_path, check=True)
    assert "2 job(s) kept" in again.stdout
    assert _stamps(tmp_path / "sw") == before


def test_a_run_json_that_is_no_runs_is_refused_with_the_rerun(whole_run, tmp_path, monkeypatch, capsys):
    """An emptied run.json (``{}``) was read as a run of unknown status, its tables shown as a result."""
    import shutil

    monkeypatch.chdir(tmp_path)
    shutil.copytree(whole_run, "r")
    Path("r/run.json").write_text("{}")
    rerun = "decpriv run protocol.rounds=2 topology.n=4 plots=false hydra.run.dir=r resume=true"
    for command in (
        ["show", "r"],
        ["report", "r"],
        ["diff", "r", "r"],
        ["plot", "r", "x=round", "y=test_accuracy"],
    ):
        line = refused(capsys, *command)
        assert "r/run.json: unreadable or corrupt (no status: not a run's run.json)" in line and rerun in line
    assert main(rerun.split()[1:]) == 0 and main(["show", "r"]) == 0


def test_resuming_a_completed_run_changes_no_byte_and_no_mtime(whole_run, tmp_path, monkeypatch, capsys):
    import shutil

    monkeypatch.chdir(tmp_path)
    shutil.copytree(whole_run, "r", copy_function=shutil.copy2)
    before = _stamps(Path("r"))
    assert (
        main(["run", "protocol.rounds=2", "topology.n=4", "plots=false", "hydra.run.dir=r", "resume=true"])
        == 0
    )
    assert "skipped: already completed" in capsys.readouterr().out
    assert _stamps(Path("r")) == before


def _removing(monkeypatch, *names: str) -> None:
    """Runs whose folder is named ``names[0]`` remove the folders ``names`` (relative to the run's parent)
    just before they write their tables: a folder deleted under a running run."""
    import shutil

    from decpriv import experiment

    write = experiment._write

    def removed_first(setup, folder, *args, **kwargs):
        if folder.path.name == names[0]:
            for name in names:
                shutil.rmtree(folder.path.parent / name)
        return write(setup, folder, *args, **kwargs)

    monkeypatch.setattr(experiment, "_write", removed_first)


def test_a_run_whose_folder_is_removed_ends_failed_and_is_not_made_again(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _removing(monkeypatch, "r")
    with pytest.raises(SystemExit) as ended:
        main(["run", *QUICK, "hydra.run.dir=r"])
    assert ended.value.code == 1
    err = " ".join(capsys.readouterr().err.split())
    assert (
        f"the run folder {tmp_path / 'r'} was removed while the run ran, so nothing of this run is kept"
        in err
    )
    assert not Path("r").exists()  # not completed into a folder made again without its .hydra/


def test_a_sweep_records_a_job_removed_under_it_and_one_removed_after_it_completed(
    tmp_path, monkeypatch, capsys
):
    """Job 1 removes job 0's folder (completed) and its own (running): job 1 failed, saying why; job 0
    completed and then went missing, not 'never started'."""
    import pandas as pd

    monkeypatch.chdir(tmp_path)
    _removing(monkeypatch, "1", "0")
    assert main(["run", "-m", "seed=0,1", *QUICK, "hydra.sweep.dir=sw"]) == 1
    capsys.readouterr()
    table = pd.read_csv("sw/summary.csv")
    assert list(table.status) == ["missing", "failed"]
    assert table.error[0] == "it completed, and its folder sw/0 is gone since; resume=true reruns it"
    assert "was removed while the run ran" in table.error[1]
    assert not Path("sw/1").exists() and not Path("sw/0").exists()


def test_a_sweep_whose_folder_cannot_be_written_stops_in_one_sentence(tmp_path, monkeypatch, capsys):
    """A read-only sweep folder with jobs to run (simulated: the tests run as root, whom chmod does not
    stop): one sentence, no traceback, no job started."""
    from decpriv.report import ledger

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ledger, "open_ledger", read_only)
    assert main(["run", "-m", "seed=0,1", *QUICK, "hydra.sweep.dir=sw"]) != 0
    err = " ".join(capsys.readouterr().err.split())
    assert (
        "error: the sweep folder sw cannot be written (Permission denied), and 2 of its jobs must run" in err
    )
    assert "Traceback" not in err and not Path("sw/0").exists()


def test_a_sweep_whose_folder_is_removed_stops_and_says_so(tmp_path, monkeypatch, capsys):
    """Job 1 removes the sweep's folder: job 2 is not run into a folder made again, and the sweep ends
    (exit 1) with one sentence; it used to end 0 reading 'across 1 of 1 jobs' from job 2 alone."""
    monkeypatch.chdir(tmp_path)
    _removing(monkeypatch, "1", ".")
    assert main(["run", "-m", "seed=0,1,2", *QUICK, "hydra.sweep.dir=sw"]) == 1
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())
    assert "job 2 of 3 seed=2 not run: the sweep folder sw was removed while the sweep ran" in err
    assert (
        "error: the sweep folder sw was removed while the sweep ran, so its ledger and the jobs it held are gone"
        in err
    )
    assert not list(Path("sw").glob("*/run.json"))
