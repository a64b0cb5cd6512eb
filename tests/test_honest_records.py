"""Records that say when they are not whole (issue 48): a table cut or changed since its run wrote it is
refused by every reader in one sentence (run.json's marks); a table name cannot leave the run folder."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import QUICK

from decpriv import NO_USER_CONF
from decpriv.cli import main

pytestmark = pytest.mark.filterwarnings(f"ignore:{NO_USER_CONF}")


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """One completed quick run (with an attack: its summary has a headline and a baseline)."""
    root = tmp_path_factory.mktemp("whole")
    line = [*QUICK[:2], "plots=false", f"hydra.run.dir={root / 'run'}"]
    assert main(["run", *line]) == 0
    return root / "run"


def _copy(whole: Path, tmp_path: Path, name: str = "r") -> Path:
    target = tmp_path / name
    shutil.copytree(whole, target)
    return target


def _cut(file: Path, keep: int) -> None:
    file.write_bytes(file.read_bytes()[:keep])


def test_run_json_marks_every_table_it_wrote(whole):
    marks = json.loads((whole / "run.json").read_text())["tables"]
    assert set(marks) == {p.name for p in whole.glob("*.csv")}
    summary = whole / "summary.csv"
    assert marks["summary.csv"]["rows"] == 1 and marks["summary.csv"]["bytes"] == summary.stat().st_size


def test_a_summary_cut_mid_row_is_refused_by_every_reader(whole, tmp_path, monkeypatch, capsys):
    from decpriv.api import load
    from decpriv.errors import ConfigError
    from decpriv.report.resume import already_completed
    from decpriv.report.runs_index import index

    run = _copy(whole, tmp_path)
    size = (run / "summary.csv").stat().st_size
    _cut(run / "summary.csv", size - 9)  # the last cells cut: it still parses as one row
    assert len(pd.read_csv(run / "summary.csv")) == 1  # what readers used to show as the result
    said = f"{run}: damaged: its summary.csv is cut ({size - 9} of the {size} bytes the run wrote)"
    for command in (["show", str(run)], ["report", str(run)], ["diff", str(whole), str(run)]):
        assert main(command) == 2, command
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and said in err, (command, err)
    with pytest.raises(ConfigError, match="its summary.csv is cut"):
        load(run)
    with pytest.warns(UserWarning, match="its summary.csv is cut"):
        table = index(tmp_path)
    assert list(table.status) == ["damaged"] and table.headline.iloc[0] == ""
    digest = json.loads((run / "run.json").read_text())["config_digest"]
    assert not already_completed(run, digest)  # resume=true reruns it


def test_a_summary_cut_in_its_header_or_changed_is_one_sentence(whole, tmp_path, capsys):
    run = _copy(whole, tmp_path)
    _cut(run / "summary.csv", 40)
    assert main(["report", str(run)]) == 2  # was a raw IndexError
    assert "damaged: its summary.csv is cut (40 of the" in capsys.readouterr().err
    other = _copy(whole, tmp_path, "changed")
    text = (other / "summary.csv").read_text()
    (other / "summary.csv").write_text(text.replace(",completed,", ",completed,", 1).replace("0.", "1.", 1))
    assert main(["show", str(other)]) == 2
    assert "changed since the run wrote it" in capsys.readouterr().err


def test_a_summary_without_a_row_and_without_a_mark_is_refused_not_an_index_error(whole, tmp_path, capsys):
    run = _copy(whole, tmp_path)
    meta = json.loads((run / "run.json").read_text())
    del meta["tables"], meta["run_json_sha256"]  # a run written before the marks
    (run / "run.json").write_text(json.dumps(meta))
    header = (run / "summary.csv").read_text().splitlines()[0]
    (run / "summary.csv").write_text(header + "\n")
    for command in ("show", "report"):
        assert main([command, str(run)]) == 2
        assert "summary.csv: holds no row (cut inside its header" in capsys.readouterr().err


def test_an_unreadable_table_says_so_not_restore(whole, tmp_path, monkeypatch, capsys):
    """A table that exists and cannot be read is said so, with its fix, never "restore": a folder in the
    table's place (unreadable to root too), and a table without read permission (chmod 0; as root, who
    reads through any mode, the reader is handed the system's PermissionError)."""
    import os

    run = _copy(whole, tmp_path)
    (run / "nodes.csv").unlink()
    (run / "nodes.csv").mkdir()
    assert main(["show", str(run)]) == 2
    err = capsys.readouterr().err
    assert "nodes.csv: cannot be read (Is a directory); check the disk." in err and "restore" not in err
    run = _copy(whole, tmp_path, "denied")
    if os.geteuid() == 0:
        real = Path.read_bytes

        def denied(self):
            if self.name == "nodes.csv":
                raise PermissionError(13, "Permission denied", str(self))
            return real(self)

        monkeypatch.setattr(Path, "read_bytes", denied)
    else:
        (run / "nodes.csv").chmod(0)
    assert main(["show", str(run)]) == 2
    err = capsys.readouterr().err
    assert "nodes.csv: cannot be read (Permission denied); give yourself read permission (chmod u+r)." in err


