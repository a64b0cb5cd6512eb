"""No finding chooses what it is scored on (issue 53): a scorer's targets come from the threat model the
pipeline holds (decpriv/attacks/targets.py). The MIA's finding naming the attacker itself as a victim,
trained hard on its own data, is refused in one sentence; one that omits a victim scores chance for it.
The control: the same forged finding, scored as it names its targets (the old path), does win.
"""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import DPSGD, NEIGHBOUR_DISCOVERY, PDMM_QUADRATIC
from test_audit import PATH3
from test_pdmm_diffgrad import LOGISTIC
from test_secure_aggregation import FIG10_EDGES, SMALL

from decpriv import api, experiment
from decpriv.adversary.adversary import place_sybils
from decpriv.attacks.audit.attack import refuse_nonfinite
from decpriv.attacks.inversion.scoring import Batches, score_batches
from decpriv.attacks.p2p.active_inversion import Extracted
from decpriv.attacks.p2p.gradient_recovery import full_local_steps
from decpriv.attacks.p2p.mia import Targets, mia_report, score_targets
from decpriv.attacks.p2p.neighbour_discovery import Discovered
from decpriv.attacks.p2p.neighbourhood import closed
from decpriv.attacks.pdmm.leak import Assumed, extract
from decpriv.attacks.targets import TargetRefused
from decpriv.protocols.fedavg import client_nodes


@pytest.fixture(scope="module")
def honest():
    """A default D-PSGD run's MIA, in this process: the setup, the view, the truth and the finding."""
    cfg, _ = api.compose_config(["protocol.rounds=3", "seed=0"])
    setup = experiment.build(cfg)
    outcome, view = experiment.simulate(setup)
    truth = experiment.ground_truth(setup, outcome)
    return setup.attack, view, truth, setup.attack.run(view)


def scored_as_named(attack, findings, truth, view):
    """The finding scored on the targets it names (the scorer before issue 53)."""
    scored = score_targets(
        view.model, findings, truth, attack.score, attack.thresholds, view.seeds, attack.permutations,
        pool=attack.non_members,
    )  # fmt: skip
    return mia_report(scored)


def test_a_finding_naming_the_attacker_as_its_victim_is_refused(honest):
    attack, view, truth, findings = honest
    me = int(view.attackers[0])
    forged = Targets(findings.table.assign(victim=me), findings.models.clone())
    # the attacker's own, overfit model: its own update, which it trained on its own data
    control = scored_as_named(attack, forged, truth, view)
    assert set(control.tables["mia"].victim) == {me}  # scored on the target it chose
    with pytest.raises(TargetRefused, match=rf"^attack=mia: its finding names .*'victim': {me}.* not one of"):
        attack.evaluate(forged, truth, view)


def test_a_victim_the_finding_omits_scores_chance(honest):
    attack, view, truth, findings = honest
    whole = attack.evaluate(findings, truth, view).tables["mia"]
    victims = np.unique(findings.table.victim)
    assert len(victims) >= 2 and (whole.auc > 0.6).all()
    left_out = int(victims[0])
    kept = (findings.table.victim != left_out).to_numpy()
    partial = Targets(findings.table[kept], findings.models[kept])
    control = scored_as_named(attack, partial, truth, view).tables["mia"]
    assert left_out not in set(control.victim)  # the old path: the victim is not scored at all
    scored = attack.evaluate(partial, truth, view).tables["mia"]
    assert len(scored) == len(whole)
    assert (scored[scored.victim == left_out].auc == 0.5).all()
    others = scored[scored.victim != left_out].sort_values(["round", "victim", "view"]).auc.to_numpy()
    expected = whole[whole.victim != left_out].sort_values(["round", "victim", "view"]).auc.to_numpy()
    assert np.array_equal(others, expected)


def test_a_target_named_twice_is_refused(honest):
    attack, view, truth, findings = honest
    doubled = Targets(findings.table.iloc[[0, 0]].reset_index(drop=True), findings.models[[0, 0]].clone())
    with pytest.raises(TargetRefused, match=r"names .* twice; each target is scored once"):
        attack.evaluate(doubled, truth, view)


@pytest.fixture(scope="module")
def echoed():
    """An echo run (D-PSGD, the attacker echoes its least connected neighbour), in this process."""
    cfg, _ = api.compose_config(["attack=echo", "protocol.rounds=3", "seed=0"])
    setup = experiment.build(cfg)
    outcome, view = experiment.simulate(setup)
    return setup.attack, view, experiment.ground_truth(setup, outcome), setup.attack.run(view)


