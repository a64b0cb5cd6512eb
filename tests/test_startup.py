"""Start-up cost: a run imports only what it uses (torchmetrics pulls in torchvision: seconds per process;
scipy.optimize, only for matching reconstructions to their images, 0.1 s; matplotlib, only to draw, 0.3 s),
each picture is drawn once, and the console script collects no garbage while it imports (docs/speed.md)."""

import gc
import subprocess
import sys

import pytest

from decpriv import NO_USER_CONF
from decpriv.cli import main

pytestmark = pytest.mark.filterwarnings(f"ignore:{NO_USER_CONF}")


def _imported(modules: str, wanted: tuple[str, ...]) -> list[str]:
    code = f"import sys, {modules}; print(sorted(m for m in {wanted!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return eval(out)


def test_a_knowledge_matrix_run_does_not_import_torchmetrics_or_scipy_optimize():
    modules = "decpriv.cli, decpriv.experiment, decpriv.attacks.knowledge.attack, decpriv.metrics.images"
    assert _imported(modules, ("torchmetrics", "torchvision", "scipy.optimize")) == []


def test_the_pipeline_and_the_attacks_import_matplotlib_only_to_draw():
    """Not by the pipeline, nor by the default and knowledge-matrix attacks' modules (which the sealed
    process imports too): a run with plots=false, and the attack's process, never load it."""
    modules = "decpriv.cli.run, decpriv.experiment, decpriv.attacks.p2p.mia, decpriv.attacks.knowledge.attack"
    assert _imported(modules, ("matplotlib",)) == []


def test_each_picture_is_drawn_once_and_laid_out_without_measuring(tmp_path, monkeypatch):
    """A PNG is one drawing: no layout that measures every text first (tight_layout, or savefig's
    bbox_inches="tight", which draws the figure once more to find its bounds), and no title lifted over
    its axis' measured tick labels (each drawing would measure every axis' texts)."""
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure

    drawn, measured = [], []
    draw = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: drawn.append(1) or draw(self, renderer))
    for cls in (Axes, Axis):
        tightbbox = cls.get_tightbbox
        monkeypatch.setattr(
            cls, "get_tightbbox", lambda self, *a, k=tightbbox, **kw: measured.append(1) or k(self, *a, **kw)
        )
    command = ["run", "protocol.rounds=4", "attack=knowledge_matrix", "protocol=gossip", "topology.n=12"]
    assert main([*command, f"hydra.run.dir={tmp_path / 'r'}"]) == 0
    assert len(list((tmp_path / "r").rglob("*.png"))) == 3 == len(drawn) and measured == []


def test_the_console_script_collects_no_garbage_until_its_config_is_checked(tmp_path, monkeypatch):
    """Automatic collections walk every object the imports made (0.45 s of CPU): paused from the start of
    ``decpriv`` until the precheck has built the config, running again for the pipeline."""
    from decpriv import experiment, scheduler
    from decpriv.cli import entry
    from decpriv.cli import precheck as checks

    collecting = {}
    check, run = checks.precheck, experiment.run

    def precheck(*args):
        collecting["precheck"] = gc.isenabled()
        return check(*args)

    def pipeline(*args, **kwargs):
        collecting["run"] = gc.isenabled()
        return run(*args, **kwargs)

    monkeypatch.setattr(checks, "precheck", precheck)
    monkeypatch.setattr(experiment, "run", pipeline)
    command = ["run", "protocol.rounds=4", "attack=knowledge_matrix", "protocol=gossip", "topology.n=12"]
    monkeypatch.setattr(sys, "argv", ["decpriv", *command, "plots=false", f"hydra.run.dir={tmp_path / 'r'}"])
    ending = scheduler.ENDING[0]
    try:
        with pytest.raises(SystemExit) as ended:
            entry()
    finally:
        scheduler.ENDING[0] = ending  # entry() marks its process as ending after main
        gc.enable()
        gc.unfreeze()
    assert ended.value.code == 0 and collecting == {"precheck": False, "run": True}


def test_the_reading_commands_collect_as_usual(tmp_path, monkeypatch):
    """Only ``decpriv run`` pauses collections for its start-up: a reading command may walk a large sweep,
    and its garbage is collected as it comes."""
    from decpriv import scheduler
    from decpriv.cli import entry

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["decpriv", "runs"])
    ending = scheduler.ENDING[0]
    try:
        with pytest.raises(SystemExit):
            entry()
        assert gc.isenabled()
    finally:
        scheduler.ENDING[0] = ending
        gc.enable()
        gc.unfreeze()
