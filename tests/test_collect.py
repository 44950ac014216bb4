"""Collection that cannot mislead: every varying option has a place in the figure, seed
spread is drawn, numbers stay numbers, runs keep grid order, plain outdirs count too.

The runs are made by the real sweep driver with run_job replaced by a closed-form batch
time (a bandwidth term plus a lane term), so every plotted point can be checked against
the configuration it claims to show."""

import json
from pathlib import Path

import pytest

import simulate.simulator
from components.sim import units
from simulate.run import configure
from simulate.run.options import UsageError
from simulate.sweeps import collect, collect_plot
from simulate.sweeps.driver import execute
from simulate.sweeps.spec import load_sweep

ROOT = Path(__file__).resolve().parents[1]


def _collect_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("collect_script", ROOT / "scripts" / "collect.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BANDWIDTH = "board.cxl_mem.pmem.ctrl_write_bandwidth"
LANES = "board.cxl_mem.link.lanes"


def closed_form(options) -> float:
    """Batch time (ms) of a run: 8 ms / (write GB/s) + 24 ms / lanes + seed / 100."""
    sets = dict(options.sets)
    bandwidth = units.parse_bandwidth(sets.get(BANDWIDTH, "2GB/s")) / 1e9
    lanes = int(sets.get(LANES, 16))
    return 8 / bandwidth + 24 / lanes + options.seed / 100


def fake_run_job(options):
    """Writes what a run writes for collection (config.json from the real board with the
    sets applied, results.json with the closed-form time) in milliseconds."""
    _, _, board = configure.prepare(options)
    mean = closed_form(options)
    results = {
        "system": options.system,
        "seed": options.seed,
        "batch_time_ms": {"mean": mean, "p50": mean, "p99": mean},
        "unit_utilisation": {"gpu": 0.5, "cxl_mem.nmp": 0.25},
        "energy_j": {"total": 2.0, "components": {"board.gpu": {"total": 1.5}}},
    }
    outdir = Path(options.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    config = {"options": {"system": options.system, "seed": options.seed, "sets": [
        f"{path}={value}" for path, value in options.sets]}, "board": board.config()}  # fmt: skip
    (outdir / "config.json").write_text(json.dumps(config))
    (outdir / "results.json").write_text(json.dumps(results))
    return results


def run_sweep(tmp_path: Path, axes: str, monkeypatch) -> Path:
    monkeypatch.setattr(simulate.simulator, "run_job", fake_run_job)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"outroot: {tmp_path / 'out'}\nfixed: {{system: cxl-b, model: rm1, batches: 3}}\n"
        f"axes: {{{axes}}}\n"
    )
    sweep = load_sweep(spec)
    summary = execute(sweep, sweep.runs, "debug", 1)  # in-process
    assert summary.counts["done"] == len(sweep.runs)
    return sweep.outroot


def drawn(ax) -> list:
    """(data line, min-max bar segments or None) of each errorbar drawn on ax."""
    return [(c.lines[0], c.lines[2][0].get_segments() if c.lines[2] else None)
            for c in ax.containers]  # fmt: skip


TRAP = f"set.{BANDWIDTH}: [1GB/s, 2GB/s, 4GB/s], set.{LANES}: [2, 4, 16]"


def test_the_averaging_trap_is_refused_then_drawn_as_one_line_per_lane_count(tmp_path, monkeypatch):
    outroot = run_sweep(tmp_path, TRAP, monkeypatch)
    rows = collect.gather(outroot)
    with pytest.raises(UsageError, match=r"average over set\.board\.cxl_mem\.link\.lanes "
                       r"\(3 values: 2, 4, 16\).*--hue lanes"):  # fmt: skip
        collect_plot.layout(rows, "batch_time_ms.mean", "ctrl_write_bandwidth")

    plan = collect_plot.layout(rows, "batch_time_ms.mean", "ctrl_write_bandwidth", hue="lanes")
    figure = collect_plot.draw(rows, plan)
    ax = figure.axes[0]
    lines = {text.get_text(): line for text, (line, bars) in zip(
        ax.get_legend().get_texts(), drawn(ax), strict=True)}  # fmt: skip
    assert sorted(lines, key=int) == ["2", "4", "16"]
    for lanes, line in lines.items():
        assert list(line.get_xdata()) == [1, 2, 4]  # GB/s, at their values, not 0, 1, 2
        expected = [8 / bw + 24 / int(lanes) + 0.01 for bw in (1, 2, 4)]
        assert list(line.get_ydata()) == pytest.approx(expected)
    assert "GB/s" in ax.get_xlabel() and "ms" in ax.get_ylabel()


def test_averaging_on_request_draws_the_spread_over_the_averaged_axis(tmp_path, monkeypatch):
    outroot = run_sweep(tmp_path, TRAP, monkeypatch)
    rows = collect.gather(outroot)
    plan = collect_plot.layout(
        rows, "batch_time_ms.mean", "ctrl_write_bandwidth", average_over=["lanes"]
    )
    figure = collect_plot.draw(rows, plan)
    ((line, bars),) = drawn(figure.axes[0])
    means = [sum(8 / bw + 24 / lanes + 0.01 for lanes in (2, 4, 16)) / 3 for bw in (1, 2, 4)]
    assert list(line.get_ydata()) == pytest.approx(means)
    for segment, bw in zip(bars, (1, 2, 4), strict=True):  # min-max: the x16 and x2 runs
        assert [y for _, y in segment] == pytest.approx([8 / bw + 24 / 16 + 0.01,
                                                         8 / bw + 24 / 2 + 0.01])  # fmt: skip
    assert "lanes (cxl_mem.link) 2, 4, 16" in figure._suptitle.get_text()


def test_seeds_become_error_bars_and_systems_lines(tmp_path, monkeypatch):
    outroot = run_sweep(tmp_path, "seed: [1, 2, 5]", monkeypatch)
    rows = collect.gather(outroot)
    plan = collect_plot.layout(rows, "batch_time_ms.mean", "model")
    figure = collect_plot.draw(rows, plan)
    ((line, bars),) = drawn(figure.axes[0])
    assert list(line.get_ydata()) == pytest.approx([8 / 2 + 24 / 16 + 8 / 300])
    assert [y for _, y in bars[0]] == pytest.approx([5.51, 5.55])
    assert "seed 1, 2, 5" in figure._suptitle.get_text()


def test_rows_keep_grid_order_numbers_and_flat_utilisation(tmp_path, monkeypatch):
    outroot = run_sweep(tmp_path, f"set.{BANDWIDTH}: [16GB/s, 2GB/s, 500MB/s]", monkeypatch)
    rows = collect.gather(outroot)
    assert [row[f"set.{BANDWIDTH}"] for row in rows] == ["500MB/s", "2GB/s", "16GB/s"]
    assert [row[f"set.{BANDWIDTH}.si"] for row in rows] == [5e8, 2e9, 1.6e10]
    assert rows.units[f"set.{BANDWIDTH}.si"] == "B/s"
    assert rows[0]["unit_utilisation.gpu"] == 0.5
    assert rows[0]["unit_utilisation.cxl_mem.nmp"] == 0.25
    assert rows[0]["energy_j.components.board.gpu.total"] == 1.5
    csv_path, parquet_path = collect.write_table(rows, tmp_path / "t")
    import pyarrow.parquet as pq

    field = pq.read_schema(parquet_path).field(f"set.{BANDWIDTH}.si")
    assert field.metadata == {b"unit": b"B/s"} and str(field.type) == "double"


def test_plain_run_outdirs_are_collected_beside_each_other(tmp_path, monkeypatch):
    from simulate.run.options import parse_run_options

    for name, lanes in (("a", 4), ("b", 8)):
        argv = ["--system", "cxl-b", "--set", f"{LANES}={lanes}", "--outdir", str(tmp_path / name)]
        fake_run_job(parse_run_options(argv, "t", ""))
    rows = collect.gather([tmp_path / "a", tmp_path / "b"])
    assert [(row["id"], row[f"set.{LANES}"]) for row in rows] == [("a", "4"), ("b", "8")]
    assert [row["batch_time_ms.mean"] for row in rows] == pytest.approx([10.01, 7.01])
    assert collect.gather([tmp_path])[1]["id"] == "b"  # a folder of outdirs


def _two_runs(tmp_path: Path) -> list[Path]:
    from simulate.run.options import parse_run_options

    for name, lanes in (("a", 4), ("b", 8)):
        argv = ["--system", "cxl-b", "--set", f"{LANES}={lanes}", "--outdir", str(tmp_path / name)]
        fake_run_job(parse_run_options(argv, "t", ""))
    return [tmp_path / "a", tmp_path / "b"]


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("system", 3, "system is 3, not a str"),
        ("seed", "x", "seed is 'x', not a int"),
        ("batch_time_ms", [1.0], "batch_time_ms is \\[1.0\\], not a dict"),
        ("batch_time_ms", {"mean": "slow"}, "batch_time_ms.mean is 'slow', not a number"),
    ],
)
def test_a_results_file_no_run_wrote_is_refused_naming_its_field(tmp_path, field, value, needle):
    a, b = _two_runs(tmp_path)
    results = json.loads((b / "results.json").read_text())
    results[field] = value
    (b / "results.json").write_text(json.dumps(results))
    with pytest.raises(UsageError, match=needle):
        collect.gather([a, b])


