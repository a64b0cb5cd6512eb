"""A preset's ``claim`` in ``decpriv report``: the claim section opens report.md/html with the measured
numbers and the figure on the claim's axes, a sweep over single attackers colours the graph by outcome
(El Mrini et al., Figs. 3/5), a run without a figure shows its own pictures and headline metrics, and a
bad claim is refused in one sentence before anything is written.

Hand-solved case: after one gossip step a single attacker has heard each neighbour's private value once,
so it reconstructs exactly its neighbours: reconstructed_honest = its degree (Florentine families:
node 0 has degree 1, node 1 degree 6)."""

import math
import shutil

import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import run_cli

from decpriv.cli import main
from decpriv.errors import ConfigError
from decpriv.report.claims import Claim, claim_section, measured, parse_claim

CLAIM = (
    'claim={source: "Test 2026, Fig. 1", statement: "one gossip step reveals the neighbours",'
    " figure: {x: protocol.rounds, y: fraction_reconstructed, hue: [adversary.nodes]}}"
)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Four cheap knowledge-matrix jobs on the Florentine families: T = 1, 2 gossip steps, attacker 0 or 1."""
    cwd = tmp_path_factory.mktemp("claims")
    run_cli(
        "run",
        "-m",
        "topology=florentine",
        "protocol=gossip",
        "attack=knowledge_matrix",
        "partition=one_per_node",
        "data=gaussian_classes",
        "protocol.rounds=1,2",
        "adversary.nodes=[0],[1]",
        CLAIM,
        "hydra.sweep.dir=sw",
        cwd=cwd,
        check=True,
    )
    return cwd / "sw"


def _with_claim(job, target, claim):
    """A copy of a job folder whose config states ``claim`` (a run folder as ``decpriv run`` writes it)."""
    shutil.copytree(job, target)
    config_file = target / ".hydra" / "config.yaml"
    config = yaml.safe_load(config_file.read_text())
    config["claim"] = claim
    config_file.write_text(yaml.safe_dump(config))
    return target


def test_sweep_report_opens_with_the_claim_its_numbers_and_figure(sweep, capsys):
    summary = pd.read_csv(sweep / "summary.csv")
    assert not [c for c in summary.columns if c.startswith("claim")]  # the paper's words are no setting
    assert main(["report", str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "claim (Test 2026, Fig. 1): one gossip step reveals the neighbours" in out
    assert "claim figure:" in out and "claim.png" in out

    markdown = (sweep / "report" / "report.md").read_text()
    assert markdown.index("## Claim") < markdown.index("jobs: 4 completed")  # the page opens with it
    assert f"| [0] | 1 | {2 / 15:.6g} |  | 1 |" in markdown  # the attacker and its one neighbour
    assert f"| [1] | 1 | {7 / 15:.6g} |  | 1 |" in markdown  # ... and its six
    assert "![claim](plots/claim.png)" in markdown
    page = (sweep / "report" / "report.html").read_text()
    assert page.index("<h2>Claim</h2>") < page.index("jobs: 4 completed")

    section = claim_section(sweep)
    figure = section.figures["plots/claim.png"]
    ax = figure.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("protocol.rounds", "fraction_reconstructed")
    assert "Test 2026, Fig. 1" in ax.get_title()
    lines = {bars.get_label(): bars.lines[0] for bars in ax.containers}  # one errorbar per hue
    assert list(lines["[1]"].get_xdata()) == [1, 2] and lines["[1]"].get_ydata()[0] == pytest.approx(7 / 15)
    assert list(lines["[1]"].get_ydata()) == sorted(lines["[1]"].get_ydata())  # more steps, more known
    plt.close(figure)
    pixels = mpimg.imread(sweep / "report" / "plots" / "claim.png")
    assert pixels.shape[1] >= 600 and pixels[..., :3].std() > 0.05


def test_measured_numbers_are_mean_std_count_over_seeds_by_hue_and_x():
    table = pd.DataFrame(
        {
            "status": ["completed"] * 5 + ["failed"],
            "topology.n": [40, 20, 40, 20, 20, 40],
            "adversary.count": [1, 1, 1, 1, 2, 1],
            "y": [0.1, 0.2, 1.0, 0.4, 0.9, math.nan],
        }
    )
    claim = Claim("S", "T", x="topology.n", y="y", hue=("adversary.count",))
    got = measured(claim, table[table.status == "completed"])
    assert got.columns.tolist() == ["adversary.count", "topology.n", "mean", "std", "count"]
    assert got[["adversary.count", "topology.n", "count"]].values.tolist() == [
        [1, 20, 2],
        [1, 40, 2],
        [2, 20, 1],
    ]
    assert got["mean"].tolist() == pytest.approx([0.3, 0.55, 0.9])
    assert got["std"].tolist()[:2] == pytest.approx([0.02**0.5, (2 * 0.45**2) ** 0.5])  # sample std
    assert math.isnan(got["std"].iloc[2])  # one seed: no spread


def test_sweep_over_single_attackers_colours_the_graph_by_outcome(sweep, tmp_path):
    claim = {
        "source": "Test 2026, Fig. 3",
        "statement": "S",
        "figure": {"x": "adversary.nodes", "y": "reconstructed_honest"},
    }
    folder = tmp_path / "graph"
    summary = pd.read_csv(sweep / "summary.csv")
    for job in summary.loc[summary["protocol.rounds"] == 1, "job"]:
        _with_claim(sweep / str(job), folder / str(job), claim)
    section = claim_section(folder)
    figure = section.figures["plots/claim.png"]
    nodes = next(c for c in figure.axes[0].collections if c.get_array() is not None)
    colours = np.ma.filled(nodes.get_array().astype(float), math.nan)
    degree = pd.read_csv(sweep / "0" / "nodes.csv")["degree"]
    assert len(colours) == 15 and colours[0] == degree[0] == 1 and colours[1] == degree[1] == 6
    assert all(math.isnan(c) for c in colours[2:])  # never the attacker: left blank
    plt.close(figure)


def test_run_without_figure_shows_its_own_pictures_and_the_metrics_its_claim_names(sweep, tmp_path, capsys):
    claim = {"source": "Test 2026, Fig. 2", "statement": "the attacker finds its knowledge_rank"}
    run = _with_claim(sweep / "0", tmp_path / "run", claim)
    figure, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    figure.savefig(run / "plots" / "outcome.png")
    plt.close(figure)
    assert main(["report", str(run)]) == 0
    assert "the attacker finds its knowledge_rank" in capsys.readouterr().out
    markdown = (run / "report" / "report.md").read_text()
    claim_part = markdown[markdown.index("## Claim") : markdown.index("- status:")]
    rank = pd.read_csv(run / "summary.csv")["knowledge_rank"].iloc[0]
    assert f"| knowledge_rank | {rank:.6g} |" in claim_part  # the metric its statement names, not all
    assert "fraction_reconstructed" not in claim_part
    assert "](../plots/outcome.png)" in claim_part and "](../plots/knowledge_graph.png)" in claim_part
    assert "training" not in claim_part
    assert markdown.count("../plots/outcome.png") == 1  # shown once, in the claim


def test_bad_claim_figure_is_refused_in_one_sentence_before_writing(sweep, tmp_path):
    claim = {"source": "S", "statement": "T", "figure": {"x": "protocol.rounds", "y": "fraction_reconstruct"}}
    run = _with_claim(sweep / "1", tmp_path / "run", claim)
    proc = run_cli("report", str(run))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert "claim.figure.y='fraction_reconstruct'" in proc.stderr
    assert "did you mean fraction_reconstructed" in proc.stderr
    assert not (run / "report").exists()


@pytest.mark.parametrize(
    ("claim", "key"),
    [
        ({"source": "S"}, "claim.statement"),
        ({"source": "S", "statement": "T", "figures": {}}, "claim.figures"),
        ({"source": "S", "statement": "T", "figure": {"y": "edges"}}, "claim.figure.x"),
        (
            {"source": "S", "statement": "T", "figure": {"x": "a", "y": "b", "colour": "c"}},
            "claim.figure.colour",
        ),
        ({"source": "S", "statement": "T", "figure": {"x": "a", "y": "b", "hue": [1]}}, "claim.figure.hue"),
    ],
)
def test_malformed_claims_name_the_key(claim, key):
    with pytest.raises(ConfigError, match=f"^{key}="):
        parse_claim(claim)
