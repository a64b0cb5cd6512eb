"""decpriv's front door stands on public ground: no Hydra internals, no private ``_core`` module, no library
class patched at run time; its sweeper is a Hydra plugin found from an editable and from a normal install;
one parser with ``--help`` on every subcommand."""

import ast
import importlib
import inspect
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "decpriv", ROOT / "hydra_plugins"]


def _imported_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted name of what it imports, for the modules outside decpriv."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return {k: v for k, v in names.items() if not v.startswith(("decpriv", "hydra_plugins.decpriv"))}


def _resolve(dotted: str) -> object:
    """The object a dotted name (``module.Class.attr``) names, or None when it cannot be imported."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = getattr(found, part, None)
        return found
    return None


def _chain(node: ast.AST) -> list[str]:
    """``a.b.c`` -> ["a", "b", "c"]; [] for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [*_chain(node.value), node.attr] if _chain(node.value) else []
    return []


def patched_library_classes(tree: ast.Module) -> list[str]:
    """Attributes of an imported library class assigned, deleted or set (``setattr``) by this code:
    ``BasicSweeper.validate_batch_is_legal = ...``, ``submitit.AutoExecutor.map_array = ...``. A module's
    documented hook (``warnings.showwarning``, ``sys.argv``) is a module attribute, not a class's."""
    imported = _imported_names(tree)
    owners = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            owners += [_chain(t)[:-1] for t in targets if isinstance(t, ast.Attribute)]
        elif isinstance(node, ast.Call) and _chain(node.func) in (["setattr"], ["delattr"]) and node.args:
            owners.append(_chain(node.args[0]))
    found = []
    for owner in owners:
        if owner and owner[0] in imported:
            target = _resolve(".".join([imported[owner[0]], *owner[1:]]))
            if inspect.isclass(target):
                found.append(".".join(owner))
    return found


def test_no_hydra_internals_no_private_core_and_no_patched_library_class():
    files = [path for folder in SOURCES for path in sorted(folder.rglob("*.py"))]
    assert len(files) > 100 and any("checked_sweeper" in f.name for f in files)  # both trees were read
    for path in files:
        text = path.read_text()
        assert "_internal" not in text, path
        assert "._core" not in text, path
        assert patched_library_classes(ast.parse(text)) == [], path


def test_the_patch_guard_catches_a_patch():
    code = (
        "from hydra._internal.core_plugins.basic_sweeper import BasicSweeper\n"
        "import submitit\nimport warnings, sys\n"
        "BasicSweeper.validate_batch_is_legal = lambda self, batch: None\n"
        "submitit.AutoExecutor.map_array = None\n"
        "setattr(BasicSweeper, 'split_arguments', None)\n"
        "del BasicSweeper.validate_batch_is_legal\n"
        "warnings.showwarning = print\nsys.argv = []\n"
    )
    assert patched_library_classes(ast.parse(code)) == [
        "BasicSweeper",
        "submitit.AutoExecutor",
        "BasicSweeper",
        "BasicSweeper",
    ]


DISCOVER = (
    "from hydra.core.plugins import Plugins; from hydra.plugins.sweeper import Sweeper; import decpriv;"
    "found = [c for c in Plugins.instance().discover(Sweeper) if c.__name__ == 'CheckedSweeper'];"
    "import inspect; print(inspect.getfile(found[0])); print(decpriv.__file__)"
)


def test_the_sweeper_is_discovered_from_the_editable_install(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", DISCOVER], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [
        str(ROOT / "hydra_plugins" / "decpriv_checked_sweeper" / "checked_sweeper.py"),
        str(ROOT / "decpriv" / "__init__.py"),
    ]


def test_the_sweeper_is_discovered_from_a_built_wheel(tmp_path):
    """The wheel holds the hydra_plugins namespace package; installed alone beside the dependencies
    (``python -S``: no .pth file, so not the editable install), Hydra's plugin scan finds the sweeper."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__")
    for name in ("decpriv", "hydra_plugins"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    pip = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(tmp_path),
    ]
    subprocess.run([*pip, str(source)], capture_output=True, check=True)
    installed = tmp_path / "installed"
    with zipfile.ZipFile(next(tmp_path.glob("decpriv-*.whl"))) as wheel:
        wheel.extractall(installed)
    site = next(p for p in sys.path if p.endswith("site-packages"))
    env = {**os.environ, "PYTHONPATH": f"{installed}{os.pathsep}{site}"}
    out = subprocess.run(
        [sys.executable, "-S", "-c", DISCOVER],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == [
        str(installed / "hydra_plugins" / "decpriv_checked_sweeper" / "checked_sweeper.py"),
        str(installed / "decpriv" / "__init__.py"),
    ]


def test_every_sweep_uses_the_checked_sweeper_and_hydra_sweeper_selects_it():
    from decpriv.api import compose_job

    target = "hydra_plugins.decpriv_checked_sweeper.checked_sweeper.CheckedSweeper"
    assert compose_job([])[2].sweeper._target_ == target
    assert compose_job(["hydra/sweeper=basic"])[2].sweeper._target_.endswith(".BasicSweeper")
    assert compose_job(["hydra/sweeper=basic", "hydra/sweeper=checked"])[2].sweeper._target_ == target


@pytest.mark.parametrize("command", ["list", "show", "diff", "report", "plot", "runs"])
def test_every_subcommand_has_its_help(command, capsys):
    from decpriv.cli import main

    assert main([command, "--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: decpriv {command}")


def test_the_top_level_help_lists_every_command(capsys):
    from decpriv.cli import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(
        f"    {command} " in out for command in ("run", "list", "show", "diff", "report", "plot", "runs")
    )


def test_hydra_reads_its_command_line_only_inside_the_call(tmp_path, monkeypatch, capsys):
    """``hydra.main`` reads sys.argv: set for that call alone, and put back even when the call fails."""
    from decpriv.cli import main
    from decpriv.cli.run import hydra_command_line

    monkeypatch.chdir(tmp_path)
    before = list(sys.argv)
    with pytest.raises(RuntimeError), hydra_command_line(["-m", "seed=0,1"]):
        assert sys.argv == ["decpriv run", "-m", "seed=0,1"]
        raise RuntimeError
    assert sys.argv == before
    assert main(["run", "--cfg", "job", "topology=complete"]) == 0
    assert "decpriv.graphs.topologies.complete" in capsys.readouterr().out and sys.argv == before
