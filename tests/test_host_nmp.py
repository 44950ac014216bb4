"""Host CPU embedding ops and the CXL-MEM near-memory engine against analytical bounds."""

import numpy as np
import pytest
from simrun import duration, run_ops

from components.compute.host import HostCpu
from components.compute.nmp import NearMemoryEngine
from components.memory import Dram, Pmem
from components.sim.units import TICKS_PER_SECOND


def _rows(n, seed=0):
    return np.random.default_rng(seed).integers(0, 2**22, n).astype(np.int64) * 128


def alone(body, *devices, unit=None):
    (record,), sched = run_ops(body, devices=devices, units=[unit] if unit else None)
    return duration(record), sched


def test_host_gather_is_bound_by_memory_level_parallelism():
    cpu, pmem = HostCpu(), Pmem(read_queue=10**6)  # only the CPU's window limits it
    n = 20000
    ticks, _ = alone(lambda now: cpu.gather_reduce(pmem, _rows(n), 128), pmem)
    window = cpu.cores * cpu.fill_buffers // 2  # 128 B rows take two lines each
    bound = pmem.read_latency * (1 + (n - 1) / window)
    assert ticks - cpu.op_overhead == pytest.approx(bound, rel=0.01)
    slow = Pmem(read_queue=10**6)
    fewer, _ = alone(lambda now: HostCpu(cores=1).gather_reduce(slow, _rows(n), 128), slow)
    assert fewer > 5 * ticks


def test_host_persist_overlaps_its_fence_chain_with_the_stream():
    rows = np.arange(6000, dtype=np.int64) * 136
    times = {}
    for domain in ("adr", "eadr"):
        pmem, cpu = Pmem(domain=domain), HostCpu()
        times[domain], _ = alone(lambda now, c=cpu, p=pmem: c.persist_rows(p, rows, 136), pmem)
    pmem, cpu = Pmem(), HostCpu()
    stream = pmem.write(rows, 136, cpu.outstanding(136))
    visible = max(stream.needs.values())
    chain = 6000 * (pmem.write_latency + cpu.sfence_latency) / cpu.cores
    # under ADR each core's fences wait a write latency each: the chain, not the stream,
    # sets the pace when it is longer; the two overlap (max, not sum)
    assert chain > visible
    expected = chain + pmem.write_latency + cpu.op_overhead
    assert times["adr"] == pytest.approx(expected, rel=0.01)
    assert times["eadr"] < times["adr"]


def test_host_energy_is_busy_cores_times_power():
    cpu, dram = HostCpu(), Dram()
    ticks, sched = alone(
        lambda now: cpu.gather_reduce(dram, _rows(1000), 128), dram, unit="host.cpu"
    )
    cpu.absorb_use(sched.network.use, sched.resources)
    assert cpu.busyTicks.value == ticks
    assert cpu.dynamicEnergy.value == pytest.approx(6 * 14 * ticks / TICKS_PER_SECOND)


def test_nmp_lookup_is_bandwidth_bound_for_big_batches():
    nmp, pmem = NearMemoryEngine(), Pmem()
    n = 200000
    ticks, sched = alone(lambda now: nmp.lookup(pmem, _rows(n), 128), pmem)
    media = sum(pmem._children[f"ctrl{c}"].mediaBytesRead.value for c in range(4))
    assert media == pytest.approx(2 * 128 * n, rel=0.02)  # random rows: whole XPLines
    busiest = max(sched.network.use[pmem.resource(c)].busy for c in range(4))
    assert ticks == pytest.approx(busiest, rel=0.01)  # the busiest controller sets the pace
    assert busiest == pytest.approx(
        media / 4 * TICKS_PER_SECOND / pmem.ctrl_read_bandwidth, rel=0.02
    )
    one = Pmem()
    single, _ = alone(lambda now: NearMemoryEngine().lookup(one, _rows(1), 128), one)
    assert single == Pmem().read_latency  # one row: latency bound


def test_nmp_window_is_bounded_by_scratchpad():
    assert NearMemoryEngine(scratchpad="1KiB").window(128) == 8
    assert NearMemoryEngine().window(128) == 256


def test_nmp_update_reads_and_writes_every_row_on_shared_media():
    nmp, pmem = NearMemoryEngine(), Pmem()
    rows = np.unique(_rows(5000))
    ticks, sched = alone(lambda now: nmp.update(pmem, rows, 128), pmem)
    ctrls = [pmem._children[f"ctrl{c}"] for c in range(4)]
    assert sum(c.readReqs.value for c in ctrls) >= rows.size
    assert sum(c.writeReqs.value for c in ctrls) == rows.size
    assert nmp.flops.value == 2 * rows.size * 32
    # reads, RMW reads and line writes share each controller's media: the op lasts at
    # least the busiest controller's sum of them (the WPQ's tail drains afterwards)
    read_s = [c.mediaBytesRead.value / pmem.ctrl_read_bandwidth for c in ctrls]
    write_s = [c.mediaBytesWritten.value / pmem.ctrl_write_bandwidth for c in ctrls]
    media = max(r + w for r, w in zip(read_s, write_s, strict=True)) * TICKS_PER_SECOND
    per_line = 1 / pmem.ctrl_write_bandwidth + 1 / pmem.ctrl_read_bandwidth  # with its RMW
    drain = pmem.write_queue * pmem.access_unit * per_line * TICKS_PER_SECOND
    assert media - drain <= ticks <= media + pmem.read_latency + pmem.write_latency


def test_nmp_checkpoint_copy_and_mlp_counters():
    nmp, pmem = NearMemoryEngine(), Pmem()
    rows = _rows(1000)
    entries = 2**34 + np.arange(1000, dtype=np.int64) * 136
    alone(lambda now: nmp.copy_rows(pmem, rows, 128, entries, 136, 2**34 - 64), pmem)
    written = sum(pmem._children[f"ctrl{c}"].mediaBytesWritten.value for c in range(4))
    assert written == pytest.approx(1000 * 136 + 256, abs=2 * 256)  # entries combine in lines
    assert nmp.rowsCopied.value == 1000
    nmp.start_mlp_log(10_000)
    nmp.count_mlp(6000)
    assert not nmp.mlp_log_complete
    nmp.count_mlp(4000)
    assert nmp.mlp_log_complete and nmp.mlpBytesReceived.value == 10_000
