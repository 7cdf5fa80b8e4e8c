"""What the GPU sweep keeps on file: the code's version, the sweep log, and what calls brought back.

Each step's records go into ``data/reference/<machine>.json`` as soon as the step ends, or as each
of its parts ends where the suite hands them over, into the GPU's file (the CPU's for what measures
the CPU, such as ``loop``), and each step ends with an entry in ``data/sweeps/<gpu>.json``: the
step, how it ended, its time, estimate and limit, the machine, the date, the commit where there is
one, and the version of the code. A step logged for this GPU and this code is skipped (``--redo``
runs it again). The version is a hash of the package, the tests and the project file rather than
the commit: the device's copy of the tree has no ``.git``, and committing the files a call returns
must not make it start over.

Each call starts from the tree as committed, so a second call of a lease does not have the first
call's records: :func:`merge` puts what each call brought back into ``data/``, in the order they ran.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from rlgpu_helpers.core.files import atomic_write
from sweep_calls import Step

ROOT = Path(__file__).resolve().parent.parent


SOURCES = ("rlgpu_helpers", "tests", "conftest.py", "pyproject.toml")
"""What the measurements and the tests depend on: a change here makes every step run again."""


def code_version(root: Path = ROOT) -> str:
    """A short hash of the Python files and the project file under :data:`SOURCES`."""
    digest = hashlib.sha256()
    for source in SOURCES:
        path = root / source
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            digest.update(file.relative_to(root).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def git_commit(root: Path = ROOT) -> str | None:
    """The checkout's commit, or None where there is no ``.git`` (the device's copy of the tree)."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def read_log(path: Path) -> list[dict]:
    """The entries of a sweep log (none if it does not exist yet)."""
    return json.loads(path.read_text()) if path.exists() else []


def append_log(path: Path, entry: dict) -> None:
    """Add one step's entry to the sweep log, atomically: a kill leaves the old log or the new one."""
    text = json.dumps(read_log(path) + [entry], indent=1) + "\n"
    atomic_write(path, text.encode())


ENDED = ("ok", "failed", "timed out")
"""How a step on file ended. A step cut off by its call's deadline ("cut off") is not on file: it runs again."""


def on_file(entries: list[dict], step: Step, code: str) -> dict | None:
    """The latest entry of ``step`` for this code that says how it ended, or None."""
    mine = [e for e in entries if e["step"] == step.describe() and e["code"] == code and e["outcome"] in ENDED]
    return mine[-1] if mine else None


def merge(folders: list[Path], data: Path) -> list[str]:
    """Put what calls brought back (their ``--out`` folders, in the order the calls ran) into ``data``.

    Each call starts from the tree as committed, so the reference file it wrote lacks what an earlier
    call of the same lease measured: copying the files over would lose those records. A call's
    ``records/`` hold only what it measured; they are merged record by record (a later call's
    replaces the same figure), and its ``log/`` entries are appended to the sweep log, each once.
    Returns one line per file merged.
    """
    from rlgpu_helpers.measure.records import load_json, merge_reference

    missing = [str(folder) for folder in folders if not (folder / "log").is_dir()]
    if missing:
        raise ValueError(f"{', '.join(missing)}: not a call's --out folder (no log/ in it)")
    lines = []
    for folder in folders:
        for source in sorted((folder / "records").glob("*.json")):
            path = merge_reference(source, data / "reference")
            lines.append(f"{len(load_json(source))} records of {folder} into {path}")
        for source in sorted((folder / "log").glob("*.json")):
            path = data / "sweeps" / source.name
            entries = read_log(path)
            new = [entry for entry in read_log(source) if entry not in entries]
            text = json.dumps(entries + new, indent=1) + "\n"
            atomic_write(path, text.encode())
            lines.append(f"{len(new)} log entries of {folder} into {path}")
    return lines
