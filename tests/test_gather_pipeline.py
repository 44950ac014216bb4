"""The near-memory gather is an in-order pipeline of finite slots: a read of a line the
previous update has not drained holds its slot, so the reads behind it wait too
(components/compute/gather.py). Checked against a per-request recursion of the
pipeline and against the analytical time of a gather stalled behind one read."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simrun import run_ops
from test_cli import parse_stats

from components.compute.gather import in_order_segments
from components.compute.nmp import NearMemoryEngine
from components.memory.pmem import Pmem
from components.memory.stages import stage
from components.sim.units import TICKS_PER_SECOND
from simulate.simulator import Simulator
from workloads.models import get_model
from workloads.workload import DlrmWorkload

ROW = 256


def _required(waits: np.ndarray, window: int) -> np.ndarray:
    """Per request, the drain position it waits for, one request at a time: it issues
    once request j - window has retired, which retires after every request before it."""
    need = np.zeros(waits.size)
    for j in range(window, waits.size):
        need[j] = max(need[j - 1], waits[j - window])
    return need


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 0.0, 0.0, 0.3, 0.7, 1.2, 1.9]), min_size=1, max_size=60),
    st.lists(st.sampled_from([0.0, 0.0, 0.5, 1.5]), min_size=60, max_size=60),
    st.integers(1, 8),
)
def test_segments_gate_every_request_on_what_the_recursion_says(first, second, window):
    waits = [np.array(first), np.array(second[: len(first)])]
    starts, keys = in_order_segments(waits, window)
    assert starts[0] == 0 and np.all(np.diff(starts) > 0) and starts[-1] < len(first)
    segment = np.searchsorted(starts, np.arange(len(first)), side="right") - 1
    for s, wait in enumerate(waits):
        assert np.array_equal(keys[s, segment], _required(wait, window))


def _gather_behind(stalled_at: int, rows: int, reads: int):
    """An update writing ``rows`` sorted rows and, issued with it, a gather of ``reads``
    rows elsewhere whose request ``stalled_at`` reads the update's last row."""
    pmem, nmp = Pmem(), NearMemoryEngine()
    window = nmp.window(ROW)
    updated = np.arange(rows, dtype=np.int64) * ROW
    gather = (1 << 30) + np.arange(reads, dtype=np.int64) * ROW
    gather[stalled_at] = updated[-1]
    writes = []

    def update(now):
        writes.append(pmem.write(updated, ROW, window))
        return stage(writes[0])

    (_, lookup), _ = run_ops(update, lambda now: nmp.lookup(pmem, gather, ROW), devices=[pmem])
    return lookup, writes[0].writes[0].drain, pmem, nmp


def _alone_ticks(pmem: Pmem, nmp: NearMemoryEngine, reads: int) -> float:
    """Reads of consecutive rows, spread evenly over the controllers, on an idle device:
    the busiest controller's media, the window's bound or the lanes, whichever is
    longest."""
    media = reads / pmem.controllers * ROW / pmem.ctrl_read_bandwidth * TICKS_PER_SECOND
    window = reads * pmem.read_latency / nmp.window(ROW)
    lanes = reads * ROW / 4 / (nmp.lanes * nmp.clock) * TICKS_PER_SECOND
    return max(media, window, lanes)


def test_a_stalled_read_holds_back_every_read_a_window_behind_it():
    """Stalled first: only the first window's reads go beside the update; the rest issue
    once the update's last line has drained and then take their alone time."""
    rows, reads = 20_000, 40_960
    lookup, drain, pmem, nmp = _gather_behind(0, rows, reads)
    tail = _alone_ticks(pmem, nmp, reads - nmp.window(ROW))
    latency = pmem.read(np.zeros(1, dtype=np.int64), ROW).latency
    assert lookup.end == pytest.approx(drain.end + tail + latency, rel=2e-3)
    assert nmp.gatedSegments.value == 1


def test_where_the_update_keeps_the_media_busy_a_stall_moves_time_not_work():
    """Stalled last: every other read goes beside the update and takes turns with it on
    each controller (a line write, a line read), so the update drains after its writes'
    turns and as many reads'; stalled first, the update has the media to itself. Either
    way the media never idles, so the gather ends at each controller's read and write
    media time: the stall only reorders the work."""
    rows, reads = 20_000, 40_960
    last, late_drain, pmem, nmp = _gather_behind(reads - 1, rows, reads)
    first, early_drain, *_ = _gather_behind(0, rows, reads)
    write_turn = ROW / pmem.ctrl_write_bandwidth * TICKS_PER_SECOND
    read_turn = ROW / pmem.ctrl_read_bandwidth * TICKS_PER_SECOND
    per_ctrl = pmem.controllers
    media = rows / per_ctrl * write_turn + reads / per_ctrl * read_turn
    latency = pmem.read(np.zeros(1, dtype=np.int64), ROW).latency
    assert early_drain.end == pytest.approx(rows / per_ctrl * write_turn, rel=5e-3)
    assert late_drain.end == pytest.approx(rows / per_ctrl * (write_turn + read_turn), rel=5e-3)
    for lookup in (first, last):
        assert lookup.end == pytest.approx(media + latency, rel=5e-3)
    assert nmp.gatedSegments.value == 0


def _cxl_b_batch(tmp_path, reuse: float) -> tuple[float, dict]:
    """RM1's tables and lookups with MLPs too small for the MLP log to bound the batch
    (docs/calibration.md), on CXL-B at the given reuse (the unique rows held)."""
    model = dataclasses.replace(get_model("rm1"), bottom_mlp=(13, 64, 32), top_mlp=(64, 1))
    outdir = tmp_path / f"reuse-{reuse}"
    workload = DlrmWorkload(model, reuse=reuse)
    results = Simulator("cxl-b", workload, 4, outdir, progress=False).run()
    return results["batch_time_ms"]["mean"], parse_stats(outdir / "stats.txt")


def test_cxl_b_batch_time_rises_with_reuse_by_at_most_one_gather(tmp_path):
    """With no reuse nothing waits and the gather of batch N+1 shares the media with
    batch N's update; with reuse its reads of updated rows hold the pipeline, so the
    gather's reads behind them move after the update's drain and the batch grows, by
    less than the gather's own media time (the most a full serialization could add)."""
    plain, plain_stats = _cxl_b_batch(tmp_path, 0.0)
    reused, reused_stats = _cxl_b_batch(tmp_path, 0.8)
    assert float(plain_stats["board.cxl_mem.nmp.gatedSegments"]) == 0
    assert float(reused_stats["board.cxl_mem.nmp.gatedSegments"]) > 0
    pmem = Pmem()
    lookups = float(reused_stats["board.lookupsPerBatch"])
    gather_ms = lookups * get_model("rm1").embedding_dim * 4 / pmem.read_bandwidth * 1e3
    assert 0 < reused - plain < gather_ms
