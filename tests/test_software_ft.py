"""Software failure tolerance (components/boards/software_ft.py): checkpoint bytes and
time against their analytical values, Check-N-Run's differential against the rows the
batches modified, the quantizer's error bound, and refusals."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from simrun import duration, run_ops
from test_cli import parse_stats

from components.boards.software_ft import bulk_stage
from components.memory.dram import Dram
from components.memory.ssd import Ssd
from components.persistence.quantize import dequantize, error_bound, quantize, quantized_row_bytes
from components.sim.engine import Engine
from components.sim.schedule import Scheduler
from components.sim.units import TICKS_PER_SECOND
from simulate.run.configure import connected_board, input_generator
from simulate.run.options import RunOptions
from workloads.models import get_model
from workloads.opgraph import build_demand

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "trainingcxl.py"
SMALL = ["--model", "rmc1", "--batch-size", "64"]


def _run(tmp_path: Path, *args: str) -> tuple[dict, dict]:
    subprocess.run(
        [sys.executable, str(CONFIG), *SMALL, *args, "--outdir", str(tmp_path), "--no-progress"],
        check=True,
        capture_output=True,
    )
    results = json.loads((tmp_path / "results.json").read_text())
    return results, parse_stats(tmp_path / "stats.txt")


def test_a_bulk_copy_takes_the_slower_side_at_streaming_bandwidth():
    """10 GB from DRAM to the NVMe store: the store's write bandwidth bounds it."""
    dram, store = Dram(), Ssd()
    for device in (dram, store):
        device.capacity = "64GiB"
    nbytes = 10 * 10**9
    records, _ = run_ops(
        lambda now: bulk_stage(("read", dram, nbytes), ("write", store, nbytes)),
        devices=[dram, store],
    )
    store_ticks = nbytes / (store.controllers * store.ctrl_write_bandwidth) * TICKS_PER_SECOND
    dram_ticks = nbytes / (dram.controllers * dram.ctrl_read_bandwidth) * TICKS_PER_SECOND
    first = max(dram.idle_read_latency, store.idle_write_latency)
    assert duration(records[0]) == pytest.approx(max(store_ticks, dram_ticks) + first, abs=2)


def test_a_cpr_checkpoint_writes_every_table_and_the_mlps(tmp_path):
    results, stats = _run(tmp_path, "--system", "dram", "--batches", "3", "--checkpoint", "cpr",
                          "--ckpt-interval", "1e-9")  # fmt: skip
    spec = get_model("rmc1")
    row_bytes = spec.embedding_dim * 4
    tables, mlps = spec.total_rows * row_bytes, spec.mlp_param_count * 4
    assert int(stats["board.ft.checkpoints"]) == 3
    assert int(stats["board.ft.checkpointBytes"]) == 3 * (tables + mlps)
    assert int(stats["board.ft.checkpointRows"]) == 3 * spec.total_rows
    # each batch pays at least the dump at the store's bandwidth
    store_s = (tables + mlps) / 0.384e9
    assert min(results["batch_times_ms"]) >= 1e3 * store_s


def test_check_n_run_writes_exactly_the_rows_modified_since_the_last_checkpoint(tmp_path):
    """First checkpoint full, then every batch's own unique rows (one per batch)."""
    batches = 4
    _, stats = _run(tmp_path, "--system", "dram", "--batches", str(batches),
                    "--checkpoint", "check-n-run", "--ckpt-interval", "1e-9")  # fmt: skip
    spec = get_model("rmc1")
    options = RunOptions(system="dram", model="rmc1", batch_size=64)
    generator = input_generator(options, spec, 64)
    unique, previous = [], None
    for n in range(batches):
        batch = generator.batch(n)
        unique.append(len(build_demand(spec, batch, n, previous).lookup.unique_rows))
        previous = batch
    assert int(stats["board.ft.checkpoints"]) == batches
    assert int(stats["board.ft.checkpointRows"]) == spec.total_rows + sum(unique[1:])
    row, mlps = spec.embedding_dim * 4, spec.mlp_param_count * 4
    written = spec.total_rows * row + sum(unique[1:]) * row + batches * mlps
    assert int(stats["board.ft.checkpointBytes"]) == written


def test_quantized_checkpoints_store_codes_and_a_range_per_row(tmp_path):
    _, stats = _run(tmp_path, "--system", "dram", "--batches", "2", "--checkpoint",
                    "check-n-run", "--ckpt-interval", "1e-9", "--quantize", "4")  # fmt: skip
    spec = get_model("rmc1")
    rows = int(stats["board.ft.checkpointRows"])
    mlps = spec.mlp_param_count * 4
    per_row = math.ceil(spec.embedding_dim * 4 / 8) + 8
    assert per_row == quantized_row_bytes(spec.embedding_dim, 4)
    assert int(stats["board.ft.checkpointBytes"]) == rows * per_row + 2 * mlps