def test_the_echo_scores_the_node_it_echoed_not_the_one_its_finding_names(echoed):
    """The finding relabels another neighbour as the echoed one: refused; omitting the echoed node
    scores chance for it. Control: scored as it names its targets, the relabelled node is the victim."""
    attack, view, truth, findings = echoed
    honest = attack.evaluate(findings, truth, view)
    table = findings.targets.table
    victim = findings.victim
    other = int(table.victim[table.victim != victim].iloc[0])
    relabelled = table.assign(view=np.where(table.victim == other, "echo_victim", "other_neighbour"))
    forged = Targets(relabelled, findings.targets.models)
    control = score_targets(view.model, forged, truth, "mentr", attack.thresholds, view.seeds).table
    assert set(control[control.view == "echo_victim"].victim) == {other}  # the echo's scorer before
    with pytest.raises(
        TargetRefused, match=rf"'victim': {victim}, 'view': 'other_neighbour'.* node {victim} the echoed"
    ):
        attack.evaluate(replace(findings, targets=forged, victim=other), truth, view)
    kept = (table.victim != victim).to_numpy()
    omitted = replace(findings, targets=Targets(table[kept], findings.targets.models[kept]))
    scored = attack.evaluate(omitted, truth, view)
    rows = scored.tables["echo"] if "echo" in scored.tables else next(iter(scored.tables.values()))
    assert (rows[rows.victim == victim].auc == 0.5).all()
    assert scored.summary["echo_victim_mia_advantage"] == 0.0
    assert honest.summary["echo_victim"] == victim == scored.summary["echo_victim"]


def sealed_run(*overrides):
    """A run's attack, view, truth and finding, in this process."""
    cfg, _ = api.compose_config(list(overrides))
    setup = experiment.build(cfg)
    outcome, view = experiment.simulate(setup)
    return setup.attack, view, experiment.ground_truth(setup, outcome), setup.attack.run(view)


@pytest.fixture(scope="module")
def recovered():
    """Gradient recovery on karate, nodes 0 and 33 corrupt, full batch: every step is exact."""
    return sealed_run(
        "topology=karate", *DPSGD, "attack=gradient_recovery", "adversary.nodes=[0,33]",
        "protocol.rounds=3", "protocol.batch_size=null", "protocol.dtype=float64",
    )  # fmt: skip


def test_gradient_recovery_scores_the_recoverable_steps_not_the_ones_its_finding_names(recovered):
    """Node 5's neighbour 16 is never heard, so its step is out of reach: a finding claiming it is
    refused (control: scored as named, it counts). A victim the finding omits scores no guess: cosine
    0, relative error 1; the others keep their numbers."""
    attack, view, truth, findings = recovered
    honest = attack.evaluate(findings, truth, view).tables["gradient_recovery"]
    assert 5 in set(findings.skipped.victim) and honest.cosine_vs_full_batch_step.min() > 0.999
    forged = replace(
        findings,
        table=findings.table.assign(victim=np.where(findings.table.index == 0, 5, findings.table.victim)),
    )
    control = full_local_steps(view, truth, forged, float(view.hyper["lr"]))
    assert torch.isfinite(control[0]).all()  # the old scorer scored node 5's claimed step
    with pytest.raises(TargetRefused, match=r"^attack=gradient_recovery: its finding names .*'victim': 5"):
        attack.evaluate(forged, truth, view)
    left_out = int(findings.table.victim.iloc[0])
    kept = (findings.table.victim != left_out).to_numpy().copy()
    partial = replace(
        findings, table=findings.table[kept], bases=findings.bases[kept], steps=findings.steps[kept]
    )
    scored = attack.evaluate(partial, truth, view).tables["gradient_recovery"]
    assert len(scored) == len(honest)
    mine = scored[scored.victim == left_out]
    assert len(mine) == kept.size - kept.sum()
    assert (mine.cosine_vs_full_batch_step == 0).all() and np.allclose(
        mine.relative_error_vs_full_batch_step, 1
    )
    key = ["round", "victim"]
    others = scored[scored.victim != left_out].sort_values(key).cosine_vs_full_batch_step.to_numpy()
    expected = honest[honest.victim != left_out].sort_values(key).cosine_vs_full_batch_step.to_numpy()
    assert np.array_equal(others, expected)


