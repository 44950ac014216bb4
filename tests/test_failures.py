"""Injected power failures: recovery (timed on the device model, also when interrupted),
resume, verdicts; Adagrad runs recover exactly; one recorded run per failure run."""

import numpy as np
import pytest

from components.persistence.image import PmemImage
from components.persistence.protocols import PROTOCOLS
from components.persistence.writes import all_words
from simulate.failures import inject, recording
from simulate.failures.inject import failure_ticks, run_with_failures
from simulate.failures.oracle import expected_for, reference_from, same_bits, verdict
from simulate.failures.recording import build_journal, initial_image, run_stretch
from simulate.failures.recovery import time_protocol_recovery as time_recovery
from simulate.run.options import RunOptions, UsageError

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def tiny(system: str, batches: int = 4, **extra) -> RunOptions:
    return RunOptions(
        system=system, model="rmc1", rows=64, batch_size=8, batches=batches, progress=False,
        **extra,
    )  # fmt: skip


def cut_during_update(options):
    """(stretch, protocol, image cut in the middle of batch 1's in-place update)."""
    stretch = run_stretch(options)
    image = initial_image(options, state=stretch.initial_state())
    protocol = PROTOCOLS[options.system](image.layout)
    journal = build_journal(protocol, stretch)
    update = [r for r in stretch.records if r.name == "update" and r.batch == 1][0]
    journal.image_at(image.words, (update.start + update.end) // 2)
    return stretch, protocol, image


@pytest.mark.parametrize("system", ["cxl-b", "pmem", "cxl"])
def test_a_failure_at_any_point_of_a_recovery_is_survived(system):
    """Each recovery epoch interrupted with a torn subset of its writes, the ones before
    it durable, then a fresh recovery: the same state, the one the protocol guarantees."""
    stretch, protocol, crash = cut_during_update(tiny(system, batches=3))
    want = expected_for(protocol.system_kind, crash)
    clean = protocol.recover(crash.copy())
    plan = protocol.plan(crash.copy())
    epochs = [e for e in plan.epochs if any(g.count for g in e)]
    assert epochs  # there is something to roll back or replay
    rng = np.random.default_rng(3)
    for k in range(len(epochs)):
        for _ in range(5):
            image = crash.copy()
            for epoch in epochs[:k]:
                dst, values = all_words(epoch)
                image.words[dst] = values
            dst, values = all_words(epochs[k])
            keep = rng.random(dst.size) < 0.5
            image.words[dst[keep]] = values[keep]
            again = protocol.recover(image)
            assert again.batch == clean.batch and same_bits(again.table, clean.table)
            assert same_bits(again.mlp, clean.mlp)
    reference = reference_from(stretch.initial_state())
    reference.extend(stretch.facts)
    assert verdict(reference, clean, want)[0] in ("exact", "within_gap")


@pytest.mark.parametrize("system", ["cxl-b", "cxl-d", "ssd"])
def test_strict_systems_resume_to_the_failure_free_model_bit_for_bit(system):
    horizon = run_stretch(tiny(system)).end_tick
    at = [str(horizon * 3 // 10), str(horizon * 3 // 10 + 1000), str(horizon * 7 // 10)]
    results = run_with_failures(tiny(system, fail_at=at))
    assert len(results) == 2  # the second instant falls inside the first recovery
    assert results[0]["interrupted_recoveries"] == 1
    for entry in results:
        assert entry["verdict"] == "exact" and entry["final_model_exact"] is True
        assert entry["recovery_ms"] > 0 and entry["recovery_energy_j"] > 0
        assert entry["resume_batch"] <= entry["batch"] + 1 and entry["phase"]


@pytest.mark.parametrize("system", ["cxl-b", "pmem"])
def test_adagrad_runs_recover_exactly(system):
    horizon = run_stretch(tiny(system)).end_tick
    options = tiny(system, fail_at=[str(horizon * 3 // 10), str(horizon * 7 // 10)])
    results = run_with_failures(options, optimizer="adagrad")
    assert [e["verdict"] for e in results] == ["exact", "exact"]
    assert all(e["final_model_exact"] for e in results)  # accumulators included


def test_relaxed_cxl_recovers_the_specific_copy_its_protocol_designates():
    options = tiny("cxl", batches=6, fail_random=3, seed=5)
    results = run_with_failures(options)
    assert results and all(e["verdict"] in ("exact", "within_gap") for e in results)
    assert all(e["resume_batch"] >= e["mlp_batch"] for e in results)


def test_dram_restarts_from_the_initial_weights():
    horizon = run_stretch(tiny("dram")).end_tick
    (entry,) = run_with_failures(tiny("dram", fail_at=[str(horizon // 2)]))
    assert entry["resume_batch"] == 0 and entry["batches_redone"] == entry["batch"]
    assert entry["verdict"] == "exact" and entry["final_model_exact"]


def test_recovery_time_comes_from_the_device_model():
    """The recovery's streams on the table device: never faster than its bytes at the
    device's full bandwidth plus one access latency; slower on the SSD than on PMEM."""
    costs = {}
    for system in ("pmem", "ssd"):
        options = tiny(system, batches=3)
        _, protocol, crash = cut_during_update(options)
        rec = protocol.plan(crash)
        run = time_recovery(options, rec, protocol)
        device = run_stretch(tiny(system, batches=1)).board.table_memory()
        floor = rec.bytes_written / device.write_bandwidth + rec.bytes_read / device.read_bandwidth
        assert run.ticks / 1e12 >= floor + device.idle_read_latency / 1e12
        assert run.energy > 0 and len(run.journal) > 0
        assert run.journal.end <= run.ticks
        costs[system] = run.ticks
    assert costs["ssd"] > 5 * costs["pmem"]


def test_a_failure_run_simulates_the_failure_free_run_once(monkeypatch):
    calls = []
    real = recording.run_stretch

    def counting(options, start=0, *args, **kwargs):
        calls.append(start)
        return real(options, start, *args, **kwargs)

    monkeypatch.setattr(inject, "run_stretch", counting)
    options = tiny("cxl-b", fail_at=["0.2ms"])
    (entry,) = run_with_failures(options, inject.record_run(options))
    assert calls == [0, entry["resume_batch"]]  # the recorded run, then the resumed one
    assert entry["resume_batch"] > 0


def test_failure_ticks_parse_times_and_draw_seeded_random_ones():
    options = tiny("cxl", fail_at=["3.2ms", "1000"], fail_random=2, seed=9)
    ticks = failure_ticks(options, 10**9)
    assert 3_200_000_000 in ticks and 1000 in ticks and len(ticks) == 4
    assert ticks == failure_ticks(options, 10**9) == sorted(ticks)
    with pytest.raises(UsageError, match="--fail-at 'soon'"):
        failure_ticks(tiny("cxl", fail_at=["soon"]), 10)


def test_pmem_image_file_outlives_the_run(tmp_path):
    path = str(tmp_path / "pmem.img")
    horizon = run_stretch(tiny("cxl-b", batches=3)).end_tick
    run_with_failures(tiny("cxl-b", batches=3, fail_at=[str(horizon // 2)], pmem_image=path))
    image = PmemImage.open(path)
    final = run_stretch(tiny("cxl-b", batches=3)).model
    assert np.array_equal(image.table(), final.table)
    assert image.flag("emb0") == 2 or image.flag("emb1") == 2
    assert image.identity["system"] == "cxl-b" and image.identity["batch_size"] == 8
