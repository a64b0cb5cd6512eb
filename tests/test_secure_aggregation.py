"""Secure aggregation (Bonawitz et al. 2017) and its two-Sybil evasion (Pasquini et al. 2023, Sec. 6.1)."""

from itertools import combinations

import numpy as np
import pandas as pd
import pytest
import torch

from decpriv.adversary.recorder import Recorder
from decpriv.api import compose_config
from decpriv.defenses.masking import Groups, Ring, pairwise_masked_sum
from decpriv.errors import ConfigError
from decpriv.experiment import build, simulate
from decpriv.seal.truth import Truth

# Fig. 10 shape: victim 0, Sybils 1 (hears 0, 3, 4) and 2 (hears 3, 4); 5 and 6 close the graph.
FIG10_EDGES = "0 1\n1 2\n1 3\n1 4\n2 3\n2 4\n0 5\n5 6\n3 6\n4 5\n"
SMALL = ["data=digits", "model=softmax", "partition.per_node=12"]


def pipeline(overrides):
    cfg, _ = compose_config([*SMALL, "protocol.batch_size=4", *overrides])
    setup = build(cfg)
    outcome, view = simulate(setup)
    return setup, outcome, view


def loop_masked_sum(ring, group, encoded, arrived, m, fault_tolerant, threshold):
    """Reference: the masks pair by pair, the sum member by member (Bonawitz et al., Sec. 3-4)."""
    S, p = encoded.shape
    masked = encoded.clone()
    pairs = [
        (i, j) for g in range(int(group.max()) + 1) for i, j in combinations(np.flatnonzero(group == g), 2)
    ]
    for k, (i, j) in enumerate(pairs):
        masked[i] = (masked[i] + m[k]) % ring.modulus
        masked[j] = (masked[j] - m[k]) % ring.modulus
    sums, ok = [], []
    for g in range(int(group.max()) + 1):
        members = np.flatnonzero(group == g)
        alive = [i for i in members if arrived[i]]
        total = sum(masked[i] for i in alive) % ring.modulus
        for k, (i, j) in enumerate(pairs):  # survivors reveal the masks shared with dropped members
            if i in alive and j in members and j not in alive:
                total = (total - m[k]) % ring.modulus
            if j in alive and i in members and i not in alive:
                total = (total + m[k]) % ring.modulus
        sums.append(total)
        ok.append(len(alive) >= threshold and (fault_tolerant or len(alive) == len(members)))
    return masked, torch.stack(sums), ok


@pytest.mark.parametrize("fault_tolerant", [True, False])
def test_pairwise_masks_agree_with_a_pair_loop_and_cancel_exactly(fault_tolerant):
    ring = Ring.for_sums(4, 16)
    group = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    groups = Groups.from_slots(group, torch.arange(7), 2)
    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    encoded = ring.encode(x)
    arrived = torch.tensor([True, True, True, True, False, True, True])
    out = pairwise_masked_sum(
        ring, groups, encoded, arrived, torch.Generator().manual_seed(1), 3, fault_tolerant
    )
    m = ring.uniform((len(groups.pairs), 5), torch.Generator().manual_seed(1))
    masked, sums, ok = loop_masked_sum(ring, group.numpy(), encoded, arrived.numpy(), m, fault_tolerant, 3)
    assert torch.equal(out.masked, masked) and out.ok.tolist() == ok
    assert torch.equal(out.sums, sums)
    # exact cancellation: the revealed sum is the sum of the survivors' encodings, not a float approximation
    assert torch.equal(out.sums[0], encoded[:3].sum(0) % ring.modulus)
    if fault_tolerant:
        assert torch.equal(out.sums[1], encoded[[3, 5, 6]].sum(0) % ring.modulus)
    assert torch.allclose(ring.decode(out.sums[0]), x[:3].sum(0), atol=3 * 2.0**-16)
    assert not torch.equal(out.masked, encoded)


def test_masked_messages_are_uniform_whatever_they_hide():
    ring = Ring.for_sums(3, 32)
    groups = Groups.from_slots(torch.zeros(3, dtype=torch.int64), torch.arange(3), 1)
    zeros = ring.encode(torch.zeros(3, 20000, dtype=torch.float64))
    out = pairwise_masked_sum(
        ring, groups, zeros, torch.ones(3, dtype=torch.bool), torch.Generator().manual_seed(2), 3, True
    )
    top = (out.masked >> (ring.bits - 1)).double()
    assert abs(float(top.mean()) - 0.5) < 0.01  # a hidden zero looks like a fair coin in every bit
    assert torch.equal(out.sums[0], torch.zeros(20000, dtype=torch.int64))


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-5), ("float64", 1e-8)])
def test_dsgd_under_secure_aggregation_trains_the_same_models(dtype, tol):
    base = ["topology=torus", "topology.n=9", "protocol.rounds=8", f"protocol.dtype={dtype}", "~attack"]
    _, plain, _ = pipeline(base)
    setup, masked, _ = pipeline([*base, "defense=secure_aggregation"])
    assert torch.allclose(masked.final, plain.final, rtol=tol, atol=tol)
    assert not torch.equal(masked.final, plain.final) or dtype == "float32"  # fixed point, not a bypass
    assert setup.defense.summary()["sa_messages_per_round"] == 9 * 4


