"""``decpriv diff`` on sweeps: rows aligned on the swept keys; equal, changed, added, removed, tolerance;
tidy CSV / Markdown output for CI; metric changes highlighted in colour."""

import io
import json
from pathlib import Path

import pandas as pd
from rich.console import Console

from decpriv.cli import main
from decpriv.report.diff import diff_paths, diff_rows
from decpriv.report.show import print_diff

ROWS = [
    {"topology": "ring", "seed": 0, "acc": 0.80, "protocol.lr": 0.1},
    {"topology": "ring", "seed": 1, "acc": 0.82, "protocol.lr": 0.1},
    {"topology": "torus", "seed": 0, "acc": 0.90, "protocol.lr": 0.1},
    {"topology": "torus", "seed": 1, "acc": 0.91, "protocol.lr": 0.1},
]


def make_sweep(folder: Path, rows: list[dict], swept: tuple[str, ...] = ("topology", "seed")) -> Path:
    """A sweep folder as decpriv writes it: multirun.yaml, job folders with run.json, and summary.csv."""
    folder.mkdir(parents=True)
    task = "\n".join(f"    - {k}=x,y" for k in swept)
    (folder / "multirun.yaml").write_text(f"hydra:\n  overrides:\n    task:\n{task}\n")
    for job, row in enumerate(rows):  # each job's own row: what the sweep's table is read from
        (folder / str(job)).mkdir()
        (folder / str(job) / "run.json").write_text(json.dumps({"status": "completed", "metrics": ["acc"]}))
        pd.DataFrame([{"status": "completed", **row}]).to_csv(folder / str(job) / "summary.csv", index=False)
    # Job numbers differ between sweeps of different grids; the diff must pair rows on the swept keys.
    table = pd.DataFrame([{"job": j, "status": "completed", **r} for j, r in enumerate(rows)])
    table.to_csv(folder / "summary.csv", index=False)
    return folder


