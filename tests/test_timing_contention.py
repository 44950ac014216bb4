"""Concurrent ops share devices and links as time advances (analytical expectations).

Each expectation is computed from what the streams need alone (their per-resource
needs, from the device model) and the sharing rule (equal shares of a bottleneck), not
from the simulated result. A controller's ``arbitration`` decides what is shared
equally: media time (``time``) or turns (``requests``, the default).
"""

import numpy as np
import pytest
from simrun import duration, run_ops

from components.interconnect.cxl import CxlLink, CxlPath, mmio_write
from components.memory.pmem import Pmem
from components.memory.stages import concurrent, stage
from components.sim.engine import Engine
from components.sim.schedule import Scheduler


def test_two_equal_streams_on_one_link_each_get_half_of_it():
    link = CxlLink()
    path = CxlPath([(link, "down")])
    nbytes = 4 << 20
    serial = link.serialization_ticks(16 + nbytes)
    latency = link.propagation_latency
    (alone,), _ = run_ops(lambda now: mmio_write(path, nbytes))
    a, b = run_ops(lambda now: mmio_write(path, nbytes), lambda now: mmio_write(path, nbytes))[0]
    assert duration(alone) == pytest.approx(serial + latency, abs=2)
    assert duration(a) == duration(b) == pytest.approx(2 * serial + latency, abs=2)


def test_opposite_directions_of_a_link_do_not_share():
    link = CxlLink()
    down, up = CxlPath([(link, "down")]), CxlPath([(link, "up")])
    nbytes = 1 << 20
    a, b = run_ops(lambda now: mmio_write(down, nbytes), lambda now: mmio_write(up, nbytes))[0]
    assert duration(a) == duration(b) == link.serialization_ticks(16 + nbytes) + 40_000


def _one_controller() -> Pmem:
    return Pmem(controllers=1, arbitration="time")


def test_a_read_write_mix_on_one_controller_obeys_its_media_time_budget():
    pmem = _one_controller()
    rng = np.random.default_rng(3)
    reads = rng.integers(0, 1 << 20, 20_000) * 256
    writes = (1 << 30) + np.arange(4_000, dtype=np.int64) * 256
    r_need = 20_000 * 256 / pmem.ctrl_read_bandwidth * 1e12
    w_need = 4_000 * 256 / pmem.ctrl_write_bandwidth * 1e12
    tail = pmem.read(reads[:1], 256).latency  # the idle latency beyond one line's service
    pmem = _one_controller()
    (read, write), sched = run_ops(
        lambda now: stage(pmem.read(reads, 256, 256)),
        lambda now: stage(pmem.write(writes, 256, 256)),
        devices=[pmem],
    )
    media = sched.network.use[pmem.resource(0)]
    # every line read and written took its own media time, no more, no less
    assert media.busy == pytest.approx(r_need + w_need, rel=1e-6)
    # the media was never idle until both were done: the last of them (incl. the WPQ
    # drain) ends at the sum of their media times
    last = max(read.end - tail, write.end - pmem.write_latency)
    assert last <= r_need + w_need + 2
    # the read ran at half speed while the write stream's visible part was running
    assert duration(read) == pytest.approx(2 * r_need + tail, rel=1e-6)


def test_under_request_arbitration_streams_take_turns_instead_of_time_shares():
    n = 20_000
    reads = np.random.default_rng(3).integers(0, 1 << 20, n) * 256
    writes = (1 << 30) + np.arange(n, dtype=np.int64) * 256
    probe = Pmem(controllers=1)
    read, write = probe.read(reads, 256), probe.write(writes, 256)
    t_read = max(read.needs.values()) / n  # media ticks per request, alone
    t_write = (max(write.needs.values()) + max(write.writes[0].drain.needs.values())) / n
    assert t_write > 2 * t_read  # a line write costs the media more than a line read
    pmem = Pmem(controllers=1, arbitration="requests")
    (r, w), sched = run_ops(
        lambda now: stage(pmem.read(reads, 256)),
        lambda now: stage(pmem.write(writes, 256)),
        devices=[pmem],
    )
    # one read per write, turn by turn: the reads end after n turns of both costs ...
    assert duration(r) == pytest.approx(n * (t_read + t_write) + read.latency, rel=1e-3)
    # ... while under time sharing they would have ended after 2 n t_read
    assert duration(r) > 1.5 * (2 * n * t_read)
    # the media served exactly what both needed, whoever got the turns
    media = sched.network.use[pmem.resource(0)]
    assert media.busy == pytest.approx(n * (t_read + t_write), rel=1e-6)