def test_a_column_of_mixed_kinds_is_refused_and_the_previous_table_kept(tmp_path):
    """One run's utilisation a string where the other's is a number: refused naming both
    runs, and a collect that fails leaves the table an earlier one wrote."""
    a, b = _two_runs(tmp_path)
    collect_script = _collect_script()
    table = tmp_path / "sweep"
    assert collect_script.main([str(a), str(b), "--out", str(table)]) == 0
    before = (tmp_path / "sweep.csv").read_bytes()
    results = json.loads((b / "results.json").read_text())
    results["unit_utilisation"]["gpu"] = "busy"
    (b / "results.json").write_text(json.dumps(results))
    with pytest.raises(UsageError, match="unit_utilisation.gpu is a str in run b .* a number"):
        collect.gather([a, b])
    assert collect_script.main([str(a), str(b), "--out", str(table)]) == 2
    assert (tmp_path / "sweep.csv").read_bytes() == before


def test_outputs_swapped_for_devices_or_fifos_are_refused_or_skipped(tmp_path, monkeypatch):
    """A stats.json that became a link to /dev/zero is refused naming it (never read to
    the end of memory); a sweep run whose DONE marker is a FIFO is not complete, and
    collection does not block on it."""
    import os

    from simulate.sweeps import store

    a, b = _two_runs(tmp_path)
    (a / "stats.json").write_text(json.dumps({"simTicks": {"value": 1}}))
    (b / "stats.json").unlink(missing_ok=True)
    (b / "stats.json").symlink_to("/dev/zero")
    with pytest.raises(UsageError, match=r"stats.json: not a regular file \(a character device\)"):
        collect.gather([a, b], stats=["simTicks"])
    (b / "DONE").unlink(missing_ok=True)
    os.mkfifo(b / store.DONE)
    assert store.is_complete(tmp_path, "b") is False
