"""The stacked objective replayed as one CUDA graph.

One evaluation of the objective (a vmapped gradient of a gradient) is some 150 small kernels whatever the
number of stacked problems; on a GPU, up to a few dozen restarts, the time goes to launching them from
Python, not to running them (docs/speed.md, "Inversion restarts"). A CUDA graph records the launches once
and replays them as one (the PyTorch documentation's "CUDA Graphs" recipe: warm up on a side stream,
capture with static input and outputs, copy in, replay). The replay runs the recorded kernels themselves,
so it gives the eager evaluation's numbers.
"""

import warnings

import torch

from decpriv.attacks.inversion.optimisers import Objective

WARMUP = 3  # evaluations on a side stream before capture, as the recipe asks (lazy init, workspaces)


def graphed(objective: Objective, like: torch.Tensor) -> Objective:
    """``objective`` as a replay of its CUDA graph for inputs shaped as ``like``; itself on a CPU, or where
    the objective cannot be captured (with a warning)."""
    if like.device.type != "cuda":
        return objective
    static_u = like.detach().clone()
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP):
                objective(static_u)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_g, static_v = objective(static_u)
    except RuntimeError as error:  # an operation that cannot be recorded: the eager objective still runs
        warnings.warn(f"inversion: the objective runs eagerly, no CUDA graph ({error})", stacklevel=2)
        return objective

    def replay(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        static_u.copy_(u)
        graph.replay()
        # the optimisers keep a trial's values across calls: the next replay overwrites the static outputs
        return static_g.clone(), static_v.clone()

    return replay
