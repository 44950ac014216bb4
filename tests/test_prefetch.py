"""simulate/run/prefetch.py: items made on the worker thread come in order and unchanged,
an error there is raised at the consumer where it happened, at most one item is made
ahead, closing stops the thread; and a run gives the same stats with and without it."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simrun import simulated_stats

from simulate.run import prefetch
from simulate.run.options import RunOptions
from simulate.run.prefetch import made_ahead
from simulate.simulator import run_job


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers()), st.booleans())
def test_items_come_in_order_and_unchanged(items, threaded):
    assert list(made_ahead(iter(items), threaded)) == items


def failing_after(count: int):
    yield from range(count)
    raise ValueError("trace.bin: truncated")


@pytest.mark.parametrize("threaded", [True, False])
def test_an_error_is_raised_at_the_item_it_stopped_at(threaded):
    got = []
    with pytest.raises(ValueError, match="truncated"):
        for item in made_ahead(failing_after(3), threaded):
            got.append(item)
    assert got == [0, 1, 2]


def test_at_most_one_item_is_made_ahead_and_closing_stops_the_worker():
    made = []

    def items():
        for n in range(100):
            made.append(n)
            yield n

    others = set(threading.enumerate())  # another test's worker may still be ending
    ahead = made_ahead(items(), True)
    assert next(ahead) == 0
    (worker,) = set(threading.enumerate()) - others
    time.sleep(0.3)  # room for the worker to run ahead, were it unbounded
    assert len(made) <= 3  # the one handed over, one queued, one being made
    ahead.close()
    assert not worker.is_alive()
    assert len(made) <= 3


def test_the_gil_switches_faster_while_a_worker_runs():
    """WORKER_SWITCH_INTERVAL from the first worker's start to the last one's stop,
    then the interval before, also when a worker stops on an error."""
    before = sys.getswitchinterval()
    first = made_ahead(iter(range(5)), True)
    next(first)
    assert sys.getswitchinterval() == pytest.approx(prefetch.WORKER_SWITCH_INTERVAL) != before
    second = made_ahead(failing_after(1), True)
    next(second)
    first.close()
    assert sys.getswitchinterval() == pytest.approx(prefetch.WORKER_SWITCH_INTERVAL)
    with pytest.raises(ValueError, match="truncated"):
        next(second)
    assert sys.getswitchinterval() == before
    assert list(made_ahead(iter(range(3)), False)) == [0, 1, 2]
    assert sys.getswitchinterval() == before


def test_one_usable_cpu_makes_the_items_in_line(monkeypatch):
    monkeypatch.setattr(prefetch, "usable_cpus", lambda: 1)
    threads = []

    def items():
        threads.append(threading.current_thread())
        yield 1

    assert list(made_ahead(items())) == [1]
    assert threads == [threading.main_thread()]


def run_stats(options: RunOptions) -> list[str]:
    run_job(options)
    return simulated_stats(options.outdir)


@pytest.mark.parametrize("system,model", [("cxl", "rm1"), ("cxl-b", "rmc1"), ("ssd", "rmc2")])
def test_a_run_gives_the_same_stats_with_and_without_the_worker(
    monkeypatch, tmp_path, system, model
):
    options = dict(system=system, model=model, batches=4, seed=3, progress=False)
    monkeypatch.setattr(prefetch, "usable_cpus", lambda: 2)
    threaded = run_stats(RunOptions(**options, outdir=str(tmp_path / "threaded")))
    monkeypatch.setattr(prefetch, "usable_cpus", lambda: 1)
    assert run_stats(RunOptions(**options, outdir=str(tmp_path / "inline"))) == threaded


@pytest.mark.parametrize(
    "cpus,runs,threaded", [(2, 1, True), (2, 2, False), (8, 4, True), (8, 5, False)]
)
def test_a_sweeps_runs_get_the_thread_only_with_two_cpus_each(monkeypatch, cpus, runs, threaded):
    monkeypatch.setattr(prefetch, "usable_cpus", lambda: cpus)
    monkeypatch.setattr(prefetch, "_sharing", 1)
    prefetch.share_cpus(runs)
    where = []

    def items():
        where.append(threading.current_thread() is threading.main_thread())
        yield 1

    assert list(made_ahead(items())) == [1]
    assert where == [not threaded]


def test_a_local_sweeps_workers_are_told_how_many_share_the_cpus(monkeypatch):
    from simulate.sweeps import executors

    told = []
    monkeypatch.setattr(prefetch, "share_cpus", told.append)
    monkeypatch.setattr(executors, "_die_with", lambda parent: None)
    monkeypatch.setattr(executors.signal, "signal", lambda *a: None)
    executors._init_worker(1, 3)
    assert told == [3]
