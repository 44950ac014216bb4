"""docs/validation/gpu.yaml: every row's command, run as scripts/validate.py runs it
(``python <command> --json``, the metric read from stdout), lands within its band of
the published value."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ROWS = yaml.safe_load((ROOT / "docs" / "validation" / "gpu.yaml").read_text())
KEYS = {"id", "experiment", "published", "unit", "source", "role", "band", "fast", "command",
        "output", "metric"}  # fmt: skip


def test_rows_follow_the_schema():
    assert len({row["id"] for row in ROWS}) == len(ROWS)
    for row in ROWS:
        assert set(row) == KEYS, row["id"]
        assert row["role"] in ("calibration", "validation") and row["output"] == "stdout"
        assert row["source"].strip() and 0 < row["band"] < 1


@pytest.mark.parametrize("row", [r for r in ROWS if r["fast"]], ids=lambda r: r["id"])
def test_row_is_in_band(row):
    done = subprocess.run(
        [sys.executable, *row["command"], "--json"], cwd=ROOT, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    value = json.loads(done.stdout)
    for key in str(row["metric"]).split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    assert abs(value / row["published"] - 1) <= row["band"], (value, row["published"])
