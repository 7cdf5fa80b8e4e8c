"""Docstrings say what and why, briefly, and the notebooks they name use their module (issue 37).

A function's, class's or attribute's docstring takes at most 15 lines, a module's at most 25 (the
lesson map aside). Every notebook a module's docstrings name ("notebook 05", "notebooks 01, 03
and 04", "notebooks 03-11", or "(05)" beside a module in a package's list) exists and uses the
module: its code cells import the module (or a module inside it, for a package), or import a
package module that imports it; a notebook that shows ``python -m rlgpu_helpers`` uses ``cli``.
Read from the AST and the notebooks' JSON, so nothing is imported.
"""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from pathlib import Path

from test_layers import MODULES, PACKAGE, package_edges

NOTEBOOKS = PACKAGE.parent / "notebooks"
MAX_MODULE_LINES = 25
MAX_LINES = 15  # a function's, a class's or an attribute's

LONG_MODULE_DOCSTRINGS = {
    "rlgpu_helpers/__init__.py": "the lesson map: every lesson's modules, the page the course starts from",
}

# (module, notebook) pairs a docstring may name though the notebook does not use the module.
NOT_USED_BUT_NAMED = {
    ("rlgpu_helpers.bench.suites", "00"): "the suites of `python -m rlgpu_helpers bench`, which notebook 00 "
                                          "has the student run in a terminal: a command, not an import",
}

COMMAND_LINE = re.compile(r"-m rlgpu_helpers\b(?!\.)")  # shown in a markdown cell or run in a code cell
NUMBERS = r"\d\d(?:(?:\s*,\s*|\s*,?\s+and\s+|\s*[-–]\s*)\d\d(?!\d))*"
NOTEBOOK_REFERENCE = re.compile(rf"\b[Nn]otebooks?\s+({NUMBERS})(?!\d)")
LISTED_NOTEBOOKS = re.compile(rf"\(({NUMBERS})(?!\d)")


def numbers(text: str) -> list[str]:
    """``"01, 03 and 05-07"`` -> ``["01", "03", "05", "06", "07"]``."""
    found = []
    for first, last in re.findall(r"(\d\d)(?:\s*[-–]\s*(\d\d))?", text):
        found += [f"{n:02d}" for n in range(int(first), int(last or first) + 1)]
    return found


