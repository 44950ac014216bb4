"""CPR-SSU (components/boards/software_ft.py CprCheckpoint.ssu_share): after a full
checkpoint each one saves a seeded uniform sample of ceil(share x used) of the rows
looked up since the previous one, and stores those rows' bytes plus the MLPs; the same
seed draws the same samples, another seed others; MFU and SSU together are refused."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.boards.software_ft import CprCheckpoint
from simulate.failures.recording import run_stretch
from simulate.run.configure import input_generator, resolve_functional
from simulate.run.options import RunOptions
from workloads.opgraph import build_demand

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
ROOT = Path(__file__).resolve().parents[1]


def ssu(share: float, seed: int, uses: np.ndarray) -> CprCheckpoint:
    """A CPR-SSU policy of run seed ``seed`` whose rows were looked up ``uses`` times."""
    policy = CprCheckpoint(ssu_share=share)
    object.__setattr__(policy, "seed", seed)
    object.__setattr__(policy, "_uses", uses)
    return policy


@settings(max_examples=60, deadline=None)
@given(
    st.floats(0.001, 1.0, exclude_max=True),
    st.lists(st.integers(0, 499), min_size=0, max_size=300),
    st.integers(0, 2**31),
    st.integers(0, 50),
)
def test_a_sample_is_ceil_share_x_used_distinct_used_rows_fixed_by_the_seed(
    share, looked_up, seed, checkpoint
):
    uses = np.zeros(500, np.int64)
    np.add.at(uses, np.asarray(looked_up, np.int64), 1)
    sample = ssu(share, seed, uses).sub_sampled(checkpoint)
    used = set(np.flatnonzero(uses).tolist())
    assert len(sample) == math.ceil(share * len(used))
    assert set(sample.tolist()) <= used and len(set(sample.tolist())) == len(sample)
    assert np.all(np.diff(sample) > 0)  # in row order
    assert np.array_equal(sample, ssu(share, seed, uses).sub_sampled(checkpoint))


def test_another_seed_or_checkpoint_draws_another_sample():
    uses = np.ones(1000, np.int64)
    draws = []
    for seed, checkpoint in ((1, 3), (2, 3), (1, 4)):
        draws.append(ssu(0.1, seed, uses).sub_sampled(checkpoint))
    assert all(len(d) == 100 for d in draws)
    assert not np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[0], draws[2])


def tiny(seed: int = 1, batches: int = 3, share: str = "0.25") -> RunOptions:
    return RunOptions(system="dram", model="rmc1", rows=64, batch_size=8, batches=batches,
                      progress=False, checkpoint="cpr", ckpt_interval=1e-9, seed=seed,
                      sets=[("board.ft.ssu_share", share)])  # fmt: skip


def test_a_ssu_checkpoint_saves_a_sample_of_the_rows_its_interval_used_and_their_bytes():
    """Checkpoints every batch: batch 0's is full, batch 1's holds ceil(0.25 x the rows
    batch 1 looked up), all among them, and stores them x 4 x dim bytes plus the MLPs at
    FP32; a run of the same seed takes the same rows."""
    warnings.simplefilter("ignore", RuntimeWarning)
    options = tiny(batches=2)
    stretch = run_stretch(options)
    spec, batch_size = resolve_functional(options)
    generator = input_generator(options, spec, batch_size)
    demand = build_demand(spec, generator.batch(1), 1, generator.batch(0))
    used = np.unique(demand.lookup.rows)
    full, partial = stretch.board.ft.taken
    assert full.full and not partial.full
    assert len(partial.rows) == math.ceil(0.25 * len(used))
    assert set(partial.rows.tolist()) <= set(used.tolist())
    mlps = spec.mlp_param_count * 4
    assert partial.stored == len(partial.rows) * spec.embedding_dim * 4 + mlps
    assert full.stored == spec.total_rows * spec.embedding_dim * 4 + mlps
    again = run_stretch(options).board.ft.taken[1]
    assert np.array_equal(again.rows, partial.rows)
    # the checkpoint op read exactly the sample from the tables (what the oracle trusts)
    assert np.array_equal(stretch.checkpoint_reads[partial.write.record.uid], partial.rows)


def test_another_run_seed_samples_other_rows():
    warnings.simplefilter("ignore", RuntimeWarning)
    rows = [run_stretch(tiny(seed=s, batches=4)).board.ft.taken for s in (1, 2)]
    partial = [[t.rows for t in taken if not t.full] for taken in rows]
    assert partial[0] and partial[1]
    assert any(not np.array_equal(a, b) for a, b in zip(*partial, strict=False))


def test_share_one_is_plain_cpr():
    warnings.simplefilter("ignore", RuntimeWarning)
    taken = run_stretch(tiny(share="1")).board.ft.taken
    assert all(t.full for t in taken)


def test_mfu_and_ssu_together_are_refused_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "configs" / "trainingcxl.py"), "--system", "dram",
         "--model", "rmc1", "--rows", "64", "--batch-size", "8", "--batches", "2",
         "--checkpoint", "cpr", "--ckpt-interval", "1e-9", "--outdir", str(tmp_path / "o"),
         "--set", "board.ft.mfu_share=0.5", "--set", "board.ft.ssu_share=0.5"],
        capture_output=True, text=True,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1
    assert "mfu_share" in lines[0] and "ssu_share" in lines[0]