@pytest.fixture(scope="module")
def discovered():
    """Neighbour discovery by an eavesdropper on a 16-node torus: 16 victims x 2 rounds."""
    return sealed_run(*NEIGHBOUR_DISCOVERY)


def test_neighbour_discovery_scores_every_search_the_threat_model_fixes(discovered):
    """A finding that adds exact rows for round 0 (no previous round: nothing to search there) is
    refused; the control, its rows scored as named, would count them as 16 more exact trials. A victim it
    omits found nothing: never exact, still counted among the trials."""
    attack, view, truth, findings = discovered
    honest = attack.evaluate(findings, truth, view)
    table = findings.table
    assert honest.summary["discovery_trials"] == 32
    forged = pd.concat([table, table[table["round"] == 1].assign(round=0)], ignore_index=True)
    true = forged.victim.map(lambda v: str(closed(view.network, int(v)).tolist()))
    assert (forged.found == true).sum() > honest.tables["neighbour_discovery"].exact.sum()  # control
    with pytest.raises(TargetRefused, match=r"^attack=neighbour_discovery: its finding names .*'round': 0"):
        attack.evaluate(Discovered(forged), truth, view)
    partial = attack.evaluate(Discovered(table[table.victim != 3]), truth, view)
    assert partial.summary["discovery_trials"] == honest.summary["discovery_trials"] == 32
    rows = partial.tables["neighbour_discovery"]
    assert not rows[rows.victim == 3].exact.any()
    exact_others = honest.tables["neighbour_discovery"].query("victim != 3").exact.sum()
    assert partial.summary["discovery_exact_rate"] == exact_others / 32


@pytest.fixture(scope="module")
def overridden():
    """A rushing state override on karate, nodes 0 and 33 corrupt, aiming every coverable neighbour at 0."""
    return sealed_run(
        "topology=karate", *DPSGD, "attack=state_override", "attack.target=zeros",
        "adversary.nodes=[0,33]", "protocol.rounds=3",
    )  # fmt: skip


def test_state_override_scores_the_coverable_victims_on_the_pipelines_honest_aggregate(overridden):
    """A finding claiming node 16 (its neighbours 5 and 6 are not heard: out of reach) with an honest
    aggregate far away is refused; the control, the old formula on its own numbers, says 16 is held. A
    finding's own honest aggregate is not read; an omitted victim scores the honest run's 0."""
    attack, view, truth, findings = overridden
    honest = attack.evaluate(findings, truth, view)
    assert honest.summary["override_victims"] == 24 and 16 not in set(findings.victims.tolist())
    aim = torch.zeros_like(findings.targets[:1])
    far = torch.full_like(aim, 1e6)
    forged = replace(findings, victims=np.array([16]), targets=aim, honest=far)
    reached = truth.final_states[[16]].to(aim.dtype)
    control = 1 - (reached - aim).norm(dim=1) / (far - aim).norm(dim=1)
    assert float(control) > 0.99  # the old scorer: node 16 "held"
    with pytest.raises(TargetRefused, match=r"^attack=state_override: its finding names \{'victim': 16\}"):
        attack.evaluate(forged, truth, view)
    inflated = attack.evaluate(replace(findings, honest=findings.honest * 1e6), truth, view)
    assert inflated.tables["state_override"].equals(honest.tables["state_override"])
    left_out = int(findings.victims[0])
    partial = replace(
        findings, victims=findings.victims[1:], targets=findings.targets[1:], honest=findings.honest[1:]
    )
    scored = attack.evaluate(partial, truth, view).tables["state_override"].set_index("victim")
    whole = honest.tables["state_override"].set_index("victim")
    assert scored.controlled_fraction[left_out] == 0.0 and len(scored) == 24
    assert (
        scored.drop(left_out)
        .sort_index()
        .controlled_fraction.equals(whole.drop(left_out).sort_index().controlled_fraction)
    )


@pytest.fixture(scope="module")
def trapped():
    """Active inversion on karate, nodes 0 and 33 corrupt, batches of 8 read off trap weights."""
    return sealed_run(
        "topology=karate", *DPSGD, "attack=active_inversion", "adversary.nodes=[0,33]",
        "protocol.rounds=2", "protocol.batch_size=8", "protocol.dtype=float64",
    )  # fmt: skip


