"""Foresight: digests of a batch's streams made ahead by the batch maker's thread.

The memo (components/memory/memo.py) makes each digest once whichever thread asks
first, and a digest made ahead is what the device would have made itself; the boards'
foresight names exactly the arrays their ops then issue (no big stream is digested
again by the engine); the worker does foresight only while the consumer has not taken
the item (simulate/run/prefetch.py). Mutants of each show the checks can fail.
"""

from __future__ import annotations

import copy
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simrun import timed

from components.memory import Pmem, fused, kernels
from components.memory.memo import DigestMemo
from simulate.run import host, prefetch
from simulate.run.prefetch import made_ahead

pytestmark = pytest.mark.skipif(not kernels.COMPILED, reason="numba not installed")


def read_only(values) -> np.ndarray:
    addr = np.array(values, dtype=np.int64)
    addr.flags.writeable = False
    return addr


# ----- the memo ------------------------------------------------------------------------
def test_two_threads_asking_at_once_make_a_digest_once():
    memo, calls, started = DigestMemo(), [], threading.Event()
    addr = read_only([0, 256])

    def slow():
        calls.append(threading.current_thread().name)
        started.set()
        time.sleep(0.2)
        return "digest"

    other = threading.Thread(target=lambda: memo.foresee("read", addr, (1,), slow))
    other.start()
    started.wait()
    assert memo.get("read", addr, (1,), slow) == "digest"  # waited for the other's
    other.join()
    assert len(calls) == 1


def test_a_failed_digest_is_made_again_by_the_thread_that_asks():
    memo = DigestMemo()
    addr = read_only([0])

    def broken():
        raise ValueError("made ahead, failed")

    memo.foresee("read", addr, (1,), broken)  # the worker's failure is not raised there
    with pytest.raises(ValueError, match="failed"):
        memo.get("read", addr, (1,), broken)  # raised where the engine asks
    assert memo.get("read", addr, (1,), lambda: 7) == 7


def test_write_plans_are_taken_once_reads_kept_writable_arrays_never():
    memo, calls = DigestMemo(), []
    addr = read_only([0, 128])

    def make():
        calls.append(1)
        return len(calls)

    memo.foresee("write", addr, (1,), make)
    assert memo.get("write", addr, (1,), make, keep=False) == 1
    assert memo.get("write", addr, (1,), make, keep=False) == 2  # taken: made again
    assert memo.get("write", addr, (1,), make, keep=False) == 3  # and not kept
    assert memo.get("read", addr, (1,), make) == memo.get("read", addr, (1,), make) == 4
    assert memo.get("read", addr, (2,), make) == 5  # another key: its own
    writable = np.array([0, 128], dtype=np.int64)
    memo.foresee("read", writable, (1,), make)  # nothing made ahead: it may change
    assert memo.get("read", writable, (1,), make) == 6
    assert memo.get("read", writable, (1,), make) == 7  # and made each time


def test_the_memo_holds_at_most_depth_entries_and_a_copy_starts_empty():
    memo = DigestMemo()
    arrays = [read_only([i]) for i in range(DigestMemo.DEPTH + 5)]
    for i, addr in enumerate(arrays):
        memo.get("read", addr, (1,), lambda i=i: i)
    assert len(memo._entries) == DigestMemo.DEPTH
    assert memo.get("read", arrays[-1], (1,), lambda: "again") == len(arrays) - 1
    assert memo.get("read", arrays[0], (1,), lambda: "again") == "again"  # evicted
    assert not copy.deepcopy(memo)._entries


