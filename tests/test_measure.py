import datetime
import json
import math
import time

import pytest
import torch

from rlgpu_helpers.core.files import data_dir
from rlgpu_helpers.measure import timing
from rlgpu_helpers.measure.plots import plot_records, xticklabels_overlap
from rlgpu_helpers.measure.records import (
    FORMAT,
    Record,
    load_json,
    load_reference,
    save_json,
    save_reference,
    select,
)
from rlgpu_helpers.measure.table import records_table
from rlgpu_helpers.measure.timing import Timing, rate, time_callable, time_sized

REPORT = {"gpu": None, "cpu": "Test CPU 9000", "logical_cores": 4}
LABEL = "cpu-test-cpu-9000-4c"
OTHER = "gpu-nvidia-h100-80gb-hbm3"


def record(value=1.5, machine=LABEL, n=256, variant="float32", **changes):
    fields = dict(name="matmul", variant=variant, metric="throughput", value=value, unit="TFLOP/s",
                  params={"n": n}, spread=0.25, machine=machine, date="2025-01-31")
    return Record(**{**fields, **changes})


# --- timing ---------------------------------------------------------------------------------

def test_time_callable_measures_a_known_sleep():
    timing = time_callable(lambda: time.sleep(0.02), warmup=1, repeats=5, device="cpu")
    assert len(timing.times) == 5
    assert 0.02 <= timing.min <= timing.median <= timing.max
    assert timing.median < 0.04
    assert 0 <= timing.iqr <= timing.max - timing.min


def test_time_callable_reports_seconds_per_call_over_runs_of_several_calls():
    calls = []
    timing = time_callable(lambda: (calls.append(1), time.sleep(0.005)), warmup=2, repeats=3, number=4)
    assert len(calls) == 2 + 3 * 4
    assert len(timing.times) == 3
    assert 0.005 <= timing.median < 0.015


def test_time_callable_sees_more_compute_take_longer():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # no waiting on a busy second core: the fastest run is pure compute
    try:
        small, big = (torch.randn(n, n) for n in (32, 512))  # 4096 times the work
        fast = time_callable(lambda: small @ small, repeats=5, device="cpu")
        slow = time_callable(lambda: big @ big, repeats=5, device="cpu")
    finally:
        torch.set_num_threads(threads)
    assert 0 < fast.min < slow.min


def test_time_callable_synchronizes_before_and_after_each_run(monkeypatch):
    syncs = []
    monkeypatch.setattr(timing, "synchronize", lambda device: syncs.append(device))
    monkeypatch.setattr(timing, "get_device", lambda device: torch.device("cuda"))
    time_callable(lambda: None, warmup=2, repeats=3, number=5, device="cuda")
    assert syncs == [torch.device("cuda")] * (1 + 3)


@pytest.mark.parametrize("kwargs, error, name", [
    ({"warmup": -1}, ValueError, "warmup"), ({"warmup": 1.0}, TypeError, "warmup"),
    ({"repeats": 0}, ValueError, "repeats"), ({"repeats": True}, TypeError, "repeats"),
    ({"number": 0}, ValueError, "number"),
])
def test_time_callable_rejects_bad_counts(kwargs, error, name):
    with pytest.raises(error, match=f"{name}={kwargs[name]!r}"):
        time_callable(lambda: None, **kwargs)


def test_time_callable_rejects_non_callables():
    with pytest.raises(TypeError, match="fn=3"):
        time_callable(3)


def test_timing_statistics():
    timing = Timing((1.0, 2.0, 3.0, 4.0, 5.0))
    assert (timing.median, timing.iqr, timing.min, timing.max) == (3.0, 2.0, 1.0, 5.0)
    rate, spread = timing.rate(10.0)  # rates 10, 5, 3.33, 2.5, 2: quartiles 2.5 and 5
    assert rate == pytest.approx(10 / 3) and spread == pytest.approx(2.5)
    assert str(timing) == "median 3.00 s (IQR 2.00 s, min 1.00 s, max 5.00 s; 5 runs)"
    assert str(Timing((2e-6,))).startswith("median 2.00 µs")