def test_active_inversion_scores_the_overridden_victims_not_the_attacker(trapped):
    """A finding naming attacker 0 as its victim, with attacker 0's own images as the extraction, is
    refused; the control (scored as named) reads them all "exactly". An omitted victim has no image:
    a passive neighbour's 0 samples, the others unchanged."""
    attack, view, truth, findings = trapped
    honest = attack.evaluate(findings, truth, view)
    own = truth.local.x[0][truth.local.mask[0]][:8]
    forged = Extracted(np.array([0]), [own.clone()])
    control = torch.cdist(own.double().flatten(1), truth.local.x[0][truth.local.mask[0]].double().flatten(1))
    assert (control.min(1).values < 1e-8).all()  # the old scorer: 8 of 8 read "exactly"
    with pytest.raises(TargetRefused, match=r"^attack=active_inversion: its finding names \{'victim': 0\}"):
        attack.evaluate(forged, truth, view)
    left_out = int(findings.victims[0])
    partial = attack.evaluate(Extracted(findings.victims[1:], findings.images[1:]), truth, view)
    scored = partial.tables["active_inversion"].set_index("victim")
    whole = honest.tables["active_inversion"].set_index("victim")
    assert whole.distinct_samples_recovered[left_out] > 0 and len(scored) == len(whole)
    assert scored.distinct_samples_recovered[left_out] == 0 and scored.units_hit[left_out] == 0
    rest = ["units_hit", "exact_units", "distinct_samples_recovered"]
    assert scored.drop(left_out)[rest].sort_index().equals(whole.drop(left_out)[rest].sort_index())
    assert partial.summary["active_inversion_victims"] == honest.summary["active_inversion_victims"]


@pytest.fixture(scope="module")
def inverted():
    """A FedSGD server inverting, in closed form, the first 3 clients' round-0 gradients (Yu 2023, E1)."""
    return sealed_run("experiment=yu_e1_fedsgd", "attack.victims=3")


def test_centralised_inversion_scores_the_configured_clients(inverted):
    """A finding naming a client past the first attack.victims=3, with that client's own data as its
    reconstruction, is refused (control: scored as named, it is exact); an omitted client is scored as
    the guess that needs no attack, flagged undefined, the others unchanged."""
    attack, view, truth, findings = inverted
    honest = attack.evaluate(findings, truth, view).tables["attack"]
    assert list(findings.victims) == list(client_nodes(view.network)[:3]) and honest.l2_error.max() < 1e-4
    outsider = int(client_nodes(view.network)[5])
    stolen = truth.local.x[outsider][truth.local.mask[outsider]].double()
    forged = replace(
        findings, victims=np.array([outsider]), inversions=[replace(findings.inversions[0], x=stolen)]
    )
    found = Batches(forged.victims, [stolen], [findings.inversions[0].y], [0.0])
    control = score_batches(*(found.victims, found.xs, found.ys, found.objectives), truth, (0.0, 1.0), False)
    assert control.table.l2_error.max() < 1e-12  # the old scorer: the outsider "reconstructed" exactly
    with pytest.raises(
        TargetRefused, match=rf"^attack=gradient_inversion: its finding names \{{'victim': {outsider}\}}"
    ):
        attack.evaluate(forged, truth, view)
    left_out = int(findings.victims[0])
    partial = replace(findings, victims=findings.victims[1:], inversions=findings.inversions[1:])
    scored = attack.evaluate(partial, truth, view).tables["attack"]
    assert len(scored) == len(honest) and not scored[scored.victim == left_out].defined.any()
    prior = truth.dataset.x_test.mean(0)
    own = truth.local.x[left_out][truth.local.mask[left_out]]
    guess = (own.double() - prior.double()).flatten(1).norm(dim=1)
    assert np.allclose(scored[scored.victim == left_out].l2_error, guess.numpy())
    key = ["victim", "example"]
    assert (
        scored[scored.victim != left_out].sort_values(key).l2_error.to_numpy().tolist()
        == honest[honest.victim != left_out].sort_values(key).l2_error.to_numpy().tolist()
    )


@pytest.fixture(scope="module")
def differenced():
    """diffgrad's closed form on PDMM, logistic regression, one sample a node, the first 3 honest nodes."""
    return sealed_run(*LOGISTIC, "attack.victims=3", "protocol.rounds=15")


