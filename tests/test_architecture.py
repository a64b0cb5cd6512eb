"""The package's shape, measured: import circles, long functions, and what attacks may touch.

``python tests/test_architecture.py`` prints the figures (modules, import edges, circles, functions over
60 lines) that docs/ARCHITECTURE.md quotes.
"""

import ast
from pathlib import Path

import networkx as nx

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


GROUND_TRUTH = {"truth", "Truth", "setup", "Setup", "cfg"}
BEFORE_SCORING = ("prepare", "behaviour", "run")  # what an attack computes before it is scored


def reaches_ground_truth(tree: ast.Module) -> list[str]:
    """Attack methods ``prepare``/``behaviour``/``run`` that name the truth, the Setup or the config, or
    call (by name or ``self.``, transitively, within the module) a function that does. A function that
    reads ``view.oracle`` is the declared oracle door (``Attack.oracle``) and may."""
    functions = {
        node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }

    def names(fn) -> set[str]:
        return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | {
            a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)
        }

    def called(fn) -> set[str]:
        out = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name):
                    out.add(f.id)
                elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                    out.add(f.attr)
        return out & set(functions)

    bad = []
    for entry in BEFORE_SCORING:
        if entry not in functions:
            continue
        seen, stack = set(), [entry]
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            oracle = any(
                isinstance(n, ast.Attribute) and n.attr == "oracle" for n in ast.walk(functions[name])
            )
            if names(functions[name]) & GROUND_TRUTH and not oracle:
                bad.append(f"{entry} -> {name}")
            stack.extend(called(functions[name]))
    return bad


def test_attacks_see_only_their_context_and_view():
    """No attack module imports the Setup, the pipeline or the config; prepare/behaviour/run (and what
    they call) never name the truth: ground truth reaches evaluate alone (and run through ``view.oracle``
    for a declared oracle)."""
    forbidden = {"decpriv.built", "decpriv.experiment", "decpriv.api", "omegaconf", "hydra"}
    checked = 0
    for path in sorted((PACKAGE / "attacks").rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        tree = ast.parse(path.read_text())
        assert not imported(tree, module, path.name == "__init__.py") & forbidden, path
        assert reaches_ground_truth(tree) == [], path
        checked += "def prepare" in path.read_text() or "def run" in path.read_text()
    assert checked >= 12  # every attack module was read


def test_the_guard_catches_a_peek():
    peek = ast.parse(
        "def helper(truth):\n    return truth.local\n"
        "class A:\n    def run(self, view):\n        return self.score(view)\n"
        "    def score(self, view):\n        return helper(view.truth)\n"
    )
    assert reaches_ground_truth(peek) == ["run -> helper"]


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
    print(f"import circles: {len(found)}")
    for circle in found:
        print("  " + " <-> ".join(circle))
    long = long_functions()
    print(f"functions over 60 lines: {len(long)}")
    for length, where in long:
        print(f"  {length:4d} {where}")
