"""tools/run_notebooks.py saves progress bars as they ended, for JupyterLab to show in a fresh clone."""

import importlib.util
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="tools/run_notebooks.py needs nbformat (dev extras)")
pytest.importorskip("nbclient", reason="tools/run_notebooks.py runs notebooks with nbclient (dev extras, with jupyterlab)")

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("run_notebooks", ROOT / "tools" / "run_notebooks.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def widget_output(model_id: str, text: str):
    return nbformat.v4.new_output("display_data", data={
        tool.WIDGET_VIEW: {"model_id": model_id, "version_major": 2, "version_minor": 0}, "text/plain": text})


def model(name: str, **state) -> dict:
    return {"model_name": name, "model_module": "@jupyter-widgets/controls", "model_module_version": "2.0.0",
            "state": state}


def notebook_with_bars():
    """A notebook as nbclient saves it: two tqdm bars and a player widget, with their final state."""
    state = {
        "bar": model("HBoxModel", children=["IPY_MODEL_left", "IPY_MODEL_progress", "IPY_MODEL_right"]),
        "left": model("HTMLModel", value="naive\u2007DQN:\u2007100%"),
        "progress": model("FloatProgressModel", value=2000.0, max=2000.0, bar_style="success"),
        "right": model("HTMLModel", value="\u20072000/2000\u2007[00:01&lt;00:00,\u20071545.83step/s]"),
        "open": model("HBoxModel", children=["IPY_MODEL_open_left", "IPY_MODEL_open_bar", "IPY_MODEL_open_right"]),
        "open_left": model("HTMLModel", value="naive\u2007DQN:\u2007"),
        "open_bar": model("FloatProgressModel", value=1.0, max=1.0, bar_style="success"),
        "open_right": model("HTMLModel", value="\u200772072/?\u2007[00:13&lt;00:00,\u20074560.67step/s]"),
        "player": model("VBoxModel", children=["IPY_MODEL_left"]),
    }
    cell = nbformat.v4.new_code_cell("run()", outputs=[
        widget_output("bar", "naive DQN:   0%|          | 0/2000 [00:00<?, ?step/s]"),
        widget_output("open", "naive DQN: 0step [00:00, ?step/s]"),
        widget_output("player", "SnakePlayer(height=10, width=10)"),
        widget_output("closed", "naive DQN:   0%|          | 0/10 [00:00<?, ?step/s]"),  # no saved state
    ])
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Bars"), cell])
    notebook.metadata["widgets"] = {tool.WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    return notebook


def test_each_progress_bar_shows_its_final_state_as_text():
    notebook = notebook_with_bars()
    tool.show_final_progress(notebook)
    texts = [output.data["text/plain"] for output in notebook.cells[1].outputs]
    assert texts == [
        "naive DQN: 100%|██████████| 2000/2000 [00:01<00:00, 1545.83step/s]",
        "naive DQN: |██████████| 72072/? [00:13<00:00, 4560.67step/s]",  # no total: tqdm shows a full bar
        "SnakePlayer(height=10, width=10)",  # not a progress bar: left alone
        "naive DQN:   0%|          | 0/10 [00:00<?, ?step/s]",  # no final state saved: left alone
    ]


def test_a_notebook_run_by_the_tool_stores_the_finished_bar(tmp_path):
    """A real kernel runs a tqdm loop; the saved text/plain is the bar at its end, not at its start."""
    path = tmp_path / "bar.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from tqdm.auto import tqdm\nfor _ in tqdm(range(3), desc='loop'):\n    pass")]), path)
    tool.execute(path, timeout=120)
    output, = nbformat.read(path, as_version=4).cells[0].outputs
    assert tool.WIDGET_VIEW in output.data
    assert re.fullmatch(r"loop: 100%\|██████████\| 3/3 \[00:00<00:00, .*it/s\]", output.data["text/plain"])


FULL_DISK = """
import importlib.util, resource, sys
from pathlib import Path
import nbformat
from rlgpu_helpers.core.files import DiskFullError
spec = importlib.util.spec_from_file_location("run_notebooks", sys.argv[1])
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))  # as `ulimit -f 64` does
cell = nbformat.v4.new_code_cell("print(x)", outputs=[nbformat.v4.new_output("stream", text="x" * 200_000)])
try:
    tool.save(nbformat.v4.new_notebook(cells=[cell]), Path(sys.argv[2]))
except DiskFullError as error:
    print(error)
"""


def test_a_notebook_that_finds_no_room_is_not_saved_and_the_old_file_stays(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "lesson.ipynb"
    tool.save(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# the old lesson")]), path)
    old = path.read_bytes()
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(ROOT / "tools" / "run_notebooks.py"), str(path)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"[Errno 27] could not write {path}: no room for its ") and "bytes" in done.stdout
    assert path.read_bytes() == old and not list(tmp_path.glob("*.tmp"))