def test_timing_rejects_bad_input():
    with pytest.raises(ValueError, match="times=()"):
        Timing(())
    with pytest.raises(ValueError, match="work=0"):
        Timing((1.0,)).rate(0)


# --- records and files ----------------------------------------------------------------------

def test_record_stores_numbers_as_floats_and_defaults_to_today():
    made = Record("copy", "device copy", "bandwidth", 12, "GB/s", {"MiB": 64}, None, LABEL)
    assert made.value == 12.0 and isinstance(made.value, float)
    assert made.date == datetime.date.today().isoformat()


@pytest.mark.parametrize("changes, error, field", [
    ({"name": ""}, ValueError, "name"), ({"unit": None}, TypeError, "unit"),
    ({"value": math.nan}, ValueError, "value"), ({"value": "3"}, TypeError, "value"),
    ({"spread": -1.0}, ValueError, "spread"), ({"spread": math.inf}, ValueError, "spread"),
    ({"params": {"n": [1, 2]}}, ValueError, "params"), ({"params": [("n", 1)]}, TypeError, "params"),
    ({"date": "yesterday"}, ValueError, "date"), ({"machine": ""}, ValueError, "machine"),
])
def test_record_rejects_bad_fields(changes, error, field):
    with pytest.raises(error, match=f"^{field}="):
        record(**changes)


def test_records_round_trip_through_json(tmp_path):
    records = [record(), record(value=0.5, n=1024, spread=None, params={"n": 1024, "note": None, "ok": True})]
    path = save_json(tmp_path / "sub" / "out.json", records, REPORT, "python -m rlgpu_helpers bench")
    assert load_json(path) == records
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT and data["machine"] == REPORT
    assert [entry["command"] for entry in data["records"]] == ["python -m rlgpu_helpers bench"] * 2


def test_save_json_rejects_bad_input(tmp_path):
    with pytest.raises(TypeError, match="Record"):
        save_json(tmp_path / "x.json", [{"name": "matmul"}], REPORT, "cmd")
    with pytest.raises(ValueError, match="command=''"):
        save_json(tmp_path / "x.json", [record()], REPORT, "")


def test_save_reference_merges_into_the_machine_file(tmp_path):
    first = save_reference([record(1.0, n=256), record(2.0, n=512)], REPORT, "first run", directory=tmp_path)
    assert first == tmp_path / f"{LABEL}.json"
    second = save_reference([record(9.0, n=512), record(3.0, n=1024)], REPORT, "second run", directory=tmp_path)
    assert second == first
    entries = json.loads(first.read_text())["records"]
    assert sorted((e["params"]["n"], e["value"], e["command"]) for e in entries) == [
        (256, 1.0, "first run"), (512, 9.0, "second run"), (1024, 3.0, "second run")]


def test_save_reference_refuses_records_of_another_machine(tmp_path):
    with pytest.raises(ValueError, match=OTHER):
        save_reference([record(machine=OTHER)], REPORT, "cmd", directory=tmp_path)


def test_load_reference_reports_and_skips_bad_files(tmp_path, capsys):
    save_reference([record()], REPORT, "cmd", directory=tmp_path)
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "foreign.json").write_text(json.dumps({"format": "something-else/2", "rows": []}))
    (tmp_path / "other-machine.json").write_text(json.dumps({"format": FORMAT, "machine": REPORT, "records": []}))
    (tmp_path / "notes.txt").write_text("not a reference file, and not a .json either")
    assert load_reference(tmp_path) == [record()]
    out, err = capsys.readouterr()
    assert err == ""
    skipped = [line.split()[3].rstrip(":") for line in out.splitlines()]
    assert skipped == ["broken.json", "foreign.json", "other-machine.json"]
    assert "not valid JSON" in out and FORMAT in out and f"machine report is of {LABEL!r}" in out


