"""The verifiable ledger of FedAvg updates: a hash chain every node checks, and a tampering aggregator
caught in the round it starts."""

import numpy as np
import pytest
import torch

from decpriv.api import compose_config
from decpriv.defenses.update_ledger import (
    GENESIS,
    Block,
    UpdateForm,
    commitment,
    verify,
    weighted_mean,
)
from decpriv.errors import ConfigError
from decpriv.experiment import build, simulate

SMALL = ["data=digits", "model=softmax", "partition.per_node=12", "protocol.batch_size=4"]
FORM = UpdateForm(np.dtype(np.float32), 7)  # what every client of honest_block knows
FEDAVG = ["protocol=fedavg", "topology=complete", "topology.n=6", "protocol.rounds=5"]


def run(*overrides):
    setup = build(compose_config([*SMALL, *FEDAVG, *overrides])[0])
    outcome, _ = simulate(setup)
    return setup.defense, outcome


def honest_block(previous=GENESIS, round_=0):
    rng = np.random.default_rng(round_)
    clients = np.array([0, 2, 3])
    updates = rng.normal(size=(3, 7)).astype(np.float32)
    nonces = tuple(rng.bytes(32) for _ in clients)
    posted = tuple(commitment(round_, int(u), r, x) for u, r, x in zip(clients, nonces, updates, strict=True))
    weights = np.array([5, 1, 2, 7])
    block = Block(
        round_, previous, clients, posted, clients, nonces, updates, weighted_mean(updates, weights[clients])
    )
    return block, weights


def own(block):
    """What the round's clients posted themselves: each its own commitment."""
    return dict(zip(block.clients.tolist(), block.commitments, strict=True))


def test_an_honest_run_builds_a_chain_every_node_verifies_and_trains_as_fedavg():
    ledger, outcome = run("defense=ledger")
    _, plain = run()
    assert len(ledger.chain) == 5 and ledger.detected is None
    head = GENESIS
    for block in ledger.chain:  # every block links to the one before: the chain a node replays
        assert block.previous == head
        head = block.digest()
    assert head == ledger.head
    assert torch.allclose(outcome.final, plain.final, atol=1e-6)  # float64 mean vs FedAvg's float32
    summary = ledger.summary()
    assert summary["ledger_chain_bytes_per_round"] == 8 + 64 + 6 * 40  # header and 6 commitments
    # what a verifier downloads: 6 float32 updates of 650 values, their nonces, the float64 aggregate
    assert summary["ledger_opening_bytes_per_round"] == 6 * 650 * 4 + 6 * 32 + 650 * 8


@pytest.mark.parametrize(
    "tamper, reason",
    [
        ("alter", "the aggregate is not the weighted mean"),
        ("drop", "client 0 posted a commitment the block leaves out"),
        ("duplicate", "client 0's update is opened 6 times"),
        ("replace", "client 0's commitment in the block is not the one it posted"),
    ],
)
def test_a_tampering_aggregator_is_caught_in_the_round_it_starts(tamper, reason):
    with pytest.warns(UserWarning, match="the nodes reject round 2's block"):
        ledger, outcome = run("defense=ledger", f"defense.tamper={tamper}", "defense.tamper_from=2")
    summary = ledger.summary()
    assert summary["ledger_detected_round"] == 2 and reason in summary["ledger_detection"]
    assert summary["ledger_rejected_rounds"] == 3 and len(ledger.chain) == 2
    # the nodes reject every tampered aggregate: the global model stays round 2's
    honest, _ = run("defense=ledger", "protocol.rounds=2")
    assert np.array_equal(ledger.chain[-1].aggregate, honest.chain[-1].aggregate)


def test_every_check_of_a_block_fails_on_its_own_lie():
    block, weights = honest_block()
    posted = own(block)
    assert verify(block, GENESIS, weights, posted, FORM) is None
    forged = block.openings.copy()
    forged[1, 0] += 1e-3  # the aggregator publishes the update it used in place of client 2's
    lie = Block(
        0,
        GENESIS,
        block.clients,
        block.commitments,
        block.opened,
        block.nonces,
        forged,
        weighted_mean(forged, weights[block.opened]),
    )
    assert (
        verify(lie, GENESIS, weights, posted, FORM)
        == "client 2's published update does not match its commitment"
    )
    assert verify(block, b"\1" * 32, weights, posted, FORM) == "the block does not extend the chain's head"
    nxt, _ = honest_block(block.digest(), round_=1)
    assert verify(nxt, block.digest(), weights, own(nxt), FORM) is None
    replayed = Block(
        1,
        block.digest(),
        *[getattr(block, k) for k in ("clients", "commitments", "opened", "nonces", "openings", "aggregate")],
    )
    # last round's openings do not open this round's commitments: the round is in the hash
    assert "does not match its commitment" in verify(replayed, block.digest(), weights, posted, FORM)


