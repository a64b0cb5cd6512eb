"""The package's shape, measured: import circles, long functions, and what attacks may touch.

``python tests/test_architecture.py`` prints the figures (modules, import edges, circles, functions over
60 lines) that docs/ARCHITECTURE.md quotes.
"""

import ast
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "decpriv"


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every dotted name a module imports, at any depth (lazy imports inside functions count)."""
    package = module if is_package else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> nx.DiGraph:
    """module -> module it imports, inside the package (TYPE_CHECKING imports included: a circle of
    annotations is still two modules that cannot be understood apart)."""
    mods = modules()
    graph = nx.DiGraph()
    for module, path in mods.items():
        graph.add_node(module)
        for name in imported(ast.parse(path.read_text()), module, path.name == "__init__.py"):
            while name and name not in mods:
                name = name.rpartition(".")[0]
            if name and name != module:
                graph.add_edge(module, name)
    return graph


def circles(graph: nx.DiGraph) -> list[list[str]]:
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def long_functions(limit: int = 60) -> list[tuple[int, str]]:
    out = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    out.append((length, f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}"))
    return sorted(out, reverse=True)


def lines_of_code() -> int:
    return sum(len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py"))


def test_no_import_circles():
    """Every module can be read after the ones it imports: no two modules import each other, even lazily."""
    graph = import_graph()
    assert graph.number_of_edges() > 300  # the parser sees the package's imports
    assert circles(graph) == []


def top_level(module: str) -> str:
    """``decpriv.seal.zygote`` -> ``decpriv.seal``: the top-level file or package a module belongs to."""
    return ".".join(module.split(".")[:2])


def package_graph() -> nx.DiGraph:
    """Top-level file or package -> one it imports (the map docs/ARCHITECTURE.md draws)."""
    graph = nx.DiGraph()
    for a, b in import_graph().edges():
        if top_level(a) != top_level(b):
            graph.add_edge(top_level(a), top_level(b))
    return graph


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def crossing(package: str) -> tuple[set[tuple[str, str]], set[str]]:
    """(importer, seal module) edges that enter ``package`` from outside, and what it imports outside."""
    edges = import_graph().edges()
    inward = {(a, b) for a, b in edges if inside(b, package) and not inside(a, package)}
    outward = {b for a, b in edges if inside(a, package) and not inside(b, package)}
    return inward, outward


# Who may start or drive the sealed process: the pipeline and the CLI (which warms the zygote first thing);
# the config layer and `decpriv list sandbox` read the sandbox's declared limits. decpriv.seal.truth is the
# type evaluate scores against, imported by scorers (test_attacks_see_only_their_context_and_view keeps it
# out of what attacks compute before scoring).
SEAL_DRIVERS = {"decpriv.experiment", "decpriv.cli", "decpriv.cli.precheck", "decpriv.cli.reading"}
SEAL_LIMITS_READERS = {"decpriv.config.validation"}
# What the seal itself may import: the types that cross its border (an attack, its behaviour's forgery, its
# findings, the truth's data), its device and streams, the key checks of its limits, the errors.
SEAL_IMPORTS = {
    "decpriv",
    "decpriv.errors",
    "decpriv.device",
    "decpriv.random",
    "decpriv.random.streams",
    "decpriv.config.types",
    "decpriv.adversary.behaviour",
    "decpriv.attacks.base",
    "decpriv.report.findings",
    "decpriv.data.datasets",
    "decpriv.data.partition",
}


def test_the_seal_is_driven_by_the_pipeline_alone_and_imports_only_what_crosses_it():
    inward, outward = crossing("decpriv.seal")
    drivers = {a for a, b in inward if b != "decpriv.seal.truth" and b != "decpriv.seal.sandbox"}
    assert drivers <= SEAL_DRIVERS | SEAL_LIMITS_READERS, drivers - SEAL_DRIVERS
    assert {a for a, b in inward if b == "decpriv.seal.sandbox"} <= SEAL_DRIVERS | SEAL_LIMITS_READERS
    assert "decpriv.experiment" in drivers  # the walk sees the pipeline's own import of the seal
    assert outward <= SEAL_IMPORTS, outward - SEAL_IMPORTS


def test_the_config_layer_and_the_streams_stand_below_the_pipeline():
    """The config layer checks, it builds nothing: it imports no plugin family by name (those load through
    their ``_target_``) and neither the pipeline nor the CLI; the streams import nothing of decpriv."""
    _, config_out = crossing("decpriv.config")
    assert {top_level(m) for m in config_out} <= {
        "decpriv",
        "decpriv.errors",
        "decpriv.seal",
        "decpriv.report",
    }
    assert config_out & {"decpriv.seal.sandbox"}  # the walk sees the limits it checks
    _, random_out = crossing("decpriv.random")
    assert random_out == set()


def test_the_top_level_keeps_the_pipeline_spine():
    """The seal, the config layer and the random streams are packages; the top level holds the pipeline's
    spine and the plugin families (23 files and packages, no circle between modules)."""
    tops = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"}
    assert {"seal", "config", "random"} <= tops
    assert not tops & {"zygote", "sandbox", "plain", "primitives", "truth", "validation", "rng", "philox"}
    assert len(tops - {"__init__"}) == 22 and "conf" in tops


def test_no_function_over_80_lines():
    """The style's limit: a longer function is split along the steps it narrates."""
    assert long_functions(limit=60)  # the walk sees the package's functions (some run past 60 lines)
    assert long_functions(limit=80) == []