def test_load_reference_of_an_empty_folder(tmp_path):
    assert load_reference(tmp_path) == []
    with pytest.raises(FileNotFoundError, match="no-such-folder"):
        load_reference(tmp_path / "no-such-folder")


def test_data_dir_is_the_checkout_data_folder():
    path = data_dir()
    assert path.name == "data" and path.is_dir()
    assert (path.parent / "pyproject.toml").is_file()


def test_data_dir_can_be_another_folder_named_by_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RLGPU_DATA_DIR", str(tmp_path))
    assert data_dir() == tmp_path and load_reference() == []
    monkeypatch.setenv("RLGPU_DATA_DIR", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="RLGPU_DATA_DIR=.*missing' is not a folder"):
        data_dir()


def test_committed_reference_files_load_cleanly(capsys):
    records = load_reference()
    assert capsys.readouterr().out == ""
    assert {"matmul", "copy"} <= {r.name for r in records}


# --- tables and plots -----------------------------------------------------------------------

def test_records_table_text_and_html():
    records = [record(123.456, machine=OTHER, n=4096), record(0.0123, n=4096), record(1234.6, n=256),
               Record("copy", "<device>", "bandwidth", 12.0, "GB/s", {"MiB": 64}, 0.5, LABEL)]
    table = records_table(records, this_machine=LABEL)
    text = str(table)
    header = text.splitlines()[0]
    for column in ("machine", "benchmark", "variant", "n", "MiB", "throughput (TFLOP/s)",
                   "spread (TFLOP/s)", "bandwidth (GB/s)", "spread (GB/s)"):
        assert column in header
    for value in ("123", "0.0123", "1,235", "12.0", "0.250", "0.500"):
        assert value in text
    machines = [row[0] for row in table.rows]
    # sorted by benchmark, variant, then n; this machine's row first among equal params
    assert machines == [f"{LABEL} (this machine)", f"{LABEL} (this machine)", f"{LABEL} (this machine)", OTHER]
    assert [row[1] for row in table.rows] == ["copy", "matmul", "matmul", "matmul"]
    page = table._repr_html_()
    assert page.startswith("<table>") and "throughput (TFLOP/s)" in page and "1,235" in page
    assert "&lt;device&gt;" in page and "<device>" not in page


def test_records_table_rejects_non_records():
    with pytest.raises(TypeError, match="Record"):
        records_table([{"value": 1}])


def test_plot_records_labels_lines_and_log_scales():
    records = [record(v, n=n, machine=m, variant=var)
               for m in (LABEL, OTHER) for var in ("float32", "bfloat16")
               for n, v in ((10, 1.0), (1000, 1.5))]
    fig = plot_records(records, x="n", xlabel="matrix size n")
    ax, = fig.axes
    assert ax.get_title() == "matmul: throughput"
    assert ax.get_xlabel() == "matrix size n" and ax.get_ylabel() == "throughput (TFLOP/s)"
    assert len(ax.get_lines()) == 4
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
    legend, = fig.legends  # four lines: the legend sits under the plot, where it hides none of them
    assert sorted(text.get_text() for text in legend.get_texts()) == sorted(
        f"{m} · {var}" for m in (LABEL, OTHER) for var in ("float32", "bfloat16"))
    fig.draw_without_rendering()
    assert legend.get_window_extent().y1 < ax.get_window_extent().y0


def test_plot_records_rejects_what_it_cannot_plot():
    with pytest.raises(ValueError, match="records=\\[\\]"):
        plot_records([], x="n")
    with pytest.raises(ValueError, match="mix"):
        plot_records([record(), record(unit="GFLOP/s")], x="n")
    with pytest.raises(ValueError, match="x='batch'"):
        plot_records([record()], x="batch")


