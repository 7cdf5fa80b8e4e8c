"""Course-wide rules every notebook follows (see COURSE_DESIGN.md, Conventions)."""

import ast
import importlib
import importlib.util
import inspect
import re
from pathlib import Path

import pytest
from hidden_compiler import run_without_a_compiler

nbformat = pytest.importorskip("nbformat", reason="the notebook checks read the notebooks with nbformat (dev extras)")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
IDS = [path.name for path in NOTEBOOKS]


def code_cells(path):
    return [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]


def python_source(cell) -> str:
    """A cell's source with IPython magics and shell escapes blanked, so `ast` can parse it."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell.source.splitlines())


def used_helpers(tree) -> set[tuple[str, str]]:
    """(module, attribute) pairs a cell takes from rlgpu_helpers, directly or through an alias."""
    used, aliases = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rlgpu_helpers"):
            used |= {(node.module, alias.name) for alias in node.names}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("rlgpu_helpers"):
                    aliases[alias.asname or alias.name] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = [node.attr]
            value = node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in aliases:
                module = aliases[value.id]
                for attribute in chain:  # rlgpu_helpers.bench.plot_records: walk submodules
                    if importlib.util.find_spec(f"{module}.{attribute}") is None:
                        used.add((module, attribute))
                        break
                    module = f"{module}.{attribute}"
    return used


def test_there_are_notebooks():
    assert "00_setup.ipynb" in IDS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_helpers_used_in_notebooks_exist(path):
    tree = ast.parse("\n".join(python_source(cell) for cell in code_cells(path)))
    for module, attribute in sorted(used_helpers(tree)):
        assert hasattr(importlib.import_module(module), attribute), f"{path.name} uses missing {module}.{attribute}"


def defined_names(module) -> set[str]:
    """Names a module defines at its top level (not the ones it imports)."""
    tree = ast.parse(Path(module.__file__).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebooks_import_each_helper_from_the_module_that_defines_it(path):
    """So a helper's import line names the file to open: no re-exports in between."""
    tree = ast.parse("\n".join(python_source(cell) for cell in code_cells(path)))
    for module, attribute in sorted(used_helpers(tree)):
        imported = importlib.import_module(module)
        if inspect.ismodule(getattr(imported, attribute, None)):
            continue  # a submodule, such as `from rlgpu_helpers.snake import rules`
        assert attribute in defined_names(imported), (
            f"{path.name} imports {attribute} from {module}, which does not define it")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_first_code_cell_is_the_colab_install_cell(path):
    first = code_cells(path)[0].source
    assert first == code_cells(NOTEBOOKS[0])[0].source
    assert 'if "google.colab" in sys.modules:' in first
    assert re.search(r'^COURSE_REPO = "https://', first, flags=re.M)


def test_the_colab_cell_stops_with_a_message_while_the_repository_is_a_placeholder(monkeypatch):
    """In Colab, an unpublished course must say what to set, not fail inside `git clone`."""
    import subprocess
    import sys

    calls = []
    monkeypatch.setitem(sys.modules, "google.colab", object())
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: calls.append(args))
    with pytest.raises(SystemExit, match="COURSE_REPO in this cell is still the placeholder"):
        exec(code_cells(NOTEBOOKS[0])[0].source, {})
    assert calls == []  # nothing was cloned or installed