def cli(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().out


def test_equal_sweeps_in_another_job_order(tmp_path, capsys):
    a = make_sweep(tmp_path / "a", ROWS)
    b = make_sweep(tmp_path / "b", ROWS[::-1])
    code, out = cli(capsys, "diff", str(a), str(b))
    assert code == 0 and "equal" in out


def test_changed_metric_beyond_and_within_tolerance(tmp_path, capsys):
    changed = [dict(r) for r in ROWS]
    changed[2]["acc"] = 0.9009  # 0.1 % off
    a, b = make_sweep(tmp_path / "a", ROWS), make_sweep(tmp_path / "b", changed)
    found, *jobs = diff_paths(a, b)  # the sweeps' rows, then each pair of jobs' tables
    assert [j.name for j in jobs if not j.equal] == ["2/summary"] and jobs[2].changed.column.tolist() == [
        "acc"
    ]
    assert found.keys == ["topology", "seed"]
    assert found.changed[["topology", "seed", "column"]].values.tolist() == [["torus", 0, "acc"]]
    assert found.changed.rel_diff[0] == abs(0.9009 - 0.9) / 0.9009
    assert cli(capsys, "diff", str(a), str(b))[0] == 1
    assert cli(capsys, "diff", str(a), str(b), "--rtol", "1e-2")[0] == 0
    assert cli(capsys, "diff", str(a), str(b), "--rtol", "1e-4")[0] == 1
    assert cli(capsys, "diff", str(a), str(b), "--atol", "1e-3")[0] == 0


def test_added_and_removed_rows_of_a_grown_sweep(tmp_path, capsys):
    grown = [*ROWS[1:], {"topology": "complete", "seed": 0, "acc": 0.95, "protocol.lr": 0.1}]
    a, b = make_sweep(tmp_path / "a", ROWS), make_sweep(tmp_path / "b", grown)
    code, out = cli(capsys, "diff", str(a), str(b), "--format", "csv")
    rows = pd.read_csv(io.StringIO(out))
    assert code == 1
    assert rows[["change", "key"]].values.tolist() == [
        ["removed", "topology=ring;seed=0"],
        ["added", "topology=complete;seed=0"],
    ]
    code, out = cli(capsys, "diff", str(a), str(b))
    assert "only in A: topology=ring, seed=0" in out and "only in B: topology=complete, seed=0" in out


def test_config_change_outside_the_grid_shows_on_every_row(tmp_path, capsys):
    other = [{**r, "protocol.lr": 0.2} for r in ROWS]
    a, b = make_sweep(tmp_path / "a", ROWS), make_sweep(tmp_path / "b", other)
    code, out = cli(capsys, "diff", str(a), str(b), "--format", "markdown")
    lines = out.strip().splitlines()
    assert code == 1 and lines[0] == "| table | change | key | column | a | b | rel_diff |"
    assert len(lines) == 2 + 4 + 4  # the sweeps' four rows, then each pair of jobs' own summary
    assert all("| changed |" in line and "protocol.lr" in line for line in lines[2:])
    assert [line.split("|")[1].strip() for line in lines[6:]] == [f"{j}/summary" for j in range(4)]


def test_diff_leads_with_config_then_metrics_then_a_verdict(tmp_path):
    changed = [{**r, "acc": r["acc"] + 0.05} if r["seed"] == 0 else r for r in ROWS]
    changed[1] = {**changed[1], "protocol.lr": 0.3}
    a, b = make_sweep(tmp_path / "a", ROWS), make_sweep(tmp_path / "b", changed)
    stream = io.StringIO()
    console = Console(file=stream, width=80)
    assert print_diff(a, b, 1e-9, 0.0, console) == 1
    lines = stream.getvalue().splitlines()
    config, metrics = lines.index("config that differs (1)"), lines.index("metrics that differ (2)")
    assert config < metrics and "protocol.lr" in lines[config + 3]
    assert sum(line.split()[1:2] == ["acc"] for line in lines[metrics:]) == 2
    assert lines[-1] == "differ: 1 config key, 2 metrics (acc 0.8 -> 0.85), 3 tables"  # each job's too
    assert lines[-4:-1] == [
        f"{j}/summary.csv: 1 cell(s) differ in {c}" for j, c in enumerate(["acc", "protocol.lr", "acc"])
    ]
    assert max(map(len, lines)) <= 80
    stream = io.StringIO()
    assert print_diff(a, b, 1e-9, 0.0, Console(file=stream, width=80), brief=True) == 1
    assert stream.getvalue().splitlines() == lines[-1:]


def test_diff_rows_of_missing_tables_and_bad_paths(tmp_path, capsys):
    a = make_sweep(tmp_path / "a", ROWS)
    b = make_sweep(tmp_path / "b", ROWS)
    pd.DataFrame({"round": [0], "loss": [1.0]}).to_csv(b / "history.csv", index=False)
    rows = diff_rows(diff_paths(a, b))
    assert rows[["table", "change"]].values.tolist() == [["history", "added"]]
    code = main(["diff", str(a), str(tmp_path / "nowhere")])
    assert code == 2 and "nowhere" in capsys.readouterr().err


def test_rows_sort_by_number_and_wide_tables_do_not_warn(tmp_path, recwarn):
    rounds = [10, 2, 1]
    wide = {f"metric_{i}": [0.5] * 3 for i in range(150)}  # as wide as an MIA run's summary
    a = pd.DataFrame({"round": rounds, **wide})
    b = a.assign(metric_0=[0.1, 0.2, 0.3])
    a.to_csv(tmp_path / "a.csv", index=False)
    b.to_csv(tmp_path / "b.csv", index=False)
    (found,) = diff_paths(tmp_path / "a.csv", tmp_path / "b.csv")
    assert found.changed["round"].tolist() == [1, 2, 10]  # by value, not as text ("10" < "2")
    assert found.changed.b.tolist() == [0.3, 0.2, 0.1]
    assert not [w for w in recwarn if "pandas" in w.filename or "fragmented" in str(w.message)]


def test_rows_pair_on_the_keys_a_table_declares(tmp_path):
    from decpriv.report.findings import keyed
    from decpriv.report.run_folder import RunFolder

    by_stop = pd.DataFrame({"t_max": [10, 100, 500], "difference_error": [4.7, 0.81, 0.022]})
    for name, frame in (("a", by_stop), ("b", by_stop.iloc[::-1].assign(difference_error=[0.022, 0.5, 4.7]))):
        folder = RunFolder(tmp_path / name)
        folder.start(seed=0, device="cpu", config_digest="x")
        folder.write_table("leak_by_t_max", keyed(frame.copy(), "t_max"))
        folder.complete({"metrics": []})
    assert json.loads((tmp_path / "a" / "run.json").read_text())["table_keys"] == {"leak_by_t_max": ["t_max"]}
    (found,) = diff_paths(tmp_path / "a", tmp_path / "b")
    # t_max is no usual key name: without the declaration the rows would pair by position, 3 changes
    assert found.keys == ["t_max"]
    assert found.changed[["t_max", "a", "b"]].values.tolist() == [[100, 0.81, 0.5]]


def test_config_keys_differ_by_any_amount_and_show_every_digit(tmp_path):
    """Seeds 2^32 and 2^32 + 1 are 2.3e-10 apart relatively, inside diff's rtol=1e-9: the config table
    dropped them, so the runs read as "same config, other results"; lr 0.5 against 0.5000001 showed as
    0.5 and 0.5."""
    rows = [{"topology": t, "seed": 2**32, "acc": 0.8, "protocol.lr": 0.5} for t in ("ring", "torus")]
    other = [{**row, "seed": 2**32 + 1, "acc": 0.7, "protocol.lr": 0.5000001} for row in rows]
    a = make_sweep(tmp_path / "a", rows, swept=("topology",))
    b = make_sweep(tmp_path / "b", other, swept=("topology",))
    stream = io.StringIO()
    assert print_diff(a, b, 1e-9, 0.0, Console(file=stream, width=80)) == 1
    lines = [line.split() for line in stream.getvalue().splitlines()]
    assert any(line[-3:] == ["seed", "4294967296", "4294967297"] for line in lines)
    assert any(line[-3:] == ["protocol.lr", "0.5", "0.5000001"] for line in lines)
