"""The centralised inversion attacks end to end from the CLI."""

import json

import pandas as pd


def test_idlg_on_a_fedsgd_server_recovers_the_digit(cli, tmp_path):
    run = tmp_path / "run"
    proc = cli(
        "run",
        "experiment=inversion_digits_mlp",
        "attack=idlg",
        "attack.iterations=40",
        "adversary.eavesdropper=true",
        f"hydra.run.dir={run}",
        check=True,
    )
    table = pd.read_csv(run / "attack.csv")
    assert len(table) == 1 and table["label_correct"].all()
    assert (table["psnr"] > 30).all() and table["recovered"].all()
    assert (run / "reconstructions" / "idlg.png").stat().st_size > 0
    # the headline leads with the recovered fraction beside the mean image's (none), then the PSNRs
    meta = json.loads((run / "run.json").read_text())
    assert [h["metric"] for h in meta["headline"][:2]] == ["attack_recovered_fraction", "attack_psnr_median"]
    assert "verdict: idlg: 1 of 1 image(s) recovered" in " ".join(proc.stdout.split())


def test_server_must_see_the_updates(cli):
    proc = cli(
        "run",
        "experiment=inversion_digits_mlp",
        "adversary.eavesdropper=false",
        "adversary.count=1",
        "hydra.run.dir=x",
    )
    assert proc.returncode == 2 and "adversary.eavesdropper" in proc.stderr + proc.stdout


def test_refuses_decentralized_protocols(cli):
    proc = cli("run", "attack=idlg", "protocol=dsgd", "adversary.eavesdropper=true", "hydra.run.dir=x")
    assert proc.returncode == 2 and "protocol" in proc.stderr + proc.stdout


def test_refuses_clients_left_out_of_the_first_round(cli):
    proc = cli("run", "experiment=inversion_digits_mlp", "protocol.client_fraction=0.5", "hydra.run.dir=x")
    assert proc.returncode == 2 and "protocol.client_fraction" in proc.stderr + proc.stdout


def test_fedsgd_server_reads_the_gradient_of_any_round(cli, tmp_path):
    """Round 3's gradient is taken at w^3, which the server rebuilt from round 2's updates: the closed
    form then recovers every client's input as exactly as from the first round's."""
    run = tmp_path / "run"
    cli(
        "run",
        "experiment=yu_e1_fedsgd",
        "protocol.rounds=4",
        "attack.round=3",
        "attack.victims=10",
        f"hydra.run.dir={run}",
        check=True,
    )
    summary = pd.read_csv(run / "summary.csv").iloc[0]
    assert summary["attack_round"] == 3 and summary["attack_l2_error"] < 1e-4


def test_refuses_a_round_the_run_does_not_have(cli):
    proc = cli("run", "experiment=yu_e1_fedsgd", "protocol.rounds=4", "attack.round=4", "hydra.run.dir=x")
    assert proc.returncode == 2 and "attack.round" in proc.stderr + proc.stdout
