"""Injected power failures: recovery (also when interrupted), resume, verdicts."""

import numpy as np
import pytest

from components.persistence.image import PmemImage
from components.persistence.protocols import PROTOCOLS
from workloads.failures import failure_ticks, run_with_failures
from workloads.options import RunOptions, UsageError
from workloads.oracle import Reference, same_bits
from workloads.recording import build_journal, initial_image, simulate

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def tiny(system: str, batches: int = 4, **extra) -> RunOptions:
    return RunOptions(
        system=system, model="rmc1", rows=64, batch_size=8, batches=batches, progress=False,
        **extra,
    )  # fmt: skip


@pytest.mark.parametrize("system", ["cxl-b", "pmem", "cxl"])
def test_a_failure_during_recovery_is_survived(system):
    """Every prefix of a recovery's writes, then a fresh recovery: the same state."""
    options = tiny(system, batches=3)
    stretch = simulate(options)
    base = initial_image(options)
    protocol = PROTOCOLS[system](base)
    journal = build_journal(protocol, stretch).frozen()
    update = [r for r in stretch.records if r.name == "update" and r.batch == 1][0]
    crash = PmemImage(base.layout, journal.image_at(base.buf, (update.start + update.end) // 2))
    clean = protocol.recover(crash.copy())
    plan = protocol.plan(crash.copy())
    assert plan.writes  # there is something to roll back or replay
    for k in range(0, len(plan.writes) + 1, max(len(plan.writes) // 7, 1)):
        image = crash.copy()
        for offset, data in plan.writes[:k]:
            image.write(offset, data)
        again = protocol.recover(image)
        assert again.batch == clean.batch and same_bits(again.table, clean.table)
        assert same_bits(again.mlp, clean.mlp)
    reference = Reference(base.table().copy(), base.mlp_record("base")[1])
    reference.extend(stretch.facts)
    assert same_bits(clean.table, reference.table_at(clean.batch))


@pytest.mark.parametrize("system", ["cxl-b", "cxl-d", "ssd"])
def test_strict_systems_resume_to_the_failure_free_model_bit_for_bit(system):
    horizon = simulate(tiny(system)).end_tick
    at = [str(horizon * 3 // 10), str(horizon * 3 // 10 + 1000), str(horizon * 7 // 10)]
    results = run_with_failures(tiny(system, fail_at=at))
    assert len(results) == 2  # the second instant falls inside the first recovery
    assert results[0]["interrupted_recoveries"] == 1
    for entry in results:
        assert entry["verdict"] == "exact"
        assert entry["final_model_exact"] is True
        assert entry["recovery_ms"] > 0 and entry["recovery_energy_j"] > 0
        assert entry["resume_batch"] <= entry["batch"] + 1
        assert entry["phase"]


def test_relaxed_cxl_recovers_embeddings_exactly_and_mlps_within_the_gap():
    options = tiny("cxl", batches=6, fail_random=3, seed=5, sets=[("board.mlp_log_gap", "2")])
    results = run_with_failures(options)
    assert results and all(e["verdict"] in ("exact", "within_gap") for e in results)
    assert all(e["resume_batch"] - e["mlp_batch"] >= 0 for e in results)


def test_dram_restarts_from_the_initial_weights():
    horizon = simulate(tiny("dram")).end_tick
    (entry,) = run_with_failures(tiny("dram", fail_at=[str(horizon // 2)]))
    assert entry["resume_batch"] == 0 and entry["batches_redone"] == entry["batch"]
    assert entry["verdict"] == "exact" and entry["final_model_exact"]


def test_failure_ticks_parse_times_and_draw_seeded_random_ones():
    options = tiny("cxl", fail_at=["3.2ms", "1000"], fail_random=2, seed=9)
    ticks = failure_ticks(options, 10**9)
    assert 3_200_000_000 in ticks and 1000 in ticks and len(ticks) == 4
    assert ticks == failure_ticks(options, 10**9) == sorted(ticks)
    with pytest.raises(UsageError, match="--fail-at 'soon'"):
        failure_ticks(tiny("cxl", fail_at=["soon"]), 10)


def test_pmem_image_file_outlives_the_run(tmp_path):
    path = str(tmp_path / "pmem.img")
    horizon = simulate(tiny("cxl-b", batches=3)).end_tick
    run_with_failures(tiny("cxl-b", batches=3, fail_at=[str(horizon // 2)], pmem_image=path))
    image = PmemImage.open(path)
    final = simulate(tiny("cxl-b", batches=3)).model
    assert np.array_equal(image.table(), final.table)
    assert image.flag("emb0") == 2 or image.flag("emb1") == 2
