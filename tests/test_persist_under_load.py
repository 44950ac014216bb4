"""Under eADR and GPF a write is durable once it has left its issuer, and it leaves
when the served progress lets it: a requester with W requests in flight issues request
k once request k - W is accepted. Load that slows acceptance therefore delays the
persist ticks; before, they followed the idle issue schedule (40k writes beside 200k
reads all persisted by 0.44 ms while the stream ran to 1.54 ms)."""

from __future__ import annotations

import numpy as np
import pytest
from simrun import run_ops

from components.memory.pmem import Pmem
from components.memory.stages import stage, write_range

WINDOW = 64
WRITES = np.arange(4000, dtype=np.int64) * 256
READS = (1 << 28) + np.arange(40000, dtype=np.int64) * 256


def _persist(domain: str, with_reads: bool) -> tuple[np.ndarray, int, int]:
    """(persist ticks of the write stream, its op's end, its acceptance end)."""
    dev = Pmem(domain=domain)
    persisted: list[np.ndarray] = []
    dev.write_listeners.append(lambda p: persisted.append(p.ticks))
    bodies = [lambda now: stage(dev.write(WRITES, 256, WINDOW))]
    if with_reads:
        bodies.append(lambda now: stage(dev.read(READS, 256, 256)))
    records, _ = run_ops(*bodies, devices=[dev])
    return persisted[0], records[0].end, records[0].start


@pytest.mark.parametrize("domain", ["eadr", "gpf"])
def test_persist_ticks_move_with_concurrent_load(domain):
    alone, alone_end, _ = _persist(domain, with_reads=False)
    loaded, loaded_end, _ = _persist(domain, with_reads=True)
    assert loaded_end > alone_end  # the reads slow the writes' acceptance
    # the window ties the last issues to acceptance: they move as the stream's end does
    # (the idle issue schedule moved them by nothing)
    assert loaded.max() - alone.max() >= 0.9 * (loaded_end - alone_end)
    assert loaded.max() <= loaded_end and np.all(loaded >= alone - 1)


def test_a_request_leaves_once_the_one_a_window_before_it_is_accepted():
    """The issue rule, checked against the acceptance ticks ADR reports for the same
    loaded stream (ADR: accepted + write latency)."""
    gpf, _, _ = _persist("gpf", with_reads=True)
    adr, _, _ = _persist("adr", with_reads=True)
    accepted = adr - Pmem().write_latency
    assert np.all(gpf[WINDOW:] >= np.minimum(accepted[:-WINDOW], accepted[WINDOW:]) - 1)
    assert np.all(gpf <= accepted + 1)  # never after its own acceptance


def test_adr_ticks_are_acceptance_plus_the_write_latency_alone_and_loaded():
    for with_reads in (False, True):
        adr, end, _ = _persist("adr", with_reads)
        assert adr.min() >= Pmem().write_latency and adr.max() <= end + Pmem().write_latency


def test_a_write_range_is_accepted_in_address_order_behind_a_full_queue():
    """write_range's head (up to the first burst boundary), whole bursts and tail go out
    one after another: behind a stream that keeps the WPQ full, the head is accepted
    first, the tail last. Served side by side, the head's one request of many lines was
    accepted only as the range's flow ended, so a flow stopped early (a relaxed MLP log
    slice at its window's end) had written bursts after it but not the head."""
    dev = Pmem()
    seen: list = []
    dev.write_listeners.append(seen.append)
    base, burst = 1 << 28, 4096
    start, nbytes = base + 256, 16 * burst  # a head, 15 bursts and a tail
    bodies = [
        lambda now: stage(dev.write(WRITES, 256, WINDOW)),
        lambda now: stage(write_range(dev, start, nbytes, burst, WINDOW)),
    ]
    records, _ = run_ops(*bodies, devices=[dev], starts=[0, 1000])
    parts = {p.size: p for p in seen if p.owner == records[1].uid}
    head, body, tail = parts[burst - 256], parts[burst], parts[256]
    assert head.addresses.tolist() == [start] and tail.addresses.tolist() == [base + 16 * burst]
    assert head.ticks.max() <= body.ticks.min() and body.ticks.max() <= tail.ticks.min()
