"""scripts/validate.py: its band logic (with a made-up row out of band: the mutant that
proves it fails), its schema checks, and the fast subset of docs/validation/*.yaml run
against the simulator."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("validate", ROOT / "scripts" / "validate.py")
validate = importlib.util.module_from_spec(spec)
sys.modules["validate"] = validate
spec.loader.exec_module(validate)

ROW = {
    "id": "made_up_read_peak",
    "experiment": "a made-up device's read peak",
    "published": 10.0,
    "unit": "GB/s",
    "source": "none: a test row",
    "role": "validation",
    "band": 0.15,
    "fast": True,
    "command": ["configs/microbench.py", "--device", "dram"],
    "output": "results.json",
    "metric": "streams.0.bandwidth_gbps",
}


def rows_file(tmp_path, *rows, name="madeup.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(list(rows)))
    return path


def fake_runner(value):
    return lambda command, output: {"streams": [{"bandwidth_gbps": value}]}


@pytest.mark.parametrize(
    ("simulated", "held"),
    [(10.0, True), (11.5, True), (8.5, True), (11.6, False), (8.4, False), (math.nan, False)],
)
def test_band_is_the_ratio_within_plus_minus_band(simulated, held):
    assert validate.in_band(simulated, 10.0, 0.15) is held


def test_a_row_out_of_its_band_fails_the_run(tmp_path, monkeypatch, capsys):
    """The mutant: a made-up row whose simulator value is 30% off must exit 1 and be
    marked in the table; the same row at 5% off passes."""
    monkeypatch.setattr(validate, "ROWS_DIR", tmp_path)
    rows_file(tmp_path, ROW)
    doc = tmp_path / "validation.md"
    monkeypatch.setattr(validate, "run_command", fake_runner(13.0))
    assert validate.main(["--doc", str(doc)]) == 1
    assert "**NO**" in doc.read_text() and "made_up_read_peak" in capsys.readouterr().out
    monkeypatch.setattr(validate, "run_command", fake_runner(10.5))
    assert validate.main(["--doc", str(doc)]) == 0
    assert "1 of 1 rows in band" in doc.read_text()


def test_measure_runs_a_shared_command_once():
    calls = []

    def runner(command, output):
        calls.append(command)
        return {"streams": [{"bandwidth_gbps": 1.0, "loaded_latency_ns": 2.0}]}

    one = validate.Row(**{**ROW, "command": tuple(ROW["command"]), "device": "x"})
    two = validate.Row(
        **{
            **ROW,
            "id": "b",
            "metric": "streams.0.loaded_latency_ns",
            "command": tuple(ROW["command"]),
            "device": "x",
        }
    )
    verdicts = validate.measure([one, two], runner)
    assert [v.simulated for v in verdicts] == [1.0, 2.0] and len(calls) == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"band": 1.5}, "band in (0, 1)"),
        ({"role": "fitted"}, "role must be"),
        ({"published": "six"}, "field 'published'"),
        ({"fast": "yes"}, "field 'fast'"),
        ({"command": None}, "field 'command'"),
    ],
)
def test_a_row_off_the_schema_is_one_error_line(tmp_path, monkeypatch, capsys, change, message):
    monkeypatch.setattr(validate, "ROWS_DIR", tmp_path)
    rows_file(tmp_path, {**ROW, **change})
    assert validate.main(["--device", "madeup"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_unknown_device_and_duplicate_ids_are_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(validate, "ROWS_DIR", tmp_path)
    rows_file(tmp_path, ROW, ROW)
    assert validate.main(["--device", "nothing"]) == 2
    assert validate.main(["--device", "madeup"]) == 2
    assert "appears twice" in capsys.readouterr().err


def test_every_published_file_follows_the_schema():
    rows = [row for path in validate.files(None) for row in validate.load_rows(path)]
    assert validate.select(rows, fast=False)
    assert any(row.role == "validation" for row in rows)


@pytest.mark.parametrize(
    "row",
    [r for p in validate.files(None) for r in validate.load_rows(p) if r.fast],
    ids=lambda r: r.id,
)
def test_fast_rows_hold_their_band(row):
    """Each fast row, run as the script runs it: the simulator within the band of the
    published measurement (a model change that leaves it fails here)."""
    (verdict,) = validate.measure([row])
    assert verdict.in_band, (
        f"{row.id}: simulated {verdict.simulated:.4g} {row.unit}, published "
        f"{row.published:g} ({row.source}), ratio {verdict.ratio:.3f}, band ±{row.band:.0%}"
    )


def test_a_doc_that_cannot_be_written_is_refused_before_any_row_runs(tmp_path, monkeypatch, capsys):
    """--doc in a missing folder, a folder in its place, or a folder that takes no new
    file: one line, exit 2, and no row measured; a good --doc is written whole."""
    monkeypatch.setattr(validate, "ROWS_DIR", tmp_path)
    rows_file(tmp_path, ROW)
    ran = []
    monkeypatch.setattr(validate, "measure", lambda rows: ran.append(rows) or [])
    (tmp_path / "taken.md").mkdir()
    for doc, why in [(tmp_path / "no" / "v.md", "is not a directory"),
                     (tmp_path / "taken.md", "not a regular file"),
                     (Path("/proc/self/v.md"), "cannot write in /proc/self")]:  # fmt: skip
        assert validate.main(["--device", "madeup", "--doc", str(doc)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and why in err[0], err
    assert ran == []
    good = tmp_path / "v.md"
    assert validate.main(["--device", "madeup", "--doc", str(good)]) == 0
    assert good.read_text().startswith("# Validation against real devices")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
