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


def test_a_circle_is_found():
    graph = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])
    assert circles(graph) == [["a", "b", "c"]]


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
