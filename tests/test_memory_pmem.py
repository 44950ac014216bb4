"""PMEM model: Table 2 ratios, Optane figures, XPLine amplification, combining, RAW,
persistence ticks, interleaving and parameter validation."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numpy_path import numpy_path
from simrun import media_bytes, timed

from components.memory import Dram, Pmem, kernels
from components.memory.streams import queue_merges
from components.sim.params import ConfigError
from components.sim.units import TICKS_PER_SECOND


def _bandwidth(dev, op, size=256, n=20000):
    ticks, _, _ = timed(dev, op, np.arange(n, dtype=np.int64) * size, size)
    return n * size * TICKS_PER_SECOND / ticks


def _latency(dev, op):
    return timed(dev, op, [4096], 64)[0]


def test_table2_ratios_against_dram_model():
    pmem, dram = Pmem(), Dram(controllers=4)  # ratios are per channel: same channel count
    assert _latency(pmem, "read") / _latency(dram, "read") == pytest.approx(3, rel=0.15)
    assert _latency(pmem, "write") / _latency(dram, "write") == pytest.approx(7, rel=0.15)
    assert _bandwidth(pmem, "read") / _bandwidth(dram, "read") == pytest.approx(0.6, rel=0.15)
    # writes are posted: the requester sees the stream minus the WPQ's drain
    n = 200_000
    w_pmem, w_dram = _bandwidth(pmem, "write", n=n), _bandwidth(dram, "write", n=n)
    assert w_pmem / w_dram == pytest.approx(0.1, rel=0.15)


def test_idle_read_latency_matches_optane():
    assert _latency(Pmem(), "read") == pytest.approx(305_000, rel=0.15)
    assert _latency(Pmem.optane(), "read") == 305_000


def test_optane_preset_bandwidth_per_dimm():
    dev = Pmem.optane(controllers=1)
    assert _bandwidth(dev, "read") == pytest.approx(6.6e9, rel=0.05)
    assert _bandwidth(dev, "write", n=200_000) == pytest.approx(2.3e9, rel=0.05)


def test_random_128B_reads_move_whole_xplines():
    rng = np.random.default_rng(0)
    addr = rng.choice(2**22, 5000, replace=False).astype(np.int64) * 256  # distinct lines
    assert media_bytes(Pmem().read(addr, 128)) == 2 * 128 * addr.size


def test_sequential_reads_hit_the_xpbuffer():
    assert media_bytes(Pmem().read(np.arange(4000, dtype=np.int64) * 128, 128)) == 4000 * 128


def test_the_buffer_holds_lines_not_a_window_of_accesses():
    # line A, then 200 accesses to one other line, then A again: a buffer of lines still
    # holds A (one other line came between), a window of the last 64 accesses would not
    a, b = 0, 4 * 4096  # same controller, different buffer entries
    addr = np.array([a] + [b] * 200 + [a], dtype=np.int64)
    dev = Pmem()
    dev.read(addr, 64)
    assert dev.ctrl0.bufferHits.value == 200  # 199 repeats of b, and A again


def test_write_combining_sequential_vs_random():
    n = 4096
    seq_ticks, seq, _ = timed(Pmem(), "write", np.arange(n, dtype=np.int64) * 64, 64)
    assert media_bytes(seq) == n * 64  # four 64 B writes fill each 256 B line, no RMW
    rng = np.random.default_rng(1)
    rand_addr = rng.choice(2**24, n, replace=False).astype(np.int64) * 256
    dev = Pmem()
    rand_ticks, rand, _ = timed(dev, "write", rand_addr, 64)
    assert media_bytes(rand) == n * (256 + 256)  # line write + read-modify-write
    assert _rmw_reads(dev) == n
    assert rand_ticks > seq_ticks


def test_rmw_coverage_is_the_union_of_the_bytes_written():
    # the same 128 B half written twice covers half the line: still a read-modify-write
    dev = Pmem()
    dev.write(np.array([0, 0], dtype=np.int64), 128)
    assert dev.ctrl0.rmwReads.value == 1
    dev = Pmem()
    dev.write(np.array([0, 128], dtype=np.int64), 128)  # both halves: no RMW
    assert dev.ctrl0.rmwReads.value == 0


def test_without_a_buffer_log_entries_merge_in_the_wpq():
    """136 B log entries cut lines in two; gem5's WPQ (and a DRAM controller's) merges
    the pieces of a line while it is queued, so without the XPBuffer the appends still
    write whole lines, once each, with a read of only the last, partly written line."""
    n = 1000
    bare = Pmem(buffer_lines=0)
    written = bare.write(np.arange(n, dtype=np.int64) * 136, 136)
    lines = -(-n * 136 // 256)
    assert media_bytes(written) == (lines + 1) * 256  # every line once, one RMW read
    assert _rmw_reads(bare) == 1


def test_without_a_buffer_writes_further_apart_than_the_wpq_do_not_merge():
    """Two halves of a line merge only while the first is still queued: with more lines
    than the WPQ holds written in between, both are written, each with its RMW read."""
    queue = Pmem().write_queue
    step = Pmem().controllers * Pmem().interleave  # the next line of the same controller
    others = np.arange(1, queue + 2, dtype=np.int64) * step  # whole lines in between
    for between, rmw in ((queue - 1, 0), (queue + 1, 2)):
        dev = Pmem(buffer_lines=0)
        addr = np.concatenate([[0], others[:between], [128]])
        dev.write(addr, 128)  # the other lines are halves too: one RMW read each
        assert _rmw_reads(dev) == between + rmw


def _rmw_reads(dev: Pmem) -> int:
    return sum(dev._children[f"ctrl{c}"].rmwReads.value for c in range(dev.controllers))


def test_mutant_without_wpq_merging_fails_the_log_check(monkeypatch):
    """Each piece of an entry written on its own (the model before the WPQ merged)."""
    import components.memory.streams as streams

    def unmerged(line, ctrl, queue):
        return streams.buffer_hits(line, ctrl, line, 0, True)

    monkeypatch.setattr(streams, "queue_merges", unmerged)
    with pytest.raises(AssertionError):
        test_without_a_buffer_log_entries_merge_in_the_wpq()


def _merges_line_by_line(line: np.ndarray, ctrl: np.ndarray, queue: int) -> np.ndarray:
    """The documented rule, access by access: at most ``queue`` lines entered the
    controller's stream since the previous access to the line."""
    entered, last_line, seen = {}, {}, {}
    merged = np.zeros(line.size, dtype=bool)
    for i, (ln, c) in enumerate(zip(line.tolist(), ctrl.tolist(), strict=True)):
        if last_line.get(c) != ln:
            entered[c] = entered.get(c, 0) + 1
            last_line[c] = ln
        merged[i] = ln in seen and entered[c] - seen[ln] <= queue
        seen[ln] = entered[c]
    return merged


