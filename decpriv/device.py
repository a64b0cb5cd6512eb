"""Where a run computes: the device a config names, resolved to the one that runs, with CUDA's kernels set
to repeat themselves, and that device's name for the record (docs/simulation.md, "Same numbers on any
device").
"""

import os
import platform
from pathlib import Path

import torch

from decpriv.errors import bad_value

# where this process's attack computes: the sealed attack process (decpriv.seal.process) sets the run's GPU where it
# could start CUDA there; the CPU everywhere else
_ATTACK_DEVICE = ["cpu"]


def attack_device() -> str:
    """The device an attack may compute on in this process. What crosses into the attack's process is on
    the CPU (the outcome, the view); an attack that computes on the GPU moves its own work there and brings
    its findings back (the DP-SGD audit's trials do)."""
    return _ATTACK_DEVICE[0]


def set_attack_device(name: str) -> None:
    """The sealed attack process's device, once it has started CUDA there (or the CPU)."""
    if torch.device(name).type == "cuda":
        repeatable_cuda()  # the attack's kernels under the run's rules
    _ATTACK_DEVICE[0] = name


def resolve_device(name: str) -> torch.device:
    """``auto`` is the GPU when one is visible, else the CPU; ``cuda`` without a GPU is refused."""
    if name == "cuda" and not torch.cuda.is_available():
        raise bad_value("device", name, "no CUDA GPU is visible", "use device=auto or device=cpu")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        repeatable_cuda()
    return device


def repeatable_cuda() -> None:
    """CUDA kernels that give the CPU's float32 to rounding and the same bits run after run: no TF32 (a
    10-bit mantissa in matmuls and cuDNN's convolutions, on by default for cuDNN), no autotuned cuDNN
    algorithm (another choice each process), and deterministic scatter/index_add (atomics sum in another
    order each call). cuBLAS needs its workspace fixed before the context exists for that; ops with no
    deterministic kernel warn rather than fail."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)


def device_name(device: torch.device) -> str:
    """The GPU's name (``NVIDIA H100 80GB HBM3``), or the CPU's model: which machine made the numbers."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()
