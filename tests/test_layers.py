"""The package's layers import only downward, and no import cycle exists between its modules.

The rule, from the course design: ``core < measure < gpu < snake, replay < learn < bench < cli``.
A module may import from its own layer or from any layer below it; an import inside a function is
allowed only for optional or heavy third-party packages. Read from the AST, so nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rlgpu_helpers"
LAYERS = {
    "core": 0, "measure": 1, "gpu": 2, "snake": 3, "replay": 3, "learn": 4, "bench": 5,
    "cli": 6, "__main__": 6, "__init__": 6,
}
LATE_IMPORTS_ALLOWED = {
    "matplotlib", "stable_baselines3", "torchrl", "tensordict", "pynvml", "PIL", "resource",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    parts = module.split(".")
    return LAYERS["__init__" if len(parts) == 1 else parts[1]]


def imports_of(module: str):
    """(imported package module, line, inside a function?) for every import in ``module``."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    late = {id(n) for f in functions for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, id(node) in late
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                yield (candidate if candidate in MODULES else target), node.lineno, id(node) in late


def package_edges():
    """module -> set of package modules it imports (at module level or in a function)."""
    edges = {}
    for module in MODULES:
        edges[module] = {t for t, _, _ in imports_of(module) if t in MODULES and t != module}
    return edges


def test_every_module_belongs_to_a_layer():
    for module in MODULES:
        layer_of(module)


def test_every_package_import_names_a_module_that_exists():
    missing = [
        f"{m}:{line} imports {t}"
        for m in MODULES
        for t, line, _ in imports_of(m)
        if t.startswith("rlgpu_helpers") and t not in MODULES
    ]
    assert not missing, "\n".join(missing)


def test_layers_import_only_downward():
    upward = [
        f"{m}:{line} imports {t} (layer {layer_of(m)} -> {layer_of(t)})"
        for m in MODULES
        for t, line, _ in imports_of(m)
        if t in MODULES and not t == "rlgpu_helpers" and layer_of(t) > layer_of(m)
        and not (m == "rlgpu_helpers")
    ]
    assert not upward, "\n".join(upward)


def test_imports_inside_functions_are_only_optional_or_heavy_packages():
    late = [
        f"{m}:{line} imports {t} inside a function"
        for m in MODULES
        for t, line, inside in imports_of(m)
        if inside and t.split(".")[0] not in LATE_IMPORTS_ALLOWED
    ]
    assert not late, "\n".join(late)


def strongly_connected(edges):
    """Tarjan's algorithm: the strongly connected components of the graph ``edges``."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in edges[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            components.append(component)

    for node in edges:
        if node not in index:
            visit(node)
    return components


def test_strongly_connected_finds_a_planted_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert sorted(map(sorted, strongly_connected(edges))) == [["a", "b", "c"], ["d"]]


def test_no_import_cycles_between_modules():
    edges = package_edges()
    # A package's __init__ importing its own modules is how a package presents itself, not a cycle.
    for module in edges:
        edges[module] = {t for t in edges[module] if not module.startswith(t + ".")}
    cycles = [sorted(c) for c in strongly_connected(edges) if len(c) > 1]
    assert not cycles, cycles


@pytest.mark.parametrize("subpackage", ["bench"])
def test_bench_holds_at_most_35_percent_of_the_lines(subpackage):
    lines = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    share = sum(n for m, n in lines.items() if m.startswith(f"rlgpu_helpers.{subpackage}")) / sum(lines.values())
    assert share <= 0.35, f"{subpackage}/ holds {share:.1%} of the package's lines"