# ----- a device's foresight ------------------------------------------------------------
streams = st.tuples(
    st.lists(st.integers(0, 1 << 20), min_size=1, max_size=300),
    st.sampled_from([64, 128, 136, 256, 512]),
    st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(streams)
def test_a_stream_foreseen_needs_and_counts_what_it_would_have(stream):
    """Whatever the addresses (any order, lines shared, partial lines, bursts), a read
    or write digested ahead gives the device the same needs, bytes and stats."""
    values, size, sort = stream
    addr = read_only(sorted(values) if sort else values)
    for op in ("read", "write"):
        plain, ahead = Pmem(), Pmem()
        getattr(ahead, f"foresee_{op}")(addr, size)
        want, got = timed(plain, op, addr, size), timed(ahead, op, addr, size)
        assert got[0] == want[0]
        np.testing.assert_array_equal(got[2], want[2])
        for field in ("needs", "bytes", "min_ticks", "latency", "requests"):
            assert getattr(got[1], field) == getattr(want[1], field), (op, field)
        assert plain.stat_rows() == ahead.stat_rows()


def count_kernel_calls(monkeypatch, names=("read_summary", "line_writes")) -> list[str]:
    calls = []
    for name in names:
        kernel = getattr(fused, name)

        def counted(*args, kernel=kernel, name=name):
            calls.append(name)
            return kernel(*args)

        monkeypatch.setattr(fused, name, counted)
    return calls


def test_a_foreseen_stream_is_not_digested_again(monkeypatch):
    calls = count_kernel_calls(monkeypatch)
    addr = read_only(np.arange(0, 128 * 1000, 128))
    device = Pmem()
    device.foresee_read(addr, 128)
    device.foresee_write(addr, 128)
    assert calls == ["read_summary", "line_writes"]
    timed(device, "read", addr, 128)
    timed(device, "read", addr, 128)
    timed(device, "write", addr, 128)
    assert calls == ["read_summary", "line_writes"]
    timed(device, "write", addr, 128)  # a write plan serves one stream
    assert calls == ["read_summary", "line_writes", "line_writes"]


def test_what_the_device_would_refuse_or_not_digest_is_not_foreseen(monkeypatch):
    calls = count_kernel_calls(monkeypatch)
    device = Pmem()
    device.foresee_read(read_only([-256, 0]), 128)  # refused when issued
    device.foresee_read(np.arange(0, 1024, 128), 128)  # writable: may change
    device.foresee_read(read_only([0, 256]).astype(np.int32), 128)  # copied when issued
    device.foresee_read(read_only([]), 128)
    device.foresee_write(read_only(np.arange(0, 4096, 256)), 256)  # bursts: no digest
    assert calls == []


def test_an_int64_array_with_another_dtype_object_is_digested_once(monkeypatch):
    """numba's results carry an int64 dtype object that is not numpy's own: np.asarray
    made a new array object of them, so a read-only array read twice was digested
    twice (the mutant)."""
    calls = count_kernel_calls(monkeypatch)
    dtype = np.dtype(np.int64).newbyteorder("=")
    addr = np.arange(0, 128 * 500, 128, dtype=np.int64).view(dtype)
    addr.flags.writeable = False
    assert addr.dtype == np.int64 and np.asarray(addr, dtype=np.int64) is not addr
    device = Pmem()
    device.read(addr, 128)
    device.read(addr, 128)
    assert calls == ["read_summary"]


# ----- the boards' foresight -----------------------------------------------------------
@pytest.mark.parametrize("system", ["cxl", "cxl-b", "cxl-d", "pcie"])
def test_a_near_memory_board_foresees_every_big_stream_it_issues(monkeypatch, tmp_path, system):
    """With each batch's foresight done before it is handed over, the engine digests
    none of the big streams (the lookup's gather, the log copy's reads and writes, the
    update's reads and writes): the pieces name the very arrays the ops issue (the
    mutant making the log entries' addresses anew per call fails). Stats as without."""
    from simrun import simulated_stats

    from simulate.run.options import RunOptions
    from simulate.simulator import run_job

    foreseeing, engine_digests, pieces = [False], [], []
    for name in ("read_summary", "line_writes"):
        kernel = getattr(fused, name)

        def watched(addr, *args, kernel=kernel, name=name):
            if addr.size > 1000 and not foreseeing[0]:
                engine_digests.append(name)
            return kernel(addr, *args)

        monkeypatch.setattr(fused, name, watched)

    def in_line_with_foresight(items, threaded=None, foresight=None):
        for item in items:
            work = foresight(item)
            foreseeing[0] = True
            for piece in work:
                piece()
            foreseeing[0] = False
            pieces.append(len(work))
            yield item

    def run(name: str) -> list[str]:
        options = RunOptions(system=system, model="rm1", batches=4, outdir=str(tmp_path / name))
        run_job(options)
        return simulated_stats(options.outdir)

    monkeypatch.setattr(prefetch, "usable_cpus", lambda: 1)
    plain = run("plain")
    engine_digests.clear()
    monkeypatch.setattr(host, "made_ahead", in_line_with_foresight)
    assert run("foreseen") == plain
    assert pieces == [4] * 4 and engine_digests == []


# ----- the worker ----------------------------------------------------------------------
def run_worker(consumer_delay: float, items: int = 12) -> tuple[list, list]:
    """Foresight pieces done (item, items taken when it began) with a consumer that
    takes ``consumer_delay`` seconds per item."""
    taken, done = [0], []

    def piece(item):
        done.append((item, taken[0]))
        time.sleep(0.002)  # lets the consumer run, as a kernel without the GIL does

    def foresight(item):
        return [lambda item=item: piece(item) for _ in range(3)]

    for _ in made_ahead(iter(range(items)), True, foresight):
        taken[0] += 1
        time.sleep(consumer_delay)
    return done, taken


@pytest.mark.parametrize("delay", [0.0, 0.02])
def test_foresight_is_done_only_on_items_not_yet_taken(delay):
    """A piece of item k never begins once the consumer has taken k: the consumer may
    be doing that work itself (the mutant doing foresight after handing the item over
    fails with a fast consumer)."""
    done, _ = run_worker(delay)
    assert all(item >= taken for item, taken in done), done


def test_a_slow_consumer_finds_the_foresight_of_every_item_done():
    done, _ = run_worker(0.02)
    assert {item for item, _ in done} >= set(range(2, 12))
    assert len(done) >= 3 * 10


def test_in_line_there_is_no_foresight(monkeypatch):
    monkeypatch.setattr(prefetch, "usable_cpus", lambda: 1)
    done = []
    items = made_ahead(iter(range(5)), None, lambda item: [lambda: done.append(item)])
    assert list(items) == list(range(5)) and done == []
