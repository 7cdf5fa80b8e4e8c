"""The benchmark harness: timing, records, reference files, tables and plots.

Introduced in notebook 00; every later notebook measures with it.

A measurement goes through four steps:

1. :func:`time_callable` runs a function a few times and returns a :class:`Timing`
   (seconds per call), waiting for the device so GPU work is really finished;
2. the time becomes a :class:`Record`: one figure with a unit, the parameters it was measured
   at, and the machine it was measured on;
3. records from real machines are kept as reference files in ``data/reference/``
   (:func:`save_reference`, :func:`load_reference`), written by
   ``python -m rlgpu_helpers bench --save``;
4. :func:`records_table` and :func:`plot_records` show this machine's records beside them.
"""

import dataclasses
import datetime
import html
import json
import math
import numbers
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from .atomic import atomic_write
from .config import check_int
from .device import get_device, machine_label, synchronize

FORMAT = "rlgpu-bench/1"
_JSON_SCALARS = (str, int, float, bool, type(None))


def format_number(value: float) -> str:
    """Three significant digits, with thousands separators for large values: 1,235 / 12.3 / 0.0123."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}"


def _format_seconds(seconds: float) -> str:
    for scale, unit in ((1, "s"), (1e3, "ms"), (1e6, "µs")):
        if seconds * scale >= 1:
            return f"{format_number(seconds * scale)} {unit}"
    return f"{format_number(seconds * 1e9)} ns"


def _finite(number, name: str) -> float:
    if isinstance(number, bool) or not isinstance(number, numbers.Real) or not math.isfinite(number):
        raise ValueError(f"{name}={number!r} must be a finite number")
    return float(number)


@dataclasses.dataclass(frozen=True)
class Timing:
    """Seconds per call over repeated runs, with the statistics benchmarks report."""

    times: tuple[float, ...]

    def __post_init__(self):
        if not self.times or any(t < 0 for t in self.times):
            raise ValueError(f"times={self.times!r} must be a non-empty sequence of non-negative seconds")

    @property
    def median(self) -> float:
        return float(np.median(self.times))

    @property
    def iqr(self) -> float:
        """Interquartile range: the spread of the middle half of the runs."""
        q1, q3 = np.percentile(self.times, [25, 75])
        return float(q3 - q1)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def max(self) -> float:
        return max(self.times)

    def rate(self, work: float) -> tuple[float, float]:
        """``work`` per second at the median time, and the interquartile range of that rate.

        For example ``timing.rate(2 * n**3 / 1e12)`` gives TFLOP/s for an n x n matmul.
        """
        if _finite(work, "work") <= 0:
            raise ValueError(f"work={work!r} must be positive")
        rates = work / np.asarray(self.times)
        q1, q3 = np.percentile(rates, [25, 75])
        return float(np.median(rates)), float(q3 - q1)

    def __str__(self) -> str:
        return (f"median {_format_seconds(self.median)} (IQR {_format_seconds(self.iqr)}, "
                f"min {_format_seconds(self.min)}, max {_format_seconds(self.max)}; {len(self.times)} runs)")


def time_callable(fn: Callable[[], object], *, warmup: int = 1, repeats: int = 5, number: int = 1,
                  device: str | torch.device | None = None) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed runs of ``number`` calls each.

    Returns seconds *per call*. A run of several calls times work too short for one call to be
    measured well, and lets GPU calls queue back to back as they do in a training loop.
    The device (default: the best available, as in ``get_device()``) is synchronized before
    the first timed run and after each one, so queued GPU work is counted. Warm-up calls pay
    one-time costs (memory allocation, kernel selection, caches) that would skew the first run.
    """
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable")
    check_int("warmup", warmup, 0)
    check_int("repeats", repeats, 1)
    check_int("number", number, 1)
    device = get_device(device)
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        synchronize(device)
        times.append((time.perf_counter() - start) / number)
    return Timing(tuple(times))


