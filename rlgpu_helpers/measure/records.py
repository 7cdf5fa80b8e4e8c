"""Benchmark records: one measured figure with its unit, parameters, machine and date.

Introduced in notebook 00; every benchmark suite returns a list of :class:`Record`.

A record is one figure, e.g. matmul / float32 / throughput = 0.07 TFLOP/s at ``{"n": 2048}``,
measured on a named machine on a given date. Records are stored as JSON with the machine's
report and the command that produced them: :func:`save_json` and :func:`load_json` for any
file, :func:`save_reference` and :func:`load_reference` for the reference files in
``data/reference/`` (one per machine), which ``python -m rlgpu_helpers bench --save`` writes and
the notebooks show beside the student's own measurements.
"""

import dataclasses
import datetime
import json
from collections.abc import Sequence
from pathlib import Path

from ..core.checks import check_number
from ..core.device import machine_label
from ..core.files import atomic_write, data_dir, exclusive_lock

FORMAT = "rlgpu-bench/1"
_JSON_SCALARS = (str, int, float, bool, type(None))


@dataclasses.dataclass
class Record:
    """One benchmark figure, e.g. matmul / float32 / throughput = 0.07 TFLOP/s at ``{"n": 2048}``.

    ``spread`` (same unit as ``value``, e.g. the IQR) is None when the figure has none;
    ``machine`` is the :func:`~rlgpu_helpers.core.device.machine_label` of the measured device and
    ``date`` the ISO date of the measurement (default: today).
    """

    name: str
    variant: str
    metric: str
    value: float
    unit: str
    params: dict
    spread: float | None
    machine: str
    date: str = dataclasses.field(default_factory=lambda: datetime.date.today().isoformat())

    def __post_init__(self):
        for field in ("name", "variant", "metric", "unit", "machine"):
            text = getattr(self, field)
            if not isinstance(text, str):
                raise TypeError(f"{field}={text!r} must be a str, not {type(text).__name__}")
            if not text:
                raise ValueError(f"{field}={text!r} must not be empty")
        self.value = check_number("value", self.value)
        if self.spread is not None:
            self.spread = check_number("spread", self.spread, at_least=0)
        if not isinstance(self.params, dict):
            raise TypeError(f"params={self.params!r} must be a dict, not {type(self.params).__name__}")
        if not all(
            isinstance(key, str) and isinstance(value, _JSON_SCALARS) for key, value in self.params.items()
        ):
            raise ValueError(f"params={self.params!r} must be a dict of str keys to JSON scalars")
        try:
            datetime.date.fromisoformat(self.date)
        except (TypeError, ValueError):
            raise ValueError(f"date={self.date!r} must be an ISO date such as 2025-01-31") from None


_RECORD_FIELDS = tuple(field.name for field in dataclasses.fields(Record))


def _record_key(record: Record) -> tuple:
    """Records with the same key measure the same thing; a newer one replaces an older one."""
    return record.name, record.variant, record.metric, json.dumps(record.params, sort_keys=True)


def check_records(records, what: str = "records") -> list[Record]:
    """``records`` as a list, or a TypeError naming ``what`` if anything in it is not a :class:`Record`."""
    records = list(records)
    bad = [record for record in records if not isinstance(record, Record)]
    if bad:
        raise TypeError(f"{what} must hold only Record objects, not {bad[0]!r}")
    return records


def _check_unique(records: list[Record]) -> None:
    """A ValueError naming the first two records that measure the same thing (same key)."""
    seen = {}
    for index, record in enumerate(records):
        first = seen.setdefault(_record_key(record), index)
        if first != index:
            raise ValueError(f"records {first} and {index} both measure {record.name} / {record.variant} / "
                             f"{record.metric} at {record.params}: give each figure once")


_MISSING = object()


def select(records, /, **where) -> list[Record]:
    """The records whose fields or params equal every item of ``where``, in their order.

    A key that names a field of :class:`Record` (``name``, ``variant``, ``metric``, ``unit``,
    ``machine``, ...) compares that field; any other key compares ``params[key]``, and a record
    without that param does not match. ``select(records, name="env_step", num_envs=256)``.
    """
    def matches(record: Record) -> bool:
        return all((getattr(record, key) if key in _RECORD_FIELDS else record.params.get(key, _MISSING)) == value
                   for key, value in where.items())

    return [record for record in check_records(records) if matches(record)]


def _check_command(command) -> None:
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"command={command!r} must be the command line that produced the records")


