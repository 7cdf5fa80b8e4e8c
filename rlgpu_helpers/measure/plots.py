"""Showing measurements as plots: a figure against a parameter, this machine beside the references.

Introduced in notebook 00. :func:`plot_records` draws log axes where values span a decade or
more, tells the reference machines apart from this one, and draws ceilings as lines.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence

from ..core.checks import check_number
from .records import Record, check_records

LOG_SPAN = 10
"""An axis whose positive values span this factor (a decade) or more gets a log scale."""


_PAD = 0.06  # of the axis span, on each side, so that no marker is cut off at the edge


def _limits(values: list[float], log: bool, from_zero: bool) -> tuple[float, float]:
    """Axis limits that hold every value with a margin; in log space on a log axis."""
    low, high = min(values), max(values)
    if log:
        low, high = math.log10(low), math.log10(high)
    pad = _PAD * (high - low) if high > low else (0.5 if log else 0.1 * abs(high) or 1.0)
    low, high = (0.0 if from_zero else low - pad), high + pad
    return (10**low, 10**high) if log else (low, high)


def _tick_label(value: float, _position=None) -> str:
    """A plain tick label: 16,384 / 0.02 / 1,000,000 rather than 1.6×10⁴ / 2×10⁻² / 1e+06."""
    return f"{value:,.12g}"


_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def bytes_label(value: float) -> str:
    """A byte count as a short tick label: 1 KiB, 64 MiB, 1.5 GiB (binary units, 1 KiB = 1,024 B).

    For ``plot_records(..., xticklabel=bytes_label)``: "1,073,741,824" is too wide to sit beside
    its neighbours on an axis of sizes.
    """
    value = check_number("value", value, at_least=0)
    power = min(int(math.log(value, 1024)) if value >= 1 else 0, len(_BINARY_UNITS) - 1)
    return f"{value / 1024**power:,.4g} {_BINARY_UNITS[power]}"


@functools.cache
def _plain_log_formatter():
    """A matplotlib formatter class: its log ticks, labelled as plain numbers (made on first use)."""
    from matplotlib import ticker

    class PlainLogFormatter(ticker.LogFormatter):
        def __call__(self, value, position=None):
            return _tick_label(value) if super().__call__(value, position) else ""

    return PlainLogFormatter


_LEGEND_BELOW = 4  # legends with this many entries or more go under the plot, not over it


_MAX_DATA_TICKS = 12  # an x axis with at most this many values gets a tick at each...


_MIN_TICK_GAP = 0.08  # ...if no two are closer than this fraction of the axis (labels would collide)


def _plain_ticks(ax, axis: str, values: list[float], log: bool, label=None) -> None:
    """Plain numbers on a log axis; on an x axis with few, well-spread values, a tick at each.

    ``label`` (a function of the value) writes the x tick labels instead of plain numbers.
    """
    from matplotlib import ticker

    target = getattr(ax, f"{axis}axis")
    distinct = sorted(set(values))
    low, high = getattr(ax, f"get_{axis}lim")()
    scale = math.log10 if log else float
    gaps = [(scale(b) - scale(a)) / (scale(high) - scale(low)) for a, b in zip(distinct, distinct[1:])]
    if axis == "x" and 1 < len(distinct) <= _MAX_DATA_TICKS and min(gaps) >= _MIN_TICK_GAP:
        target.set_major_locator(ticker.FixedLocator(distinct))
        target.set_major_formatter(ticker.FuncFormatter(_tick_label if label is None else lambda v, _: label(v)))
        target.set_minor_formatter(ticker.NullFormatter())
    elif axis == "x" and label is not None:
        target.set_major_formatter(ticker.FuncFormatter(lambda v, _: label(v)))
        target.set_minor_formatter(ticker.NullFormatter())
    elif log:
        target.set_major_formatter(_plain_log_formatter()())
        target.set_minor_formatter(_plain_log_formatter()())


_TICK_ANGLES = (35, 60, 90)  # degrees: x tick labels that would overlap side by side are slanted
_TICK_LINE = 1.3  # text heights between slanted labels, for a slant to be enough


def shown_xticklabels(ax) -> list:
    """The x tick labels drawn (major and minor) with text, inside the axis limits, left to right."""
    low, high = sorted(ax.get_xlim())
    labels = [label for label in ax.get_xticklabels() + ax.get_xticklabels(minor=True)
              if label.get_visible() and label.get_text() and low <= label.get_position()[0] <= high]
    return sorted(labels, key=lambda label: label.get_position()[0])


def xticklabels_overlap(fig, ax) -> bool:
    """Whether two neighbouring x tick labels of ``ax`` overlap, as ``fig`` draws them.

    Level labels overlap when their boxes do; slanted ones (all at one angle) when their
    anchors are closer, across the slant, than ``_TICK_LINE`` text heights.
    """
    fig.draw_without_rendering()
    labels = shown_xticklabels(ax)
    if len(labels) < 2:
        return False
    angle = math.radians(labels[0].get_rotation())
    if angle == 0:
        boxes = [label.get_window_extent() for label in labels]
        return any(left.x1 > right.x0 for left, right in itertools.pairwise(boxes))
    anchors = [ax.transData.transform((label.get_position()[0], 0))[0] for label in labels]
    height = labels[0].get_fontsize() * fig.dpi / 72
    return min(b - a for a, b in itertools.pairwise(anchors)) * math.sin(angle) < _TICK_LINE * height


def _slant_crowded_xticklabels(fig, ax) -> None:
    """Slant the x tick labels, as little as will do, when neighbours would overlap side by side."""
    for angle in _TICK_ANGLES:
        if not xticklabels_overlap(fig, ax):
            return
        ax.tick_params(axis="x", which="both", labelrotation=angle)
        for label in ax.get_xticklabels() + ax.get_xticklabels(minor=True):
            label.set_horizontalalignment("right" if angle < 90 else "center")
            label.set_rotation_mode("anchor" if angle < 90 else "default")


def _reference_clause(machines: set[str], this_machine: str) -> str:
    """What the plot shows, in words: this machine and how many reference machines."""
    others = len(machines - {this_machine})
    counted = f"{others} reference machine{'' if others == 1 else 's'}"
    if this_machine not in machines:
        return f"{counted} (none from this machine)"
    return f"this machine and {counted}" if others else "this machine only (no reference records)"


def plot_records(records: Sequence[Record], x: str, *, xlabel: str | None = None,
                 title: str | None = None, this_machine: str | None = None,
                 hlines: dict[str, float] | None = None,
                 xticklabel: Callable[[float], str] | None = None):
    """Plot ``value`` against the parameter ``x``: one line per machine, variant and other setting.

    All records share one metric and unit (the y axis); records that differ in another parameter
    than ``x`` get a line each, labelled with it. An axis spanning a decade or more (``LOG_SPAN``) is
    logarithmic, and a linear y axis of positive values starts at zero. ``this_machine`` draws that
    machine solid and the others dashed, and the title says what is shown ("this machine and 2
    reference machines"). ``hlines`` draws labelled ceilings (``{"float32 matmul ceiling": 0.23}``);
    ``xticklabel`` writes each x tick (:func:`bytes_label`), slanted where they would overlap.
    Returns the matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    records = check_records(records)
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
    if xticklabel is not None and not callable(xticklabel):
        raise TypeError(f"xticklabel={xticklabel!r} must be a function of the tick value, or None")
    if hlines is not None and not isinstance(hlines, dict):
        raise TypeError(f"hlines={hlines!r} must be a dict of label -> y value")
    hlines = {str(label): check_number(f"hlines[{label!r}]", level) for label, level in (hlines or {}).items()}
    (metric, unit), = measures
    # a parameter besides x that differs within one machine's variant splits it into lines
    seen = {}
    for record in records:
        for key in record.params.keys() - {x}:
            seen.setdefault((record.machine, record.variant, key), set()).add(repr(record.params[key]))
    varying = sorted({key for (_, _, key), values in seen.items() if len(values) > 1})
    lines = {}
    for record in sorted(records, key=lambda r: r.params[x]):
        key = (record.machine, record.variant, tuple(record.params.get(k) for k in varying))
        lines.setdefault(key, []).append((record.params[x], record.value))

    entries = len(lines) + len(hlines)
    below = entries >= _LEGEND_BELOW  # a legend this long would hide lines: put it under the plot
    height = 4.5 + (0.25 * math.ceil(entries / 2) + 0.4 if below else 0)
    fig, ax = plt.subplots(figsize=(7, height), layout="constrained")
    for (machine, variant, settings), points in lines.items():
        xs, ys = zip(*points)
        label = " · ".join([f"{machine} (this machine)" if machine == this_machine else machine, variant,
                            *(f"{k}={v}" for k, v in zip(varying, settings))])
        style = {} if this_machine is None or machine == this_machine else {"linestyle": "--",
                                                                          "markerfacecolor": "none"}
        ax.plot(xs, ys, marker="o", label=label, **style)
    for level, (label, value) in enumerate(hlines.items()):
        ax.axhline(value, color="gray", linestyle=(0, (4, 2 + 2 * level)), linewidth=1.2, label=label)

    xs = [r.params[x] for r in records]
    ys = [r.value for r in records] + list(hlines.values())
    for axis, values in (("x", xs), ("y", ys)):
        log = min(values) > 0 and max(values) / min(values) >= LOG_SPAN
        if log:
            getattr(ax, f"set_{axis}scale")("log")
        # a linear y axis from zero shows differences at their true size
        from_zero = axis == "y" and not log and min(values) > 0
        getattr(ax, f"set_{axis}lim")(*_limits(values, log, from_zero))
        _plain_ticks(ax, axis, values, log, xticklabel if axis == "x" else None)
    names = sorted({record.name for record in records})
    heading = title or f"{', '.join(names)}: {metric}"
    if this_machine is not None:
        heading += "\n" + _reference_clause({record.machine for record in records}, this_machine)
    ax.set_title(heading)
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(f"{metric} ({unit})")
    ax.grid(True, which="both", alpha=0.3)
    legend = {"title": " · ".join(["machine", "variant", *varying]), "fontsize": "small"}
    if below:
        fig.legend(loc="outside lower center", ncols=2, **legend)
    else:
        ax.legend(**legend)
    _slant_crowded_xticklabels(fig, ax)
    plt.close(fig)  # returned, not also drawn by pyplot at the end of a notebook cell
    return fig