GROUND_TRUTH = {"truth", "Truth", "setup", "Setup", "cfg"}
BEFORE_SCORING = ("prepare", "behaviour", "run")  # what an attack computes before it is scored


def is_oracle_flag(test: ast.expr) -> bool:
    """``self.oracle``: the declared oracle door (``Attack.oracle``), the one test that opens a branch
    allowed to read ``view.oracle``."""
    return (
        isinstance(test, ast.Attribute)
        and test.attr == "oracle"
        and isinstance(test.value, ast.Name)
        and test.value.id == "self"
    )


def non_oracle_path(fn: ast.AST) -> list[ast.AST]:
    """Every node of ``fn`` outside the body of an ``if self.oracle:`` (statement or expression): its
    test and its else branch are the honest path and stay in."""
    out, stack = [], [fn]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, ast.If) and is_oracle_flag(node.test):
            stack.extend([node.test, *node.orelse])
        elif isinstance(node, ast.IfExp) and is_oracle_flag(node.test):
            stack.extend([node.test, node.orelse])
        else:
            stack.extend(ast.iter_child_nodes(node))
    return out


def peeks(nodes: list[ast.AST]) -> bool:
    """A read of ground truth among ``nodes``: a name of the truth, the Setup or the config (variable or
    parameter), ``<anything but self>.oracle``, or the string "oracle" (``getattr(view, "oracle")``)."""
    for n in nodes:
        if (
            isinstance(n, ast.Name)
            and n.id in GROUND_TRUTH
            or isinstance(n, ast.arg)
            and n.arg in GROUND_TRUTH
        ):
            return True
        if isinstance(n, ast.Attribute) and n.attr == "oracle" and not is_oracle_flag(n):
            return True
        if isinstance(n, ast.Constant) and n.value == "oracle":
            return True
    return False


def imported_functions(tree: ast.Module, module: str, is_package: bool) -> dict[str, tuple[str, str]]:
    """Local name -> (module, name) of every ``from X import f [as g]`` of a module."""
    package = module if is_package else module.rpartition(".")[0]
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            out.update({alias.asname or alias.name: (base, alias.name) for alias in node.names})
    return out


def reaches_ground_truth(
    tree: ast.Module, module: str = "", others: dict[str, tuple[ast.Module, bool]] | None = None
) -> list[str]:
    """Attack methods ``prepare``/``behaviour``/``run`` whose honest path reads the truth (``peeks``), or
    calls (by name, ``self.`` or a name imported from one of ``others``, the other attack modules, with
    whether each is a package; transitively) a function whose honest path does. Only the body of
    ``if self.oracle:`` may read ``view.oracle`` and call what reads it: a function that also has an oracle
    branch is checked everywhere else."""
    others = others or {}
    trees = {**others, module: (tree, others.get(module, (tree, False))[1])}
    functions = {
        m: {n.name: n for n in ast.walk(t) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        for m, (t, _) in trees.items()
    }
    aliases = {m: imported_functions(t, m, package) for m, (t, package) in trees.items()}

    def called(m: str, nodes: list[ast.AST]) -> set[tuple[str, str]]:
        out = set()
        for node in nodes:
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name):
                    out.add((m, f.id) if f.id in functions[m] else aliases[m].get(f.id, (m, f.id)))
                elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                    out.add((m, f.attr))
        return {(where, name) for where, name in out if name in functions.get(where, {})}

    bad = []
    for entry in BEFORE_SCORING:
        if entry not in functions[module]:
            continue
        seen, stack = set(), [(module, entry)]
        while stack:
            where, name = stack.pop()
            if (where, name) in seen:
                continue
            seen.add((where, name))
            honest = non_oracle_path(functions[where][name])
            if peeks(honest):
                bad.append(f"{entry} -> {name}" if where == module else f"{entry} -> {where}.{name}")
            stack.extend(called(where, honest))
    return bad