@dataclasses.dataclass
class Record:
    """One benchmark figure, e.g. matmul / float32 / throughput = 0.07 TFLOP/s at ``{"n": 2048}``.

    ``spread`` (same unit as ``value``, e.g. the IQR) is None when the figure has none;
    ``machine`` is the :func:`~rlgpu_helpers.device.machine_label` of the measured device and
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
            if not isinstance(text, str) or not text:
                raise ValueError(f"{field}={text!r} must be a non-empty str")
        self.value = _finite(self.value, "value")
        if self.spread is not None:
            self.spread = _finite(self.spread, "spread")
            if self.spread < 0:
                raise ValueError(f"spread={self.spread!r} must be >= 0")
        if not isinstance(self.params, dict) or not all(
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


def _check_records(records) -> list[Record]:
    records = list(records)
    bad = [record for record in records if not isinstance(record, Record)]
    if bad:
        raise TypeError(f"records must hold only Record objects, not {bad[0]!r}")
    return records


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
    for index, entry in enumerate(data["records"]):
        if not isinstance(entry, dict) or set(entry) != {*_RECORD_FIELDS, "command"}:
            raise ValueError(f"{path}: record {index} must have exactly the fields "
                             f"{', '.join(_RECORD_FIELDS)}, command")
    return data["machine"], data["records"]


def _write(path: Path, report: dict, entries: list[dict]) -> None:
    """Write a benchmark file atomically, so an interrupted run never leaves half a file."""
    text = json.dumps({"format": FORMAT, "machine": report, "records": entries}, indent=1) + "\n"
    atomic_write(path, lambda f: f.write(text.encode()))


def _entry(record: Record, command: str) -> dict:
    return {**dataclasses.asdict(record), "command": command}


def _record(path: Path, index: int, entry: dict) -> Record:
    try:
        return Record(**{field: entry[field] for field in _RECORD_FIELDS})
    except ValueError as error:
        raise ValueError(f"{path}: record {index}: {error}") from None


def save_json(path: str | Path, records: Sequence[Record], report: dict, command: str) -> Path:
    """Write ``records`` with the machine ``report`` and the ``command`` that produced them."""
    records = _check_records(records)
    _check_command(command)
    path = Path(path)
    _write(path, report, [_entry(record, command) for record in records])
    return path


def load_json(path: str | Path) -> list[Record]:
    """Read the records of a file written by :func:`save_json` or :func:`save_reference`."""
    path = Path(path)
    _, entries = _read(path)
    return [_record(path, index, entry) for index, entry in enumerate(entries)]


def data_dir() -> Path:
    """The checkout's ``data/`` folder (reference results, trained agents).

    Found next to the package, so it works from a clone installed with ``pip install -e .``.
    """
    path = Path(__file__).resolve().parent.parent / "data"
    if not path.is_dir():
        raise FileNotFoundError(f"no data/ folder at {path}: install the package from a clone of "
                                "the course repository with `pip install -e .`")
    return path


def save_reference(records: Sequence[Record], report: dict, command: str,
                   directory: str | Path | None = None) -> Path:
    """Merge ``records`` into this machine's reference file ``<directory>/<machine_label>.json``.

    ``directory`` defaults to ``data/reference``. A record replaces an older one with the same
    name, variant, metric and params; the others stay. The file's machine report becomes
    ``report``. Returns the file's path.
    """
    records = _check_records(records)
    _check_command(command)
    label = machine_label(report)
    foreign = [record for record in records if record.machine != label]
    if foreign:
        raise ValueError(f"records include one measured on {foreign[0].machine!r}, "
                         f"which cannot go into the reference file of {label!r}")
    path = Path(directory if directory is not None else data_dir() / "reference") / f"{label}.json"
    kept = []
    if path.exists():
        replaced = {_record_key(record) for record in records}
        kept = [entry for index, entry in enumerate(_read(path)[1])
                if _record_key(_record(path, index, entry)) not in replaced]
    _write(path, report, kept + [_entry(record, command) for record in records])
    return path


def load_reference(directory: str | Path | None = None) -> list[Record]:
    """Records of every machine in ``directory`` (default ``data/reference``).

    A file that is not a valid reference file is skipped, and the reason printed (to stdout, so
    notebooks stay clean of stderr).
    """
    directory = Path(directory if directory is not None else data_dir() / "reference")
    records = []
    for path in sorted(directory.glob("*.json")):
        try:
            records += load_json(path)
        except (OSError, ValueError) as error:
            print(f"Skipped reference file {path.name}: {error}")
    return records


def _sort_value(value) -> tuple:
    """Numbers sort before text, numerically; None last."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return 0, value, ""
    return (1, 0, str(value)) if value is not None else (2, 0, "")


