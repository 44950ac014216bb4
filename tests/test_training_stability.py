"""Numerical health of functional runs: presets train stably at their default lr (also
with tables capped small), capped tables start at the full model's scale, and a
non-finite loss stops a run with one line naming the batch."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from simulate import simulator
from workloads.dlrm import DLRM
from workloads.inputs import InputGenerator
from workloads.models import PRESETS, ModelSpec, get_model
from workloads.training import FunctionalTrainer, TrainingDiverged, default_lr

SATURATED = 100 / 8
"""The loss of a batch of 8 with one prediction saturated wrong (BCE clamps log at
-100): a model that has diverged produces such batches; a training one never does."""
BATCHES = 6
"""Without the fixes, RM1 and RM2 capped at 64 rows reach a loss of 75 at batch 1 and
RMC2 one of 37-75 by batch 2-3 (NaN by batch 7-8): six batches show either."""


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_trains_stably_at_its_default_lr_with_small_tables(name):
    """64 rows per table and batches of 8, as in the README's failure examples: the
    regime where sum-pooled bags repeat their hottest row most (the hardest case)."""
    spec = get_model(name).capped(64)
    generator = InputGenerator(spec, 8, seed=2)
    trainer = FunctionalTrainer.create(spec, seed=2, relaxed=True)
    for n in range(BATCHES):
        trainer.step(generator.batch(n))  # raises TrainingDiverged on a NaN
    losses = np.array(trainer.losses)
    assert np.isfinite(losses).all() and losses.max() < SATURATED, losses


def test_rmc2_diverges_at_the_generic_lr_which_is_why_it_has_its_own():
    """The case of the issue: RMC2 capped at 64 rows sums 120 lookups per bag, ~28 of
    them the hottest row; SGD at 0.01 leaves its stability region within 10 batches."""
    spec = get_model("rmc2").capped(64)
    generator = InputGenerator(spec, 8, seed=1)
    trainer = FunctionalTrainer.create(spec, seed=1, relaxed=False, lr=0.01)
    with np.errstate(all="ignore"), pytest.raises(TrainingDiverged, match="rmc2 .lr 0.01."):
        for n in range(40):
            trainer.step(generator.batch(n))
    assert default_lr(spec) < 0.01


def test_capped_tables_start_at_the_scale_of_the_full_model():
    """dlrm draws a table of n rows from U(+-sqrt(1/n)): n is the preset's size, not the
    cap, so capping keeps the initial weights (and the interaction's scale) the same."""
    full = get_model("rm1")
    capped = full.capped(64)
    model = DLRM(capped, seed=0)
    bound = np.sqrt(1.0 / full.rows_per_table[0])
    assert np.abs(model.table).max() <= bound
    assert np.abs(model.table).max() > 0.9 * bound  # and it spans the range
    assert model.table.std() == pytest.approx(bound / np.sqrt(3), rel=0.05)  # uniform
    tiny = ModelSpec("tiny", 4, 3, 2, (50, 7), 2, (3, 4), (2, 1), "random", "test", "test")
    table = DLRM(tiny, seed=0).table  # an uncapped model: each table at its own size
    assert np.abs(table[:50]).max() <= np.sqrt(1 / 50) < np.abs(table[50:]).max()
    assert np.abs(table[50:]).max() <= np.sqrt(1 / 7)


def test_a_nan_stops_training_before_it_reaches_the_model():
    spec = get_model("rmc1").capped(64)
    generator = InputGenerator(spec, 8, seed=1)
    trainer = FunctionalTrainer.create(spec, seed=1, relaxed=False)
    for n in range(3):
        trainer.step(generator.batch(n))
    trainer.model.top[0][0][0, 0] = np.nan  # a poisoned weight: the next loss is NaN
    table = trainer.model.table.copy()
    with np.errstate(all="ignore"), pytest.raises(TrainingDiverged) as stop:
        trainer.step(generator.batch(3))
    assert "diverged at batch 3 of rmc1" in str(stop.value)
    assert "loss is nan" in str(stop.value)
    assert np.array_equal(trainer.model.table, table) and len(trainer.losses) == 3


def test_a_diverging_run_is_one_line_naming_the_batch_and_writes_nothing(tmp_path, monkeypatch):
    create = FunctionalTrainer.create.__func__

    def unstable(cls, spec, seed, relaxed, lr=None, optimizer="sgd", replicas=1):
        return create(cls, spec, seed, relaxed, lr=1e4, optimizer=optimizer, replicas=replicas)

    monkeypatch.setattr(FunctionalTrainer, "create", classmethod(unstable))
    out = tmp_path / "out"
    argv = ["--model", "rmc1", "--rows", "64", "--batch-size", "8", "--batches", "20"]
    argv += ["--functional", "--no-progress", "--outdir", str(out)]
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), np.errstate(all="ignore"):
        status = simulator.run_from_command_line(argv, "trainingcxl.py")
    lines = stderr.getvalue().splitlines()
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith("trainingcxl.py: error: functional training diverged at batch ")
    assert not out.exists()
