"""Execute notebooks in place at full size, in order, to refresh their committed outputs.

    python tools/run_notebooks.py                       # every notebooks/*.ipynb
    python tools/run_notebooks.py notebooks/00_setup.ipynb
    python tools/run_notebooks.py --quick notebooks/05_transfers_and_replay.ipynb   # a draft, minutes

Each notebook runs top to bottom in a fresh kernel with RLGPU_QUICK unset, from its own folder
as in JupyterLab (`--quick` sets RLGPU_QUICK=1 instead: a draft to check the compared cells
against while writing a lesson; commit only full-size outputs). A notebook is written back only
if no cell raised and no cell wrote to stderr (strict nbval would reject that output); otherwise
the script stops with the reason.

Progress bars are saved as they ended: JupyterLab shows the widget outputs of an untrusted notebook
(every fresh clone) as their `text/plain`, which tqdm captured when the bar was created ("0%| | 0/2000");
each bar's `text/plain` is rewritten from the bar's final state, which nbclient saves in the
notebook's metadata.
"""

import argparse
import html
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from tqdm.std import Bar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing: python tools/run_notebooks.py

from rlgpu_helpers.core.files import DiskFullError, atomic_write  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def stderr_cells(notebook) -> list[int]:
    """Indices of the code cells that wrote to stderr."""
    return [index for index, cell in enumerate(notebook.cells)
            if cell.cell_type == "code"
            and any(output.get("name") == "stderr" for output in cell.get("outputs", []))]


def progress_text(state: dict, model_id: str) -> str | None:
    """The text of a tqdm bar in its saved final state, as tqdm prints it; None for other widgets.

    tqdm's notebook bar is an HBox of an HTML (description and percentage), a progress bar and
    an HTML (count, times, rate), with spaces written as U+2007 and the text HTML-escaped.
    """
    def model(reference: str) -> dict:
        return state.get(reference.removeprefix("IPY_MODEL_"), {})

    box = state.get(model_id, {})
    if box.get("model_name") != "HBoxModel":
        return None
    children = [model(reference) for reference in box["state"].get("children", [])]
    if [child.get("model_name") for child in children] not in (
            ["HTMLModel", "FloatProgressModel", "HTMLModel"], ["HTMLModel", "IntProgressModel", "HTMLModel"]):
        return None
    left, bar, right = (child["state"] for child in children)
    done = bar.get("value", 0) / bar["max"] if bar.get("max") else 1.0
    text = html.unescape(left.get("value", "")) + f"|{Bar(done)}|" + html.unescape(right.get("value", ""))
    return text.replace("\u2007", " ")


def show_final_progress(notebook) -> None:
    """Rewrite the `text/plain` of each stored tqdm bar to the bar's final state (see the module doc)."""
    state = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(WIDGET_VIEW)
            text = progress_text(state, view["model_id"]) if view else None
            if text:
                output["data"]["text/plain"] = text


def execute(path: Path, timeout: int) -> None:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=timeout, record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    noisy = stderr_cells(notebook)
    if noisy:
        said = "".join(f"\n--- cell {index}:\n" + "".join(output.get("text", "") for output in notebook.cells[index].outputs
                                                         if output.get("name") == "stderr")[-2000:] for index in noisy)
        raise SystemExit(f"{path}: cells {noisy} wrote to stderr; not saved{said}")
    show_final_progress(notebook)
    save(notebook, path)


def save(notebook, path: Path) -> None:
    """Write ``notebook`` to ``path`` atomically: a kill or a full disk (:class:`DiskFullError`) keeps the old file."""
    text = nbformat.writes(notebook)
    atomic_write(path, (text if text.endswith("\n") else text + "\n").encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/*.ipynb")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per cell (default: %(default)s)")
    parser.add_argument("--quick", action="store_true",
                        help="run in quick mode: a draft while writing a lesson, not outputs to commit")
    args = parser.parse_args()
    paths = sorted(args.notebooks or NOTEBOOKS.glob("*.ipynb"))
    if args.quick:
        os.environ["RLGPU_QUICK"] = "1"
        print("RLGPU_QUICK=1: a draft; commit only the outputs of a full-size run")
    elif os.environ.pop("RLGPU_QUICK", None) is not None:
        print("RLGPU_QUICK unset: committed outputs come from a full-size run")
    for path in paths:
        print(f"Running {path} ...", flush=True)
        try:
            execute(path, args.timeout)
        except CellExecutionError as error:
            sys.exit(f"{path}: a cell raised; not saved\n{error}")
        except DiskFullError as error:
            sys.exit(f"{path}: not saved, the file as it was: {error}")
        print(f"Saved {path}")


if __name__ == "__main__":
    main()