def _read(path: Path) -> tuple[dict, list[dict]]:
    """The machine report and raw record entries of a benchmark file; ValueError naming the file."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not an {FORMAT} file (no \"format\": \"{FORMAT}\")")
    if not isinstance(data.get("machine"), dict) or not isinstance(data.get("records"), list):
        raise ValueError(f"{path} lacks a \"machine\" object or a \"records\" list")
    return data["machine"], data["records"]


def _write(path: Path, report: dict, entries: list[dict]) -> None:
    """Write a benchmark file atomically, so an interrupted run never leaves half a file."""
    text = json.dumps({"format": FORMAT, "machine": report, "records": entries}, indent=1) + "\n"
    atomic_write(path, text.encode())


def _entry(record: Record, command: str) -> dict:
    return {**dataclasses.asdict(record), "command": command}


def _record(path: Path, index: int, entry) -> Record:
    """Record ``index`` of the file ``path``; a ValueError naming both if the entry is not one."""
    if not isinstance(entry, dict) or set(entry) != {*_RECORD_FIELDS, "command"}:
        raise ValueError(f"{path}: record {index} must have exactly the fields {', '.join(_RECORD_FIELDS)}, command")
    try:
        return Record(**{field: entry[field] for field in _RECORD_FIELDS})
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: record {index}: {error}") from None


def save_json(path: str | Path, records: Sequence[Record], report: dict, command: str) -> Path:
    """Write ``records`` with the machine ``report`` and the ``command`` that produced them."""
    records = check_records(records)
    _check_unique(records)
    _check_command(command)
    path = Path(path)
    _write(path, report, [_entry(record, command) for record in records])
    return path


def load_json(path: str | Path) -> list[Record]:
    """Read the records of a file written by :func:`save_json` or :func:`save_reference`."""
    path = Path(path)
    _, entries = _read(path)
    return [_record(path, index, entry) for index, entry in enumerate(entries)]


def save_reference(records: Sequence[Record], report: dict, command: str,
                   directory: str | Path | None = None) -> Path:
    """Merge ``records`` into this machine's reference file ``<directory>/<machine_label>.json``.

    ``directory`` defaults to ``data/reference``. A record replaces an older one with the same
    name, variant, metric and params; the others stay. The file's machine report becomes
    ``report``. The merge holds a lock on the file (a hidden ``.<machine>.json.lock`` beside it),
    so runs that save at the same moment keep every record. Returns the file's path.
    """
    records = check_records(records)
    _check_unique(records)
    _check_command(command)
    return _merge(report, [_entry(record, command) for record in records], directory)


def merge_reference(source: str | Path, directory: str | Path | None = None) -> Path:
    """Merge the records of the benchmark file ``source``, each with its own command, into the
    reference file of its machine in ``directory`` (default ``data/reference``), as
    :func:`save_reference` would have saved them there. Returns the reference file's path.

    What a GPU sweep's call brings back from the device is merged this way, call by call in the
    order they ran, so that no call's records are lost to a later call that started without them.
    """
    source = Path(source)
    report, entries = _read(source)
    records = [_record(source, index, entry) for index, entry in enumerate(entries)]
    _check_unique(records)
    for entry in entries:
        _check_command(entry["command"])
    return _merge(report, entries, directory)


def _merge(report: dict, entries: list[dict], directory: str | Path | None) -> Path:
    """Write ``entries`` into the reference file of ``report``'s machine, replacing those with their keys."""
    label = machine_label(report)
    foreign = [entry for entry in entries if entry["machine"] != label]
    if foreign:
        raise ValueError(f"records include one measured on {foreign[0]['machine']!r}, "
                         f"which cannot go into the reference file of {label!r}")
    path = Path(directory if directory is not None else data_dir() / "reference") / f"{label}.json"
    replaced = {_record_key(_record(path, index, entry)) for index, entry in enumerate(entries)}
    with exclusive_lock(path.with_name(f".{path.name}.lock")):
        kept = []
        if path.exists():
            kept = [entry for index, entry in enumerate(_read(path)[1])
                    if _record_key(_record(path, index, entry)) not in replaced]
        _write(path, report, kept + entries)
    return path


def gpu_coverage(records, names) -> str:
    """One line for a lesson: each GPU machine in ``records``, which of the record ``names`` (the lesson's
    measurements) it holds and which it does not yet; or that no GPU machine is on file."""
    names = list(names)
    gpus = sorted({r.machine for r in records if r.machine.startswith("gpu-")})
    if not gpus:
        return "GPU machines in data/reference/: none"
    parts = []
    for machine in gpus:
        held = [name for name in names if any(r.machine == machine and r.name == name for r in records)]
        missing = [name for name in names if name not in held]
        said = f"holds {', '.join(held)}" if held else "holds none of this lesson's records"
        parts.append(f"{machine} ({said}" + (f"; not measured yet: {', '.join(missing)})" if missing else ")"))
    return "GPU machines in data/reference/: " + "; ".join(parts)


def load_reference(directory: str | Path | None = None) -> list[Record]:
    """Records of every machine in ``directory`` (default ``data/reference``).

    What is wrong is skipped alone, with the reason printed (to stdout, so notebooks stay clean of
    stderr): a file that is not a reference file, or whose machine report is another machine's
    than its name says; a record that is invalid, measured on another machine than its file's, or
    a second one of the same figure. A ``directory`` given that is not a folder is a
    FileNotFoundError; a data folder without ``reference/`` yet has no records.
    """
    if directory is None:
        directory = data_dir() / "reference"
        if not directory.is_dir():
            return []
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"directory={str(directory)!r} is not a folder of reference files")
    records = []
    for path in sorted(directory.glob("*.json")):
        try:
            report, entries = _read(path)
            if machine_label(report) != path.stem:
                raise ValueError(f"its machine report is of {machine_label(report)!r}, not {path.stem!r}")
        except (OSError, ValueError) as error:
            print(f"Skipped reference file {path.name}: {error}")
            continue
        records += _reference_records(path, entries)
    return records


def _reference_records(path: Path, entries: list[dict]) -> list[Record]:
    """The valid records of one reference file; each one skipped is named with its index and reason."""
    records, seen = [], {}
    for index, entry in enumerate(entries):
        try:
            record = _record(path, index, entry)
            if record.machine != path.stem:
                raise ValueError(f"{path}: record {index} was measured on {record.machine!r}, not {path.stem!r}")
            first = seen.setdefault(_record_key(record), index)
            if first != index:
                raise ValueError(f"{path}: record {index} repeats record {first} ({record.name} / "
                                 f"{record.variant} / {record.metric} at {record.params})")
        except ValueError as error:
            print(f"Skipped {error}")
            continue
        records.append(record)
    return records
