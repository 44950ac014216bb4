"""DRAM reference figures, SSD page granularity and the host-DRAM vector cache."""

import numpy as np
import pytest
from simrun import media_bytes, timed

from components.memory import Dram, Ssd, SsdWithCache
from components.sim.units import TICKS_PER_SECOND


def test_dram_idle_latency_and_channel_bandwidth():
    dram = Dram()
    refresh = 350 / 7800  # tRFC / tREFI: a burst's share of refresh (tests/test_memory_ddr4.py)
    burst = 64 / 19.2e9 * TICKS_PER_SECOND
    assert dram.idle_read_latency == 100_000
    one = timed(dram, "read", [0], 64)[0]
    assert one == pytest.approx(100_000 + burst * refresh / (1 - refresh), abs=1)
    n = 50000
    ticks = timed(Dram(), "read", np.arange(n, dtype=np.int64) * 64, 64)[0]
    assert n * 64 * TICKS_PER_SECOND / ticks == pytest.approx(2 * 19.2e9 * (1 - refresh), rel=0.01)
    assert dram.read_bandwidth == 2 * 19.2e9


def test_dram_outstanding_bounds_bandwidth():
    n, outstanding = 20000, 4
    ticks = timed(Dram(), "read", np.arange(n, dtype=np.int64) * 64, 64, outstanding)[0]
    expected = 100_000 + (n - 1) * 100_000 / outstanding  # Little's law
    assert ticks == pytest.approx(expected, rel=1e-4)


def test_ssd_table2_ratios():
    ssd, dram = Ssd(), Dram(controllers=1)
    assert ssd.idle_read_latency / dram.idle_read_latency == pytest.approx(165)
    assert ssd.read_bandwidth / dram.read_bandwidth == pytest.approx(0.02)


def test_ssd_row_costs_a_page():
    rng = np.random.default_rng(0)
    addr = rng.choice(2**20, 1000, replace=False).astype(np.int64) * 4096 + 128
    ticks, stream, _ = timed(Ssd(), "read", addr, 128)
    assert media_bytes(stream) == 1000 * 4096
    page_ticks = timed(Ssd(), "read", addr - 128, 4096)[0]
    assert page_ticks == pytest.approx(ticks, rel=0.01)  # same pages moved


def test_ssd_log_appends_combine_into_pages():
    # 136 B log entries appended in order: whole pages written, no read-modify-write
    entries = np.arange(3000, dtype=np.int64) * 136
    ssd = Ssd()
    _, stream, _ = timed(ssd, "write", entries, 136)
    pages = -(-3000 * 136 // 4096)
    assert ssd.ctrl0.mediaBytesWritten.value == pages * 4096
    assert ssd.ctrl0.rmwReads.value <= 1  # only the last, partly filled page
    assert media_bytes(stream) <= (pages + 1) * 4096


def test_vector_cache_hits_on_reuse():
    dev = SsdWithCache()
    rows = np.random.default_rng(1).choice(10**6, 2000, replace=False).astype(np.int64) * 128
    cold = timed(dev, "read", rows, 128)[0]
    assert dev.misses.value == 2000 and dev.hits.value == 0
    warm = timed(dev, "read", rows, 128)[0]
    assert dev.hits.value == 2000
    assert warm * 50 < cold  # DRAM instead of 16.5 us pages


def test_vector_cache_capacity_evicts_least_recent():
    dev = SsdWithCache(cache_capacity=100 * 128)
    first = np.arange(100, dtype=np.int64) * 128
    dev.read(first, 128)
    dev.read(first[:50] + 10**9, 128)  # 50 new rows evict the 50 oldest
    dev.read(first, 128)
    assert dev.hits.value == 50


def test_repeated_rows_within_one_op_hit():
    dev = SsdWithCache()
    dev.read(np.array([0, 128, 0, 0, 128], dtype=np.int64), 128)
    assert (dev.hits.value, dev.misses.value) == (3, 2)


def test_ssd_energy_is_counted_once():
    from components.energy import EnergyReport

    dev = SsdWithCache()
    timed(dev, "read", np.arange(1000, dtype=np.int64) * 4096, 128)
    report = EnergyReport.build(dev, TICKS_PER_SECOND)
    dynamic = dev.ssd.dynamicEnergy.value + dev.dram.dynamicEnergy.value
    assert report.dynamic == pytest.approx(dynamic)
