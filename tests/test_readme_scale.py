"""The README's scale commands (its Speed section) run as written: each passes the whole precheck (every
plugin built, the data holding a sample a node) in the default suite, and runs to completion when slow."""

import re
import shlex
from pathlib import Path

import pytest

from decpriv import NO_USER_CONF

pytestmark = pytest.mark.filterwarnings(f"ignore:{NO_USER_CONF}")
README = Path(__file__).resolve().parents[1] / "README.md"


def speed_commands() -> list[list[str]]:
    """The ``decpriv run`` lines of the README's Speed section, each as its overrides."""
    section = README.read_text().split("## Speed", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1).replace("\\\n", " ")
    return [shlex.split(line)[2:] for line in block.splitlines() if line.startswith("decpriv run ")]


def test_the_speed_section_names_its_three_scales():
    sizes = [next(o for o in command if o.startswith("topology.n=")) for command in speed_commands()]
    assert sizes == ["topology.n=100000", "topology.n=5000", "topology.n=1024"]


@pytest.mark.parametrize("command", speed_commands(), ids=lambda c: c[0])
def test_a_readme_scale_command_passes_the_precheck(command):
    from decpriv.cli.precheck import precheck

    plan = precheck(command, multirun=False)
    n = int(next(o for o in command if o.startswith("topology.n=")).split("=")[1])
    setup = plan.prebuilt.setup
    assert setup.network.n == n and int(setup.local.counts.min()) >= 1


@pytest.mark.slow
@pytest.mark.parametrize("command", speed_commands(), ids=lambda c: c[0])
def test_a_readme_scale_command_runs(tmp_path, monkeypatch, command):
    from decpriv.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["run", *command, "plots=false", "hydra.run.dir=r"]) == 0
    assert (tmp_path / "r" / "summary.csv").is_file()