@pytest.mark.parametrize("name", ["../outside", "sub/inner", "/tmp/abs", "..", ".hidden", ""])
def test_a_table_name_that_is_a_path_is_refused_and_nothing_written(name, tmp_path):
    from decpriv.report.run_folder import RunFolder

    folder = RunFolder(tmp_path / "run")
    with pytest.raises(ValueError, match="its name is a plain file name"):
        folder.write_table(name, pd.DataFrame({"a": [1]}))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["run"]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            ["seed=0,1", "seed=2,3"],
            "seed=0,1 and seed=2,3 both set seed, and Hydra keeps the last one alone, ",
        ),
        (
            ["seed=range(0,3)", "seed=1"],
            "so the sweep would run seed=1 only; give seed once, with every value",
        ),
    ],
)
def test_a_key_given_twice_in_a_sweep_is_refused(line, said, tmp_path, monkeypatch, capsys):
    from conftest import refused

    monkeypatch.chdir(tmp_path)
    assert said in refused(capsys, "run", "-m", *line, *QUICK)
    assert not any(tmp_path.iterdir())


def test_a_sweep_without_its_plan_files_never_takes_a_verdict_for_a_swept_key(whole, tmp_path):
    """summary.csv and multirun.yaml gone, the ledger intact: the ledger names the swept keys; with the
    ledger gone too, the config columns that vary, never a metric such as the verdict."""
    from decpriv.report.aggregate import aggregate, load_sweep
    from decpriv.report.ledger import close_ledger, open_ledger

    sweep = tmp_path / "sw"
    for seed in (0, 1):  # the one run as two seeds of a sweep, each with its own verdict
        job = _copy(whole, sweep, str(seed))
        summary = pd.read_csv(job / "summary.csv").assign(seed=seed)
        summary["verdict"] = summary["verdict"] + f" (seed {seed})"
        summary.to_csv(job / "summary.csv", index=False)
        meta = json.loads((job / "run.json").read_text())
        del meta["tables"], meta["run_json_sha256"]  # edited here: as a run from before the marks
        (job / "run.json").write_text(json.dumps({**meta, "started": "2999-01-01T00:00:00"}))
    open_ledger(sweep, [[f"seed={s}"] for s in (0, 1)], ["seed"], set(), "basic")
    close_ledger(sweep)
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    assert "verdict" in json.loads((whole / "run.json").read_text())["metrics"]
    for gone in ("summary.csv", "multirun.yaml", "ledger.json"):
        (sweep / gone).unlink()
        found = load_sweep(sweep)
        assert found.keys == ["seed"], gone
        assert set(aggregate(found)["count"]) == {2}, gone  # one row over the two seeds, not two of n=1


