"""Crash states a slower device produces (issue 48): each device's durable ops as late as
what waits for them allows, metadata faults over every bit of the words a decoder
reads, runs with three MLP copies, copies over several slices and fewer GPUs than
CXL-MEMs; the adversary set of tests/late_mutants.py caught at default settings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from late_mutants import (
    ADVERSARIES,
    ESCAPED_BEFORE,
    HELD_OUT,
    RUNS,
    single_run,
)

from components.persistence.cluster import device_of_resource
from components.persistence.explorer import ExploreSettings
from components.persistence.image import RECORD_HEADER
from simulate.failures.crashcheck import CheckSettings, crashcheck
from simulate.failures.oracle import guarantee_for
from simulate.failures.persist_states import sweep_bits
from simulate.failures.recording import build_journal, protocol_for, run_stretch
from simulate.failures.schedules import late_devices

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(scope="module")
def undo_2x2():
    stretch = run_stretch(RUNS["2x2"]("cxl-b"))
    journal = build_journal(protocol_for("cxl-b", stretch.layout), stretch)
    return stretch, journal


def test_a_late_device_moves_only_its_ops_and_keeps_every_dependency(undo_2x2):
    """Each variant delays only the pieces of one device's ops, never earlier, never
    past the start of an op that waits for them (itself moved or not); the coordinator
    (device 0, with its commit logic) and the other device each get one."""
    stretch, journal = undo_2x2
    records = {r.uid: r for r in stretch.records}
    variants = [v for v in late_devices(journal, stretch.records, device_of_resource) if v]
    assert len(variants) == 2
    moved_devices = set()
    for variant in variants:
        delay = variant.journal.hi - journal.hi
        assert (delay >= 0).all() and delay.any()
        assert np.array_equal(variant.journal.hi - variant.journal.lo, journal.hi - journal.lo)
        ops = np.unique(journal.op[delay > 0])
        devices = {device_of_resource(records[int(u)].resource) for u in ops}
        assert len(devices) == 1
        moved_devices |= devices
        assert set(variant.moved) == set(ops.tolist())
        for uid, end in variant.moved.items():
            assert end == records[uid].end + int(delay[journal.op == uid].max())
            for r in stretch.records:
                if uid in r.deps and r.end >= 0:
                    assert end < r.start + variant.moved.get(r.uid, r.end) - r.end
    assert moved_devices == {0, 1}


def test_a_delayed_commit_keeps_its_batch_from_its_new_end(undo_2x2):
    """A commit of N persisting later guarantees R >= N from its new end on (not from
    its recorded end, and not dropped): the bound before it is the previous commit's."""
    stretch, _ = undo_2x2
    commit = [r for r in stretch.records if r.name == "commit" and r.batch == 1][0]
    nxt = [r for r in stretch.records if r.name == "commit" and r.batch == 2][0]
    later = (commit.end + nxt.end) // 2
    recorded = guarantee_for("cluster-undo", stretch)
    moved = guarantee_for("cluster-undo", stretch, moved={commit.uid: later})
    assert recorded.least(commit.end) == 1 and moved.least(commit.end) == 0
    assert moved.least(later) == 1 and moved.least(nxt.end) == 2


