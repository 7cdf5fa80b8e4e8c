"""Set the repository URL the notebooks' Colab cell clones, in every notebook at once.

    python tools/set_course_repo.py https://github.com/your-org/rlgpu-course

The first code cell of every notebook installs the course package in Colab from
``COURSE_REPO``. Until an instructor publishes the course, that is a placeholder, and the cell
stops with a message saying so. This script writes the URL into that cell of every notebook
(the cells must stay identical: a test checks it) and changes nothing else.
"""

import argparse
import re
from pathlib import Path

import nbformat

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LINE = re.compile(r'^COURSE_REPO = "[^"\n]*"$', flags=re.M)


def set_repo(path: Path, url: str) -> bool:
    """Write ``url`` into the notebook's first code cell; whether the file changed."""
    notebook = nbformat.read(path, as_version=4)
    cell = next(cell for cell in notebook.cells if cell.cell_type == "code")
    source = LINE.sub(f'COURSE_REPO = "{url}"', cell.source, count=1)
    if source == cell.source:
        return False
    cell.source = source
    nbformat.write(notebook, path)
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the course repository, e.g. https://github.com/your-org/rlgpu-course")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"https://[^\s\"]+", args.url):
        parser.error(f"url={args.url!r} must be an https:// URL without spaces or quotes")
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        print(f"{'Set' if set_repo(path, args.url) else 'Unchanged'}: {path.name}")


if __name__ == "__main__":
    main()