def test_a_full_disk_during_a_sweep_ends_in_one_sentence_with_the_ledger_finished(
    tmp_path, monkeypatch, capsys
):
    """The disk fills once the job has run (every later write of the sweep's table fails): no traceback,
    the ledger records the sweep's end and why, and the exit status says it did not finish."""
    import errno

    import decpriv.report.ledger as ledger

    monkeypatch.chdir(tmp_path)
    real, calls = ledger.write_csv, []

    def filling(path, table):
        calls.append(path)
        if len(calls) >= 3:  # the plan, the job's start, then nothing more
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, table)

    monkeypatch.setattr(ledger, "write_csv", filling)
    assert main(["run", "-m", "seed=0", *QUICK, "hydra.sweep.dir=fd"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "error: the sweep stopped: OSError: [Errno 28] No space left on device" in err
    record = json.loads(Path("fd/ledger.json").read_text())
    assert record["finished"] and record["failed"].startswith("OSError: [Errno 28]")


def test_runs_at_80_columns_keeps_the_headline_with_paths_relative_to_the_root(whole, tmp_path, capsys):
    from rich.console import Console

    from decpriv.cli.reading import runs_command

    deep = tmp_path / "root" / "a" / "long" / "chain" / "of" / "folders" / "run-with-a-long-name-2026-11-28"
    shutil.copytree(whole, deep)
    console = Console(width=80, force_terminal=False)
    import argparse

    assert runs_command(argparse.Namespace(root=tmp_path / "root", filters=[], format="table"), console) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("run "))
    assert lines[at].split()[:3] == ["run", "status", "headline"], lines
    row = lines[at + 2]
    assert "completed" in row and "=" in row and "vs" in row and str(tmp_path) not in row
    assert max(map(len, lines)) <= 80


def test_the_readme_names_what_the_python_api_returns(whole):
    import re

    from decpriv.api import load

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    said = readme[readme.index("From Python: `decpriv.api.run") :].split("\n\n")[0]
    names = re.findall(r"`(\w+)`", said) + re.findall(r"`result\.(\w+)`", said)
    result = load(whole)
    assert names == ["path", "status", "tables", "summary", "history"]
    assert all(hasattr(result, name) for name in names)
    assert result.path == whole and result.summary["status"] == "completed"


def test_the_softmax_null_preset_has_the_digits_a_node_the_readme_says():
    from decpriv.api import compose_config
    from decpriv.experiment import build

    counts = set(build(compose_config(["experiment=mia_digits_softmax_null"])[0]).local.counts.tolist())
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert counts == {84, 85} and "With 84 or 85 digits a node and softmax regression" in readme


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            ["defense=none", "+defense.clip=1.0"],
            "defense.clip=1.0: the defense chosen takes no keys, and this one was set by a preset or the "
            "command line for another; drop defense.clip, or choose a defense that reads it",
        ),
        (["protocol=admm", "defense=homomorphic"], "under PDMM (the protocol chosen) every node combines"),
        (["protocol=admm", "defense=ledger"], "PDMM (the protocol chosen) has no server"),
        (
            ["defense=[homomorphic,ledger]"],
            "defense=[homomorphic,ledger]: a run has one defense, and Hydra would merge these options' "
            "settings into one defense that neither reads; choose one, or sweep them: -m "
            "defense=homomorphic,ledger",
        ),
    ],
)
def test_refusals_name_what_the_user_chose(line, said, tmp_path, monkeypatch, capsys):
    from conftest import refused

    monkeypatch.chdir(tmp_path)
    assert said in refused(capsys, "run", *line)


def test_a_deleted_working_folder_is_one_sentence_and_no_traceback(tmp_path):
    import subprocess

    from conftest import DECPRIV

    (tmp_path / "gone").mkdir()
    shell = f"cd gone && rmdir ../gone && exec {DECPRIV} run {' '.join(QUICK)}"
    done = subprocess.run(["sh", "-c", shell], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: the working folder no longer exists (deleted after this shell entered it), and decpriv run "
        "writes its run folders and reads ./conf there; cd into an existing folder and run again."
    )
