"""A preset's ``claim`` in ``decpriv report``: the claim section opens report.md/html with the measured
numbers (checked against a ring's edge count, solved by hand, and against pandas on summary.csv), the
figure is drawn on the claim's axes, a run without a figure shows its own pictures and headline metrics,
and a bad claim is refused in one sentence before anything is written."""

import shutil
from dataclasses import replace

import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import pandas as pd
import pytest
import yaml
from conftest import run_cli

from decpriv.cli import main
from decpriv.errors import ConfigError
from decpriv.report.claims import claim_section, measured, parse_claim

CLAIM = (
    'claim={source: "Test 2026, Fig. 1", statement: "a ring of n nodes has n edges",'
    " figure: {x: topology.n, y: edges, hue: [topology]}}"
)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Four cheap jobs (rings of 4 and 6 nodes, two seeds, no attack) with a claim on the command line."""
    cwd = tmp_path_factory.mktemp("claims")
    args = ["run", "-m", "topology.n=4,6", "seed=0,1", "protocol.rounds=2", "~attack", CLAIM]
    run_cli(*args, "hydra.sweep.dir=sw", cwd=cwd, check=True)
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
    assert "claim (Test 2026, Fig. 1): a ring of n nodes has n edges" in out
    assert "claim figure:" in out and "claim.png" in out

    markdown = (sweep / "report" / "report.md").read_text()
    assert markdown.index("## Claim") < markdown.index("jobs: 4 completed")  # the page opens with it
    assert (
        "| ring | 4 | 4 | 0 | 2 |" in markdown and "| ring | 6 | 6 | 0 | 2 |" in markdown
    )  # edges(ring n) = n
    assert "![claim](plots/claim.png)" in markdown
    page = (sweep / "report" / "report.html").read_text()
    assert page.index("<h2>Claim</h2>") < page.index("jobs: 4 completed")

    section = claim_section(sweep)
    expected = summary.groupby("topology.n")["test_accuracy"].agg(["mean", "std", "count"])
    table = measured(replace(section.claim, y="test_accuracy"), summary).set_index("topology.n")
    assert table["mean"].tolist() == pytest.approx(expected["mean"].tolist(), abs=1e-12)
    assert table["std"].tolist() == pytest.approx(expected["std"].tolist(), abs=1e-12)
    assert table["count"].tolist() == [2, 2]

    figure = section.figures["plots/claim.png"]
    ax = figure.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("topology.n", "edges")
    assert "Test 2026, Fig. 1" in ax.get_title() and "topology=ring" in ax.get_title()
    assert [list(line.get_xdata()) for line in ax.lines[:1]] == [[4, 6]]
    assert list(ax.lines[0].get_ydata()) == [4, 6]
    plt.close(figure)
    pixels = mpimg.imread(sweep / "report" / "plots" / "claim.png")
    assert pixels.shape[1] >= 600 and pixels[..., :3].std() > 0.05


def test_run_without_figure_shows_its_own_pictures_and_the_metrics_its_claim_names(sweep, tmp_path, capsys):
    claim = {"source": "Test 2026, Fig. 2", "statement": "the ring's spectral_gap is positive"}
    run = _with_claim(sweep / "0", tmp_path / "run", claim)
    figure, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    figure.savefig(run / "plots" / "outcome.png")
    plt.close(figure)
    assert main(["report", str(run)]) == 0
    assert "the ring's spectral_gap is positive" in capsys.readouterr().out
    markdown = (run / "report" / "report.md").read_text()
    claim_part = markdown[markdown.index("## Claim") : markdown.index("- status:")]
    gap = pd.read_csv(run / "summary.csv")["spectral_gap"].iloc[0]
    assert f"| spectral_gap | {gap:.6g} |" in claim_part  # the metric its statement names, not all
    assert "test_accuracy" not in claim_part
    assert "](../plots/outcome.png)" in claim_part and "training" not in claim_part
    assert markdown.count("../plots/outcome.png") == 1  # shown once, in the claim


def test_bad_claim_figure_is_refused_in_one_sentence_before_writing(sweep, tmp_path):
    claim = {"source": "S", "statement": "T", "figure": {"x": "topology.n", "y": "egdes"}}
    run = _with_claim(sweep / "1", tmp_path / "run", claim)
    proc = run_cli("report", str(run))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert "claim.figure.y='egdes'" in proc.stderr and "did you mean edges" in proc.stderr
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
