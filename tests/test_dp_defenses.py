"""DP defenses: clipping, DP-SGD per-example path vs a loop, noise levels, DECOR's cancelling noise,
CDP averaging, Muffliato, and the CLI end to end (calibration, plots, bad input)."""

import math
import re
from types import SimpleNamespace

import dp_accounting
import networkx as nx
import numpy as np
import pandas as pd
import pytest
import torch
from dp_accounting.pld import PLDAccountant

from decpriv.api import compose_config, compose_or_refuse, run
from decpriv.defenses.decor import Decor
from decpriv.defenses.dp import DPSGD, CentralDP, LocalDP, clip_rows
from decpriv.defenses.muffliato import Muffliato
from decpriv.errors import ConfigError
from decpriv.experiment import build
from decpriv.graphs.gossip_matrix import metropolis_hastings
from decpriv.graphs.network import Network
from decpriv.models.architectures import softmax
from decpriv.privacy.secldp_bounds import slope_for_epsilon
from decpriv.random.streams import Seeds


@pytest.fixture(autouse=True)
def float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def toy(n=4, b=5, d=6, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    model = softmax((d,), classes)
    theta = torch.randn(n, model.p, generator=g, dtype=torch.float64)
    x = torch.randn(n, b, d, generator=g, dtype=torch.float64)
    y = torch.randint(0, classes, (n, b), generator=g)
    w = torch.ones(n, b, dtype=torch.float64)
    w[0, -2:] = 0.0  # padding on node 0
    return model, theta, x, y, w


def test_clip_rows_projects_onto_ball():
    g = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    out = clip_rows(g, 1.0)
    torch.testing.assert_close(out, torch.tensor([[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]]))


def test_dpsgd_without_noise_is_mean_of_clipped_example_gradients_by_loop():
    model, theta, x, y, w = toy()
    got = DPSGD(clip=0.5, sigma=0.0).gradients(model, theta, x, y, w, 0, torch.Generator())
    for v in range(len(theta)):
        rows = []
        for i in range(x.shape[1]):
            if w[v, i] == 0:
                continue
            th = theta[v].clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(model.loss(th, x[v, i : i + 1], y[v, i : i + 1]), th)
            rows.append(grad * min(1.0, 0.5 / float(grad.norm())))
        torch.testing.assert_close(got[v], torch.stack(rows).mean(0))


def test_noise_levels_of_dpsgd_ldp_cdp():
    model, theta, x, y, w = toy(n=400, b=4)
    w[:] = 1.0
    gen = torch.Generator().manual_seed(1)
    base = LocalDP(clip=1.0, sigma=0.0).gradients(model, theta, x, y, w, 0, gen)
    cases = [(LocalDP(clip=1.0, sigma=2.0), 2.0), (CentralDP(clip=1.0, sigma=2.0), 2.0 / 400**0.5)]
    for defense, std in cases:
        noise = defense.gradients(model, theta, x, y, w, 0, gen) - base
        assert float(noise.std()) == pytest.approx(std, rel=0.05)
    clean = DPSGD(clip=1.0, sigma=0.0).gradients(model, theta, x, y, w, 0, gen)
    noise = DPSGD(clip=1.0, sigma=2.0).gradients(model, theta, x, y, w, 0, gen) - clean
    assert float(noise.std()) == pytest.approx(2.0 / 4, rel=0.05)  # sigma C on the sum, divided by b


def test_cdp_aggregates_by_exact_average():
    m = torch.randn(5, 3)
    out = CentralDP().aggregate(torch.eye(5), m)
    torch.testing.assert_close(out, m.mean(0).expand(5, 3))


def bound_decor(graph: nx.Graph, sigma_cor: float = 3.0, seed: int = 0) -> tuple[Decor, Network]:
    network = Network.build(graph, metropolis_hastings)
    decor = Decor(clip=1.0, sigma_cdp=1.0, sigma_cor=sigma_cor, epsilon=None, level="user")
    unbatched = SimpleNamespace(batch_size=None)
    decor.bind(
        SimpleNamespace(network=network, device=torch.device("cpu"), seeds=Seeds(seed), protocol=unbatched)
    )
    return decor, network


def test_decor_correlated_noise_sums_to_zero_every_round_and_is_fresh():
    decor, network = bound_decor(nx.grid_2d_graph(4, 4, periodic=True))
    draws = torch.stack([decor.correlated(16, 7, torch.float64) for _ in range(200)])  # (rounds, n, p)
    assert draws.sum(1).abs().max() < 1e-12
    assert not torch.allclose(draws[0], draws[1])
    # node i's correlated part has variance deg(i) sigma_cor^2 (one independent term per edge)
    assert float(draws.var(dim=(0, 2)).mean()) == pytest.approx(4 * 9.0, rel=0.1)
    # neighbours' parts are anti-correlated (covariance -sigma_cor^2 per shared edge), others independent
    flat = draws.permute(1, 0, 2).reshape(16, -1)
    cov = np.cov(flat.numpy())
    u, v = network.edges[0]
    assert cov[u, v] == pytest.approx(-9.0, rel=0.15)
    far = np.flatnonzero(network.distances_from([0]) >= 2)[0]
    assert abs(cov[0, far]) < 1.0


def test_decor_average_gradient_equals_clipped_average_when_private_noise_is_off():
    model, theta, x, y, w = toy(n=16)
    decor, _ = bound_decor(nx.cycle_graph(16), sigma_cor=50.0)
    decor.sigma_cdp = 0.0
    noisy = decor.gradients(model, theta, x, y, w, 0, torch.Generator())
    clean = LocalDP(clip=1.0, sigma=0.0).gradients(model, theta, x, y, w, 0, torch.Generator())
    assert float((noisy - clean).abs().max()) > 10.0
    torch.testing.assert_close(noisy.mean(0), clean.mean(0))


def test_decor_same_seed_same_noise_other_seed_other_noise():
    a, _ = bound_decor(nx.cycle_graph(8), seed=4)
    b, _ = bound_decor(nx.cycle_graph(8), seed=4)
    c, _ = bound_decor(nx.cycle_graph(8), seed=5)
    first = a.correlated(8, 3, torch.float64)
    torch.testing.assert_close(first, b.correlated(8, 3, torch.float64))
    assert not torch.allclose(first, c.correlated(8, 3, torch.float64))


def test_muffliato_clips_then_adds_noise_once():
    values = torch.cat([torch.full((500, 2), 10.0), torch.full((500, 2), 0.1)])
    out = Muffliato(clip=1.0, sigma=0.0 + 1e-9).messages(values, 0, torch.Generator())
    assert float(out[:500].norm(dim=1).max()) == pytest.approx(1.0, rel=1e-6)
    torch.testing.assert_close(out[500:], values[500:], atol=1e-6, rtol=0)
    noisy = Muffliato(clip=1.0, sigma=3.0).messages(values, 0, torch.Generator().manual_seed(0))
    assert float((noisy[500:] - values[500:]).std()) == pytest.approx(3.0, rel=0.1)


LSQ = (  # every use picks defense=decor|cdp|ldp: Allouah et al.'s least squares protects users
    "data=least_squares",
    "defense.level=user",
    "~attack",
    "partition=contiguous",
    "model=linear_regression",
    "protocol.batch_size=null",
    "protocol.lr=1.668e-3",
    "protocol.dtype=float64",
)


def test_calibrated_runs_meet_target(tmp_path):
    s = run(["defense=dpsgd", "defense.epsilon=3", "protocol.rounds=10"], tmp_path / "a").summary
    assert s["epsilon_decpriv_rdp"] == pytest.approx(3.0, rel=1e-4) and s["epsilon_target"] == 3.0
    assert s["epsilon"] <= 3.0 * (1 + 1e-4)  # the tightest sound value, PLD here
    result = run([*LSQ, "defense=decor", "defense.epsilon=5", "protocol.rounds=100"], tmp_path / "b")
    summary = result.summary
    assert summary["epsilon_renyi_slope"] == pytest.approx(5.0, rel=1e-6) and summary["sigma_cor"] > 0
    # the headline is the exact epsilon of the composed Gaussian view; dp-accounting's PLD of T Gaussian
    # steps of the same slope (pessimistic discretisation) lies just above it
    library = PLDAccountant(value_discretization_interval=1e-4)
    library.compose(dp_accounting.GaussianDpEvent(1 / math.sqrt(2 * summary["slope"])), 100)
    assert summary["epsilon"] <= library.get_epsilon(1e-5) <= summary["epsilon"] * (1 + 1e-3)
    assert summary["epsilon"] < 0.9 * 5.0 and summary["epsilon_method"] == "exact Gaussian view"
    assert {"source", "observer", "epsilon", "alpha", "delta", "threat"} <= set(result.privacy.columns)
    assert (tmp_path / "b" / "plots" / "epsilon_vs_sigma_cor.png").stat().st_size > 10000


def test_accountant_cdp_excess_moves_decor_along_one_budget_and_leaves_ldp_alone():
    """Allouah et al. App. D.2: many (sigma_cdp, sigma_cor) couples meet one budget; accountant.cdp_excess
    picks sigma_cdp = excess x sigma_ldp / sqrt(n), and sigma_cor rises as sigma_cdp nears the CDP level."""
    couples, ldp_sigmas = {}, {}
    for excess in (1.05, 1.5):
        overrides = [*LSQ, "topology=ring", "accountant=secldp", "protocol.rounds=100", "defense.epsilon=5"]
        overrides.append(f"accountant.cdp_excess={excess}")
        setup = build(compose_config([*overrides, "defense=decor"])[0])
        sigma_ldp = math.sqrt(2 / slope_for_epsilon(5, 100, 1e-5))  # clip 1, T = 100 full-batch steps
        assert setup.defense.sigma_cdp == pytest.approx(excess * sigma_ldp / 4)
        couples[excess] = setup.defense.sigma_cor
        # the couple is accounted afresh from the calibrated sigmas: it spends the whole budget, no more
        assert setup.accountant.account(setup).summary["epsilon_renyi_slope"] == pytest.approx(5, rel=1e-6)
        ldp = build(compose_config([*overrides, "defense=ldp"])[0])
        ldp_sigmas[excess] = ldp.defense.sigma
        assert ldp.accountant.account(ldp).summary["epsilon_renyi_slope"] == pytest.approx(5, rel=1e-6)
        assert setup.defense.sigma_cdp == pytest.approx(excess * ldp.defense.sigma / 4)  # n = 16
    assert couples[1.05] > 2 * couples[1.5] > 0
    assert ldp_sigmas[1.05] == ldp_sigmas[1.5] > 1  # cdp_excess moves DECOR only
    with pytest.raises(ConfigError, match=re.escape("accountant.cdp_excess=1.0")):
        build(compose_config([*LSQ, "defense=decor", "accountant=secldp", "accountant.cdp_excess=1.0"])[0])


def test_decor_close_to_cdp_and_far_better_than_ldp_on_least_squares(tmp_path):
    gaps = {}
    for defense in ("cdp", "decor", "ldp"):
        overrides = [
            *LSQ,
            "topology=complete",
            f"defense={defense}",
            "defense.epsilon=10",
            "accountant=secldp",
            "accountant.cdp_excess=1.2",  # the couple nearest CDP (the default 2 halves the ring's noise)
        ]
        overrides += ["protocol.rounds=1500", "protocol.average_last=200", "seed=1"]
        gaps[defense] = run(overrides, tmp_path / defense).summary["optimality_gap"]
    assert gaps["cdp"] < gaps["ldp"] / 5 and gaps["decor"] < gaps["ldp"] / 5
    assert gaps["decor"] < 3 * gaps["cdp"]


def test_cli_muffliato_gossip_writes_distance_profile(cli, tmp_path):
    cli(
        "run", "protocol=gossip", "defense=muffliato", "topology=torus", "topology.n=36",
        "partition=one_per_node", "protocol.rounds=8", "hydra.run.dir=m", check=True,
    )  # fmt: skip
    profile = pd.read_csv(tmp_path / "m" / "privacy_distance.csv")  # exact whole view: far nodes recovered
    assert profile["mean"].iloc[0] == pytest.approx(20.0) and profile["mean"].iloc[1] < 20.0
    theorem = pd.read_csv(tmp_path / "m" / "privacy.csv").groupby("distance").epsilon_rdp_theorem1.mean()
    assert theorem.is_monotonic_decreasing
    assert (tmp_path / "m" / "plots" / "privacy_vs_distance.png").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("defense=ldp", "defense.clip=0"), "defense.clip=0"),
        (("defense=dpsgd", "defense.epsilon=-1"), "defense.epsilon=-1"),
        (("defense=ldp", "accountant=rdp", "accountant.delta=2"), "accountant.delta=2"),
        (("defense=ldp", "defense.epsilon=0.0001", "protocol.rounds=5000"), "defense.epsilon=0.0001"),
        (("defense=decor", "accountant=secldp", "accountant.threat=spy"), "accountant.threat='spy'"),
        (
            ("defense=decor", "accountant=secldp", "accountant.threat=collusion", "accountant.collusion=15"),
            "collusion=15",
        ),
        (("defense=muffliato", "protocol=dsgd"), "accountant='network_dp'"),
        (
            ("defense=ldp", "defense.level=example", "accountant=network_dp"),
            "protocol=dsgd at the example level",
        ),
        (("defense=ldp", "defense.level=batch"), "defense.level='batch'"),
        (("defense=ldp", "defense.sampler=fixed"), "defense.sampler='fixed': the user level releases"),
        (("defense=decor", "defense.epsilon=null", "defense.sigma_cdp=1"), "defense.sigma_cor=null"),
        (("defense=muffliato", "protocol=gossip", "accountant=rdp"), "accountant='rdp'"),
        (
            ("protocol=random_walk", "defense=ldp", "defense.sigma=1", "accountant=random_walk"),
            "defense.sigma=1",
        ),
        (("protocol=dsgd", "defense=ldp", "accountant=random_walk"), "accountant='random_walk'"),
    ],
)
def test_bad_input_refused_before_running(args, needle):
    cfg, _ = compose_config(["protocol.rounds=5", *args])
    with pytest.raises(ConfigError, match=re.escape(needle)):
        build(cfg)


