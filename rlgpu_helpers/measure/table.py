"""Showing measurements as tables: numbers with three significant digits, records side by side.

Introduced in notebook 00. :func:`records_table` puts this machine's records beside the
reference machines' (``str()`` gives aligned text, Jupyter shows HTML), and
:func:`format_number` writes every figure with three significant digits. Plots are in
:mod:`.plots`.
"""

import html
import math
from collections.abc import Sequence

from .records import Record, check_records


def format_number(value: float) -> str:
    """Three significant digits, with thousands separators for large values: 1,235 / 12.3 / 0.0123."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}"


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
        records = check_records(records)
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