class Table:
    """Rows of text under column headers: ``str()`` gives aligned text, Jupyter shows HTML.

    ``numeric[i]`` right-aligns column i.
    """

    def __init__(self, columns: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool]):
        self.columns, self.rows, self._numeric = list(columns), [list(row) for row in rows], list(numeric)

    def __str__(self) -> str:
        widths = [max(len(text) for text in column) for column in zip(self.columns, *self.rows)]
        def line(cells):
            return "  ".join(cell.rjust(width) if numeric else cell.ljust(width)
                             for cell, width, numeric in zip(cells, widths, self._numeric)).rstrip()
        return "\n".join([line(self.columns), line("-" * width for width in widths),
                          *(line(row) for row in self.rows)])

    def _repr_html_(self) -> str:
        def cells(tag, values):
            return "".join(f'<{tag} style="text-align:{"right" if numeric else "left"}">{html.escape(value)}</{tag}>'
                           for value, numeric in zip(values, self._numeric))
        body = "".join(f"<tr>{cells('td', row)}</tr>" for row in self.rows)
        return f"<table><thead><tr>{cells('th', self.columns)}</tr></thead><tbody>{body}</tbody></table>"

    def __repr__(self) -> str:
        return str(self)


class RecordsTable(Table):
    """A table of records. Columns: machine, benchmark, variant, one per parameter, then each
    metric with its unit, and its spread where records have one.
    """

    def __init__(self, records: Sequence[Record], this_machine: str | None = None):
        records = _check_records(records)
        param_keys = sorted({key for record in records for key in record.params})
        measures = list(dict.fromkeys((record.metric, record.unit) for record in records))
        with_spread = {(r.metric, r.unit) for r in records if r.spread is not None}
        columns = ["machine", "benchmark", "variant", *param_keys]
        for metric, unit in measures:
            columns.append(f"{metric} ({unit})")
            if (metric, unit) in with_spread:
                columns.append(f"spread ({unit})")
        records.sort(key=lambda r: (r.name, r.variant, r.metric,
                                    [_sort_value(r.params.get(key)) for key in param_keys],
                                    r.machine != this_machine, r.machine))
        rows = []
        for record in records:
            machine = f"{record.machine} (this machine)" if record.machine == this_machine else record.machine
            row = [machine, record.name, record.variant,
                   *("" if key not in record.params else str(record.params[key]) for key in param_keys)]
            for measure in measures:
                mine = measure == (record.metric, record.unit)
                row.append(format_number(record.value) if mine else "")
                if measure in with_spread:
                    row.append(format_number(record.spread) if mine and record.spread is not None else "")
            rows.append(row)
        super().__init__(columns, rows, [index >= 3 + len(param_keys) for index in range(len(columns))])


def records_table(records: Sequence[Record], *, this_machine: str | None = None) -> RecordsTable:
    """Show records as a table; rows of the same benchmark sit together, ``this_machine`` first."""
    return RecordsTable(records, this_machine)


def plot_records(records: Sequence[Record], x: str, *, xlabel: str | None = None,
                 title: str | None = None):
    """Plot ``value`` against the parameter ``x``: one line per (machine, variant).

    All records must share one metric and unit (the y axis). An axis whose values span 100x or
    more gets a log scale; a linear y axis starts at zero. Returns the matplotlib Figure
    (Jupyter displays it).
    """
    import matplotlib.pyplot as plt

    records = _check_records(records)
    if not records:
        raise ValueError("records=[] holds nothing to plot")
    measures = {(record.metric, record.unit) for record in records}
    if len(measures) != 1:
        raise ValueError(f"records mix metrics/units {sorted(measures)}: plot one at a time")
    for record in records:
        value = record.params.get(x)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"x={x!r}: record {record.name}/{record.variant} on {record.machine} "
                             f"has params {record.params}, without a number under {x!r}")
    (metric, unit), = measures
    lines = {}
    for record in sorted(records, key=lambda r: r.params[x]):
        lines.setdefault((record.machine, record.variant), []).append((record.params[x], record.value))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (machine, variant), points in lines.items():
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o", label=f"{machine} · {variant}")
    for axis, values in (("x", [r.params[x] for r in records]), ("y", [r.value for r in records])):
        if min(values) > 0 and max(values) / min(values) >= 100:
            getattr(ax, f"set_{axis}scale")("log")
    if ax.get_yscale() == "linear" and min(r.value for r in records) >= 0:
        ax.set_ylim(bottom=0)  # a linear axis from zero shows differences at their true size
    names = sorted({record.name for record in records})
    ax.set_title(title or f"{', '.join(names)}: {metric}")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(f"{metric} ({unit})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="machine · variant", fontsize="small")
    fig.tight_layout()
    plt.close(fig)  # returned, not also drawn by pyplot at the end of a notebook cell
    return fig