def _lie(block, **changed):
    fields = ("clients", "commitments", "opened", "nonces", "openings")
    kept = {k: changed.get(k, getattr(block, k)) for k in fields}
    weights = np.array([5, 1, 2, 7])
    aggregate = weighted_mean(kept["openings"], weights[kept["opened"]])
    return Block(block.round, block.previous, *kept.values(), aggregate)


def test_duplicated_dropped_and_replaced_openings_are_each_rejected():
    """Each lie is consistent with the commitments the block itself carries (the old verifier accepted
    them all): only the clients' own record catches it."""
    block, weights = honest_block()
    posted = own(block)
    k = len(block.clients)
    duplicated = _lie(  # client 0's honest opening three times: weight 3 of 3
        block,
        clients=np.repeat(block.clients[:1], k),
        commitments=(block.commitments[0],) * k,
        opened=np.repeat(block.clients[:1], k),
        nonces=(block.nonces[0],) * k,
        openings=np.repeat(block.openings[:1], k, axis=0),
    )
    assert verify(duplicated, GENESIS, weights, posted, FORM) == "the block lists client 0 3 times"
    opened_twice = _lie(
        block,
        opened=block.clients[[0, 0, 1, 2]],
        nonces=(block.nonces[0], *block.nonces),
        openings=block.openings[[0, 0, 1, 2]],
    )
    assert verify(opened_twice, GENESIS, weights, posted, FORM) == "client 0's update is opened 2 times"
    dropped = _lie(
        block,
        clients=block.clients[1:],
        commitments=block.commitments[1:],
        opened=block.clients[1:],
        nonces=block.nonces[1:],
        openings=block.openings[1:],
    )
    assert (
        verify(dropped, GENESIS, weights, posted, FORM) == "client 0 posted a commitment the block leaves out"
    )
    forged = -block.openings[0]
    made = commitment(0, 0, bytes(32), forged)
    replaced = _lie(
        block,
        commitments=(made, *block.commitments[1:]),
        nonces=(bytes(32), *block.nonces[1:]),
        openings=np.vstack([forged, block.openings[1:]]),
    )
    assert (
        verify(replaced, GENESIS, weights, posted, FORM)
        == "client 0's commitment in the block is not the one it posted"
    )
    stranger = _lie(block, clients=np.array([0, 2, 3, 1]), commitments=(*block.commitments, made))
    assert "client 1, which posted nothing" in verify(stranger, GENESIS, weights, posted, FORM)


def test_an_honest_nan_update_is_not_tampering():
    block, weights = honest_block()
    openings = block.openings.copy()
    openings[1, 3] = np.nan  # a client whose training diverged sends what it has
    posted = tuple(
        commitment(0, int(u), r, x) for u, r, x in zip(block.clients, block.nonces, openings, strict=True)
    )
    honest = _lie(block, commitments=posted, openings=openings)
    assert np.isnan(honest.aggregate[3])
    assert verify(honest, GENESIS, weights, own(honest), FORM) is None


def test_nonces_come_from_the_operating_system_not_the_seed():
    """Two runs of one config and seed: the same models, other nonces (so other commitments): a
    commitment hides its update from whoever knows the config."""
    first, a = run("defense=ledger", "protocol.rounds=2")
    second, b = run("defense=ledger", "protocol.rounds=2")
    assert torch.equal(a.final, b.final)
    for x, y in zip(first.chain, second.chain, strict=True):
        assert np.array_equal(x.aggregate, y.aggregate)
        assert not set(x.nonces) & set(y.nonces) and x.commitments != y.commitments


def test_the_ledger_is_refused_where_no_server_aggregates():
    with pytest.raises(ConfigError, match="use protocol=fedavg or fedsgd"):
        build(compose_config([*SMALL, "defense=ledger", "protocol=dsgd"])[0])
    with pytest.raises(ConfigError, match="defense.tamper_from"):
        build(
            compose_config(
                [*SMALL, *FEDAVG, "defense=ledger", "defense.tamper=drop", "defense.tamper_from=5"]
            )[0]
        )


