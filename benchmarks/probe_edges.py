"""Probe of odd inputs at the edges (issue 24): each case runs ``decpriv`` in a fresh process and is
classified as refused cleanly (exit 2, one line), clear runtime failure (exit 1, one line naming a cause),
unclear failure (exit 1 with an exception's text), traceback, silently wrong (exit 0 where a refusal,
a warning or another result was due) or fine (exit 0, correct).

Run: ``.venv/bin/python -m benchmarks.probe_edges [OUT_FOLDER]`` (a few minutes; each case is a process).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = str(Path(sys.executable).with_name("decpriv"))
SMALL = ["topology.n=6", "protocol.rounds=2", "plots=false"]
# (name, argv after `decpriv`, expected: refuse | fail | ok | warn, check(result, tmp) -> bool or None)
RUN = ["run", *SMALL]


def cases(tmp: Path) -> list:
    garbage = tmp / "garbage_mnist"
    garbage.mkdir(exist_ok=True)
    for name in ("train-images-idx3-ubyte", "t10k-images-idx3-ubyte", "MNIST"):
        (garbage / name).write_bytes(b"\x00garbage" * 10)
    used = tmp / "used"
    c = [
        # silent wrong answers
        (
            "preset topology",
            ["run", "experiment=elmrini_fig2", "topology=ring", f"hydra.run.dir={tmp}/p1"],
            "refuse",
            None,
        ),
        (
            "sybil count ignored",
            [*RUN, "attack=sybil_evasion", "adversary.sybils=3", "adversary.count=999"],
            "refuse",
            None,
        ),
        (
            "sybil strategy ignored",
            [*RUN, "attack=sybil_evasion", "adversary.sybils=3", "adversary.strategy=smart"],
            "refuse",
            None,
        ),
        ("t_max 0", [*RUN, "attack.t_max=0"], "refuse", None),
        ("eval_every -1", [*RUN, "protocol.eval_every=-1"], "refuse", None),
        ("eval_every 0", [*RUN, "protocol.eval_every=0"], "refuse", None),
        (
            "rounds huge",
            [*RUN[:1], "topology.n=6", "protocol.rounds=100000000000000", "~attack"],
            "refuse",
            None,
        ),
        (
            "lr regression digits diverges",
            [
                "run",
                "model=linear_regression",
                "data=digits",
                "topology.n=6",
                "protocol.rounds=20",
                "~attack",
                "plots=false",
            ],
            "warn",
            None,
        ),
        ("run.dir empty", [*RUN, "~attack", "hydra.run.dir="], "refuse", None),
        ("second run into used folder", [*RUN, "~attack", f"hydra.run.dir={used}"], "refuse", "second"),
        (
            "sweep into used sweep",
            ["run", "-m", "seed=0,1", *SMALL, "~attack", f"hydra.sweep.dir={tmp}/sw"],
            "refuse",
            "second",
        ),
        ("show rows -3", ["show", str(used), "--rows", "-3"], "refuse", None),
        ("show rows 0", ["show", str(used), "--rows", "0"], "ok", None),
        # failures naming no cause
        (
            "n_jobs 0",
            [
                "run",
                "-m",
                "seed=0,1",
                *SMALL,
                "~attack",
                "hydra/launcher=parallel",
                "hydra.launcher.n_jobs=0",
            ],
            "refuse",
            None,
        ),
        ("mnist garbage", [*RUN, "data=mnist", f"data.root={garbage}"], "refuse", None),
        ("server mia dsgd", [*RUN, "adversary=server", "attack=mia"], "refuse", None),
        (
            "count 16 of 16",
            ["run", "topology.n=16", "adversary.count=16", "protocol.rounds=2", "plots=false"],
            "refuse",
            None,
        ),
        ("lr 1e308", [*RUN, "protocol.lr=1e308", "~attack"], "fail", None),
        ("cnn breast_cancer", [*RUN, "model=cnn", "data=breast_cancer", "~attack"], "refuse", None),
        ("logistic digits", [*RUN, "model=logistic", "data=digits", "~attack"], "refuse", None),
        ("test_fraction 1.5", [*RUN, "data.test_fraction=1.5", "~attack"], "refuse", "data.test_fraction"),
        (
            "n 2000 digits",
            ["run", "topology.n=2000", "protocol.rounds=1", "~attack", "plots=false"],
            "refuse",
            "topology.n",
        ),
        ("list --help", ["list", "--help"], "ok", None),
        # more odd inputs
        ("rounds 0", [*RUN[:1], "topology.n=6", "protocol.rounds=0", "~attack"], "refuse", None),
        ("rounds -5", [*RUN[:1], "topology.n=6", "protocol.rounds=-5", "~attack"], "refuse", None),
        ("rounds float", [*RUN[:1], "topology.n=6", "protocol.rounds=2.5", "~attack"], "refuse", None),
        ("rounds string", [*RUN[:1], "topology.n=6", "protocol.rounds=abc", "~attack"], "refuse", None),
        ("lr 0", [*RUN, "protocol.lr=0", "~attack"], "refuse", None),
        ("lr -1", [*RUN, "protocol.lr=-1", "~attack"], "refuse", None),
        ("batch 0", [*RUN, "protocol.batch_size=0", "~attack"], "refuse", None),
        ("batch huge", [*RUN, "protocol.batch_size=100000000", "~attack"], "ok", None),
        ("n 1", ["run", "topology.n=1", "protocol.rounds=1", "~attack"], "refuse", None),
        ("n 2 ring", ["run", "topology.n=2", "protocol.rounds=1", "~attack"], "refuse", None),
        ("n -4", ["run", "topology.n=-4", "protocol.rounds=1", "~attack"], "refuse", None),
        ("n huge", ["run", "topology.n=10000000000", "protocol.rounds=1", "~attack"], "refuse", None),
        ("torus 15", ["run", "topology=torus", "topology.n=15", "~attack"], "refuse", None),
        ("hypercube 12", ["run", "topology=hypercube", "topology.n=12", "~attack"], "refuse", None),
        ("er p 0", ["run", "topology=erdos_renyi", "topology.p=0", "~attack"], "refuse", None),
        ("er p 2", ["run", "topology=erdos_renyi", "topology.p=2", "~attack"], "refuse", None),
        (
            "rgg radius tiny",
            ["run", "topology=random_geometric", "topology.radius=0.001", "~attack"],
            "refuse",
            None,
        ),
        (
            "regular d odd",
            ["run", "topology=random_regular", "topology.n=7", "topology.d=3", "~attack"],
            "refuse",
            None,
        ),
        ("seed -1", [*RUN, "seed=-1", "~attack"], "ok", None),
        ("seed huge", [*RUN, "seed=99999999999999999999", "~attack"], "refuse", None),
        ("seed string", [*RUN, "seed=abc", "~attack"], "refuse", None),
        ("device gpu", [*RUN, "device=gpu", "~attack"], "refuse", None),
        ("dirichlet alpha 0", [*RUN, "partition=dirichlet", "partition.alpha=0", "~attack"], "refuse", None),
        ("shards 0", [*RUN, "partition=shards", "partition.shards=0", "~attack"], "refuse", None),
        ("ldp eps 0", [*RUN, "defense=ldp", "defense.epsilon=0", "~attack"], "refuse", None),
        ("ldp eps -1", [*RUN, "defense=ldp", "defense.epsilon=-1", "~attack"], "refuse", None),
        ("dpsgd clip 0", [*RUN, "defense=dpsgd", "defense.clip=0", "~attack"], "refuse", None),
        ("count -1", [*RUN, "adversary.count=-1"], "refuse", None),
        ("nodes out of range", [*RUN, "adversary.nodes=[99]"], "refuse", None),
        ("eval_every huge", [*RUN, "protocol.eval_every=1000", "~attack"], "ok", None),
        ("gaussian size 0", [*RUN, "data=gaussian_classes", "data.size=0", "~attack"], "refuse", None),
        (
            "gaussian classes 1",
            [*RUN, "data=gaussian_classes", "data.num_classes=1", "~attack"],
            "refuse",
            None,
        ),
        ("gaussian dim 0", [*RUN, "data=gaussian_classes", "data.dim=0", "~attack"], "refuse", None),
        ("test_fraction 0", [*RUN, "data.test_fraction=0", "~attack"], "refuse", None),
        ("test_fraction -0.1", [*RUN, "data.test_fraction=-0.1", "~attack"], "refuse", None),
        ("gossip rounds 0", ["run", "protocol=gossip", "topology.n=6", "protocol.rounds=0"], "refuse", None),
        (
            "pdmm rounds huge",
            ["run", "protocol=pdmm", "topology.n=6", "protocol.rounds=100000000000000"],
            "refuse",
            None,
        ),
        ("name with slash", [*RUN, "name=a/b", "~attack"], "refuse", None),
        ("name empty", [*RUN, "name=", "~attack", f"hydra.run.dir={tmp}/nm"], "ok", None),
        ("experiment unknown", ["run", "experiment=nope"], "refuse", None),
        ("launcher unknown", ["run", "-m", "seed=0,1", "hydra/launcher=nope"], "refuse", None),
        ("sweep empty list", ["run", "-m", "seed=", *SMALL], "refuse", None),
        ("resume without dir", ["run", "-m", "seed=0,1", *SMALL, "resume=true"], "refuse", None),
        (
            "resume maybe",
            ["run", "-m", "seed=0,1", *SMALL, "resume=maybe", f"hydra.sweep.dir={tmp}/rm"],
            "refuse",
            None,
        ),
        ("diff missing", ["diff", str(tmp / "nope"), str(used)], "refuse", None),
        ("show missing", ["show", str(tmp / "nope")], "refuse", None),
        ("report missing", ["report", str(tmp / "nope")], "refuse", None),
        ("plot no y", ["plot", str(used), "x=round"], "refuse", None),
        ("plot bad column", ["plot", str(used), "x=round", "y=nope"], "refuse", None),
        ("runs bad root", ["runs", "--root", str(tmp / "nope")], "ok", None),
        ("list nope", ["list", "nope"], "refuse", None),
        ("diff rtol -1", ["diff", str(used), str(used), "--rtol", "-1"], "refuse", None),
        ("show rows abc", ["show", str(used), "--rows", "abc"], "refuse", None),
        ("edge list dir", [*RUN, "topology=edgelist", f"topology.path={tmp}", "~attack"], "refuse", None),
        ("debug maybe", [*RUN, "debug=maybe", "~attack"], "refuse", None),
        (
            "gossip n 30000",
            [
                "run",
                "topology.n=30000",
                "protocol=gossip",
                "data=gaussian_classes",
                "~attack",
                "protocol.rounds=2",
                "plots=false",
                f"hydra.run.dir={tmp}/big",
            ],
            "ok",
            None,
        ),
    ]
    return c


def classify(expected: str, code: int, err: str) -> str:
    if "Traceback" in err:
        return "traceback"
    if code == 2:
        return "refused" if expected in ("refuse",) or err.strip() else "refused"
    if code == 0:
        if expected == "warn":
            return "fine" if "warning:" in err else "silently wrong"
        return "fine" if expected == "ok" else "silently wrong"
    if code in (124, -9):
        return "unbounded wait"
    if "run failed:" in err and "Error:" not in err.split("run failed:", 1)[1][:40]:
        return "clear runtime failure"
    if expected == "fail" and code == 1:
        return (
            "clear runtime failure" if "lower protocol.lr" in err or "diverged" in err else "unclear failure"
        )
    return "unclear failure"


def main() -> None:
    tmp = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="probe_"))
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COLUMNS": "200"}
    # a used folder and a used sweep folder, for the reuse cases
    subprocess.run(
        [BIN, "run", *SMALL, "~attack", f"hydra.run.dir={tmp}/used"],
        env=env,
        capture_output=True,
        cwd=tmp,
        check=False,
    )
    subprocess.run(
        [BIN, "run", "-m", "seed=0,1", *SMALL, "~attack", f"hydra.sweep.dir={tmp}/sw"],
        env=env,
        capture_output=True,
        cwd=tmp,
        check=False,
    )
    counts: dict[str, int] = {}
    rows = []
    for name, argv, expected, must in cases(tmp):
        begin = time.perf_counter()
        try:
            done = subprocess.run([BIN, *argv], env=env, capture_output=True, text=True, cwd=tmp, timeout=120)
            code, err = done.returncode, done.stderr
        except subprocess.TimeoutExpired:
            code, err = 124, ""
        kind = classify(expected, code, err)
        if kind == "refused" and expected != "refuse" and expected != "fail":
            kind = "refused (unexpected)"
        if kind == "refused" and isinstance(must, str) and must != "second" and must not in err:
            kind = "refused, wrong key"
        counts[kind] = counts.get(kind, 0) + 1
        line = err.strip().splitlines()[-1][:150] if err.strip() else ""
        rows.append(
            {
                "case": name,
                "exit": code,
                "kind": kind,
                "s": round(time.perf_counter() - begin, 1),
                "stderr": line,
            }
        )
        print(f"{kind:22s} {code:4d} {name:32s} {line}", flush=True)
    print(json.dumps({"tried": len(rows), **counts}))


if __name__ == "__main__":
    main()
