"""The fast D-SGD round (hand-written backward pass into a reused buffer, in-place sparse gossip) against the
reference paths it replaces: vmap(grad) per node, and the defense's exchange with a fresh W @ x."""

import pytest
import torch
from conftest import build, protocol_run

from decpriv.adversary.recorder import Recorder
from decpriv.models import architectures as arch
from decpriv.protocols.dsgd import DSGD

CHAINS = {
    "softmax": (lambda: arch.softmax((1, 8, 8), 10), (1, 8, 8), 10),
    "softmax, no bias, sum": (lambda: arch.softmax((1, 8, 8), 10, "sum", bias=False), (1, 8, 8), 10),
    "logistic": (lambda: arch.logistic((30,), 2), (30,), 2),
    "linear regression": (lambda: arch.linear_regression((10,), 0), (10,), 0),
    "mlp relu 16-7": (lambda: arch.mlp((1, 8, 8), 10, hidden=(16, 7)), (1, 8, 8), 10),
    "mlp sigmoid": (lambda: arch.mlp((1, 8, 8), 10, hidden=(16,), activation="sigmoid"), (1, 8, 8), 10),
    "mlp tanh, sum": (
        lambda: arch.mlp((1, 8, 8), 10, hidden=(16,), activation="tanh", reduction="sum"),
        (1, 8, 8),
        10,
    ),
}


@pytest.mark.parametrize("name", list(CHAINS))
@pytest.mark.parametrize("b", [1, 5])
@pytest.mark.parametrize("masked", [False, True])
def test_chain_backward_equals_vmap_grad(name, b, masked):
    make, shape, classes = CHAINS[name]
    model = make()
    assert model.chain is not None
    model.module.double()
    n = 6
    gen = torch.Generator().manual_seed(b)
    theta = model.init(n, seed=0, same=False).double()
    x = torch.rand(n, b, *shape, dtype=torch.float64, generator=gen)
    if classes:
        y = torch.randint(classes, (n, b), generator=gen)
    else:
        y = torch.randn(n, b, dtype=torch.float64, generator=gen)
    weight = (torch.rand(n, b, generator=gen) > 0.4).double() if masked else None
    reference = model.node_gradients(theta, x, y, weight)
    out = torch.full_like(theta, float("nan"))
    with torch.no_grad():
        fast = model.node_gradients(theta, x, y, weight, out=out)
    assert fast.data_ptr() == out.data_ptr()
    assert reference.abs().max() > 1e-3  # a real gradient, not a vacuous zero
    assert torch.allclose(fast, reference, rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", ["softmax", "mlp relu 16-7", "mlp sigmoid"])
@pytest.mark.parametrize("b", [1, 5])
def test_fused_sgd_step_equals_theta_minus_lr_gradient(name, b):
    make, shape, classes = CHAINS[name]
    model = make()
    model.module.double()
    gen = torch.Generator().manual_seed(b)
    theta = model.init(4, seed=0, same=False).double()
    x, y = (
        torch.rand(4, b, *shape, dtype=torch.float64, generator=gen),
        torch.randint(classes, (4, b), generator=gen),
    )
    weight = (torch.rand(4, b, generator=gen) > 0.3).double()
    expected = theta - 0.3 * model.node_gradients(theta, x, y, weight)
    stepped = theta.clone()
    with torch.no_grad():
        assert model.sgd_step_(stepped, x, y, weight, 0.3)
    assert (expected - theta).abs().max() > 1e-3
    assert torch.allclose(stepped, expected, rtol=0, atol=1e-14)
    before = stepped.clone()
    with torch.enable_grad():
        assert not model.sgd_step_(stepped, x, y, weight, 0.3)  # under autograd: declined, untouched
    assert torch.equal(stepped, before)


def test_other_architectures_keep_vmap_grad():
    model = arch.cnn((1, 8, 8), 10, channels=(4, 6), hidden=8)
    assert model.chain is None
    theta = model.init(3, seed=0, same=False)
    x, y = torch.rand(3, 2, 1, 8, 8), torch.randint(10, (3, 2))
    out = torch.empty_like(theta)
    with torch.no_grad():
        model.node_gradients(theta, x, y, out=out)
    assert torch.equal(out, model.node_gradients(theta, x, y))


def test_chain_backward_is_not_taken_under_autograd():
    """Inside autograd the result must stay differentiable: vmap(grad) is used even when out is given."""
    model = arch.mlp((4,), 3, hidden=(5,))
    theta = model.init(2, seed=0, same=False).requires_grad_(True)
    x, y = torch.rand(2, 3, 4), torch.randint(3, (2, 3))
    g = model.node_gradients(theta, x, y, out=torch.empty(2, model.p))
    (second,) = torch.autograd.grad(g.sum(), theta)
    assert second.abs().max() > 0


def run(setup, general: bool, monkeypatch, recorder: Recorder):
    """One D-SGD run, through the buffered fast path or (``general``) the defense's own calls."""
    if general:
        monkeypatch.setattr(DSGD, "plain_gradients", staticmethod(lambda sim: False))
        monkeypatch.setattr(DSGD, "plain_exchange", staticmethod(lambda sim: False))
    else:
        monkeypatch.undo()
    return protocol_run(setup, recorder)


@pytest.mark.parametrize(
    "extra",
    [
        ["model=mlp", "model.hidden=[8]", "protocol.batch_size=1"],
        ["model=mlp", "model.hidden=[8, 5]", "protocol.batch_size=4", "protocol.local_steps=2"],
        [
            "model=mlp",
            "model.hidden=[8]",
            "protocol.batch_size=4",
            "protocol.gossip_steps=3",
            "protocol.momentum=0.5",
        ],
        ["model=softmax", "protocol.batch_size=null", "protocol.weight_decay=0.01"],
        ["model=cnn", "model.channels=[2]", "model.hidden=4", "protocol.batch_size=2"],
    ],
)
def test_fast_round_equals_general_round_with_sparse_gossip(extra, monkeypatch):
    """n = 64 > 32: W is a sparse CSR tensor; same minibatches, same final states and history, the same
    recorded messages (gossip_steps = 3 records three steps a round)."""
    setup = build(
        "topology=random_regular",
        "topology.n=64",
        "topology.d=4",
        "data=digits",  # the full set: 64 nodes x 8 images (the default digits_small trains on 270)
        "partition.per_node=8",
        "protocol.rounds=6",
        "protocol.dtype=float64",
        *extra,
    )
    assert setup.network.gossip_operator(torch.device("cpu")).layout == torch.sparse_csr
    senders = setup.adversary.observed_senders(setup.network)
    outcomes, transcripts = [], []
    for general in (True, False):
        recorder = Recorder.broadcast(senders)
        outcomes.append(run(setup, general, monkeypatch, recorder))
        transcripts.append(recorder.transcript())
    general, fast = outcomes
    assert (general.final - general.truth["initial_states"]).abs().max() > 1e-3
    assert torch.allclose(fast.final, general.final, rtol=0, atol=1e-12)
    assert transcripts[0].values.shape == transcripts[1].values.shape
    assert transcripts[0].values.shape[0] == 6 * setup.protocol.gossip_steps
    assert torch.allclose(transcripts[0].values, transcripts[1].values, rtol=0, atol=1e-12)
    assert (fast.history["round"] == general.history["round"]).all()
    assert abs(fast.history.train_loss - general.history.train_loss).max() < 1e-10
