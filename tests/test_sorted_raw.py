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
from components.memory.streams import Geometry
from simulate.simulator import Simulator
from workloads.workload import DlrmWorkload

compiled = pytest.mark.skipif(not kernels.COMPILED, reason="numba not installed")


@st.composite
def sorted_reads(draw):
    """Sorted request addresses (repeats, and several requests per line) and the lines
    some writes still hold: few of them (each searched for) or many (merged)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    unit = draw(st.sampled_from([64, 256, 4096]))
    size = draw(st.sampled_from([8, 64, unit // 2, unit]))
    span = draw(st.integers(1, 400))  # lines the reads and writes fall in
    per_line = unit // size
    slots = rng.integers(0, span * per_line, draw(st.integers(1, 3000)))
    addr = np.sort(slots) * size
    waiting = np.unique(rng.integers(0, span, draw(st.integers(1, 300))))
    keys = rng.random(waiting.size) * 2
    marked = rng.random(addr.size) < draw(st.sampled_from([0.0, 0.3]))  # earlier writes
    return addr.astype(np.int64), unit, waiting.astype(np.int64), keys, marked


@compiled
@settings(max_examples=300, deadline=None)
@given(sorted_reads())
def test_the_merge_finds_what_the_search_per_access_finds(case):
    addr, unit, waiting, keys, marked = case
    held, searched = marked.copy(), marked.copy()
    got = digest.held_max_sorted(waiting, keys, addr, unit, held)
    want = digest.held_max(waiting, keys, digest.lines_of(addr, unit), searched)
    assert got == want
    np.testing.assert_array_equal(held, searched)
    reference = marked.copy()
    assert (
        numpy_path(kernels, lambda: digest.held_max_sorted(waiting, keys, addr, unit, reference))
        == want
    )
    np.testing.assert_array_equal(reference, searched)


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


@compiled
@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([64, 256]),
    st.sampled_from([1, 2, 16]),
    st.integers(1, 6),
    st.booleans(),
)
def test_stalls_per_controller_match_numpy(seed, unit, per_chunk, controllers, weighted):
    """The stalled requests' accesses per controller, over interleaves and controller
    counts that are and are not powers of two."""
    rng = np.random.default_rng(seed)
    geometry = Geometry(unit, unit * per_chunk, controllers)
    addr = np.sort(rng.integers(0, 500, rng.integers(0, 200))) * unit
    stalled = rng.random(addr.size) < 0.5
    accesses = rng.integers(1, 5, addr.size) if weighted else None
    got = digest.stalls_per_ctrl(addr, stalled, accesses, geometry)
    want = numpy_path(kernels, lambda: digest.stalls_per_ctrl(addr, stalled, accesses, geometry))
    assert got.dtype == want.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    lines = addr[stalled] // unit
    by_hand = np.zeros(controllers, dtype=np.int64)
    counts = accesses[stalled] if weighted else np.ones(lines.size)
    for line, count in zip(lines, counts, strict=True):
        by_hand[(line // per_chunk) % controllers] += int(count)
    np.testing.assert_array_equal(got, by_hand)
