"""PMEM model: Table 2 ratios, Optane figures, XPLine amplification, combining, RAW,
persistence offsets, interleaving and parameter validation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.memory import Dram, Pmem
from components.sim.params import ConfigError
from components.sim.units import TICKS_PER_SECOND

GAP = TICKS_PER_SECOND


def _bandwidth(dev, op, size=256, n=20000):
    access = getattr(dev, op)(np.arange(n, dtype=np.int64) * size, size, 0)
    return n * size * TICKS_PER_SECOND / access.ticks


def _latency(dev, op):
    return getattr(dev, op)(np.array([4096]), 64, 0).ticks


def test_table2_ratios_against_dram_model():
    pmem, dram = Pmem(), Dram(controllers=4)  # ratios are per channel: same channel count
    assert _latency(pmem, "read") / _latency(dram, "read") == pytest.approx(3, rel=0.15)
    assert _latency(pmem, "write") / _latency(dram, "write") == pytest.approx(7, rel=0.15)
    assert _bandwidth(pmem, "read") / _bandwidth(dram, "read") == pytest.approx(0.6, rel=0.15)
    assert _bandwidth(pmem, "write") / _bandwidth(dram, "write") == pytest.approx(0.1, rel=0.15)


def test_idle_read_latency_matches_optane():
    assert _latency(Pmem(), "read") == pytest.approx(305_000, rel=0.15)
    assert _latency(Pmem.optane(), "read") == 305_000


def test_optane_preset_bandwidth_per_dimm():
    dev = Pmem.optane(controllers=1)
    assert _bandwidth(dev, "read") == pytest.approx(6.6e9, rel=0.05)
    assert _bandwidth(dev, "write") == pytest.approx(2.3e9, rel=0.05)


def test_random_128B_reads_move_whole_xplines():
    rng = np.random.default_rng(0)
    addr = rng.choice(2**22, 5000, replace=False).astype(np.int64) * 256  # distinct lines
    access = Pmem().read(addr, 128, 0)
    assert access.media_bytes == 2 * 128 * addr.size


def test_sequential_reads_hit_the_xpbuffer():
    access = Pmem().read(np.arange(4000, dtype=np.int64) * 128, 128, 0)
    assert access.media_bytes == 4000 * 128


def test_write_combining_sequential_vs_random():
    n = 4096
    seq = Pmem().write(np.arange(n, dtype=np.int64) * 64, 64, 0)
    assert seq.media_bytes == n * 64  # four 64 B writes fill each 256 B line, no RMW
    rng = np.random.default_rng(1)
    rand_addr = rng.choice(2**24, n, replace=False).astype(np.int64) * 256
    dev = Pmem()
    rand = dev.write(rand_addr, 64, 0)
    assert rand.media_bytes == n * (256 + 256)  # line write + read-modify-write
    assert sum(dev._children[f"ctrl{c}"].rmwReads.value for c in range(4)) == n
    assert rand.ticks > seq.ticks


def test_raw_stall_only_when_reading_draining_lines():
    dev = Pmem()
    lines = np.arange(20000, dtype=np.int64) * 256
    write = dev.write(lines, 256, 0)
    hot = dev.read(lines[-100:], 256, write.ticks)  # just written, still draining
    assert hot.raw_stall_ticks > 0
    assert dev.rawStallTicks.value == hot.raw_stall_ticks
    cold = dev.read(lines[-100:] + 2**30, 256, write.ticks)  # other lines: no stall
    assert cold.raw_stall_ticks == 0
    later = dev.read(lines[-100:], 256, write.ticks + GAP)  # drained by then
    assert later.raw_stall_ticks == 0


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
    access = dev.write(addr.astype(np.int64), size, 0, outstanding=256)
    persist = access.persist_ticks
    assert persist.size == n
    assert persist.min() >= 0 and persist.max() <= access.ticks
    ctrl = (addr // dev.interleave) % dev.controllers
    for c in range(dev.controllers):
        assert np.all(np.diff(persist[ctrl == c]) >= 0)


def test_adr_persists_later_than_gpf():
    addr = np.arange(5000, dtype=np.int64) * 256
    adr = Pmem(domain="adr").write(addr, 256, 0).persist_ticks
    gpf = Pmem(domain="gpf").write(addr, 256, 0).persist_ticks
    assert np.all(adr >= gpf) and adr[0] == Pmem().write_latency and gpf[0] == 0


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_interleaving_spreads_requests(seed):
    dev = Pmem()
    seq = np.arange(64 * 4096 // 256, dtype=np.int64) * 256
    dev.read(seq, 256, 0)
    counts = [dev._children[f"ctrl{c}"].readReqs.value for c in range(4)]
    assert len(set(counts)) == 1
    dev = Pmem()
    rand = np.random.default_rng(seed).integers(0, 2**30 // 256, 40000) * 256
    dev.read(rand.astype(np.int64), 256, 0)
    counts = np.array([dev._children[f"ctrl{c}"].readReqs.value for c in range(4)])
    assert np.all(np.abs(counts - 10000) < 5 * np.sqrt(10000 * 0.75))  # 5 sigma binomial


def test_hierarchical_stat_names():
    names = [row[0] for row in Pmem().stat_rows()]
    assert "pmem.ctrl0.bytesRead" in names and "pmem.ctrl3.readAmplification" in names


def test_controllers_override_adds_children():
    dev = Pmem()
    dev.controllers = 6
    dev.read(np.arange(100, dtype=np.int64) * 4096, 64, 0)
    assert dev._children["ctrl5"].readReqs.value > 0


def test_negative_latency_is_a_config_error_naming_the_param():
    with pytest.raises(ConfigError, match="read_latency"):
        Pmem(read_latency="-5ns")
    with pytest.raises(ConfigError, match="domain"):
        Pmem(domain="battery")
    with pytest.raises(ConfigError, match="ctrl_write_bandwidth"):
        Pmem(ctrl_write_bandwidth="0GB/s")