def test_diffgrad_scores_the_first_honest_nodes_not_the_attacker(differenced):
    """A finding naming attacker 0, with its own sample as the reconstruction, is refused (control:
    scored as named, exact); an omitted victim is scored as the mean held-out example, undefined."""
    attack, view, truth, findings = differenced
    honest = attack.evaluate(findings, truth, view)
    assert list(findings.victims) == [1, 2, 3] and honest.summary["attack_l2_error"] < 1e-8
    own = truth.local.x[0][truth.local.mask[0]].double()
    forged = replace(findings, victims=np.array([0]), x=[own], y=[findings.y[0]], objective=[0.0])
    control = score_batches(np.array([0]), [own], [findings.y[0]], [0.0], truth, (0.0, 1.0), False)
    assert control.table.l2_error.max() == 0.0  # the old scorer: the attacker's own sample, "recovered"
    with pytest.raises(TargetRefused, match=r"^attack=diffgrad: its finding names \{'victim': 0\}"):
        attack.evaluate(forged, truth, view)
    partial = replace(
        findings,
        victims=findings.victims[1:],
        x=findings.x[1:],
        y=findings.y[1:],
        objective=findings.objective[1:],
    )
    scored = attack.evaluate(partial, truth, view)
    rows = scored.tables["attack"]
    assert (
        len(rows) == 3
        and scored.summary["attack_undefined"] == 1
        and not rows[rows.victim == 1].defined.any()
    )
    guess = (truth.local.x[1][truth.local.mask[1]].double() - truth.dataset.x_test.double().mean(0)).norm()
    assert float(rows[rows.victim == 1].l2_error.iloc[0]) == pytest.approx(float(guess), rel=1e-6)
    assert rows[rows.victim != 1].l2_error.max() < 1e-8


@pytest.fixture(scope="module")
def leaked():
    """The PDMM leak on a least-squares problem, node 0 eavesdropping, stopped at rounds 6 and 10."""
    return sealed_run(*PDMM_QUADRATIC, "protocol=pdmm", "protocol.rounds=12", "attack.t_max=[6,10]")


def test_pdmm_leak_scores_the_configured_stopping_points_over_every_round(leaked):
    """A finding reporting a stop the config did not ask for (t_max=12), or only the first rounds of a
    stop, is refused; the control (its stops scored as named) reports t_max=12 as the headline. An
    omitted stop is scored as guessing zero: relative error 1, the headline's baseline."""
    attack, view, truth, findings = leaked
    honest = attack.evaluate(findings, truth, view)
    assert list(findings) == [6, 10] and honest.summary["leak_difference_error_median"] < 1e-6
    a = Assumed.resolve(view.hyper, None, None, None, None, None)
    later = extract(view, 12, a.rho, a.theta, a.update, "messages", a.alpha, a.mu)
    forged = {**findings, 12: later}
    assert list(forged)[-1] == 12  # the old scorer's headline: the last stop the finding names
    with pytest.raises(TargetRefused, match=r"^attack=pdmm_leak: its finding names \{'t_max': 12\}"):
        attack.evaluate(forged, truth, view)
    early = replace(findings[10], rounds=findings[10].rounds[:3], difference=findings[10].difference[:3])
    with pytest.raises(TargetRefused, match=r"finding for t_max=10 does not cover rounds 1..8 of every node"):
        attack.evaluate({6: findings[6], 10: early}, truth, view)
    partial = attack.evaluate({6: findings[6]}, truth, view)
    by_stop = partial.tables["pdmm_leak_by_t_max"].set_index("t_max")
    assert list(by_stop.index) == [6, 10] and by_stop.difference_error_median[10] == 1.0
    assert (
        partial.summary["leak_difference_error_median"]
        == partial.summary["leak_plain_gradient_error_median"]
        == 1.0
    )
    whole = honest.tables["pdmm_leak_by_t_max"].set_index("t_max")
    assert by_stop.loc[6].equals(whole.loc[6])


@pytest.fixture(scope="module")
def audit_findings():
    """The audit of Muffliato on the path 0 - 1 - 2 (its plan the pipeline's own, never the attack's)."""
    return sealed_run(*PATH3, "attack.trials=4000", "attack.fit_trials=2000")