def _marker_room(fig):
    """For every plotted marker, its distance (pixels) from the nearest edge of the axes,
    less the marker's radius: negative means the marker is cut off."""
    fig.draw_without_rendering()
    ax, = fig.axes
    box = ax.get_window_extent()
    room = []
    for line in ax.get_lines():
        if line.get_marker() in (None, "", "None"):
            continue
        radius = line.get_markersize() * fig.dpi / 72 / 2
        for px, py in ax.transData.transform(line.get_xydata()):
            room.append(min(px - box.x0, box.x1 - px, py - box.y0, box.y1 - py) - radius)
    return room


@pytest.mark.parametrize("values", [(0.5, 0.6, 0.7), (0.0, 0.5, 1.0), (0.01, 0.1, 1.0), (2.0, 2.0, 2.0)])
def test_plot_records_cuts_off_no_marker(values):
    records = [record(v, n=n) for n, v in zip((1, 64, 4096), values)]
    room = _marker_room(plot_records(records, x="n"))
    assert len(room) == 3 and min(room) > 0


def test_plot_records_uses_a_log_axis_from_one_decade():
    decade = plot_records([record(0.02, n=256), record(0.25, n=4096)], x="n").axes[0]
    assert decade.get_xscale() == "log" and decade.get_yscale() == "log"  # 16x in n, 12.5x in value
    narrow = plot_records([record(0.2, n=256), record(0.9, n=2048)], x="n").axes[0]
    assert narrow.get_xscale() == "linear" and narrow.get_yscale() == "linear"  # 8x and 4.5x
    assert narrow.get_ylim()[0] == 0


@pytest.mark.parametrize("ceiling", [3.0, 0.001, 1.0])
def test_plot_records_keeps_horizontal_lines_in_view(ceiling):
    records = [record(v, n=n) for n, v in ((1, 0.5), (16, 0.9), (256, 1.2))]
    fig = plot_records(records, x="n", hlines={"float32 matmul ceiling": ceiling})
    ax, = fig.axes
    low, high = ax.get_ylim()
    assert low < ceiling < high
    if ax.get_yscale() == "log":  # and not on the edge: a margin on both sides
        assert math.log10(high / ceiling) > 0.01 and math.log10(ceiling / low) > 0.01
    else:
        assert (high - ceiling) > 0.01 * (high - low)
    ceiling_line, = [line for line in ax.get_lines() if line.get_label() == "float32 matmul ceiling"]
    assert list(ceiling_line.get_ydata()) == [ceiling, ceiling]
    assert "float32 matmul ceiling" in [text.get_text() for text in ax.get_legend().get_texts()]
    assert min(_marker_room(fig)) > 0


def test_plot_records_rejects_bad_horizontal_lines():
    with pytest.raises(ValueError, match="hlines\\['ceiling'\\]=nan"):
        plot_records([record()], x="n", hlines={"ceiling": math.nan})
    with pytest.raises(TypeError, match="hlines"):
        plot_records([record()], x="n", hlines=[1.0])


def test_plot_records_title_says_which_machines_it_shows():
    mine = [record(1.0, n=256), record(1.2, n=512)]
    theirs = [record(50.0, n=256, machine=OTHER), record(60.0, n=512, machine=OTHER)]
    both = plot_records(mine + theirs, x="n", title="Matrix multiply", this_machine=LABEL).axes[0]
    assert both.get_title() == "Matrix multiply\nthis machine and 1 reference machine"
    styles = {line.get_label(): (line.get_linestyle(), line.get_markerfacecolor()) for line in both.get_lines()}
    assert styles[f"{LABEL} (this machine) · float32"][0] == "-"
    assert styles[f"{OTHER} · float32"] == ("--", "none")
    alone = plot_records(mine, x="n", title="Matrix multiply", this_machine=LABEL).axes[0]
    assert alone.get_title() == "Matrix multiply\nthis machine only (no reference records)"
    others = plot_records(theirs, x="n", title="Matrix multiply", this_machine=LABEL).axes[0]
    assert others.get_title() == "Matrix multiply\n1 reference machine (none from this machine)"
    plain = plot_records(mine + theirs, x="n", title="Matrix multiply").axes[0]
    assert plain.get_title() == "Matrix multiply"
    assert {line.get_linestyle() for line in plain.get_lines()} == {"-"}


