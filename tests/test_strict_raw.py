"""CXL-B's strict lookup is ordered line by line, as the paper describes: batch N+1's
lookup is issued with batch N's update (on the engine's gather pipeline), reads of
lines the update writes wait for those writes, and the other reads go ahead."""

from __future__ import annotations

import csv
from pathlib import Path

from test_cli import parse_stats

from simulate.simulator import Simulator
from workloads.workload import DlrmWorkload

BATCHES = 4


def _run(tmp_path: Path, reuse: float) -> tuple[dict, Path]:
    workload = DlrmWorkload("rmc1", batch_size=32, reuse=reuse)
    outdir = tmp_path / f"reuse-{reuse}"
    results = Simulator("cxl-b", workload, BATCHES, outdir, progress=False).run()
    return results, outdir


def _ops(outdir: Path) -> dict[tuple[str, int], tuple[float, float]]:
    with open(outdir / "timeline.csv", newline="") as handle:
        return {
            (row["op"], int(row["batch"])): (float(row["start_ms"]), float(row["end_ms"]))
            for row in csv.DictReader(handle)
        }


def _stat_sum(outdir: Path, suffix: str) -> float:
    stats = parse_stats(outdir / "stats.txt")
    return sum(float(value) for name, value in stats.items() if name.endswith(suffix))


def test_a_lookup_starts_with_the_previous_update_not_after_it(tmp_path):
    _, outdir = _run(tmp_path, 0.0)
    ops = _ops(outdir)
    for n in range(1, BATCHES):
        lookup, update = ops["lookup", n], ops["update", n - 1]
        assert lookup[0] == update[0] < update[1]


def test_reads_of_lines_the_update_writes_wait_and_the_others_do_not(tmp_path):
    """Every row shared (reuse 1): each lookup of batches 1.. reads a line the previous
    update writes, so each is a read-after-write stall. No row shared: only the reads
    that happen to share a 256 B XPLine with an updated row, and the log's copies of
    rows whose writes are still draining, stall."""
    _, shared = _run(tmp_path, 1.0)
    after_first = _stat_sum(shared, "board.lookupsPerBatch") * (BATCHES - 1)
    assert _stat_sum(shared, ".rawStalls") >= after_first
    _, disjoint = _run(tmp_path, 0.0)
    assert _stat_sum(disjoint, ".rawStalls") < 0.1 * after_first
