"""A read that meets draining writes checks its lines against theirs (read-after-write
stalls). Where the read's requests lie at sorted addresses, each within one line (an
update's rows, or a gather told its distinct rows), one merge per write replaces a
search per access: it must find the same lines, the same largest drain key and the
same stalls per controller as the search does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy_path import numpy_path
from simrun import simulated_stats

from components.memory import digest, kernels
from components.memory.base import MemoryDevice
from components.memory.pmem import Pmem
from components.memory.stages import stage
from components.memory.streams import Geometry
from components.persistence.image import ImageLayout
from components.sim.engine import Engine
from components.sim.schedule import Op, Scheduler
from simulate.simulator import Simulator
from workloads.workload import DlrmWorkload

compiled = pytest.mark.skipif(not kernels.COMPILED, reason="numba not installed")


@st.composite
def sorted_reads(draw):
    """Sorted request addresses (repeats, and several requests per line) over a few
    controllers, each request's accesses (or one each), and the lines some writes
    still hold: few of them (each searched for) or many (merged)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    unit = draw(st.sampled_from([64, 256, 4096]))
    geometry = Geometry(unit, unit * draw(st.sampled_from([1, 2, 16])), draw(st.integers(1, 6)))
    size = draw(st.sampled_from([8, 64, unit // 2, unit]))
    span = draw(st.integers(1, 400))  # lines the reads and writes fall in
    slots = rng.integers(0, span * (unit // size), draw(st.integers(1, 3000)))
    addr = (np.sort(slots) * size).astype(np.int64)
    accesses = rng.integers(1, 5, addr.size) if draw(st.booleans()) else None
    waiting = np.unique(rng.integers(0, span, draw(st.integers(1, 300)))).astype(np.int64)
    keys = rng.random(waiting.size) * 2
    marked = rng.random(addr.size) < draw(st.sampled_from([0.0, 0.3]))  # earlier writes
    return addr, accesses, geometry, waiting, keys, marked


@compiled
@settings(max_examples=300, deadline=None)
@given(sorted_reads())
def test_the_merge_finds_what_the_search_per_access_finds(case):
    """The same held requests and largest key as held_max over each request's line, and
    the stalls of the requests it newly holds, weighed by their accesses."""
    addr, accesses, geometry, waiting, keys, marked = case
    n = geometry.controllers
    held, stalls = marked.copy(), np.zeros(n, dtype=np.int64)
    got = digest.held_max_sorted(waiting, keys, addr, accesses, geometry, held, stalls)
    searched = marked.copy()
    want = digest.held_max(waiting, keys, digest.lines_of(addr, geometry.unit), searched)
    assert got == want
    np.testing.assert_array_equal(held, searched)
    new = searched & ~marked
    weights = np.ones(addr.size, dtype=np.int64) if accesses is None else accesses
    by_hand = np.zeros(n, dtype=np.int64)
    for line, count in zip(addr[new] // geometry.unit, weights[new], strict=True):
        by_hand[(line // (geometry.interleave // geometry.unit)) % n] += count
    np.testing.assert_array_equal(stalls, by_hand)
    reference, numpy_stalls = marked.copy(), np.zeros(n, dtype=np.int64)
    assert (
        numpy_path(
            kernels,
            lambda: digest.held_max_sorted(
                waiting, keys, addr, accesses, geometry, reference, numpy_stalls
            ),
        )
        == want
    )
    np.testing.assert_array_equal(reference, searched)
    np.testing.assert_array_equal(numpy_stalls, by_hand)


@compiled
@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([64, 256]),
    st.sampled_from([8, 64, 128, 136, 300]),
    st.booleans(),
)
def test_sorted_in_lines_matches_numpy(seed, unit, size, ordered):
    """Addresses that go down, or a request over two lines, rule the merge out."""
    rng = np.random.default_rng(seed)
    addr = rng.integers(0, 64, rng.integers(0, 50)) * 64
    if ordered:
        addr = np.sort(addr)
    addr = addr.astype(np.int64)
    got = digest.sorted_in_lines(addr, size, unit)
    assert got == numpy_path(kernels, lambda: digest.sorted_in_lines(addr, size, unit))
    spans = digest.lines_of(addr, unit) != digest.lines_of(addr + size - 1, unit)
    assert got == (not spans.any() and bool(np.all(np.diff(addr) >= 0)))


def _searched_per_access(monkeypatch) -> None:
    """Every read checked access by access: no sorted view, no distinct rows."""
    monkeypatch.setattr(MemoryDevice, "_sorted_view", lambda self, addr, size, distinct: None)


@pytest.mark.parametrize(
    "system, model, reuse",
    [
        ("cxl-b", "rmc1", 0.5),
        ("cxl-b", "rmc2", None),
        ("cxl", "rmc1", 0.8),
        ("cxl-d", "rmc3", 0.5),
        ("pmem", "rmc1", 1.0),
    ],
)
def test_runs_give_the_same_stats_merged_or_searched(tmp_path, monkeypatch, system, model, reuse):
    """Whole runs whose reads meet draining writes (rawStalls > 0): the stats are the
    same bits whether the lookups and the log copies' reads are merged or searched."""

    def run(name: str) -> list[str]:
        workload = DlrmWorkload(model, batch_size=64, reuse=reuse)
        Simulator(system, workload, 5, tmp_path / name, progress=False).run()
        return simulated_stats(tmp_path / name)

    merged = run("merged")
    assert _stalls(merged) > 0
    with monkeypatch.context() as patch:
        _searched_per_access(patch)
        searched = run("searched")
    assert merged == searched


@pytest.mark.parametrize("system", ["cxl-b", "pmem"])
def test_a_lookup_told_its_distinct_rows_stalls_as_one_searched(tmp_path, monkeypatch, system):
    """The gathers (near memory, the host's) tell the device their distinct rows and
    each row's lookups: a stalled row counts each of its lookups (the stalls per
    controller weigh the rows), as if each lookup were searched for."""

    def run(name: str) -> list[str]:
        workload = DlrmWorkload("rmc1", batch_size=64, reuse=1.0)
        Simulator(system, workload, 4, tmp_path / name, progress=False).run()
        return simulated_stats(tmp_path / name)

    told = run("told")
    assert _stalls(told) > 0
    read = MemoryDevice.read

    def untold(self, addresses, size, outstanding=None, *, distinct=None):
        return read(self, addresses, size, outstanding)

    with monkeypatch.context() as patch:
        patch.setattr(MemoryDevice, "read", untold)
        searched = run("searched")
    assert told == searched


def _stalls(stats: list[str]) -> float:
    """Read-after-write stalls over every controller."""
    return sum(float(line.split()[1]) for line in stats if ".rawStalls " in line)


@pytest.mark.parametrize("system", ["cxl", "cxl-b", "pmem"])
def test_each_batch_finds_its_addresses_once(tmp_path, monkeypatch, system):
    """A batch's lookup addresses and its distinct rows' addresses are found once each,
    though batch N+1's lookup (told its distinct rows) may come before batch N's update
    and log copy (which read the same array, so the device digests it once)."""
    calls = []
    row_offset = ImageLayout.row_offset

    def counted(self, rows):
        calls.append(rows.size)
        return row_offset(self, rows)

    monkeypatch.setattr(ImageLayout, "row_offset", counted)
    batches = 6
    workload = DlrmWorkload("rmc1", batch_size=64, reuse=0.5)
    Simulator(system, workload, batches, tmp_path, progress=False).run()
    assert len(calls) == 2 * batches


def _draining_then_read(reads, distinct) -> tuple[Pmem, Op]:
    """A log-like write of 64 lines (accepted at once, then draining), and a read of
    ``reads`` issued once the write is accepted, told ``distinct``."""
    pmem = Pmem(controllers=2, arbitration="time")
    engine = Engine()
    scheduler = Scheduler(engine)
    pmem.bind(engine.event)
    lines = np.arange(64, dtype=np.int64) * 256
    write = scheduler.op("w", "checkpoint", 0, "dma", lambda now: stage(pmem.write(lines, 256)))
    read = scheduler.op(
        "r",
        "embedding",
        0,
        "nmp",
        lambda now: stage(pmem.read(reads, 128, distinct=distinct)),
        deps=[write],
    )
    engine.run()
    return pmem, read


def test_a_gather_told_its_rows_waits_as_one_searched_access_by_access():
    """Lookups in random order with repeats, some of lines still draining: told their
    distinct rows, the read waits as long and counts the same stalls per controller."""
    rng = np.random.default_rng(5)
    reads = rng.integers(0, 256, 2000).astype(np.int64) * 128
    rows, counts = np.unique(reads, return_counts=True)
    told, told_read = _draining_then_read(reads, (rows, counts))
    plain, plain_read = _draining_then_read(reads, None)
    assert told_read.record.end == plain_read.record.end > 0
    stalls = [told.ctrl0.rawStalls.value, told.ctrl1.rawStalls.value]
    assert stalls == [plain.ctrl0.rawStalls.value, plain.ctrl1.rawStalls.value]
    assert sum(stalls) == int(np.sum(reads < 64 * 256))  # every lookup of a held line


def test_distinct_rows_that_do_not_add_up_to_the_stream_are_refused():
    """A caller's distinct rows must count every request of the stream."""
    reads = np.arange(100, dtype=np.int64) * 128
    with pytest.raises(ValueError, match="distinct rows given count 99 requests"):
        _draining_then_read(reads, (reads[:99], np.ones(99, dtype=np.int64)))
