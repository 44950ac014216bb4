"""Host CPU embedding ops and the CXL-MEM near-memory engine against analytical bounds."""

import numpy as np
import pytest

from components.compute.host import HostCpu
from components.compute.nmp import NearMemoryEngine
from components.memory import Dram, Pmem
from components.sim.units import TICKS_PER_SECOND


def _rows(n, seed=0):
    return np.random.default_rng(seed).integers(0, 2**22, n).astype(np.int64) * 128


def test_host_gather_is_bound_by_memory_level_parallelism():
    cpu, pmem = HostCpu(), Pmem(read_queue=10**6)  # only the CPU's window limits it
    n = 20000
    result = cpu.gather_reduce(pmem, _rows(n), 128, 0)
    window = cpu.cores * cpu.fill_buffers // 2  # 128 B rows take two lines each
    bound = pmem.read_latency * (1 + (n - 1) / window)
    assert result.ticks - cpu.op_overhead == pytest.approx(bound, rel=0.01)
    fewer = HostCpu(cores=1).gather_reduce(Pmem(read_queue=10**6), _rows(n), 128, 0)
    assert fewer.ticks > 5 * result.ticks


def test_host_persist_costs_a_write_latency_per_fence_under_adr():
    rows = _rows(6000)
    plain = HostCpu().update(Pmem(), rows, 128, 0, persist=False)
    adr = HostCpu().update(Pmem(), rows, 128, 0, persist=True)
    eadr = HostCpu().update(Pmem(domain="eadr"), rows, 128, 0, persist=True)
    fence_wait = 6000 * Pmem().write_latency / 6
    assert adr.ticks - plain.ticks == pytest.approx(fence_wait, rel=0.1)
    assert plain.ticks < eadr.ticks < adr.ticks


def test_host_energy_is_busy_cores_times_power():
    cpu = HostCpu()
    result = cpu.gather_reduce(Dram(), _rows(1000), 128, 0)
    assert result.energy_j == pytest.approx(6 * 14 * result.ticks / TICKS_PER_SECOND)
    assert cpu.dynamicEnergy.value == result.energy_j


def test_nmp_lookup_is_bandwidth_bound_for_big_batches():
    nmp, pmem = NearMemoryEngine(), Pmem()
    n = 200000
    result = nmp.lookup(pmem, _rows(n), 128, 0)
    media = result.accesses[0].media_bytes
    assert media == pytest.approx(2 * 128 * n, rel=0.02)  # random rows: whole XPLines
    bound = media * TICKS_PER_SECOND / pmem.read_bandwidth
    assert result.ticks == pytest.approx(bound, rel=0.05)
    small = NearMemoryEngine().lookup(Pmem(), _rows(1), 128, 0)
    assert small.ticks == Pmem().read_latency  # one row: latency bound


def test_nmp_window_is_bounded_by_scratchpad():
    assert NearMemoryEngine(scratchpad="1KiB").window(128) == 8
    assert NearMemoryEngine().window(128) == 256


def test_nmp_update_reads_and_writes_every_row():
    nmp, pmem = NearMemoryEngine(), Pmem()
    rows = np.unique(_rows(5000))
    result = nmp.update(pmem, rows, 128, 0)
    read, write = result.accesses
    assert read.requests == write.requests == rows.size
    assert result.ticks >= pmem.read_latency + write.ticks
    assert result.flops == 2 * rows.size * 32


def test_nmp_checkpoint_copy_and_mlp_counters():
    nmp, pmem = NearMemoryEngine(), Pmem()
    rows = _rows(1000)
    copy = nmp.copy_rows(pmem, rows, 2**34, 128, 0)
    assert copy.accesses[1].media_bytes == 1000 * 128  # sequential log lines combine
    assert nmp.rowsCopied.value == 1000
    nmp.start_mlp_log(10_000)
    nmp.write_log(pmem, 6000, 2**35, 0)
    assert not nmp.mlp_log_complete
    nmp.write_log(pmem, 4000, 2**35, 10**9)
    assert nmp.mlp_log_complete and nmp.mlpBytesReceived.value == 10_000
