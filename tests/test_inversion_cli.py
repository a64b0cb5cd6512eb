"""The centralised inversion attacks end to end from the CLI."""

import pandas as pd


def test_idlg_on_a_fedsgd_server_recovers_the_digit(cli, tmp_path):
    run = tmp_path / "run"
    cli(
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
    assert (table["psnr"] > 30).all()
    assert (run / "reconstructions" / "idlg.png").stat().st_size > 0


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