def relative(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


@cache
def tree_of(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def docstrings(path: Path):
    """(line, name, kind, text, lines in the source) for every docstring in the file at ``path``."""
    for node in ast.walk(tree_of(path)):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        name = getattr(node, "name", "<module>")
        for i, statement in enumerate(body):
            if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                    and isinstance(statement.value.value, str)):
                continue
            if i == 0:
                kind = "module" if isinstance(node, ast.Module) else "definition"
                label = name
            elif isinstance(body[i - 1], (ast.Assign, ast.AnnAssign)):
                targets = body[i - 1].targets if isinstance(body[i - 1], ast.Assign) else [body[i - 1].target]
                kind, label = "attribute", ", ".join(ast.unparse(t) for t in targets)
            else:
                continue
            lines = statement.end_lineno - statement.lineno + 1
            yield statement.lineno, label, kind, statement.value.value, lines


def test_docstrings_are_short():
    too_long = []
    for path in MODULES.values():
        for line, name, kind, _, lines in docstrings(path):
            if kind == "module":
                if lines > MAX_MODULE_LINES and relative(path) not in LONG_MODULE_DOCSTRINGS:
                    too_long.append(f"{relative(path)}:{line}:{name}:{lines} (module, at most {MAX_MODULE_LINES})")
            elif lines > MAX_LINES:
                too_long.append(f"{relative(path)}:{line}:{name}:{lines} ({kind}, at most {MAX_LINES})")
    assert not too_long, f"{len(too_long)} docstrings too long:\n" + "\n".join(too_long)


def test_the_long_module_docstrings_allowed_exist_and_are_long():
    for name in LONG_MODULE_DOCSTRINGS:
        module_docstring = [d for d in docstrings(PACKAGE.parent / name) if d[2] == "module"]
        assert module_docstring and module_docstring[0][4] > MAX_MODULE_LINES, f"{name} needs no allowance"


def imported_modules(code: str) -> set[str]:
    """The package modules an import statement in ``code`` names."""
    found = set()
    for statement in re.finditer(r"^[ \t]*from[ \t]+(rlgpu_helpers[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)",
                                 code, re.M):
        module, names = statement.groups()
        found.add(module)
        for name in re.sub(r"#[^\n]*", "", names).strip("()").split(","):
            name = name.split(" as ")[0].strip()
            if f"{module}.{name}" in MODULES:
                found.add(f"{module}.{name}")
    for statement in re.finditer(r"^[ \t]*import[ \t]+(rlgpu_helpers[\w.]*)", code, re.M):
        found.add(statement.group(1))
    return found


@cache
def notebook_uses() -> dict[str, set[str]]:
    """notebook number -> the modules it uses: those its code imports, their packages, the package
    modules they import, and ``cli`` where a cell shows the command line (``python -m rlgpu_helpers``)."""
    edges = package_edges()
    uses = {}
    for notebook in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(notebook.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        imported = imported_modules(code)
        packages = {".".join(m.split(".")[:i]) for m in imported for i in range(2, m.count(".") + 1)}
        command_line = {"rlgpu_helpers.cli"} if any(COMMAND_LINE.search("".join(c["source"])) for c in cells) else set()
        uses[notebook.name[:2]] = imported | packages | {t for m in imported for t in edges.get(m, ())} | command_line
    return uses


def test_imported_modules_reads_every_import_form():
    code = ("from rlgpu_helpers.learn.ppo import PPO, PPOConfig\nfrom rlgpu_helpers.snake import rules\n"
            "import rlgpu_helpers.gpu.sync as sync\nfrom rlgpu_helpers.bench.replay import (\n"
            "    NAME as SAMPLED,  # a comment\n    dqn_table,\n)\n")
    assert imported_modules(code) == {"rlgpu_helpers.learn.ppo", "rlgpu_helpers.snake", "rlgpu_helpers.snake.rules",
                                      "rlgpu_helpers.gpu.sync", "rlgpu_helpers.bench.replay"}


def listed_modules(text: str):
    """(module, its notebooks) for each item ``- ``module``: what it holds (NN, MM)`` of a package's list."""
    for item in re.split(r"\n(?=[ \t]*- )", text):
        name, notebooks = re.match(r"\s*- ``(\w+)``:", item), LISTED_NOTEBOOKS.search(item)
        if name and notebooks:
            yield name.group(1), notebooks.group(1)


def references(module: str):
    """``(named module, line, where, notebook)`` for every notebook the docstrings of ``module`` name
    (the named module is ``module``), and for each module a package's docstring lists with its notebooks."""
    path = MODULES[module]
    for line, name, _, text, _ in docstrings(path):
        for match in NOTEBOOK_REFERENCE.finditer(text):
            for notebook in numbers(match.group(1)):
                yield module, line, f"{name}: {match.group(0)!r}", notebook
        if path.name == "__init__.py" and name == "<module>" and module != "rlgpu_helpers":
            for listed, notebooks in listed_modules(text):
                for notebook in numbers(notebooks):
                    yield f"{module}.{listed}", line, f"{name}: ``{listed}`` ({notebooks})", notebook


def test_numbers_reads_lists_and_ranges():
    assert numbers("01, 03 and 05-07") == ["01", "03", "05", "06", "07"]
    text = "notebook 05; notebooks 01, 03 and 04; Notebook 12's; notebooks 06, 11, 12; notebooks 01-03 measure"
    assert [numbers(m.group(1)) for m in NOTEBOOK_REFERENCE.finditer(text)] == [
        ["05"], ["01", "03", "04"], ["12"], ["06", "11", "12"], ["01", "02", "03"]]
    listed = ("Modules:\n\n- ``naive``: ``DequeReplay`` (01, 02; measured in 05);\n- ``precision``: bf16 (fp16 +\n"
              "  GradScaler) and TF32 (08).\n- ``claims``: the guides' claims (01-03).\n")
    assert list(listed_modules(listed)) == [("naive", "01, 02"), ("precision", "08"), ("claims", "01-03")]


def test_every_notebook_a_docstring_names_exists_and_uses_the_module():
    uses = notebook_uses()
    wrong = []
    for module in MODULES:
        for named, line, where, notebook in references(module):
            if (named, notebook) in NOT_USED_BUT_NAMED:
                continue
            if notebook not in uses:
                wrong.append(f"{relative(MODULES[module])}:{line}:{where}: there is no notebook {notebook}")
            elif named not in uses[notebook]:
                wrong.append(f"{relative(MODULES[module])}:{line}:{where}: notebook {notebook} does not use {named}")
    assert not wrong, f"{len(wrong)} references to notebooks that do not use the module:\n" + "\n".join(wrong)


def test_every_exception_to_the_notebook_rule_is_still_needed():
    uses = notebook_uses()
    named = {(m, n) for module in MODULES for m, _, _, n in references(module)}
    for (module, notebook), reason in NOT_USED_BUT_NAMED.items():
        assert reason, f"{module}, notebook {notebook}: an exception needs its reason"
        assert (module, notebook) in named, f"no docstring of {module} names notebook {notebook} any more"
        assert module not in uses.get(notebook, ()), f"notebook {notebook} uses {module}: no exception needed"
