"""DDR4 rows, ranks and refresh in Dram's media time, against the datasheet's numbers.

Expectations are worked out from the parameters' sources (Micron MT40A DDR4-2400, JEDEC,
gem5 DDR4_2400_8x8): a 64 B burst takes 64 B / 19.2 GB/s = 3.333 ns on the bus, a rank
switch adds tCS = 1.666 ns, a rank activates at most 4 rows per tFAW = 21 ns, a bank
one per tRC = 46.16 ns, and refresh takes tRFC / tREFI = 350 ns / 7.8 us of the time.
"""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numpy_path import numpy_path
from simrun import timed

from components.memory import Dram, kernels
from components.memory.ddr4 import row_activity
from components.sim.params import ConfigError

BURST_NS = 64 / 19.2e9 * 1e9
AVAILABLE = 1 - 350 / 7800  # refresh
BIG = 2**24  # lines to draw random ones from: rows are hardly ever reopened


def ns_per_line(dram: Dram, op: str, addr: np.ndarray, size: int = 64) -> float:
    """Media time of the busiest controller per line it serves, in ns."""
    stream = getattr(dram, op)(addr.astype(np.int64), size)
    needs = dict(stream.needs)
    for writes in stream.writes:  # posted writes: the last WPQ-full drains afterwards
        for resource, need in writes.drain.needs.items():
            needs[resource] = needs.get(resource, 0.0) + need
    lines_per_ctrl = addr.size * (size // 64) / dram.controllers
    return max(needs.values()) / 1000 / lines_per_ctrl


def random_lines(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).choice(BIG, n, replace=False).astype(np.int64) * 64


def test_sequential_stream_keeps_its_rows_at_the_channel_bandwidth():
    n = 100_000
    seq = np.arange(n, dtype=np.int64) * 64
    assert ns_per_line(Dram(), "read", seq) == pytest.approx(BURST_NS / AVAILABLE, rel=1e-3)
    ticks = timed(Dram(), "read", seq, 64)[0]
    assert n * 64 * 1e12 / ticks == pytest.approx(2 * 19.2e9 * AVAILABLE, rel=0.01)
    # log appends (posted 64 B writes going up through memory) drain at the same rate
    assert ns_per_line(Dram(), "write", seq) == pytest.approx(BURST_NS / AVAILABLE, rel=1e-3)


def test_random_gather_switches_rank_every_other_line():
    # two ranks drawn at random: half the consecutive bursts switch rank (+tCS each);
    # each rank then activates one row per 2 x 4.17 ns, inside its 21 ns / 4 window
    expected = (BURST_NS + 0.5 * 1.666) / AVAILABLE
    assert ns_per_line(Dram(), "read", random_lines(200_000)) == pytest.approx(expected, rel=0.01)
    assert ns_per_line(Dram(), "write", random_lines(200_000, 1)) == pytest.approx(
        expected, rel=0.01
    )


def test_one_rank_random_gather_is_bound_by_the_four_activate_window():
    # no rank switches, but every line opens a row: 21 ns / 4 per line beats 3.33 ns
    expected = 21 / 4 / AVAILABLE
    got = ns_per_line(Dram(ranks=1), "read", random_lines(200_000))
    assert got == pytest.approx(expected, rel=0.01)  # 64 B per 5.5 ns: 11.6 of 19.2 GB/s


def test_rows_of_one_bank_are_bound_by_the_row_cycle():
    # one channel; stride of a row x banks x ranks: every access reopens bank 0 of rank 0
    stride = 8192 * 16 * 2
    addr = np.arange(5000, dtype=np.int64) * stride
    assert ns_per_line(Dram(controllers=1), "read", addr) == pytest.approx(
        46.16 / AVAILABLE, rel=1e-3
    )


def test_a_rows_lines_read_together_share_one_activation():
    # 128 B rows of a table: both lines in one channel (interleave 128 B) are one row hit
    rows = random_lines(100_000) * 2
    one_line = ns_per_line(Dram(ranks=1, interleave="128B"), "read", rows, 64)
    both = ns_per_line(Dram(ranks=1, interleave="128B"), "read", rows, 128)
    assert one_line == pytest.approx(21 / 4 / AVAILABLE, rel=0.01)
    # two lines per activation: 2.6 ns of window per line, so the bus (3.33 ns) bounds
    assert both == pytest.approx(BURST_NS / AVAILABLE, rel=0.01)


def test_refresh_cannot_take_all_the_time():
    with pytest.raises(ConfigError, match="refresh_cycle"):
        Dram(refresh_cycle="8us").read(np.arange(10, dtype=np.int64) * 64, 64)


def reference_activity(ctrl, local, lines_per_row, banks, ranks, controllers):
    """The same counts, one access at a time (an independent implementation)."""
    open_row, last_rank = {}, {}
    acts = np.zeros((controllers, ranks, banks))
    switches = np.zeros(controllers)
    for c, line in zip(ctrl.tolist(), local.tolist(), strict=True):
        index = line // lines_per_row
        bank, rank, row = index % banks, (index // banks) % ranks, index // (banks * ranks)
        if c in last_rank and last_rank[c] != rank:
            switches[c] += 1
        last_rank[c] = rank
        if open_row.get((c, rank, bank)) != row:
            acts[c, rank, bank] += 1
            open_row[(c, rank, bank)] = row
    return acts.sum(axis=2), acts.max(axis=(1, 2)), switches


@settings(max_examples=60, deadline=None)
# a shuffle that changes the activations: the issue-order mutant fails whatever is drawn
@example(
    lines=[0, 128, 256, 0], controllers=1, lines_per_row=1, banks=1, ranks=1, shuffle=True,
    compiled=True,
)  # fmt: skip
@example(
    lines=[0, 128, 256, 0], controllers=1, lines_per_row=1, banks=1, ranks=1, shuffle=True,
    compiled=False,
)  # fmt: skip
@given(
    lines=st.lists(st.integers(0, 4095), min_size=1, max_size=300),
    controllers=st.integers(1, 3),
    lines_per_row=st.sampled_from([1, 2, 8, 128]),
    banks=st.sampled_from([1, 4, 16]),
    ranks=st.integers(1, 3),
    shuffle=st.booleans(),
    compiled=st.booleans(),
)
def test_row_activity_matches_a_line_by_line_replay(
    lines, controllers, lines_per_row, banks, ranks, shuffle, compiled
):
    """Both paths: the compiled one-pass kernel and the numpy definition."""
    local = np.array(lines, dtype=np.int64)
    ctrl = local % controllers
    position = None
    if shuffle:  # each access's place among its controller's (posted writes' ranks)
        shuffled = np.random.default_rng(len(lines)).permutation(local.size)
        in_order = np.lexsort((shuffled, ctrl))
        per_ctrl = np.bincount(ctrl, minlength=controllers)
        position = np.empty(local.size, dtype=np.int64)
        position[in_order] = np.arange(local.size) - np.repeat(
            np.cumsum(per_ctrl) - per_ctrl, per_ctrl
        )
        want = reference_activity(
            ctrl[in_order], local[in_order], lines_per_row, banks, ranks, controllers
        )
    else:
        want = reference_activity(ctrl, local, lines_per_row, banks, ranks, controllers)

    def call():
        return row_activity(ctrl, local, position, controllers, lines_per_row, banks, ranks)

    got = call() if compiled else numpy_path(kernels, call)
    np.testing.assert_array_equal(got.activations, want[0])
    np.testing.assert_array_equal(got.busiest_bank, want[1])
    np.testing.assert_array_equal(got.rank_switches, want[2])


def test_mutant_without_rank_switches_fails_the_random_gather_check(monkeypatch):
    """The random-gather expectation catches a model that forgets the rank switches."""
    from components.memory import ddr4

    real = ddr4.row_activity

    def no_switches(*args):
        activity = real(*args)
        return ddr4.RowActivity(
            activity.activations, activity.busiest_bank, 0 * activity.rank_switches
        )

    monkeypatch.setattr("components.memory.dram.row_activity", no_switches)
    with pytest.raises(AssertionError):
        test_random_gather_switches_rank_every_other_line()


def test_mutant_ignoring_issue_order_fails_the_replay_property(monkeypatch):
    """The property catches a row_activity that reads writes in array order."""
    real = row_activity
    monkeypatch.setitem(
        globals(), "row_activity", lambda c, lines, p, *rest: real(c, lines, None, *rest)
    )
    with pytest.raises(AssertionError):
        test_row_activity_matches_a_line_by_line_replay()
