"""Gradient inversion: restarts stacked in one vmap'd problem vs one Python loop per restart.

Same Adam budget either way (Adam is coordinate-wise, so both compute the same iterates); reports
iterations/s (one iteration = one optimiser step of every restart) for the MLP and the small CNN on
digits, on CPU and on the GPU when one is visible. Best of three repeats, one CPU thread, so that
other processes on a shared machine disturb the comparison as little as possible.
"""

import time

import torch
from torch.func import grad

from decpriv.attacks.inversion import InversionConfig, invert
from decpriv.data.datasets import digits
from decpriv.models.architectures import cnn, mlp
from decpriv.random.streams import Seeds

SHAPE = (1, 8, 8)


def _time(model, theta, target, y, restarts: int, stacked: bool, iterations: int) -> float:
    cfg = InversionConfig(
        cost="sim", optimiser="adam", iterations=iterations, lr=0.1, restarts=restarts if stacked else 1
    )
    runs = 1 if stacked else restarts
    begin = time.perf_counter()
    for r in range(runs):
        invert(model, theta, target, SHAPE, 10, len(y), y, (0.0, 1.0), cfg, torch.Generator().manual_seed(r))
    if theta.is_cuda:
        torch.cuda.synchronize()
    return iterations / (time.perf_counter() - begin)


def main() -> None:
    ds = digits(Seeds(0))
    torch.set_num_threads(1)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"{'device':6} {'model':4} {'restarts':>8} {'stacked it/s':>13} {'loop it/s':>10} {'speed-up':>9}")
    for device in devices:
        for name, built in (("mlp", mlp(SHAPE, 10, hidden=[100])), ("cnn", cnn(SHAPE, 10))):
            model = built.on(device)
            theta = model.init(1, 0)[0].to(device)
            x, y = ds.x_train[:1].to(device), ds.y_train[:1].to(device)
            target = grad(model.loss)(theta, x, y)
            for restarts in (4, 16):
                iterations = 20
                _time(model, theta, target, y, restarts, True, 2)
                stacked = max(_time(model, theta, target, y, restarts, True, iterations) for _ in range(3))
                loop = max(_time(model, theta, target, y, restarts, False, iterations) for _ in range(3))
                print(
                    f"{device:6} {name:4} {restarts:8d} {stacked:13.1f} {loop:10.1f} {stacked / loop:8.1f}x",
                    flush=True,
                )