def test_plot_records_draws_a_line_per_other_setting():
    records = [Record("linear", "float32", "throughput", v, "TFLOP/s", {"batch": b, "width": w}, None, LABEL)
               for w in (1, 256) for b, v in ((1, 0.01 * w), (16, 0.02 * w))]
    ax, = plot_records(records, x="batch").axes
    assert sorted(line.get_label() for line in ax.get_lines()) == [
        f"{LABEL} · float32 · width=1", f"{LABEL} · float32 · width=256"]
    assert all(len(line.get_xdata()) == 2 for line in ax.get_lines())
    assert ax.get_legend().get_title().get_text() == "machine · variant · width"
    # a parameter that only differs between variants is already told apart by the variant
    by_variant = [Record("env_step", f"VecSnake {obs}", "throughput", 1.0 + n, "steps/s",
                         {"num_envs": n, "obs_type": obs}, None, LABEL)
                  for obs in ("grid", "features") for n in (1, 64)]
    ax, = plot_records(by_variant, x="num_envs").axes
    assert sorted(line.get_label() for line in ax.get_lines()) == [
        f"{LABEL} · VecSnake features", f"{LABEL} · VecSnake grid"]


def test_plot_records_labels_ticks_with_plain_numbers():
    records = [record(v, n=n) for n, v in ((1, 0.016), (4, 0.03), (16, 0.08), (1024, 0.2), (16384, 0.19))]
    fig = plot_records(records, x="n")
    fig.draw_without_rendering()
    ax, = fig.axes
    assert [label.get_text() for label in ax.get_xticklabels()] == ["1", "4", "16", "1,024", "16,384"]
    shown = [label.get_text() for label in ax.get_yticklabels() + ax.get_yticklabels(minor=True)
             if label.get_text() and ax.get_ylim()[0] <= label.get_position()[1] <= ax.get_ylim()[1]]
    assert "0.1" in shown and not any("10^" in text or "$" in text for text in shown)
    large = plot_records([record(v, n=n) for n, v in ((1, 5e4), (16, 8e5), (1024, 2e7))], x="n")
    large.draw_without_rendering()
    labels = [label.get_text() for label in large.axes[0].get_yticklabels() if label.get_text()]
    assert "1,000,000" in labels and not any("e+" in text for text in labels)  # no 1e+06
    crowded = plot_records([record(1.0, n=n) for n in range(1, 30)], x="n").axes[0]  # 29 values: no tick at each
    assert len(crowded.get_xticks()) < 29


# ---------------------------------------------------------------------------- sized runs and rates

def test_time_sized_probes_once_then_sizes_each_run_to_run_s(monkeypatch):
    calls = []

    def quarter_second_calls(fn, *, warmup=1, repeats=5, number=1, device=None):
        calls.append((warmup, repeats, number))
        return Timing((0.25,) * repeats)  # every call takes 0.25 s

    monkeypatch.setattr(timing, "time_callable", quarter_second_calls)
    result = time_sized(lambda: None, 1.0, repeats=3, probes=2)
    assert calls == [(1, 2, 1), (4, 3, 4)]  # the probe, then runs of 4 calls (1 s); a run's worth of warm-up
    assert result.median == 0.25
    time_sized(lambda: None, 100.0, repeats=2)
    assert calls[-1] == (100, 2, 400)  # warm-up capped at 100 calls
    time_sized(lambda: None, 0.1, warmup=0)
    assert calls[-1] == (0, 5, 1)  # a call longer than run_s: one call per run
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="run_s"):
            time_sized(lambda: None, bad)