def test_a_key_another_option_of_the_group_reads_names_that_option():
    with pytest.raises(
        ConfigError, match=re.escape("choose defense=cdp or decor or ldp (it reads defense.level)")
    ):
        compose_or_refuse(["defense=dpsgd", "defense.level=user"])


def test_the_audit_audits_a_defense_under_its_own_accountant():
    """attack=audit pinned accountant=rdp, so `attack=audit defense=decor` was refused by rdp."""
    cases = {
        ("defense=ldp",): "rdp",
        ("defense=decor", "defense.level=user"): "secldp",
        ("defense=dpsgd",): "rdp",
    }
    for defense, accountant in cases.items():
        setup = build(compose_config(["attack=audit", *defense, "protocol.rounds=3"])[0])
        assert setup.accountant.name == accountant


def test_cli_decor_without_private_noise_exits_2_with_reason(cli):
    args = ("defense=decor", "defense.epsilon=null", "defense.sigma_cdp=0", "defense.sigma_cor=1")
    proc = cli("run", *LSQ, "protocol.rounds=5", *args, "hydra.run.dir=x")
    assert proc.returncode == 2, proc.stderr
    assert "defense.sigma_cdp=0" in proc.stderr and "exact sum" in proc.stderr


# Allouah et al. 2024, Fig. 3a at epsilon = 10, read off the published figure (CDP, DECOR complete / torus /
# ring, LDP), and how close decpriv comes from the paper's x^0 = 1: the authors' own code at their tuned
# settings gives 0.03-0.04 for CDP there, 3x below their figure (docs/privacy.md)
PAPER_EPS10 = {
    ("cdp", "complete"): (0.089, 4.0),
    ("decor", "complete"): (0.094, 4.0),
    ("decor", "torus"): (0.24, 2.0),
    ("decor", "ring"): (0.37, 1.5),
    ("ldp", "ring"): (4.8, 1.5),
}


