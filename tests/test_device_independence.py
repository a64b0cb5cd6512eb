"""Same config and seed, same numbers, whatever device simulates (docs/simulation.md, "Same numbers on any
device"): every stream is a CPU generator, every draw goes through :mod:`decpriv.random.streams` (drawn on the CPU,
then moved), the model is initialised on the CPU, and the code that runs on the simulation's device names
the device of every tensor it creates.

Without a GPU these are checked on the CPU: a draw sent to the ``meta`` device consumes its CPU stream
exactly as a CPU draw does (so its values are the CPU's, moved), and the source is read for draws and
tensors made elsewhere. tests/test_gpu.py compares whole runs on a GPU.
"""

import ast
from pathlib import Path

import pytest
import torch

from decpriv.models.architectures import cnn, mlp
from decpriv.random import streams as rng
from decpriv.random.streams import Seeds

PACKAGE = Path(__file__).resolve().parents[1] / "decpriv"
DEVICES = ["cpu", "meta"] + (["cuda"] if torch.cuda.is_available() else [])

DRAWS = {
    "normal": lambda g, d: rng.normal((3, 5), g, d, torch.float64),
    "uniform": lambda g, d: rng.uniform(7, g, d, torch.float32),
    "integers": lambda g, d: rng.integers(2, 9, (4, 2), g, d),
    "permutation": lambda g, d: rng.permutation(11, g, d),
}


def test_a_stream_is_a_cpu_generator_with_the_named_seed():
    seeds = Seeds(7)
    generator = seeds.torch("defense.noise")
    assert generator.device == torch.device("cpu")
    assert generator.initial_seed() == seeds.seed("defense.noise")


@pytest.mark.parametrize("kind", sorted(DRAWS))
@pytest.mark.parametrize("device", DEVICES)
def test_a_draw_is_the_cpu_draw_whatever_device_consumes_it(kind, device):
    """The stream advances by the same amount on every device, and the values are the CPU's: the next
    draw after it is the same number, and (where the device has values) the draw itself is."""
    on_cpu, elsewhere = Seeds(3).torch("x"), Seeds(3).torch("x")
    reference = DRAWS[kind](on_cpu, "cpu")
    moved = DRAWS[kind](elsewhere, device)
    assert moved.device.type == device and moved.shape == reference.shape and moved.dtype == reference.dtype
    assert torch.equal(on_cpu.get_state(), elsewhere.get_state())
    if device != "meta":
        assert torch.equal(moved.cpu(), reference)


def test_the_cpu_draws_are_torch_own_for_that_seed():
    """Moving draws to the CPU generators changed no CPU number: ``rng.normal`` is ``torch.randn`` on the
    stream's generator."""
    expected = torch.randn(4, 3, generator=torch.Generator().manual_seed(Seeds(5).seed("batches")))
    assert torch.equal(rng.normal((4, 3), Seeds(5).torch("batches")), expected)


@pytest.mark.parametrize("build", [lambda: mlp((1, 8, 8), 10, hidden=[16]), lambda: cnn((1, 8, 8), 10)])
def test_the_initial_model_does_not_depend_on_where_the_model_computes(build):
    """``on(device)`` moves the buffers of a copy; the module stays on the CPU, where ``init`` draws, so
    a run on any device starts from the CPU's model."""
    model = build()
    before = model.init(3, 11, same=False)
    moved = model.on("meta")
    assert all(b.device.type == "meta" for b in moved.buffers.values())
    assert torch.equal(moved.init(3, 11, same=False), before)
    assert torch.equal(model.init(3, 11, same=False), before)


def test_initialising_a_model_leaves_the_global_generators_alone():
    model = mlp((1, 8, 8), 10, hidden=[16])
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    model.init(2, 5)
    assert torch.equal(torch.rand(3), expected)


# --- the source, read --------------------------------------------------------------------------------

RANDOM = {"randn", "rand", "randint", "randperm", "normal", "bernoulli", "multinomial", "poisson"}
RANDOM |= {f"{name}_like" for name in ("randn", "rand", "randint")}
IN_PLACE = {"normal_", "uniform_", "bernoulli_", "random_", "exponential_", "geometric_", "cauchy_"}
FACTORIES = {"zeros", "ones", "empty", "full", "arange", "eye", "linspace", "logspace", "tensor"}
FACTORIES |= {"as_tensor", "triu_indices", "tril_indices", "sparse_coo_tensor", "scalar_tensor"}
# the code that runs on the simulation's device; data sets are built on the CPU and moved by LocalData.to
ON_DEVICE = ("protocols", "defenses", "adversary", "models", "metrics/training.py", "data/sampling.py")
ON_DEVICE += ("data/partition.py", "graphs/network.py", "experiment.py")


def calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            yield node, node.func


def torch_call(func: ast.Attribute) -> str | None:
    """``torch.X(...)`` -> X (also torch.random.X)."""
    value = func.value
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
        value = value.value if value.attr == "random" else None
    return func.attr if isinstance(value, ast.Name) and value.id == "torch" else None


def sources(*parts: str) -> list[Path]:
    paths = sorted(PACKAGE.rglob("*.py")) if not parts else []
    for part in parts:
        target = PACKAGE / part
        paths += sorted(target.rglob("*.py")) if target.is_dir() else [target]
    return paths


def test_every_random_draw_goes_through_the_streams():
    """A draw made on the device would give other numbers there (CUDA's Philox is not the CPU's Mersenne
    twister); a generator made by hand would escape the named streams."""
    found = []
    for path in sources():
        if path.name == "streams.py":
            continue
        for node, func in calls(path):
            name = torch_call(func)
            where = f"{path.relative_to(PACKAGE)}:{node.lineno} {ast.unparse(node)[:70]}"
            if name in RANDOM or name in {"Generator", "seed"} or func.attr in IN_PLACE | {"manual_seed"}:
                found.append(where)
    # the one exception: reset_parameters draws from the global CPU generator, seeded here for that call
    allowed = [w for w in found if w.startswith("models/functional.py") and "default_generator" in w]
    assert sorted(set(found) - set(allowed)) == [], (
        "draw through decpriv.random.streams (normal, uniform, ...)"
    )
    assert len(allowed) == 1


def test_code_on_the_device_names_the_device_of_every_tensor_it_creates():
    """A tensor made without ``device=`` lands on the CPU and meets the device's tensors in the next
    operation: on a GPU, ``Expected all tensors to be on the same device``."""
    found = [
        f"{path.relative_to(PACKAGE)}:{node.lineno} {ast.unparse(node)[:70]}"
        for path in sources(*ON_DEVICE)
        for node, func in calls(path)
        if torch_call(func) in FACTORIES and not any(k.arg == "device" for k in node.keywords)
    ]
    assert found == []


def test_the_checks_read_real_code():
    """The two source checks above would pass on an empty list: they do see the calls they judge."""
    seen = [torch_call(func) for path in sources(*ON_DEVICE) for _, func in calls(path)]
    assert seen.count("zeros") > 10 and seen.count("as_tensor") > 10
    assert len(sources(*ON_DEVICE)) > 30


def test_auto_records_the_device_that_ran(tmp_path):
    """``device=auto`` is the request; run.json and summary.csv name the device that ran and its name."""
    import json

    from decpriv import api

    expected = "cuda" if torch.cuda.is_available() else "cpu"
    result = api.run(["~attack", "protocol.rounds=1", "device=auto", "plots=false"], tmp_path / "auto")
    meta = json.loads((result.path / "run.json").read_text())
    assert meta["device"] == expected and result.summary["device"] == expected
    assert meta["device_name"] == result.summary["device_name"] != ""
    assert meta["settled"]["device"] == {"requested": "auto", "ran": expected}


def test_the_gpu_check_finds_two_runs_of_one_seed_equal_and_of_two_seeds_not(tmp_path, monkeypatch):
    """benchmarks/gpu_check.py's comparison, run on the CPU twice: the same config and seed give identical
    tables (no difference at all); two seeds differ, and the check says which tables."""
    from benchmarks import gpu_check
    from decpriv import api

    same = gpu_check.compare("gossip", str(tmp_path / "same"), sides=("cpu", "cpu"))
    assert same["passed"] and same["measure"] == 0.0 and same["folders"][0] != same["folders"][1]
    real_run, seeds = api.run, iter(["seed=0", "seed=1"])
    monkeypatch.setattr(
        api, "run", lambda overrides, out: real_run([*overrides[:-2], next(seeds), "plots=false"], out)
    )
    other = gpu_check.compare("gossip", str(tmp_path / "other"), sides=("cpu", "cpu"))
    assert not other["passed"] and other["measure"] > 1e-6 and "history" in other["differing"]
