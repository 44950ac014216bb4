"""Checkpoint store presets (components/memory/stores.py): each reaches the engine with
its published figures, is selectable on the command line and in sweeps, and a name
that is not a preset is refused in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from components.sim.units import TICKS_PER_SECOND
from simulate.run.configure import connected_board
from simulate.run.options import RunOptions
from simulate.sweeps.spec import SpecError, load_sweep
from workloads.models import get_model

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "trainingcxl.py"

# (read, write) bytes per second and latency in seconds, from each preset's source
PUBLISHED = {
    "table2-ssd": (0.384e9, 0.384e9, 16.5e-6),  # TrainingCXL Table 2
    "nvme-gen4": (6.5e9, 3.5e9, 16.5e-6),  # Samsung PM9A3 U.2 datasheet
    "object-store": (6.269e9, 6.269e9, 50e-3),  # s3-benchmark, p3dn.24xlarge
}


def _board(store: str | None):
    from components.sim.engine import Engine
    from components.sim.schedule import Scheduler

    options = RunOptions(system="dram", model="rmc1", batch_size=64, checkpoint="cpr", store=store)
    engine = Engine()
    scheduler = Scheduler(engine)
    return connected_board(options, get_model("rmc1"), 64, engine, scheduler), engine, scheduler


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_a_checkpoint_dump_takes_the_presets_published_write_bandwidth(name):
    """A CPR dump: the tables read from DRAM and written to the store in order; the
    slower side at its streaming bandwidth, plus the first latencies and the op
    overhead."""
    board, engine, scheduler = _board(name)
    nbytes = board.ft.recovery_bytes(board)
    op = scheduler.op("dump", "checkpoint", -1, None, lambda now: board.ft.dump(board, nbytes))
    engine.run()
    read_bw, write_bw, latency = PUBLISHED[name]
    dram = board.storage
    size = board.layout.regions()["data"][1]
    seconds = max(nbytes / write_bw, size / (dram.controllers * dram.ctrl_read_bandwidth))
    first = max(latency * TICKS_PER_SECOND, dram.idle_read_latency) + board.host.op_overhead
    assert op.record.end - op.record.start == pytest.approx(
        seconds * TICKS_PER_SECOND + first, rel=1e-6
    )
    assert board.ft.store.read_bandwidth == pytest.approx(read_bw)


def test_the_default_store_is_table_2s_ssd():
    default, _, _ = _board(None)
    table2, _, _ = _board("table2-ssd")
    assert default.ft.store.config() == table2.ft.store.config()


def test_a_set_overrides_the_preset():
    options = RunOptions(
        system="dram", model="rmc1", batch_size=64, checkpoint="cpr", store="nvme-gen4",
        sets=[("board.ft.store.ctrl_write_bandwidth", "1GB/s")],
    )  # fmt: skip
    from components.sim.engine import Engine
    from components.sim.schedule import Scheduler

    engine = Engine()
    board = connected_board(options, get_model("rmc1"), 64, engine, Scheduler(engine))
    assert board.ft.store.ctrl_write_bandwidth == pytest.approx(1e9)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--checkpoint", "cpr", "--store", "tape"], "--store 'tape': one of"),
        (["--store", "nvme-gen4"], "add --checkpoint"),
    ],
)
def test_a_bad_store_is_one_line_and_exit_2(tmp_path, args, needle):
    done = subprocess.run(
        [sys.executable, str(CONFIG), "--system", "dram", *args, "--outdir", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert needle in lines[0]


def test_a_sweep_varies_the_store(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'outroot = "{tmp_path / "out"}"\n[fixed]\nsystem = "dram"\ncheckpoint = "cpr"\n'
        '[axes]\nstore = ["table2-ssd", "nvme-gen4", "object-store"]\n'
    )
    sweep = load_sweep(spec)
    assert [r.options.store for r in sweep.runs] == ["table2-ssd", "nvme-gen4", "object-store"]
    assert len({r.id for r in sweep.runs}) == 3
    spec.write_text(
        f'outroot = "{tmp_path / "out"}"\n[fixed]\nsystem = "dram"\ncheckpoint = "cpr"\n'
        '[axes]\nstore = ["tape"]\n'
    )
    with pytest.raises(SpecError, match="tape"):
        load_sweep(spec)