@pytest.mark.slow
def test_decor_least_squares_tuned_couples_reproduce_paper_ordering_and_magnitudes(tmp_path):
    """DECOR Fig. 3a at epsilon 10, seed 1, from the preset's x^0 = 1 with its claim keeping each cell's best
    setting (App. D.2): the baselines over lr 5.995e-4 / 1.668e-3 (two points of the authors' grid), DECOR's
    three couples of the budget at the authors' lr 1.668e-3, clip 1. CDP < DECOR complete < torus < ring
    << LDP; CDP's tuned lr is the authors' 1.668e-3 (the smaller one cannot cover the distance from x^0 = 1
    in 3500 steps); every cell within its factor of the figure."""
    from omegaconf import OmegaConf

    from decpriv.report.claims import measured, parse_claim

    cfg = compose_config(["experiment=decor_least_squares"])[0]
    assert cfg.model.init_value == 1.0
    claim = parse_claim(OmegaConf.to_container(cfg.claim))
    cells = [
        (d, t, 1.2, lr) for d, t in (("cdp", "complete"), ("ldp", "ring")) for lr in (5.995e-4, 1.668e-3)
    ]
    cells += [("decor", t, e, 1.668e-3) for t in ("complete", "torus", "ring") for e in (1.05, 1.2, 1.5)]
    rows = []
    for defense, topology, excess, lr in cells:
        overrides = ["experiment=decor_least_squares", f"defense={defense}", f"topology={topology}"]
        overrides += [f"accountant.cdp_excess={excess}", f"protocol.lr={lr}", "defense.epsilon=10", "seed=1"]
        result = run(overrides, tmp_path / f"{defense}_{topology}_{excess}_{lr}")
        assert result.summary["epsilon_renyi_slope"] == pytest.approx(10, rel=1e-6)  # calibrated
        rows.append(result.summary)
    table = measured(claim, pd.DataFrame(rows)).set_index(["defense", "topology"])
    gap = table["mean"]

    assert gap["cdp", "complete"] < gap["decor", "complete"] < gap["decor", "torus"] < gap["decor", "ring"]
    assert gap["decor", "ring"] < gap["ldp", "ring"] / 5
    assert float(table.loc[("cdp", "complete"), "protocol.lr"]) == 1.668e-3
    for cell, (paper, factor) in PAPER_EPS10.items():
        assert paper / factor < gap[cell] < factor * paper, (cell, gap[cell], paper)


def test_a_calibrated_sigma_cdp_too_small_for_the_threat_names_the_excess_that_works():
    """Colluders who can isolate a ring node leave DECOR the private noise alone: the refusal names the
    key the user set (the excess; the calibrated sigma_cdp was never theirs) and a value that works."""
    from decpriv.api import compose_config
    from decpriv.experiment import build

    threat = ["defense=decor", "accountant=secldp", "accountant.threat=collusion", "accountant.collusion=2"]
    with pytest.raises(ConfigError, match=r"^defense\.cdp_excess=1\.01: .* above 4 however large") as refused:
        build(compose_config([*threat, "defense.cdp_excess=1.01"])[0])
    fix = re.search(r"use (defense\.cdp_excess=[\d.]+)", str(refused.value)).group(1)
    setup = build(compose_config([*threat, fix])[0])  # accepted: its private noise covers each node
    assert setup.defense.sigma_cdp > 0.7597  # cdp_excess 4's, which was refused