def test_attacks_see_only_their_context_and_view():
    """No attack module imports the Setup, the pipeline or the config; prepare/behaviour/run (and what
    they call) never name the truth: ground truth reaches evaluate alone (and run through ``view.oracle``
    for a declared oracle)."""
    forbidden = {"decpriv.built", "decpriv.experiment", "decpriv.api", "omegaconf", "hydra"}
    attacks = {m: p for m, p in modules().items() if m.startswith("decpriv.attacks")}
    trees = {m: (ast.parse(p.read_text()), p.name == "__init__.py") for m, p in attacks.items()}
    checked = 0
    for module, path in sorted(attacks.items()):
        tree = trees[module][0]
        assert not imported(tree, module, path.name == "__init__.py") & forbidden, path
        assert reaches_ground_truth(tree, module, trees) == [], path
        checked += "def prepare" in path.read_text() or "def run" in path.read_text()
    assert checked >= 12  # every attack module was read


def test_the_guard_catches_a_peek():
    peek = ast.parse(
        "def helper(truth):\n    return truth.local\n"
        "class A:\n    def run(self, view):\n        return self.score(view)\n"
        "    def score(self, view):\n        return helper(view.truth)\n"
    )
    assert reaches_ground_truth(peek) == ["run -> helper"]


ORACLE_ATTACK = """
def true_step(view):
    truth = view.oracle
    return truth.local.x
class A:
    def run(self, view):
        step = estimate(view)
        if self.oracle:
            step = true_step(view)
        {peek}
        return step
"""


@pytest.mark.parametrize(
    "peek, found",
    [
        ("", []),  # the declared oracle branch alone reads the truth: allowed
        ("step = step + view.oracle.local.x.mean()", ["run -> run"]),  # beside the branch, in the same run
        ("step = step + true_step(view)", ["run -> true_step"]),  # calling the oracle helper
        ("step = getattr(view, 'oracle') or step", ["run -> run"]),
        ("step = step if self.oracle else true_step(view)", ["run -> true_step"]),  # else branch
    ],
)
def test_the_guard_checks_the_honest_path_of_a_function_with_an_oracle_branch(peek, found):
    """The oracle branch (``if self.oracle:``) is the only place a function may read ``view.oracle``:
    a peek anywhere else in a function that also has one is caught."""
    tree = ast.parse(ORACLE_ATTACK.format(peek=peek))
    assert sorted(reaches_ground_truth(tree)) == found


def test_diffgrad_reads_the_truth_only_in_its_oracle_branch():
    """DiffGrad.run (Yu et al.'s oracle, ``attack.oracle=true``) is now checked outside that branch, into
    the helpers it imports from the other attack modules (the leak's ``extract``, the inversion engine)."""
    attacks = {m: p for m, p in modules().items() if m.startswith("decpriv.attacks")}
    trees = {m: (ast.parse(p.read_text()), p.name == "__init__.py") for m, p in attacks.items()}
    module = "decpriv.attacks.pdmm.diffgrad"
    tree = trees[module][0]
    run = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "run")
    assert any(isinstance(n, ast.If) and is_oracle_flag(n.test) for n in ast.walk(run))
    assert reaches_ground_truth(tree, module, trees) == []
    # the oracle helper it calls in that branch does read the truth: moved out of the branch, it is caught
    peeking = ast.parse(ast.unparse(tree).replace("if self.oracle:", "if True:"))
    assert "run -> true_difference" in reaches_ground_truth(peeking, module, trees)


def test_the_guard_follows_imports_into_other_attack_modules():
    helper = ast.parse("def leak(view):\n    return view.oracle.local.x\n")
    attack = ast.parse(
        "from decpriv.attacks.x import leak as peek\nclass A:\n    def run(self, view):\n        return peek(view)\n"
    )
    others = {"decpriv.attacks.x": (helper, False)}
    assert reaches_ground_truth(attack, "decpriv.attacks.a", others) == ["run -> decpriv.attacks.x.leak"]


def test_a_circle_is_found():
    graph = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])
    assert circles(graph) == [["a", "b", "c"]]


def test_user_conf_adds_options(monkeypatch, tmp_path):
    """./conf of the working directory adds presets (the repository's example) without editing the package;
    elsewhere the packaged defaults compose unchanged."""
    from decpriv.api import compose_config

    monkeypatch.chdir(PACKAGE.parent)
    cfg, choices = compose_config(["experiment=my_torus_mia"])
    assert (choices["topology"], choices["attack"], cfg.topology.n, cfg.seed) == ("torus", "mia", 36, 1)
    monkeypatch.chdir(tmp_path)
    cfg, choices = compose_config([])
    assert (choices["topology"], cfg.topology.n) == ("ring", 16)


if __name__ == "__main__":
    graph = import_graph()
    print(
        f"modules {graph.number_of_nodes()}, import edges {graph.number_of_edges()}, lines {lines_of_code()}"
    )
    found = circles(graph)
    packages = package_graph()
    print(
        f"top-level files and packages {packages.number_of_nodes()}, import edges between them {packages.number_of_edges()}"
    )
    print(f"import circles: {len(found)}")
    for circle in found:
        print("  " + " <-> ".join(circle))
    long = long_functions()
    print(f"functions over 60 lines: {len(long)}")
    for length, where in long:
        print(f"  {length:4d} {where}")