@pytest.mark.parametrize("fault_tolerant", [True, False])
def test_drop_outs_renormalise_over_survivors_or_abort(fault_tolerant):
    ft = f"defense.fault_tolerant={str(fault_tolerant).lower()}"
    cfg, _ = compose_config([*SMALL, "topology=torus", "topology.n=9", "defense=secure_aggregation", ft])
    cfg.defense.dropout = 0.4
    setup = build(cfg)
    sa, W = setup.defense, setup.network.W.toarray()
    x = torch.randn(9, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    draws = torch.Generator()
    draws.set_state(sa._drops.get_state())
    dropped = (torch.rand(9, generator=draws) < 0.4).numpy()
    mixed = sa.exchange(torch.as_tensor(W), x, Recorder.broadcast(np.array([]), False), 0, 0)
    expected = x.clone()
    for v in range(9):  # the aggregator's own message always arrives; a dropped neighbour's never does
        hood = np.flatnonzero(W[v])
        alive = [u for u in hood if u == v or not dropped[u]]
        if len(alive) >= 3 and (fault_tolerant or len(alive) == len(hood)):
            expected[v] = sum(W[v, u] * x[u] for u in alive) / W[v, alive].sum()
    assert dropped.any() and torch.allclose(mixed, expected, atol=1e-8)
    assert sa.summary()["sa_aborted_aggregations"] == int((mixed == x).all(1).sum())


def test_fedavg_under_secure_aggregation_trains_the_same_model_and_hides_updates():
    base = ["protocol=fedavg", "topology=complete", "topology.n=6", "protocol.rounds=4", "attack=mia"]
    base += ["adversary=server"]
    _, plain, plain_view = pipeline(base)
    setup, masked, view = pipeline([*base, "defense=secure_aggregation"])
    assert torch.allclose(masked.final, plain.final, atol=1e-6)
    sent = plain_view.transcript.values
    assert (view.transcript.values - sent).abs().max() > 1e3  # the server sees masks, not updates
    assert torch.allclose(view.transcript.aggregates[-1, 0], masked.final[0], atol=1e-6)
    assert setup.defense.summary()["sa_messages_per_round"] == 6


def test_secret_sharing_hides_updates_below_k_aggregators_and_trains_the_same():
    base = ["protocol=fedavg", "topology=complete", "topology.n=6", "protocol.rounds=3", "attack=mia"]
    base += ["adversary=server"]
    _, plain, plain_view = pipeline(base)
    sent = plain_view.transcript.values
    for colluding, hidden in ((1, True), (2, False)):
        setup, shared, view = pipeline([*base, "defense=secret_sharing", f"defense.colluding={colluding}"])
        assert torch.allclose(shared.final, plain.final, atol=1e-6)
        gap = float((view.transcript.values - sent).abs().max())
        assert gap > 1e3 if hidden else gap < 1e-6  # one share is noise; all k shares are the update
    assert setup.defense.summary()["ss_messages_per_round"] == 6 * 2 + 2


def run_sybils(tmp_path, extra):
    graph = tmp_path / "fig10.txt"
    graph.write_text(FIG10_EDGES)
    overrides = ["topology=edgelist", f"topology.path={graph}", "gossip_matrix=uniform", "protocol.rounds=4"]
    overrides += [
        "protocol.dtype=float64",
        "attack=sybil_evasion",
        "adversary.sybils=0",
        "attack.permutations=5",
    ]
    setup, outcome, view = pipeline([*overrides, *extra])
    findings = setup.attack.run(view)
    truth = Truth(setup.dataset, setup.local, outcome.final, outcome.truth)
    return setup, setup.attack.evaluate(findings, truth, view)


@pytest.mark.parametrize("defense", ["none", "secure_aggregation"])
def test_two_sybils_recover_the_victim_update_exactly(tmp_path, defense):
    setup, report = run_sybils(tmp_path, [f"defense={defense}"])
    pair = setup.adversary.sybils
    assert (pair.victim, pair.a, pair.b, pair.dropout) == (0, 1, 2, False)
    table = report.tables["sybil_evasion"]
    assert (table.recovered_relative_error <= 1e-6).all()
    assert table.base_known.tolist() == [True, False, False, False]  # only the common init is public
    if defense == "secure_aggregation":
        assert (table.received_relative_error > 1e3).all()  # a single node sees a masked message
    else:
        assert (table.received_relative_error == 0).all()


def test_rewired_sybils_on_a_torus():
    overrides = ["topology=torus", "topology.n=16", "gossip_matrix=uniform", "protocol.rounds=2"]
    overrides += [
        "protocol.dtype=float64",
        "attack=sybil_evasion",
        "adversary.sybils=5",
        "attack.permutations=5",
    ]
    overrides += ["defense=secure_aggregation", "adversary.rewire=true"]
    setup, outcome, view = pipeline(overrides)
    pair, net = setup.adversary.sybils, setup.network
    assert pair.rewired and net.n == 16
    hood = lambda u: set(net.neighbours(u).tolist()) | {u}  # noqa: E731
    assert hood(pair.b) - {pair.a, pair.b} == hood(pair.a) - {pair.a, pair.b, pair.victim}
    findings = setup.attack.run(view)
    truth = Truth(setup.dataset, setup.local, outcome.final, outcome.truth)
    table = setup.attack.evaluate(findings, truth, view).tables["sybil_evasion"]
    assert (table.recovered_relative_error <= 1e-6).all()


def test_sybil_drop_out_claim_on_a_complete_graph():
    overrides = ["topology=complete", "topology.n=6", "gossip_matrix=uniform", "protocol.rounds=3"]
    overrides += [
        "protocol.dtype=float64",
        "attack=sybil_evasion",
        "adversary.sybils=4",
        "attack.permutations=5",
    ]
    setup, outcome, view = pipeline([*overrides, "defense=secure_aggregation"])
    assert setup.adversary.sybils.dropout and setup.adversary.nodes.tolist() == [0, 1]
    findings = setup.attack.run(view)
    truth = Truth(setup.dataset, setup.local, outcome.final, outcome.truth)
    table = setup.attack.evaluate(findings, truth, view).tables["sybil_evasion"]
    assert (table.recovered_relative_error <= 1e-6).all() and table.base_known.all()
    assert (table.recovered_step_relative_error <= 1e-6).all()  # gradient recovery is back, every round
    assert (table.received_step_relative_error > 1e3).all()


@pytest.mark.parametrize(
    "overrides, words",
    [
        (
            ["protocol=gossip", "defense=secure_aggregation", "~attack"],
            ["defense='secure_aggregation'", "group"],
        ),
        (
            ["topology=ring", "defense=secure_aggregation", "defense.threshold=4", "~attack"],
            ["defense.threshold=4", "<= 3"],
        ),
        (
            ["topology=ring", "attack=sybil_evasion", "adversary.sybils=3"],
            ["adversary.sybils=3", "adversary.rewire=true", "topology=complete"],
        ),
        (["attack=sybil_evasion", "adversary=curious"], ["adversary.sybils=null"]),
        (
            [
                "topology=complete",
                "topology.n=6",
                "gossip_matrix=uniform",
                "defense=secure_aggregation",
                "defense.fault_tolerant=false",
                "attack=sybil_evasion",
                "adversary.sybils=2",
            ],
            ["defense.fault_tolerant=False", "drop"],
        ),
        (["defense=secure_aggregation", "attack=state_override"], ["secure aggregation", "sybil_evasion"]),
        (["defense=secure_aggregation", "attack=echo"], ["secure aggregation"]),
        (
            ["defense=secret_sharing", "protocol=dsgd", "~attack"],
            ["defense='secret_sharing'", "protocol=fedavg"],
        ),
        (
            ["protocol=fedavg", "defense=secret_sharing", "defense.colluding=3", "~attack"],
            ["defense.colluding=3"],
        ),
    ],
)
def test_bad_configurations_are_refused(overrides, words):
    cfg, _ = compose_config([*SMALL, *overrides])
    with pytest.raises(ConfigError) as error:
        build(cfg)
    for word in words:
        assert word in str(error.value)


def test_gradient_recovery_under_secure_aggregation_runs_and_fails():
    overrides = ["topology=complete", "topology.n=6", "gossip_matrix=uniform", "protocol.rounds=3"]
    overrides += ["protocol.dtype=float64", "attack=gradient_recovery", "protocol.batch_size=null"]
    for defense, check in (("none", lambda e: e < 1e-9), ("secure_aggregation", lambda e: e > 1e3)):
        setup, outcome, view = pipeline([*overrides, f"defense={defense}"])
        truth = Truth(setup.dataset, setup.local, outcome.final, outcome.truth)
        summary = setup.attack.evaluate(setup.attack.run(view), truth, view).summary
        assert check(summary["recovery_max_relative_error"]), (defense, summary)
    assert abs(summary["recovery_median_cosine"]) < 0.2


@pytest.mark.slow
def test_fig10_preset_claim(cli, tmp_path):
    """Pasquini et al. 2023, Fig. 10: under SA the single node's attacks fall to chance, two Sybils bring
    them back with the exact update (complete graph, fault-tolerant SA, b fakes v's drop-out)."""
    cli("run", "-m", "experiment=pasquini_fig10_sa_evasion", f"hydra.sweep.dir={tmp_path}/sweep", check=True)
    rows = pd.read_csv(tmp_path / "sweep" / "summary.csv").set_index("defense")
    plain, sa = rows.loc["none"], rows.loc["secure_aggregation"]
    for row in (plain, sa):
        assert row.sybil_max_relative_error <= 1e-6 and row.sybil_step_max_relative_error <= 1e-6
        assert row.sybil_exact_fraction == 1.0 and row.sybil_steps_known == 50
        # the recovered update is the true one, so membership inference on it matches the reference
        assert row.sybil_mia_sybil_recovered_auc == pytest.approx(row.sybil_mia_true_update_auc, abs=1e-9)
        assert row.sybil_mia_sybil_recovered_auc_above_null
    assert plain.received_min_relative_error == 0 and plain.received_step_min_relative_error == 0
    assert plain.sybil_mia_received_auc_above_null  # without SA a single node already sees the leak
    # under SA a single node's gradient recovery and MIA on what it received are at chance
    assert sa.received_min_relative_error > 1e6 and sa.received_step_min_relative_error > 1e6
    assert not sa.sybil_mia_received_auc_above_null and not sa.sybil_mia_received_advantage_above_null
    assert abs(sa.sybil_mia_received_auc - 0.5) < abs(sa.sybil_mia_sybil_recovered_auc - 0.5)


def fl_global(setup, view):
    targets = setup.attack.run(view)
    return targets, targets.models[np.flatnonzero(targets.table.view == "fl_global")]


def mia_summary(setup, outcome, view, targets):
    return setup.attack.evaluate(
        targets, Truth(setup.dataset, setup.local, outcome.final, outcome.truth), view
    ).summary


def test_mia_user_view_reads_the_revealed_aggregate():
    """FedAvg's user view (``fl_global``) under SA / secret sharing is the global model the server
    revealed: the masks cancel, so it equals the participants' plain updates averaged with their set
    sizes (and the unprotected run's global model), while the server's per-update view is masked noise.
    Membership inference on it is then the unprotected run's, above its null (3 users of 40 samples, 10
    local steps: measured AUC 0.640, null 97.5% 0.568), where averaging the masked updates gave chance
    (0.467 under SA, 0.471 under secret sharing)."""
    base = ["protocol=fedavg", "topology=complete", "topology.n=3", "protocol.rounds=10", "attack=mia"]
    base += ["adversary=server", "partition.per_node=40", "protocol.batch_size=40", "protocol.local_steps=10"]
    base += ["model=mlp", "protocol.lr=0.5"]
    plain_setup, plain, plain_view = pipeline(base)
    plain_targets, unprotected = fl_global(plain_setup, plain_view)
    without = mia_summary(plain_setup, plain, plain_view, plain_targets)
    assert without["mia_fl_global_auc_above_null"]
    for defense in ("defense=secure_aggregation", "defense=secret_sharing"):
        setup, masked, view = pipeline([*base, defense])
        targets, glob = fl_global(setup, view)
        sent = masked.truth["plain_messages"]  # (R, n, p) what each client really sent
        weights = torch.as_tensor(view.data_spec.local_sizes, dtype=sent.dtype)
        plain_mean = (weights[:, None] * sent).sum(1) / weights.sum()
        rounds = torch.as_tensor(targets.table[targets.table.view == "fl_global"]["round"].to_numpy().copy())
        assert torch.allclose(glob, plain_mean[rounds].to(glob.dtype), atol=1e-6)  # the masks cancel
        assert torch.allclose(glob, unprotected, atol=1e-6)
        masked_updates = targets.models[np.flatnonzero(targets.table.view == "fl_update")]
        assert (masked_updates - plain_targets.models[: len(masked_updates)]).abs().max() > 1e3
        with_defense = mia_summary(setup, masked, view, targets)
        assert with_defense["mia_fl_global_auc"] == pytest.approx(without["mia_fl_global_auc"], abs=1e-3)
        assert with_defense["mia_fl_global_auc_above_null"]
        assert not with_defense["mia_fl_update_auc_above_null"]  # the server's view of each update: masked
