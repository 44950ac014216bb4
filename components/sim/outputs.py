"""Writers for the outdir: stats.txt, stats.json, config.json, results.json, timeline.csv.

Each file is written to a temporary name and renamed into place, so a run killed
while writing never leaves a file that looks complete but is not.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

from components.sim.schedule import OpRecord
from components.sim.stats import format_rows
from components.sim.units import TICKS_PER_SECOND

GLOBAL_STATS = (
    ("simSeconds", "Number of seconds simulated", "Second"),
    ("simTicks", "Number of ticks simulated", "Tick"),
    ("finalTick", "Number of ticks from beginning of simulation", "Tick"),
    ("simFreq", "The number of ticks per simulated second", "Tick/Second"),
    ("hostSeconds", "Real time elapsed on the host", "Second"),
    ("hostMemory", "Number of bytes of host memory used", "Byte"),
)
HOST_DEPENDENT = ("hostSeconds", "hostMemory")


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def global_rows(sim_ticks: int, host_seconds: float, host_memory: int) -> list[tuple]:
    values = {
        "simSeconds": sim_ticks / TICKS_PER_SECOND,
        "simTicks": sim_ticks,
        "finalTick": sim_ticks,
        "simFreq": TICKS_PER_SECOND,
        "hostSeconds": round(host_seconds, 2),
        "hostMemory": host_memory,
    }
    return [(name, values[name], desc, unit) for name, desc, unit in GLOBAL_STATS]


def stats_json(rows: list[tuple]) -> str:
    data = {
        name: {"value": value, "description": desc, "unit": unit}
        for name, value, desc, unit in rows
    }
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def timeline_csv(records: list[OpRecord]) -> str:
    """One row per op: its unit, times, the time its flows lost to other ops (and to
    whom, largest first) and the shared resources it used."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        [
            "resource", "op", "category", "batch", "start_ms", "end_ms", "background",
            "wait_ms", "waited_on", "uses",
        ]
    )  # fmt: skip
    for record in sorted(records, key=lambda r: (r.start, r.uid)):
        writer.writerow(
            [
                record.resource or "-",
                record.name,
                record.category,
                record.batch,
                f"{record.start / 1e9:.6f}",
                f"{record.end / 1e9:.6f}",
                int(record.background),
                f"{record.wait / 1e9:.6f}",
                _blockers(records, record),
                ";".join(resource_lanes(record.resources)),
            ]
        )
    return buffer.getvalue()


def _blockers(records: list[OpRecord], record: OpRecord, most: int = 3) -> str:
    """``op@batch:ms`` of the ops this one lost most time to."""
    ranked = sorted(record.waited_on.items(), key=lambda item: (-item[1], str(item[0])))
    parts = []
    for uid, lost in ranked[:most]:
        name = f"{records[uid].name}@{records[uid].batch}" if uid is not None else "other"
        parts.append(f"{name}:{lost / 1e9:.6f}")
    return ";".join(parts)


def resource_lanes(resources: tuple[str, ...]) -> list[str]:
    """Shared resources as plot lanes: a device's controllers form one lane."""
    lanes = []
    for key in resources:
        head, _, tail = key.rpartition(".")
        lane = head if tail.startswith("ctrl") and tail[4:].isdigit() else key
        if lane not in lanes:
            lanes.append(lane)
    return lanes


def write_outdir(
    outdir: Path,
    rows: list[tuple],
    config: dict[str, Any],
    results: dict[str, Any],
    records: list[OpRecord],
) -> None:
    """Write every output file of one run."""
    outdir.mkdir(parents=True, exist_ok=True)
    write_atomic(outdir / "stats.txt", format_rows(rows))
    write_atomic(outdir / "stats.json", stats_json(rows))
    write_atomic(outdir / "config.json", json.dumps(config, indent=1) + "\n")
    write_atomic(outdir / "timeline.csv", timeline_csv(records))
    write_atomic(outdir / "results.json", json.dumps(results, indent=1) + "\n")
