"""Power failures in software-policy runs (simulate/failures/software.py): what recovery reads
back against an independent failure-free run cut at the checkpoint, a write torn by the
failure falling back to the previous checkpoint, recovery time against bytes / store
bandwidth + latencies, and the run's end."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from components.persistence.checkpoints import ChainRecovery, CheckpointStore
from components.sim.engine import Engine
from components.sim.schedule import Scheduler
from components.sim.units import TICKS_PER_SECOND, ticks_to_ms
from simulate.failures.inject import run_with_failures
from simulate.failures.oracle import StretchHistory, same_bits
from simulate.failures.recording import run_stretch
from simulate.failures.recovery import time_store_recovery as time_recovery
from simulate.failures.software import stored_of
from simulate.run.configure import connected_board, input_generator, resolve_functional
from simulate.run.options import RunOptions
from workloads.opgraph import build_demand

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
ROOT = Path(__file__).resolve().parents[1]


def tiny(policy: str, batches: int = 5, **extra) -> RunOptions:
    return RunOptions(
        system="dram", model="rmc1", rows=64, batch_size=8, batches=batches, progress=False,
        checkpoint=policy, **{"ckpt_interval": 1e-9, **extra},
    )  # fmt: skip


def writes(stretch):
    """(batch, write start, write end) of each checkpoint, in order."""
    return [(t.batch, t.write.record.start, t.write.record.end) for t in stretch.board.ft.taken]


def failed(options, stretch, tick):
    return run_with_failures(replace(options, fail_at=[f"{tick}t"]), stretch)[0]


def trained_to(options, batch) -> np.ndarray:
    """The tables after ``batch`` in a separate failure-free run."""
    return run_stretch(replace(options, batches=batch + 1)).model.table


@pytest.mark.parametrize("policy", ["cpr", "check-n-run"])
def test_a_failure_inside_a_checkpoint_write_falls_back_to_the_previous_one(policy):
    options = tiny(policy)
    stretch = run_stretch(options)
    b2, start2, end2 = writes(stretch)[2]
    inside = failed(options, stretch, (start2 + end2) // 2)
    after = failed(options, stretch, end2)
    assert inside["checkpoint_batch"] == b2 - 1 and after["checkpoint_batch"] == b2
    assert inside["verdict"] == after["verdict"] == "exact"
    if policy == "check-n-run":  # replayed: the end is the failure-free run's
        assert inside["resume_batch"] == b2 and inside["final_model_exact"]
    else:  # CPR goes on with the interrupted batch, the one in flight
        assert inside["resume_batch"] == inside["batch"]


@pytest.mark.parametrize("policy", ["cpr", "check-n-run"])
def test_the_state_read_back_is_exactly_the_checkpointed_batchs(policy):
    """Full and differential checkpoints chained, read back at each write's end: bit
    for bit the tables of a separate run stopped after that batch."""
    options = tiny(policy)
    stretch = run_stretch(options)
    store = CheckpointStore(stored_of(stretch, 0, StretchHistory(stretch), 0, ChainRecovery(), 32))
    start = stretch.initial_state()
    kinds = set()
    for batch, _, end in writes(stretch):
        got = ChainRecovery().recover(store.at(end), end, (start.table, start.mlp))
        kinds.add(len(got.chain))
        assert got.batch == batch and same_bits(got.table, trained_to(options, batch))
    assert policy == "cpr" or max(kinds) > 1  # a differential was applied


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_recovery_stays_within_half_a_step_of_the_true_rows(bits):
    options = tiny("check-n-run", quantize=str(bits))
    stretch = run_stretch(options)
    codec = ChainRecovery()
    store = CheckpointStore(stored_of(stretch, 0, StretchHistory(stretch), 0, codec, bits))
    start = stretch.initial_state()
    for batch, _, end in writes(stretch):
        got = codec.recover(store.at(end), end, (start.table, start.mlp))
        true = trained_to(options, batch).astype(np.float64)
        step = (true.max(axis=1) - true.min(axis=1)) / (2**bits - 1)
        slack = 4 * np.finfo(np.float32).eps * np.maximum(np.abs(true).max(axis=1), 1)
        error = np.abs(got.table - true)
        assert np.all(error <= (step / 2 + slack)[:, None])
        assert error.max() > step.min() / 100  # quantized, not a lossless copy
    entry = failed(options, stretch, writes(stretch)[2][2])
    assert entry["verdict"] == "within_bound" and not entry["final_model_exact"]


def test_a_recovery_takes_its_bytes_over_the_stores_bandwidth_plus_latencies():
    """CPR: the full checkpoint (every row and the MLPs) read from board.ft.store into
    DRAM, the slower side of the copy, first latencies and op overhead, then the MLPs
    to the GPU (timed alone on a second board)."""
    options = tiny("cpr")
    stretch = run_stretch(options)
    batch, _, end = writes(stretch)[1]
    entry = failed(options, stretch, end + 1)
    spec, batch_size = resolve_functional(options)
    engine = Engine()
    scheduler = Scheduler(engine)
    board = connected_board(options, spec, batch_size, engine, scheduler)
    op = scheduler.op("mlp", "x", -1, None, lambda now: board.mlp_to_gpu(board.layout.mlp_bytes))
    engine.run()
    size = spec.total_rows * spec.embedding_dim * 4
    nbytes = size + spec.mlp_param_count * 4
    store, dram = board.ft.store, board.storage
    read_s = nbytes / (store.controllers * store.ctrl_read_bandwidth)
    bulk = max(read_s, size / (dram.controllers * dram.ctrl_write_bandwidth)) * TICKS_PER_SECOND
    first = max(store.idle_read_latency, dram.idle_write_latency) + board.host.op_overhead
    expected = bulk + first + op.record.end - op.record.start
    assert entry["recovery_bytes"] == nbytes and entry["checkpoint_batch"] == batch
    assert entry["recovery_ms"] == pytest.approx(ticks_to_ms(expected), abs=1e-5)


def test_a_failure_during_recovery_starts_it_over():
    options = tiny("cpr")
    stretch = run_stretch(options)
    end = writes(stretch)[1][2]
    ticks, _ = time_recovery(options, stretch.board.ft.taken[0].stored)
    two = replace(options, fail_at=[f"{end + 1}t", f"{end + 1 + ticks // 3}t"])
    first = run_with_failures(two, stretch)[0]
    assert first["interrupted_recoveries"] == 1
    assert first["recovery_ms"] == pytest.approx(ticks_to_ms(ticks // 3 + ticks), abs=1e-6)


def test_cpr_gives_up_the_batches_since_its_checkpoint():
    """One checkpoint (batch 0, the interval outlasts the run): a failure in batch 4's
    update loses batches 1-3, and training goes on with batch 4 from batch 0's state."""
    options = tiny("cpr", batches=6, ckpt_interval=1e3)
    stretch = run_stretch(options)
    assert [b for b, _, _ in writes(stretch)] == [0]
    update = [r for r in stretch.records if r.batch == 4 and r.name == "update"][0]
    entry = failed(options, stretch, (update.start + update.end) // 2)
    assert entry["checkpoint_batch"] == 0 and entry["resume_batch"] == entry["batch"] == 4
    assert entry["batches_lost"] == 3 and entry["verdict"] == "exact"
    assert not entry["final_model_exact"]


def test_with_no_checkpoint_a_failure_restarts_from_the_initial_weights():
    options = tiny("none")
    stretch = run_stretch(options)
    entry = failed(options, stretch, stretch.end_tick // 2)
    assert entry["resume_batch"] == 0 and entry["checkpoint_batch"] is None
    assert entry["recovery_ms"] == 0 and entry["batches_redone"] == entry["batch"]
    assert entry["verdict"] == "exact" and entry["final_model_exact"]


def test_the_cli_injects_failures_into_a_software_policy_run(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "configs" / "trainingcxl.py"), "--system", "pmem",
         "--model", "rmc1", "--rows", "64", "--batch-size", "8", "--batches", "4",
         "--checkpoint", "check-n-run", "--ckpt-interval", "1e-9", "--fail-random", "2",
         "--outdir", str(tmp_path), "--no-progress"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    failure = json.loads((tmp_path / "results.json").read_text())["failure"]
    failures = failure if isinstance(failure, list) else [failure]
    recoveries = len(failures) + sum(f["interrupted_recoveries"] for f in failures)
    assert recoveries == 2 and {f["verdict"] for f in failures} == {"exact"}


def test_the_accuracy_study_loses_accuracy_only_where_the_policy_gives_up_work():
    """Replays (none, Check-N-Run FP32) end on the failure-free model: no change; CPR
    gives up batches."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ft_accuracy.py"), "--batches", "16",
         "--interval", "4", "--failures", "1", "--model", "rmc1", "--rows", "64"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in done.stdout.splitlines()
            if line.startswith("| ") and "policy" not in line}  # fmt: skip
    assert set(rows) == {"none", "cpr", "cpr-mfu 1/8", "check-n-run", "check-n-run 8-bit",
                         "check-n-run 4-bit"}  # fmt: skip
    for name in ("none", "check-n-run"):
        assert rows[name][-1].strip() == "+0.0000"
    assert int(rows["cpr"][2]) > 0 and rows["cpr"][-1].strip() != "+0.0000"


def test_only_what_the_next_recovery_can_read_is_kept():
    """CPR, a failure just after checkpoint 2's write: the store keeps that full one
    (older ones can never be read again) and nothing begun after the failure."""
    options = tiny("cpr")
    stretch = run_stretch(options)
    batch, _, end = writes(stretch)[2]
    kept = stored_of(stretch, 0, StretchHistory(stretch), 0, ChainRecovery(), 32, until=end)
    assert [c.batch for c in kept] == [batch]


MFU = [("board.ft.mfu_share", "0.25")]


def test_a_cpr_mfu_checkpoint_saves_the_rows_looked_up_most_since_the_last_one():
    """After the full checkpoint of batch 0, batch 1's saves the quarter of the rows its
    lookups hit most often (ties: lower rows first), and their bytes plus the MLPs."""
    options = tiny("cpr", batches=2, sets=MFU)
    stretch = run_stretch(options)
    spec, batch_size = resolve_functional(options)
    generator = input_generator(options, spec, batch_size)
    demand = build_demand(spec, generator.batch(1), 1, generator.batch(0))
    uses = np.bincount(demand.lookup.rows, minlength=spec.total_rows)
    ranked = sorted(np.flatnonzero(uses), key=lambda r: (-uses[r], r))
    want = sorted(ranked[: spec.total_rows // 4])
    full, partial = stretch.board.ft.taken
    assert full.full and partial.rows.tolist() == want
    assert partial.stored == len(want) * spec.embedding_dim * 4 + spec.mlp_param_count * 4


@pytest.mark.parametrize("share", ["board.ft.mfu_share", "board.ft.ssu_share"])
def test_cpr_mfu_recovers_each_row_as_last_saved_not_the_checkpoints_whole_state(share):
    options = tiny("cpr", sets=[(share, "0.25")])
    stretch = run_stretch(options)
    partial = [t for t in stretch.board.ft.taken if not t.full][0]
    end = partial.write.record.end
    store = CheckpointStore(stored_of(stretch, 0, StretchHistory(stretch), 0, ChainRecovery(), 32))
    start = stretch.initial_state()
    got = ChainRecovery().recover(store.at(end), end, (start.table, start.mlp))
    whole = trained_to(options, partial.batch)
    assert got.batch == partial.batch and not same_bits(got.table, whole)
    assert same_bits(got.table[partial.rows], whole[partial.rows])
    entry = failed(options, stretch, end)
    assert entry["verdict"] == "exact" and entry["checkpoint_batch"] == partial.batch