def test_the_audit_scores_the_pairs_of_the_pipelines_plan(audit_findings):
    """A finding adding a pair the plan does not audit (source 0 seen by node 9, with a large lower
    bound, which reconciling would hold against the accountant) is refused; the control, keyed as it
    names its pairs, keeps it. An omitted pair is no evidence: every bound 0, not finite."""
    attack, view, truth, findings = audit_findings
    honest = attack.evaluate(findings, truth, view).tables["audit"]
    pairs = list(zip(findings.source, findings.observer, strict=True))
    assert len(pairs) >= 2 and honest.finite.all()
    forged = pd.concat(
        [findings, findings.iloc[[0]].assign(observer=9, epsilon_lower=50.0)], ignore_index=True
    )
    control = refuse_nonfinite(forged.drop(columns="seconds"))
    assert (control.observer == 9).any()  # the old scorer: the invented pair is scored
    with pytest.raises(
        TargetRefused, match=r"^attack=audit: its finding names \{'source': \d+, 'observer': 9\}"
    ):
        attack.evaluate(forged, truth, view)
    source, observer = pairs[0]
    scored = attack.evaluate(findings.iloc[1:], truth, view).tables["audit"]
    mine = scored[(scored.source == source) & (scored.observer == observer)]
    assert len(scored) == len(honest) and len(mine) == 1 and not mine.finite.any()
    assert (
        mine[["epsilon_lower", "epsilon_lower_assumption_free", "epsilon_dp_lower", "mu_lower"]] == 0
    ).all(axis=None)
    assert scored.iloc[: len(honest) - 1].epsilon_lower.tolist() == honest.iloc[1:].epsilon_lower.tolist()


@pytest.fixture(scope="module")
def sybils(tmp_path_factory):
    """Two Sybils around node 0 of Pasquini et al.'s Fig. 10 graph, under secure aggregation."""
    graph = tmp_path_factory.mktemp("fig10") / "fig10.txt"
    graph.write_text(FIG10_EDGES)
    return sealed_run(
        *SMALL, "protocol.batch_size=4", "topology=edgelist", f"topology.path={graph}", "gossip_matrix=uniform",
        "protocol.rounds=4", "protocol.dtype=float64", "attack=sybil_evasion", "adversary.sybils=0",
        "attack.permutations=5", "defense=secure_aggregation",
    )  # fmt: skip


def test_the_sybil_pair_and_its_baselines_are_the_threat_models(sybils):
    """A plan naming another victim (node 3, whose update a neighbour sees masked) is refused; the
    control, the old scorer reading the plan's victim, scores node 3. A finding's own baseline (what one
    node receives) is not read: the pipeline's is; an omitted round scores that baseline."""
    attack, view, truth, findings = sybils
    honest = attack.evaluate(findings, truth, view).tables["sybil_evasion"]
    assert (view.plan.victim, view.plan.a, view.plan.b) == (0, 1, 2)
    other = replace(view.plan, victim=3)
    control = attack.truth_updates(truth, replace(view, plan=other))
    assert not torch.equal(control, attack.truth_updates(truth, view))  # the old scorer: node 3's truth
    with pytest.raises(
        TargetRefused, match=r"^attack=sybil_evasion: its plan names the Sybil pair .*victim=3"
    ):
        attack.evaluate(findings, truth, replace(view, plan=other))
    masked = attack.evaluate(replace(findings, received=findings.received * 1e6), truth, view)
    assert masked.tables["sybil_evasion"].equals(honest)
    kept = findings.rounds != findings.rounds[-1]
    partial = replace(findings, rounds=findings.rounds[kept], recovered=findings.recovered[kept])
    rows = attack.evaluate(partial, truth, view).tables["sybil_evasion"]
    assert rows["round"].tolist() == honest["round"].tolist()
    last = rows.iloc[-1]
    assert last.recovered_relative_error == last.received_relative_error > 1e3
    assert (
        rows.iloc[:-1].recovered_relative_error.tolist() == honest.iloc[:-1].recovered_relative_error.tolist()
    )


def test_on_a_complete_graph_the_sybil_victim_is_the_one_the_config_named():
    """On a complete graph every honest node has a Sybil pair placed around it (the drop-out claim): the
    victim scored is adversary.sybils's, and a plan placing the pair around another honest node is refused."""
    attack, view, truth, findings = sealed_run(
        *SMALL, "protocol.batch_size=4", "topology=complete", "topology.n=6", "protocol.rounds=3",
        "protocol.dtype=float64", "attack=sybil_evasion", "adversary.sybils=0", "attack.permutations=5",
        "defense=secure_aggregation",
    )  # fmt: skip
    assert view.sybils.victim == view.plan.victim == 0
    attack.evaluate(findings, truth, view)
    other = place_sybils(view.network, 3, view.attackers.tolist())
    with pytest.raises(TargetRefused, match=r"its plan names the Sybil pair .*victim=3"):
        attack.evaluate(findings, truth, replace(view, plan=other))
