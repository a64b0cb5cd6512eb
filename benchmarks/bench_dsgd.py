"""D-SGD speed: decpriv's round (``DSGD.run`` as the CLI runs it) against a straightforward per-node Python
loop (autograd one node at a time, then each node sums its neighbours) and against two bare batched
computations with nothing else (no recorder, guard, evaluation or buffers): ``vmap``, one
``vmap(grad(loss))`` over nodes and one sparse W @ Theta a round (the issue's reference), and ``fused``, the
hand-written layer-by-layer step decpriv itself takes for linear and MLP models (``sgd_step_``) and the same
product: decpriv's own limit, so ``/ fused`` is its bookkeeping. Same process, same minibatches, the four
timed interleaved, best of 3. Prints rounds/s, the speed-up over the loop, decpriv's time over each bare one
and the largest parameter difference after 5 rounds. Run: ``.venv/bin/python -m benchmarks dsgd``.
"""

import time

import numpy as np
import torch
from torch.func import grad, vmap

from decpriv import experiment
from decpriv.api import compose_config

SIZES = (16, 256, 1024)
MODELS = {"softmax": ["model=softmax"], "mlp": ["model=mlp", "model.hidden=[100]"]}
CHECK_ROUNDS = 5


def setup_for(model: str, n: int, rounds: int):
    batch = min(8, 1348 // n)  # the 1348 training digits shared by n nodes: 1 each at n = 1024
    overrides = [
        "data=digits",
        "topology=random_regular",
        f"topology.n={n}",
        "topology.d=4",
        f"protocol.batch_size={batch}",
        f"protocol.rounds={rounds}",
        f"protocol.eval_every={rounds}",
        *MODELS[model],
    ]
    return experiment.build(compose_config(overrides)[0])


def loop_dsgd(setup, rounds: int) -> torch.Tensor:
    """The baseline: the same D-SGD round written node by node."""
    model, local, p = setup.model, setup.local, setup.protocol
    theta = [row.clone() for row in model.init(local.n, setup.seeds.seed("init"), p.same_init)]
    batches = setup.seeds.torch("batches")
    W = setup.network.W
    neighbours = [W.indices[W.indptr[v] : W.indptr[v + 1]] for v in range(local.n)]
    weights = [
        torch.as_tensor(W.data[W.indptr[v] : W.indptr[v + 1]], dtype=torch.float32) for v in range(local.n)
    ]
    for _ in range(rounds):
        x, y, w = local.batch(p.batch_size, batches)
        for v in range(local.n):
            th = theta[v].clone().requires_grad_(True)
            (g,) = torch.autograd.grad(model.loss(th, x[v], y[v], w[v]), th)
            theta[v] = theta[v] - p.lr * g
        theta = [weights[v] @ torch.stack([theta[u] for u in neighbours[v]]) for v in range(local.n)]
    return torch.stack(theta)


def bare_dsgd(setup, rounds: int) -> torch.Tensor:
    """The physical limit: theta <- W (theta - lr vmap(grad(loss))(theta, batch)), nothing else."""
    model, local, p = setup.model, setup.local, setup.protocol
    theta = model.init(local.n, setup.seeds.seed("init"), p.same_init)
    batches = setup.seeds.torch("batches")
    W = setup.network.gossip_operator(torch.device("cpu"))
    step = vmap(grad(model.loss))
    for _ in range(rounds):
        x, y, w = local.batch(p.batch_size, batches)
        theta = W @ (theta - p.lr * step(theta, x, y, w))
    return theta


def fused_dsgd(setup, rounds: int) -> torch.Tensor:
    """theta <- W (theta - lr grad) with the gradient subtracted layer by layer in place, nothing else."""
    model, local, p = setup.model, setup.local, setup.protocol
    theta = model.init(local.n, setup.seeds.seed("init"), p.same_init)
    batches = setup.seeds.torch("batches")
    W = setup.network.gossip_operator(torch.device("cpu"))
    with torch.no_grad():
        for _ in range(rounds):
            x, y, w = local.batch(p.batch_size, batches)
            if not model.sgd_step_(theta, x, y, w, p.lr):
                raise ValueError(f"{model.loss_name}: no layer-by-layer step for this model")
            theta = W @ theta
    return theta


def timed(*calls, repeats: int = 3) -> list[float]:
    """Best of ``repeats`` wall-clock times of each call, interleaved so that all meet the same load on
    the shared CPU (the minimum is the least disturbed run)."""
    best = [float("inf")] * len(calls)
    for _ in range(repeats):
        for k, call in enumerate(calls):
            begin = time.perf_counter()
            call()
            best[k] = min(best[k], time.perf_counter() - begin)
    return best


def main() -> None:
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU; digits, random 4-regular graph"
    )
    print(
        "decpriv: DSGD.run as the CLI runs it (2 evaluations included); loop: per-node autograd + sums; "
        "vmap: vmap(grad) + W @ Theta; fused: sgd_step_ + W @ Theta"
    )
    header = (
        f"{'model':8} {'n':>5} {'p':>6} {'batch':>5} {'decpriv r/s':>11} {'loop r/s':>9} {'vmap r/s':>9}"
        f" {'fused r/s':>9} {'vs loop':>8} {'/ vmap':>7} {'/ fused':>8} {'max |diff|':>11}"
    )
    print(header)
    for model in MODELS:
        for n in SIZES:
            check = setup_for(model, n, CHECK_ROUNDS)
            vectorised = experiment.simulate(check)[0].final
            reference = loop_dsgd(check, CHECK_ROUNDS)
            diff = max(
                float((vectorised - reference).abs().max()),
                float((vectorised - bare_dsgd(check, CHECK_ROUNDS)).abs().max()),
                float((vectorised - fused_dsgd(check, CHECK_ROUNDS)).abs().max()),
            )
            loop_rounds = max(2, 1024 // n)
            fast_rounds = 400 if n <= 256 else 200
            fast = setup_for(model, n, fast_rounds)
            loop_s, fast_s, bare_s, fused_s = timed(
                lambda s=check, r=loop_rounds: loop_dsgd(s, r),
                lambda s=fast: experiment.simulate(s),
                lambda s=fast, r=fast_rounds: bare_dsgd(s, r),
                lambda s=fast, r=fast_rounds: fused_dsgd(s, r),
            )
            loop_s = loop_s / loop_rounds
            fast_s, bare_s, fused_s = fast_s / fast_rounds, bare_s / fast_rounds, fused_s / fast_rounds
            print(
                f"{model:8} {n:5d} {check.model.p:6d} {check.protocol.batch_size:5d} {1 / fast_s:11.1f}"
                f" {1 / loop_s:9.2f} {1 / bare_s:9.1f} {1 / fused_s:9.1f} {loop_s / fast_s:7.1f}x"
                f" {fast_s / bare_s:6.2f}x {fast_s / fused_s:7.2f}x {diff:11.2e}",
                flush=True,
            )
            assert np.isfinite(diff) and diff < 1e-4, "decpriv, loop and bare D-SGD disagree"
