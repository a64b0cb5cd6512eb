"""What a run says while it works and keeps afterwards: one stderr line per phase when the output is not
a terminal, the job log decpriv.log in the run folder (phases, times, warnings), and the help texts."""

import re

from conftest import run_cli


def test_phase_lines_and_the_job_log(tmp_path):
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n2 3\n3 0\n2 2\n")  # a ring of 4 and a self-loop: dropped with a warning
    proc = run_cli(
        "run",
        "topology=edgelist",
        f"topology.path={edges}",
        "protocol.rounds=3",
        "adversary.nodes=[0]",
        "hydra.run.dir=r",
        cwd=tmp_path,
        check=True,
    )
    phases = re.findall(r"^decpriv: (\w+) (\d+\.\d\d) s$", proc.stderr, flags=re.M)
    assert [name for name, _ in phases] == ["simulate", "attack", "evaluate", "write"]
    assert "self-loop" in proc.stderr  # the warning, shown once
    log = (tmp_path / "r" / "decpriv.log").read_text()
    for name in ("build", "simulate", "attack", "evaluate", "write"):
        assert re.search(rf"\[decpriv\]\[INFO\] - {name}: \d+\.\d\d s", log), name
    assert re.search(r"\[WARNING\] - topology: 1 self-loop\(s\) dropped", log)


def test_help_texts_open_with_decpriv():
    first = run_cli("run", "--help", check=True).stdout.splitlines()[0]
    assert first.startswith("decpriv run [OVERRIDES] [-m]") and "Hydra" not in first
    plot = run_cli("plot", "--help", check=True)
    assert plot.stdout.startswith("usage: decpriv plot SWEEP|RUN x=KEY y=METRIC")


def test_a_sweep_in_a_log_prints_one_line_a_job_with_its_headline(tmp_path):
    proc = run_cli(
        "run",
        "-m",
        "seed=0,1",
        "protocol.rounds=2",
        "topology.n=6",
        "hydra.sweep.dir=sw",
        cwd=tmp_path,
        check=True,
    )
    jobs = [line for line in proc.stdout.splitlines() if line.startswith("job ")]
    assert len(jobs) == 2 and "decpriv: simulate" not in proc.stderr
    for k, line in enumerate(jobs):
        assert re.fullmatch(
            rf"job {k} of 2  seed={k}  completed in \d+\.\d s  mia_received_auc=[\d.]+ vs [\d.]+ [✓✗]", line
        ), line