def test_set_course_repo_writes_the_url_into_every_first_cell(tmp_path, monkeypatch):
    import shutil

    spec = importlib.util.spec_from_file_location("set_course_repo", ROOT / "tools" / "set_course_repo.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    for path in NOTEBOOKS[:2]:
        shutil.copy(path, tmp_path / path.name)
    monkeypatch.setattr(tool, "NOTEBOOKS", tmp_path)
    tool.main(["https://github.com/example/course"])
    for path in sorted(tmp_path.glob("*.ipynb")):
        first = code_cells(path)[0].source
        assert 'COURSE_REPO = "https://github.com/example/course"' in first
        assert first.replace("https://github.com/example/course", "https://github.com/OWNER/rlgpu-course") == (
            code_cells(NOTEBOOKS[0])[0].source)
    with pytest.raises(SystemExit):
        tool.main(["not a url"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_outputs_come_from_one_run_top_to_bottom(path):
    cells = code_cells(path)
    assert [cell.execution_count for cell in cells] == list(range(1, len(cells) + 1))
    for index, cell in enumerate(cells):
        assert not any(output.get("name") == "stderr" for output in cell.outputs), f"cell {index} has stderr"
        assert not any(output.output_type == "error" for output in cell.outputs), f"cell {index} raised"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebooks_choose_devices_through_the_helper(path):
    for cell in code_cells(path):
        assert ".cuda()" not in cell.source
        assert "RLGPU_QUICK" not in cell.source  # sizes come from config.pick


# Issue 20: each GPU lesson writes its technique out in its own code cells (not only inside a helper),
# one entry per call a student will type in their own project; any of a tuple's spellings will do.
TECHNIQUE_ON_THE_PAGE = {
    "04": ["torch.cuda.set_sync_debug_mode", "torch.where"],
    "05": ["pin_memory", "non_blocking=True", "wait_stream", "record_stream"],
    "06": ["torch.cuda.OutOfMemoryError", "reset_peak_memory_stats", "max_memory_allocated"],
    "07": [".backward(", "torch.float64"],
    "08": ["torch.autocast", "GradScaler", "unscale_", "clip_grad_norm_",
           ("allow_tf32", "set_float32_matmul_precision")],
    "09": ["torch.compile", "torch.cuda.graph", ".replay()", ".copy_("],
    "10": ["init_process_group", "DistributedDataParallel", "all_reduce", "no_sync"],
    "11": [("torch.clamp", ".clamp("), ("torch.exp", ".exp()"), "gamma", "lam"],
    "12": ["torch.rot90", ".gather(", ".flip(", "torch.softmax", "torch.autocast", "torch.compile",
           "clip_grad_norm_"],
}
GPU_LESSONS = [path for path in NOTEBOOKS if path.name[:2] in TECHNIQUE_ON_THE_PAGE]


@pytest.mark.parametrize("path", GPU_LESSONS, ids=[path.name for path in GPU_LESSONS])
def test_gpu_lessons_write_their_technique_out_in_code_cells(path):
    code = "\n".join(cell.source for cell in code_cells(path))
    missing = [call for call in TECHNIQUE_ON_THE_PAGE[path.name[:2]]
               if not any(spelling in code for spelling in ((call,) if isinstance(call, str) else call))]
    assert not missing, f"{path.name}'s code cells never write {missing}"


@pytest.mark.parametrize("path", GPU_LESSONS, ids=[path.name for path in GPU_LESSONS])
def test_nbval_compares_most_cells_of_the_gpu_lessons(path):
    """At most 60% of the code cells may skip nbval's comparison: the by-hand cells are seeded and compared."""
    cells = code_cells(path)
    ignored = sum(cell.source.lstrip().startswith("# NBVAL_IGNORE_OUTPUT") for cell in cells)
    assert ignored <= 0.6 * len(cells), f"{path.name}: {ignored} of {len(cells)} code cells ignore their output"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_exercise_has_a_collapsed_solution(path):
    markdown = [cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown"]
    exercises = [source for source in markdown if re.search(r"^#+ .*exercise", source, re.IGNORECASE | re.MULTILINE)]
    assert exercises, f"{path.name} has no exercises section"
    solutions = sum(source.count("<details>") for source in markdown)
    assert solutions >= 1 and all(source.count("<details>") == source.count("</details>") for source in markdown)
    assert "write it yourself" in "\n".join(markdown).lower(), f"{path.name} has no 'write it yourself' task"


def test_notebook_12s_lines_stay_within_100_characters():
    """Its prose and code read without scrolling (the Colab cell, the same in every notebook, aside)."""
    path = next(path for path in NOTEBOOKS if path.name.startswith("12_"))
    cells = nbformat.read(path, as_version=4).cells
    long = [(index, line) for index, cell in enumerate(cells) if index != 1
            for line in cell.source.splitlines() if len(line) > 100]
    assert not long, long


NOTEBOOK_WITHOUT_A_COMPILER = """
import nbformat
from nbclient import NotebookClient
notebook = nbformat.read(NOTEBOOK, as_version=4)
NotebookClient(notebook, timeout=300, record_timing=False, resources={"metadata": {"path": HERE}}).execute()
nbformat.write(notebook, OUT)  # the executed copy, for the test to read; the notebook itself is never saved
"""


def test_notebook_09_runs_without_a_cpp_compiler_and_its_compiled_cells_say_not_measured_here(tmp_path):
    """Quick mode, a kernel whose PATH holds no compiler: no cell raises or writes to stderr, and each cell
    that compiles (torch.compile, compile_step, the suite's compiled modes) says why it measured nothing."""
    pytest.importorskip("nbclient", reason="runs the notebook with nbclient (dev extras)")
    path = next(path for path in NOTEBOOKS if path.name.startswith("09_"))
    out = tmp_path / "executed.ipynb"
    code = (NOTEBOOK_WITHOUT_A_COMPILER.replace("NOTEBOOK", repr(str(path))).replace("HERE", repr(str(tmp_path)))
            .replace("OUT", repr(str(out))))
    done = run_without_a_compiler(f"import os; os.environ['RLGPU_QUICK'] = '1'\n{code}", tmp_path, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    cells = [cell for cell in nbformat.read(out, as_version=4).cells if cell.cell_type == "code"]
    stderr = {index: "".join(output.get("text", "") for output in cell.outputs if output.get("name") == "stderr")
              for index, cell in enumerate(cells)}
    assert not any(stderr.values()), {index: text[-1000:] for index, text in stderr.items() if text}

    def printed(cell) -> str:
        return "".join(output.get("text", "") for output in cell.outputs if output.get("name") == "stdout")

    compiling = [index for index, cell in enumerate(cells)
                 if "torch.compile(" in cell.source or "compile_step(" in cell.source or "step_records(" in cell.source]
    assert len(compiling) == 4
    for index in compiling:
        assert "not measured here: torch.compile needs a C++ compiler on a CPU" in printed(cells[index]), index
    assert "compiled: not measured here:" in printed(next(cell for cell in cells if "fastest_settings(" in cell.source))