def test_a_commitment_binds_dtype_shape_and_the_nonce_boundary():
    """The same bytes read another way (int32 for float32, one row of 21 for three of 7, four bytes moved
    from the nonce into the update) open another commitment: the format-1 hash of round, client, nonce and
    raw bytes was the same for all of them."""
    block, _ = honest_block()
    nonce, update = block.nonces[0], block.openings[0]
    honest = commitment(0, 0, nonce, update)
    moved = np.frombuffer(nonce[28:] + update.tobytes(), dtype=np.float32)  # 8 values, same bytes in all
    assert commitment(0, 0, nonce[:28], moved) != honest
    assert commitment(0, 0, nonce, update.view(np.int32)) != honest
    assert commitment(0, 0, nonce, update.reshape(1, 7)) != honest
    whole = block.openings  # three updates' bytes as one opening of 21, or of shape (3, 7)
    assert commitment(0, 0, nonce, whole) != commitment(0, 0, nonce, whole.reshape(-1))
    assert commitment(0, 0, nonce, update) == honest  # and the same reading the same commitment


def _reread(block, weights, **changed):
    """The block with fields replaced and its aggregate recomputed from the openings as published (the
    aggregator's lie consistent with itself)."""
    fields = ("round", "previous", "clients", "commitments", "opened", "nonces", "openings")
    kept = {k: changed.get(k, getattr(block, k)) for k in fields}
    openings = kept["openings"]
    aggregate = changed.get("aggregate")
    if aggregate is None:
        rows = openings.reshape(len(kept["opened"]), -1) if openings.ndim == 1 else openings
        aggregate = weighted_mean(rows, weights[np.asarray(kept["opened"], dtype=np.int64)])
    return Block(*kept.values(), aggregate, changed.get("format", 2))


def test_verify_names_every_reinterpreted_or_malformed_block_and_never_raises():
    block, weights = honest_block()
    posted = own(block)
    as_int32 = _reread(block, weights, openings=block.openings.view(np.int32))
    assert np.abs(as_int32.aggregate - block.aggregate).max() > 1e8  # what the old verifier accepted
    nonces = tuple(r[:28] for r in block.nonces)  # four bytes of each nonce moved into its update
    moved = np.stack(
        [
            np.frombuffer(r[28:] + x.tobytes(), np.float32)
            for r, x in zip(block.nonces, block.openings, strict=True)
        ]
    )
    cases = {
        "the openings are published as int32, and the clients' updates are float32": as_int32,
        "the openings are published as float16, and the clients' updates are float32": _reread(
            block, weights, openings=block.openings.astype(np.float16)
        ),
        "client 0's nonce is 28 bytes, not 32 bytes (the nonce's boundary moved)": _reread(
            block, weights, nonces=nonces, openings=moved
        ),
        "the block's listed clients are float64 of shape (3,), not a list of integer client ids": _reread(
            block, weights, clients=block.clients.astype(float)
        ),
        "the block's opened clients are float64 of shape (3,), not a list of integer client ids": _reread(
            block, weights, opened=block.opened.astype(float)
        ),
        "the block's round -1 is not a round (an integer 0 or more)": _reread(block, weights, round=-1),
        "the block's round 0.0 is not a round (an integer 0 or more)": _reread(block, weights, round=0.0),
        "the openings have shape (21,), and 3 updates of 7 values have shape (3, 7)": _reread(
            block, weights, openings=block.openings.reshape(-1)
        ),
        "the openings have shape (1, 21), and 3 updates of 7 values have shape (3, 7)": _reread(
            block, weights, openings=block.openings.reshape(1, -1)
        ),
        "the aggregate is float32 of shape (7,), not float64 of shape (7,)": _reread(
            block, weights, aggregate=block.aggregate.astype(np.float32)
        ),
        "the block's listed clients include 9, and the nodes are 0..3": _reread(
            block, weights, clients=np.array([0, 2, 9])
        ),
        "client 0's commitment in the block is not a 32-byte SHA-256 digest": _reread(
            block, weights, commitments=(b"x", *block.commitments[1:])
        ),
        "the block carries 2 nonces for 3 openings": _reread(block, weights, nonces=block.nonces[1:]),
        "the block is in commitment format 1, and this verifier reads format 2": _reread(
            block, weights, format=1
        ),
    }
    for said, lie in cases.items():
        found = verify(lie, GENESIS, weights, posted, FORM)
        assert found is not None and found.startswith(said), (said, found)
    garbage = Block(0, GENESIS, None, None, None, "nonce", [[1.0]], "mean")  # never a traceback
    assert verify(garbage, GENESIS, weights, posted, FORM).startswith(
        "the block's listed clients are NoneType"
    )
    odd = Block(0, GENESIS, block.clients, None, block.opened, block.nonces, block.openings, block.aggregate)
    assert verify(odd, GENESIS, weights, posted, FORM).startswith("the block is malformed (TypeError")