def test_rate_is_work_over_the_median_time_with_the_iqr_of_the_rates(monkeypatch):
    monkeypatch.setattr(timing, "time_callable", lambda fn, **kwargs: Timing((0.5, 1.0, 2.0)))
    value, spread = rate(lambda: None, 10.0, 0.1)
    assert value == pytest.approx(10.0) and spread == pytest.approx(15.0 - 7.5)  # rates 20, 10, 5


def test_rate_of_real_work_is_near_its_true_rate():
    value, spread = rate(lambda: time.sleep(0.002), 1.0, 0.02, repeats=3, device="cpu")
    assert 100 < value < 600 and spread >= 0  # 500 calls/s at most; sleep overshoots, never undershoots


# ---------------------------------------------------------------------------- selecting records

def test_select_compares_fields_and_params_and_keeps_the_order():
    a = Record("env_step", "VecSnake features", "throughput", 1.0, "steps/s", {"num_envs": 1}, None, LABEL)
    b = Record("env_step", "VecSnake grid", "throughput", 2.0, "steps/s", {"num_envs": 256}, None, LABEL)
    c = Record("copy", "device copy", "bandwidth", 3.0, "GB/s", {"MiB": 64}, None, OTHER)
    records = [a, b, c]
    assert select(records) == records
    assert select(records, name="env_step") == [a, b]
    assert select(records, name="env_step", num_envs=256) == [b]
    assert select(records, machine=OTHER, MiB=64) == [c]
    assert select(records, num_envs=None) == []  # a missing param never matches, not even None
    assert select(iter(records), variant="VecSnake grid") == [b]
    with pytest.raises(TypeError, match="records must hold only Record objects, not 'x'"):
        select([a, "x"], name="env_step")


def copy_records():
    """Notebook 05's transfer plot: 11 sizes from 1 KiB to 1 GiB, powers of 4."""
    return [record(float(k + 1), n=1024 * 4**k, unit="GB/s") for k in range(11)]


def test_plot_records_x_tick_labels_never_overlap():
    """1,073,741,824 beside 268,435,456 overlapped on notebook 05's transfer plot: crowded labels slant."""
    plain = plot_records(copy_records(), x="n")
    assert not xticklabels_overlap(plain, plain.axes[0])
    assert len(plain.axes[0].get_xticks()) == 11 and plain.axes[0].get_xticklabels()[0].get_rotation() > 0
    many = plot_records([record(1.0, n=10**k) for k in range(1, 10)], x="n")  # long labels, a decade apart
    assert not xticklabels_overlap(many, many.axes[0])


def test_plot_records_writes_x_tick_labels_with_the_given_function():
    from rlgpu_helpers.measure.plots import bytes_label

    fig = plot_records(copy_records(), x="n", xticklabel=bytes_label)
    assert not xticklabels_overlap(fig, fig.axes[0])
    ax, = fig.axes
    assert [label.get_text() for label in ax.get_xticklabels()] == [
        "1 KiB", "4 KiB", "16 KiB", "64 KiB", "256 KiB", "1 MiB", "4 MiB", "16 MiB", "64 MiB", "256 MiB", "1 GiB"]
    assert ax.get_xticklabels()[0].get_rotation() == 0  # short labels fit side by side
    with pytest.raises(TypeError, match="xticklabel='KiB' must be a function"):
        plot_records(copy_records(), x="n", xticklabel="KiB")


@pytest.mark.parametrize("value, label", [(0, "0 B"), (1000, "1,000 B"), (1024, "1 KiB"), (1.5 * 2**30, "1.5 GiB"),
                                          (3 * 2**20 + 2**18, "3.25 MiB"), (2**60, "1,024 PiB")])
def test_bytes_label_uses_binary_units(value, label):
    from rlgpu_helpers.measure.plots import bytes_label

    assert bytes_label(value) == label


def test_bytes_label_refuses_what_is_not_a_byte_count():
    from rlgpu_helpers.measure.plots import bytes_label

    with pytest.raises(ValueError, match="value=-1 must be a finite number >= 0"):
        bytes_label(-1)