def test_a_records_one_header_does_not_lend_its_turn_to_the_entries_beside_it():
    """Log entries and their record's header, served as one stream beside a burst log:
    under turns the header is one request among thousands, so the entries progress as
    they would without it (a stream taking the costliest part's turn would not)."""
    n = 20_000
    entries = (1 << 28) + np.arange(n, dtype=np.int64) * 136
    header = np.array([1 << 27], dtype=np.int64)
    bursts = (1 << 32) + np.arange(4_000, dtype=np.int64) * 4096
    probe = Pmem(controllers=1)
    alone_entries = probe.write(entries, 136, 256)
    assert probe.write(header, 64).turn > 2 * alone_entries.turn  # the header costs a line

    def entries_beside_bursts(with_header: bool) -> int:
        pmem = Pmem(controllers=1)

        def log(now):
            stream = pmem.write(entries, 136, 256)
            return stage(concurrent(stream, pmem.write(header, 64)) if with_header else stream)

        (logged, _), _ = run_ops(
            log, lambda now: stage(pmem.write(bursts, 4096, 64)), devices=[pmem]
        )
        return duration(logged)

    plain, headed = entries_beside_bursts(False), entries_beside_bursts(True)
    assert headed == pytest.approx(plain, rel=0.01)


def test_a_write_stream_arriving_behind_a_backlogged_one_finds_no_free_wpq_entry():
    """While a log is still being accepted, the WPQ is full of its writes: a second
    stream's every write waits for a drained slot, none is accepted at once. Both are
    whole-line writes, so under turns they drain one for one."""
    pmem = Pmem(controllers=1)
    queue = pmem.write_queue
    n = 2 * queue
    log = (1 << 32) + np.arange(40 * queue, dtype=np.int64) * 4096
    late = (1 << 28) + np.arange(n, dtype=np.int64) * 256
    t_write = max(pmem.write(late, 256).needs.values()) / (n - queue)  # media per line
    start = 1_000_000  # 1 us: the log is well into its backlog
    (logged, second), _ = run_ops(
        lambda now: stage(pmem.write(log, 4096, 64)),
        lambda now: stage(pmem.write(late, 256, 256)),
        devices=[pmem],
        starts=[0, start],
    )
    assert logged.end > second.end  # the log stayed backlogged throughout
    # every one of its n writes waited for a slot: n turns of two line writes each
    assert duration(second) == pytest.approx(2 * n * t_write + pmem.write_latency, rel=0.01)


def test_a_write_stream_after_a_half_drained_queue_finds_half_of_it_free():
    """A stream of 3 queue-fulls of lines has been accepted and half its last queue-full
    has drained when a second stream of one queue-full starts: half the WPQ is free, so
    half the second stream waits for drained slots, sharing the media one for one with
    the first stream's remaining drain; both reach the end of that half together."""
    pmem = Pmem(controllers=1)
    queue = pmem.write_queue
    first = (1 << 32) + np.arange(3 * queue, dtype=np.int64) * 256
    second = (1 << 28) + np.arange(queue, dtype=np.int64) * 256
    t_write = max(pmem.write(first, 256).needs.values()) / (2 * queue)  # media per line
    start = round((2 * queue + queue / 2) * t_write)  # accepted, and half the rest drained
    (_, late), _ = run_ops(
        lambda now: stage(pmem.write(first, 256, 256)),
        lambda now: stage(pmem.write(second, 256, 256)),
        devices=[pmem],
        starts=[0, start],
    )
    # its visible half (queue / 2 lines) beside the first's last queue / 2 lines
    assert duration(late) == pytest.approx(queue * t_write + pmem.write_latency, rel=0.01)