@given(st.integers(1, 200))
def test_the_metadata_draws_flip_every_bit_of_a_word(draws):
    """Every bit of a flag, commit or count word is flipped by some draw of a run's
    ``draws`` (or of the first 64, when there are more), each draw flipping ceil(64 / D)
    of them."""
    covered = [b for i in range(max(draws, 64)) for b in sweep_bits(i, draws)]
    assert set(covered) == set(range(64))
    assert all(len(sweep_bits(i, draws)) <= -(-64 // draws) for i in range(draws))


def test_the_new_runs_commit_three_copies_and_copies_over_several_slices():
    """The suite's 2x2 cxl run (8 batches, as tests/test_cluster_failures.py's) commits
    three MLP copies, the third reusing slot 0; in the multi-slice run every copy is
    committed in a batch after its snapshot's."""
    three = run_stretch(RUNS["2x2"]("cxl"))
    assert sum(r.name == "mlp_commit" for r in three.records) >= 3
    multi = run_stretch(RUNS["multi_slice"]("cxl"))
    snaps = sorted({r.batch for r in multi.records if r.name == "mlp_snapshot"})
    commits = sorted(r.batch for r in multi.records if r.name == "mlp_commit")
    assert commits and all(c > s for s, c in zip(snaps, commits, strict=False))


@pytest.fixture(scope="module", params=["rmc2", "rmc2_2x2"])
def rmc2_stretch(request):
    return run_stretch(RUNS[request.param]("cxl"))


def test_copies_over_several_slices_of_rmc2_are_attributed(rmc2_stretch):
    """rmc2's copies span several slices, the first starting with a head (the bytes up
    to the first 4 KiB boundary), from which the relaxed protocol tells which snapshot
    a copy holds. Its requests were once missing: the copies went unwritten, and a
    cluster's MLP commit had no snapshot to name (a TypeError)."""
    protocol = protocol_for("cxl", rmc2_stretch.layout)
    build_journal(protocol, rmc2_stretch)
    devices = getattr(protocol, "protocols", [protocol])
    assert all(snapshot is not None for p in devices for _, snapshot, _, _ in p._slices.values())


def test_the_slices_of_a_copy_write_its_payload_in_order_once(rmc2_stretch):
    """Against the payload's bytes from the layout alone: on each device, the slices of
    a copy write it in order, each one run of bytes starting where the one before
    stopped, in requests that never cross a 4 KiB boundary; some copy spans several
    slices. A slice stopped at its window's end once had persisted whole bursts but not
    the head before them, and the next slice went on after the bursts."""
    layout = rmc2_stretch.layout
    slices = [
        rmc2_stretch.requests[r.uid]
        for r in sorted(rmc2_stretch.records, key=lambda r: r.start)
        if r.name == "mlp_log_slice" and r.uid in rmc2_stretch.requests
    ]
    spans = []
    for lay in getattr(layout, "devices", [layout]):
        for slot in (0, 1):
            header = lay.offset(f"mlp{slot}")
            first, end = header + RECORD_HEADER, header + RECORD_HEADER + 4 * lay.mlp_count
            written = [first]  # where each slice of the copy in progress stopped
            for requests in slices:
                inside = (requests.addr >= first) & (requests.addr < end)
                lo, hi = requests.addr[inside], requests.end[inside]
                if lo.size:
                    assert lo[0] == written[-1] and np.array_equal(lo[1:], hi[:-1])
                    assert np.array_equal(lo // 4096, (hi - 1) // 4096)
                    written.append(int(hi[-1]))
                if (requests.addr == header).any():  # the header: the copy is complete
                    assert written[-1] == end
                    spans.append(len(written) - 1)
                    written = [first]
    assert spans and max(spans) > 1


@pytest.mark.parametrize("system, run", [("cxl-b", "1x2"), ("cxl", "multi_slice"), ("cxl", "rmc2")])
def test_real_protocols_recover_every_late_device_state(system, run):
    """On fewer GPUs than CXL-MEMs, and with copies over several slices (the cxl run of
    8 batches, three copies: tests/test_cluster_failures.py; rmc2's, with a head)."""
    report = crashcheck(RUNS[run](system))
    assert report.violations == []
    assert report.modes["late_device"] > 0


@pytest.mark.parametrize(
    "system, mutant, run", ADVERSARIES, ids=lambda m: getattr(m, "__name__", None)
)
def test_the_adversaries_are_caught_at_default_settings(system, mutant, run):
    report = crashcheck(RUNS[run](system), protocol_class=mutant)
    assert report.violations, f"{mutant.__name__} escaped"


def test_the_held_out_relaxed_mutant_is_caught_on_copies_over_several_slices():
    system, mutant = HELD_OUT
    assert crashcheck(single_run(system), protocol_class=mutant).violations


@pytest.mark.parametrize("name", ["OwnFlagsNotAwaited", "SlotGateOffOneLog"])
def test_coordinator_bugs_need_the_late_devices(name):
    """Escaped before (ESCAPED_BEFORE): without the late-device schedules they still
    do; with them they are caught, in late-device states only."""
    assert name in ESCAPED_BEFORE
    system, mutant, run = [a for a in ADVERSARIES if a[1].__name__ == name][0]
    options = RUNS[run](system)
    quiet = CheckSettings(ExploreSettings(seed=options.seed), late_devices=False)
    without = crashcheck(options, quiet, protocol_class=mutant)
    assert without.violations == []
    caught = crashcheck(options, protocol_class=mutant)
    assert caught.violations and {v["mode"] for v in caught.violations} == {"late_device"}


def _adversary(name: str):
    return [a for a in ADVERSARIES if a[1].__name__ == name][0]


def test_an_unchecked_commit_word_needs_the_metadata_faults():
    """RedoCommitUnchecked (escaped before: one random bit per word) is caught by the
    metadata faults alone: without them it escapes."""
    assert "RedoCommitUnchecked" in ESCAPED_BEFORE
    system, mutant, run = _adversary("RedoCommitUnchecked")
    options = RUNS[run](system)
    quiet = CheckSettings(ExploreSettings(seed=options.seed), metadata=0)
    assert crashcheck(options, quiet, protocol_class=mutant).violations == []
    caught = crashcheck(options, protocol_class=mutant)
    assert {v["mode"] for v in caught.violations} == {"metadata"}


@pytest.mark.parametrize(
    "name, short",
    [("StaleSlotLabel", "two_copies"), ("CompletionBatchLabel", "two_copies")],
)
def test_copy_bugs_need_the_third_copy_or_copies_over_several_slices(name, short):
    """On a 6-batch cxl run (two copies of one slice each) they escape."""
    system, mutant, _ = _adversary(name)
    assert crashcheck(RUNS[short](system), protocol_class=mutant).violations == []