@given(
    arrays(np.float32, st.tuples(st.integers(1, 20), st.integers(1, 64)),
           elements=st.floats(-1e3, 1e3, width=32)),
    st.sampled_from([4, 8]),
)  # fmt: skip
@settings(max_examples=200, deadline=None)
def test_quantization_error_stays_within_half_a_step(rows, bits):
    codes, low, step = quantize(rows, bits)
    back = dequantize(codes, low, step)
    slack = 4 * np.finfo(np.float32).eps * np.maximum(np.abs(rows).max(axis=1), 1)
    assert np.all(np.abs(back - rows) <= (error_bound(step) + slack)[:, None])
    assert codes.max(initial=0) < 2**bits


def test_paper_protocols_are_unchanged_by_the_option(tmp_path):
    a, _ = _run(tmp_path / "a", "--system", "pmem", "--batches", "3")
    b, _ = _run(tmp_path / "b", "--system", "pmem", "--batches", "3", "--checkpoint", "paper")
    assert a["batch_times_ms"] == b["batch_times_ms"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--system", "cxl", "--checkpoint", "cpr"], "host-resident tables"),
        (["--system", "dram", "--checkpoint", "cpr", "--quantize", "8"], "Check-N-Run's"),
        (["--system", "dram", "--checkpoint", "check-n-run", "--quantize", "3"], "invalid choice"),
        (["--system", "dram", "--checkpoint", "cpr", "--mtbf", "-5"], "positive"),
        (["--system", "dram", "--checkpoint", "cpr", "--mtbf", "nan"], "positive"),
        (["--system", "dram", "--mtbf", "3600"], "add --checkpoint"),
        (["--system", "dram", "--checkpoint", "cpr", "--pmem-image", "x.img"], "board.ft.store"),
    ],
)
def test_software_ft_options_that_mean_nothing_are_refused_in_one_line(tmp_path, args, needle):
    done = subprocess.run(
        [sys.executable, str(CONFIG), *args, "--outdir", str(tmp_path), "--no-progress"],
        capture_output=True,
        text=True,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("trainingcxl.py: error:") and needle in lines[0]


def _connected(policy: str, **fields):
    options = RunOptions(system="dram", model="rmc1", batch_size=64, checkpoint=policy, **fields)
    engine = Engine()
    scheduler = Scheduler(engine)
    spec = get_model("rmc1")
    return connected_board(options, spec, 64, engine, scheduler), engine, scheduler


def test_a_cpr_recovery_reads_the_checkpoint_back_at_the_stores_bandwidth():
    """Recovery = the full checkpoint read from the store into DRAM, in order, then the
    MLPs to the GPU: the slower side of the copy, its first latencies, the op overhead,
    and the MLP copy (timed alone on a second board)."""
    board, engine, scheduler = _connected("cpr")
    op = scheduler.op("recovery", "recovery", -1, None, lambda now: board.ft.recovery(board))
    engine.run()
    mlp_board, mlp_engine, mlp_scheduler = _connected("cpr")
    mlp = mlp_scheduler.op(
        "mlp", "recovery", -1, None, lambda now: mlp_board.mlp_to_gpu(mlp_board.layout.mlp_bytes)
    )
    mlp_engine.run()
    store, dram = board.ft.store, board.storage
    read = board.ft.recovery_bytes(board)
    size = board.layout.regions()["data"][1]
    bulk_ticks = max(
        read / (store.controllers * store.ctrl_read_bandwidth),
        size / (dram.controllers * dram.ctrl_write_bandwidth),
    ) * TICKS_PER_SECOND  # fmt: skip
    first = max(store.idle_read_latency, dram.idle_write_latency) + board.host.op_overhead
    expected = bulk_ticks + first + (mlp.record.end - mlp.record.start)
    assert op.record.end - op.record.start == pytest.approx(expected, abs=3)
    assert read == size + board.layout.mlp_bytes


def test_check_n_run_takes_a_new_baseline_once_its_differentials_would_outgrow_one(tmp_path):
    """Tables of 60 rows that every batch mostly touches: differentials are about as
    large as the whole, so full and differential checkpoints alternate by the rule."""
    batches = 6
    _, stats = _run(tmp_path, "--system", "dram", "--batches", str(batches), "--rows", "60",
                    "--checkpoint", "check-n-run", "--ckpt-interval", "1e-9")  # fmt: skip
    spec = get_model("rmc1").capped(60)
    options = RunOptions(system="dram", model="rmc1", batch_size=64, rows=60)
    generator = input_generator(options, spec, 64)
    row, mlps = spec.embedding_dim * 4, spec.mlp_param_count * 4
    full_bytes, since, rows, written, previous = 0, 0, 0, 0, None
    for n in range(batches):
        batch = generator.batch(n)
        unique = len(build_demand(spec, batch, n, previous).lookup.unique_rows)
        previous = batch
        diff = unique * row + mlps
        if full_bytes == 0 or since + diff > full_bytes:
            full_bytes, since = spec.total_rows * row + mlps, 0
            rows, written = rows + spec.total_rows, written + full_bytes
        else:
            since, rows, written = since + diff, rows + unique, written + diff
    assert int(stats["board.ft.checkpointRows"]) == rows
    assert int(stats["board.ft.checkpointBytes"]) == written
    assert rows > spec.total_rows * 2  # the rule did take a new baseline
