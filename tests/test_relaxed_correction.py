"""CXL's relaxed lookup is corrected with the gradient, as the paper says: batch N's
update adds each row's delta into batch N+1's held bags, so no delta goes through PMEM.
PMEM traffic is then exactly lookup + update + log copy; the delta-region variant
(kept as ``board.correction=delta_region``, and the fallback for bags that do not fit
the engine's bag buffer) adds exactly the deltas' round trip."""

from __future__ import annotations

import numpy as np
import pytest
from test_cli import parse_stats

from components.boards.cxl import CxlBoard
from components.sim.params import ConfigError
from simulate.simulator import Simulator
from workloads.inputs import InputGenerator
from workloads.opgraph import build_demand
from workloads.workload import DlrmWorkload

WORKLOAD = DlrmWorkload("rmc1", batch_size=32)
BATCHES = 4
WATCHED: dict = {}  # the streams the watched board's PMEM was issued, and its layout


class WatchedCxlBoard(CxlBoard):
    """The CXL board, recording the request streams its PMEM is issued (the run
    connects a copy of the board, so they are kept outside it)."""

    def connect(self, engine, scheduler, spec, batch_size: int) -> None:
        super().connect(engine, scheduler, spec, batch_size)
        WATCHED.update(streams=[], layout=self.layout)
        self.pmem.stream_listeners.append(WATCHED["streams"].append)


def _run(tmp_path, name: str, sets: dict) -> tuple[dict, list, object]:
    simulator = Simulator(
        WatchedCxlBoard(), WORKLOAD, BATCHES, tmp_path / name, sets=sets, progress=False
    )
    results = simulator.run()
    return results, WATCHED["streams"], WATCHED["layout"]


def _demands() -> list:
    spec = WORKLOAD.spec
    generator = InputGenerator(spec, WORKLOAD.batch_size, seed=WORKLOAD.seed)
    demands, previous = [], None
    for n in range(BATCHES):
        batch = generator.batch(n)
        demands.append(build_demand(spec, batch, n, previous))
        previous = batch
    return demands


def _shared(demands: list) -> list[int]:
    """Per batch N >= 1: lookups of rows batch N-1 updated."""
    return [
        int(np.isin(d.lookup.rows, p.lookup.unique_rows).sum())
        for p, d in zip(demands, demands[1:], strict=False)
    ]


def _bytes(streams: list, kind: str) -> int:
    return sum(s.addresses.size * s.size for s in streams if s.kind == kind)


def _touches_delta_region(streams: list, layout) -> bool:
    low, size = layout.regions()["delta"]
    return any(
        np.any((s.addresses >= low) & (s.addresses < low + size))
        for s in streams
        if s.addresses.size
    )


def _stat(tmp_path, name: str, key: str) -> float:
    return float(parse_stats(tmp_path / name / "stats.txt")[key])


def test_pmem_reads_are_lookup_update_and_log_copy_only(tmp_path):
    results, streams, layout = _run(tmp_path, "gradient", {})
    demands, row_bytes = _demands(), layout.row_bytes
    expected = sum((d.lookup.lookups + 2 * len(d.lookup.unique_rows)) * row_bytes for d in demands)
    assert _bytes(streams, "read") == expected
    assert not _touches_delta_region(streams, layout)
    assert _stat(tmp_path, "gradient", "board.correctedLookups") == sum(_shared(demands))
    assert _stat(tmp_path, "gradient", "board.deltaRegionBatches") == 0


def test_the_delta_region_variant_adds_exactly_the_deltas_round_trip(tmp_path):
    gradient, quiet, layout = _run(tmp_path, "gradient", {})
    region, loud, _ = _run(tmp_path, "region", {"board.correction": "delta_region"})
    demands, row_bytes = _demands(), layout.row_bytes
    assert _bytes(loud, "read") - _bytes(quiet, "read") == sum(_shared(demands)) * row_bytes
    deltas_written = sum(len(d.lookup.unique_rows) for d in demands) * row_bytes
    assert _bytes(loud, "write") - _bytes(quiet, "write") == deltas_written
    assert _touches_delta_region(loud, layout)
    # the same additions, done in the update instead of a correction op
    flops = "board.cxl_mem.nmp.flops"
    assert _stat(tmp_path, "gradient", flops) == _stat(tmp_path, "region", flops)
    assert gradient["batch_time_ms"]["mean"] < region["batch_time_ms"]["mean"]


def test_bags_that_do_not_fit_the_buffer_go_through_the_delta_region(tmp_path):
    pooled = _demands()[0].lookup.pooled_bytes
    small = {"board.cxl_mem.nmp.bag_buffer": f"{pooled - 4}B"}
    _, spilled, layout = _run(tmp_path, "spilled", small)
    _, held, _ = _run(tmp_path, "held", {"board.cxl_mem.nmp.bag_buffer": f"{pooled}B"})
    assert _stat(tmp_path, "spilled", "board.deltaRegionBatches") == BATCHES - 1
    assert _stat(tmp_path, "held", "board.deltaRegionBatches") == 0
    demands = _demands()
    extra = sum(_shared(demands)) * layout.row_bytes
    assert _bytes(spilled, "read") - _bytes(held, "read") == extra


def test_an_unknown_correction_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="correction"):
        Simulator(CxlBoard(), WORKLOAD, 2, tmp_path, sets={"board.correction": "sideways"})