def test_a_lookup_overlapping_a_log_is_slower_by_the_shared_time_and_slows_the_log():
    pmem = Pmem(arbitration="time")  # equal shares of media time
    rows = np.random.default_rng(5).integers(0, 1 << 22, 50_000) * 128
    log = (1 << 32) + np.arange(20_000, dtype=np.int64) * 4096
    # needs alone, per controller (balanced streams: every controller the same)
    lookup = pmem.read(rows, 128, 256)
    logw = pmem.write(log, 4096, 64)
    r = max(lookup.needs.values())
    v = max(logw.needs.values())
    w_drain = max(logw.writes[0].drain.needs.values())
    assert v > r  # the log outlasts the lookup
    pmem = Pmem(arbitration="time")
    (alone,), _ = run_ops(lambda now: stage(pmem.read(rows, 128, 256)), devices=[pmem])
    pmem = Pmem(arbitration="time")
    (look, logged), _ = run_ops(
        lambda now: stage(pmem.read(rows, 128, 256)),
        lambda now: stage(pmem.write(log, 4096, 64)),
        devices=[pmem],
    )
    spread = max(lookup.needs.values()) / min(lookup.needs.values())
    assert duration(alone) == pytest.approx(r + lookup.latency, rel=1e-3)
    # both at half speed until the lookup is done: it takes twice its media time ...
    assert duration(look) == pytest.approx(2 * r + lookup.latency, rel=0.01 * spread)
    # ... and the log loses exactly the media time the lookup took
    assert duration(logged) == pytest.approx(v + r + pmem.write_latency, rel=0.01 * spread)
    assert w_drain > 0


def test_ops_starting_together_end_the_same_whichever_is_issued_first():
    rows = np.random.default_rng(7).integers(0, 1 << 22, 30_000) * 128
    log = (1 << 32) + np.arange(8_000, dtype=np.int64) * 4096

    def order(first_read: bool):
        pmem = Pmem()
        bodies = [
            lambda now: stage(pmem.read(rows, 128, 256)),
            lambda now: stage(pmem.write(log, 4096, 64)),
        ]
        records, _ = run_ops(*(bodies if first_read else bodies[::-1]), devices=[pmem])
        return [(r.start, r.end) for r in (records if first_read else records[::-1])]

    assert order(True) == order(False)


def test_a_read_of_lines_still_draining_waits_for_their_drain():
    pmem = _one_controller()
    lines = np.arange(64, dtype=np.int64) * 256  # fits in the WPQ: accepted at once
    engine = Engine()
    sched = Scheduler(engine)
    pmem.bind(engine.event)
    write = sched.op("w", "checkpoint", 0, "dma", lambda now: stage(pmem.write(lines, 256)))
    other = sched.op(
        "r_other", "embedding", 0, "nmp", lambda now: stage(pmem.read(lines + (1 << 30), 256)),
        deps=[write],
    )  # fmt: skip
    same = sched.op(
        "r_same", "embedding", 0, "nmp2", lambda now: stage(pmem.read(lines[-1:], 256)),
        deps=[write],
    )  # fmt: skip
    engine.run()
    drain = 64 * 256 / pmem.ctrl_write_bandwidth * 1e12
    # the write returns after its latency; its 64 lines then drain for `drain` ticks
    assert write.record.end == pmem.write_latency
    # the read of the last line waits for it to drain, then reads it
    assert same.record.end >= write.record.end + drain
    # a read of other lines only shares the media with the drain
    assert other.record.end < same.record.end
    assert pmem.ctrl0.rawStalls.value == 1


def test_persist_ticks_follow_the_progress_under_sharing():
    log = np.arange(4_000, dtype=np.int64) * 256
    reads = (1 << 30) + np.arange(40_000, dtype=np.int64) * 256
    seen = {}
    for contended in (False, True):
        pmem = _one_controller()
        pmem.write_listeners.append(lambda p, c=contended: seen.__setitem__(c, p.ticks))
        bodies = [lambda now, d=pmem: stage(d.write(log, 256, 256))]
        if contended:
            bodies.append(lambda now, d=pmem: stage(d.read(reads, 256, 256)))
        run_ops(*bodies, devices=[pmem])
    alone, shared = seen[False], seen[True]
    assert np.all(np.diff(alone) >= 0) and np.all(np.diff(shared) >= 0)
    # the first WPQ-full of writes persists at issue + latency either way, the rest
    # at half the pace while the reads share the controller
    q = 128
    assert alone[q - 1] == shared[q - 1]
    assert shared[-1] - shared[q] == pytest.approx(2 * (alone[-1] - alone[q]), rel=0.01)
