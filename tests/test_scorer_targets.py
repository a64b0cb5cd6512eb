"""No finding chooses what it is scored on (issue 53): a scorer's targets come from the threat model the
pipeline holds (decpriv/attacks/targets.py). The MIA's finding naming the attacker itself as a victim,
trained hard on its own data, is refused in one sentence; one that omits a victim scores chance for it.
The control: the same forged finding, scored as it names its targets (the old path), does win.
"""

from dataclasses import replace

import numpy as np
import pytest

from decpriv import api, experiment
from decpriv.attacks.p2p.mia import Targets, mia_report, score_targets
from decpriv.attacks.targets import TargetRefused


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