@settings(max_examples=40, deadline=None)
# lines of another controller between two writes of a line: counted on a shared queue,
# they would push it out (the mutant below, and a kernel counting them alike)
@example(lines=[0, 1, 3, 0], controllers=2, queue=1, compiled=True)
@example(lines=[0, 1, 3, 0], controllers=2, queue=1, compiled=False)
@given(
    lines=st.lists(st.integers(0, 40), min_size=1, max_size=300),
    controllers=st.integers(1, 4),
    queue=st.integers(1, 8),
    compiled=st.booleans(),
)
def test_wpq_merges_match_a_line_by_line_replay(lines, controllers, queue, compiled):
    """Both paths: the compiled kernel and the numpy definition."""
    line = np.array(lines, dtype=np.int64)
    ctrl = line % controllers

    def call():
        return queue_merges(line, ctrl, queue)

    hit, episode, order = call() if compiled else numpy_path(kernels, call)
    assert np.array_equal(hit, _merges_line_by_line(line, ctrl, queue))
    ordered = episode[order]  # episodes contiguous along the order, numbered from 0
    assert ordered[0] == 0 and np.all(np.diff(ordered) >= 0)
    assert np.array_equal(np.diff(ordered) == 0, hit[order][1:])


def test_mutant_counting_lines_across_controllers_fails_the_replay():
    """A queue shared by all controllers: lines of the others would push a line out."""
    line = np.array([0, 1, 3, 0], dtype=np.int64)
    ctrl = line % 2
    expected = _merges_line_by_line(line, ctrl, 1)
    assert expected.tolist() == [False, False, False, True]
    assert not np.array_equal(queue_merges(line, np.zeros_like(ctrl), 1)[0], expected)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 3000),
    size=st.sampled_from([64, 128, 256, 512]),
    seq=st.booleans(),
    domain=st.sampled_from(["adr", "eadr", "gpf"]),
    seed=st.integers(0, 2**16),
)
def test_persist_ticks_monotone_per_controller_and_bounded(n, size, seq, domain, seed):
    dev = Pmem(domain=domain)
    rng = np.random.default_rng(seed)
    addr = np.arange(n) * size if seq else rng.integers(0, 2**20, n) * size
    ticks, _, persist = timed(dev, "write", addr, size, 256)
    assert persist.size == n
    assert persist.min() >= 0 and persist.max() <= ticks
    ctrl = (addr // dev.interleave) % dev.controllers
    for c in range(dev.controllers):
        assert np.all(np.diff(persist[ctrl == c]) >= 0)


def test_adr_persists_later_than_gpf():
    addr = np.arange(5000, dtype=np.int64) * 256
    adr = timed(Pmem(domain="adr"), "write", addr, 256)[2]
    gpf = timed(Pmem(domain="gpf"), "write", addr, 256)[2]
    assert np.all(adr >= gpf) and adr[0] == Pmem().write_latency and gpf[0] == 0


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_interleaving_spreads_requests(seed):
    dev = Pmem()
    seq = np.arange(64 * 4096 // 256, dtype=np.int64) * 256
    dev.read(seq, 256)
    counts = [dev._children[f"ctrl{c}"].readReqs.value for c in range(4)]
    assert len(set(counts)) == 1
    dev = Pmem()
    rand = np.random.default_rng(seed).integers(0, 2**30 // 256, 40000) * 256
    dev.read(rand.astype(np.int64), 256)
    counts = np.array([dev._children[f"ctrl{c}"].readReqs.value for c in range(4)])
    assert np.all(np.abs(counts - 10000) < 5 * np.sqrt(10000 * 0.75))  # 5 sigma binomial


def test_hierarchical_stat_names():
    names = [row[0] for row in Pmem().stat_rows()]
    assert "pmem.ctrl0.bytesRead" in names and "pmem.ctrl3.readAmplification" in names


def test_controllers_override_adds_children():
    dev = Pmem()
    dev.controllers = 6
    dev.read(np.arange(100, dtype=np.int64) * 4096, 64)
    assert dev._children["ctrl5"].readReqs.value > 0


def test_negative_latency_is_a_config_error_naming_the_param():
    with pytest.raises(ConfigError, match="read_latency"):
        Pmem(read_latency="-5ns")
    with pytest.raises(ConfigError, match="domain"):
        Pmem(domain="battery")
    with pytest.raises(ConfigError, match="ctrl_write_bandwidth"):
        Pmem(ctrl_write_bandwidth="0GB/s")


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(2, 400),
    lines=st.sampled_from([1, 2, 4, 16]),
    gaps=st.lists(st.integers(0, 3), min_size=1, max_size=8),
    domain=st.sampled_from(["adr", "gpf"]),
)
def test_log_bursts_are_planned_per_request_exactly_as_line_by_line(n, lines, gaps, domain):
    """The per-request plan for whole-line ascending bursts must equal the general
    line-by-line plan it short-cuts."""
    dev = Pmem(domain=domain)
    size = lines * dev.access_unit
    steps = np.resize(np.array(gaps), n) * size + size
    addr = (1 << 30) + np.concatenate([[0], np.cumsum(steps[:-1])]).astype(np.int64)
    addr = addr[addr % dev.interleave + size <= dev.interleave]
    if addr.size < 2:
        return
    fast, slow = dev._burst_plan(addr, size), dev._line_plan(addr, size)
    assert fast is not None
    by_line = np.argsort(fast.line, kind="stable"), np.argsort(slow.line, kind="stable")
    assert np.array_equal(fast.line[by_line[0]], slow.line[by_line[1]])
    assert np.array_equal(fast.rank[by_line[0]], slow.rank[by_line[1]])
    for field in ("writes_c", "rmw_c", "count_c", "covered_c"):
        assert np.array_equal(getattr(fast, field), getattr(slow, field)), field
    for free in (dev.write_queue, dev.write_queue // 3, 0):  # an empty, busy or full WPQ
        free_c = np.full(dev.controllers, float(free))
        head = np.maximum(slow.writes_c - free_c, 0)
        assert np.allclose(fast.accept(head, free_c), slow.accept(head, free_c))
