"""Execute notebooks in place at full size, in order, to refresh their committed outputs.

    python tools/run_notebooks.py                       # every notebooks/*.ipynb
    python tools/run_notebooks.py notebooks/00_setup.ipynb

Each notebook runs top to bottom in a fresh kernel with RLGPU_QUICK unset, from its own folder
as in JupyterLab. A notebook is written back only if no cell raised and no cell wrote to stderr
(strict nbval would reject that output); otherwise the script stops with the reason.
"""

import argparse
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def stderr_cells(notebook) -> list[int]:
    """Indices of the code cells that wrote to stderr."""
    return [index for index, cell in enumerate(notebook.cells)
            if cell.cell_type == "code"
            and any(output.get("name") == "stderr" for output in cell.get("outputs", []))]


def execute(path: Path, timeout: int) -> None:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=timeout, record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    noisy = stderr_cells(notebook)
    if noisy:
        raise SystemExit(f"{path}: cells {noisy} wrote to stderr; not saved")
    nbformat.write(notebook, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/*.ipynb")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per cell (default: %(default)s)")
    args = parser.parse_args()
    paths = sorted(args.notebooks or NOTEBOOKS.glob("*.ipynb"))
    if os.environ.pop("RLGPU_QUICK", None) is not None:
        print("RLGPU_QUICK unset: committed outputs come from a full-size run")
    for path in paths:
        print(f"Running {path} ...", flush=True)
        try:
            execute(path, args.timeout)
        except CellExecutionError as error:
            sys.exit(f"{path}: a cell raised; not saved\n{error}")
        print(f"Saved {path}")


if __name__ == "__main__":
    main()
