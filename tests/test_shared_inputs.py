"""Batches shared through a folder (workloads/shared_inputs.py): a run that loads a batch
another run stored gets the generator's arrays bit for bit, never another generator's,
and a broken or missing file, a full disk or a read-only folder only cost CPU; a sweep's
runs with the same inputs share a folder, and their stats do not change."""

from __future__ import annotations

import os
import signal
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simrun import simulated_stats

from simulate.run.configure import inputs_key
from simulate.run.options import RunOptions
from simulate.simulator import run_job
from simulate.sweeps import driver
from simulate.sweeps.driver import execute
from simulate.sweeps.spec import load_sweep
from workloads import shared_inputs
from workloads.inputs import Batch, DistinctRows, InputGenerator
from workloads.models import get_model
from workloads.shared_inputs import SharedBatches, generator_identity


def _arrays(batch: Batch) -> list[np.ndarray]:
    return [batch.dense, batch.labels, *batch.offsets, *batch.indices]


def _same(got: Batch, want: Batch) -> None:
    assert len(got.indices) == len(want.indices) and len(got.offsets) == len(want.offsets)
    for a, b in zip(_arrays(got), _arrays(want), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _generator(**kwargs) -> InputGenerator:
    spec = get_model(kwargs.pop("model", "rmc1")).capped(kwargs.pop("rows", 5000))
    return InputGenerator(spec, kwargs.pop("batch_size", 16), **kwargs)


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["rmc1", "rmc2", "rm3"]),
    st.integers(1, 40),
    st.integers(0, 2**32 - 1),
    st.booleans(),
    st.sampled_from([None, 0.0, 0.5, 1.0]),
)
def test_a_loaded_batch_is_the_generated_one_bit_for_bit(model, size, seed, fixed, reuse):
    generator = _generator(
        model=model, batch_size=size, seed=seed, fixed_pooling=fixed, reuse=reuse
    )
    with tempfile.TemporaryDirectory() as folder:
        first = SharedBatches(generator, folder)
        stored = [first.batch(i) for i in (0, 3, 1)]
        second = SharedBatches(generator, folder)
        offsets = generator.spec.table_offsets
        for i, batch in zip((0, 3, 1), stored, strict=True):
            want = generator.batch(i)
            loaded = second.batch(i)
            _same(batch, want)
            _same(loaded, want)
            for got in (batch, loaded):  # the distinct rows they carry are the sort's
                for a, b in zip(
                    got.distinct_rows(offsets), want.distinct_rows(offsets), strict=True
                ):
                    assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
            assert loaded.distinct is not None
        assert (first.loaded, second.loaded) == (0, 3)


@pytest.mark.parametrize(
    "change",
    [
        dict(seed=8),
        dict(batch_size=17),
        dict(zipf_exponent=1.2),
        dict(reuse=0.5),
        dict(fixed_pooling=False),
        dict(teacher_scale=2.0),
        dict(teacher_bias=-1.0),
        dict(rows=4000),
        dict(model="rmc2"),
    ],
)
def test_another_generator_never_reads_the_batches(tmp_path, change):
    """Every parameter that decides a batch names the folder: a run with another one
    generates its own batches instead of loading these."""
    base = _generator(seed=7)
    SharedBatches(base, tmp_path).batch(0)
    other = _generator(**{"seed": 7, **change})
    assert generator_identity(other) != generator_identity(base)
    shared = SharedBatches(other, tmp_path)
    _same(shared.batch(0), other.batch(0))
    assert shared.loaded == 0


def _stored(folder: Path) -> Path:
    (path,) = folder.glob("*/0.batch")
    return path


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[: len(raw) // 2],  # truncated
        lambda raw: b"",  # empty
        lambda raw: b"NOTABATC" + raw[8:],  # another file
        lambda raw: raw + b"\0" * 8,  # longer than its header says
        lambda raw: raw[:8] + np.int64(5).tobytes() + raw[16:],  # another table count
        lambda raw: raw[:16] + np.int64(3).tobytes() + raw[24:],  # another sample count
    ],
)
def test_a_broken_stored_batch_is_drawn_again(tmp_path, damage):
    generator = _generator(seed=3)
    SharedBatches(generator, tmp_path).batch(0)
    path = _stored(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    shared = SharedBatches(generator, tmp_path)
    _same(shared.batch(0), generator.batch(0))
    assert shared.loaded == 0
    _same(SharedBatches(generator, tmp_path).batch(0), generator.batch(0))  # stored again


def _one_row_id_changed(raw: bytes) -> bytes:
    """The stored batch with its first lookup's row id moved to the next row: the
    offsets and the distinct rows' counts still add up."""
    header = np.frombuffer(raw[8:48], dtype=np.int64)
    tables, samples, dense, width = (int(header[i]) for i in (0, 1, 2, 4))
    start = 8 + 8 * (5 + tables) + 4 * samples * dense + 4 * samples + 8 * tables * (samples + 1)
    ids = np.dtype(np.int32 if width == 4 else np.int64)
    row = int(np.frombuffer(raw[start : start + width], dtype=ids)[0])
    changed = np.array([row + 1 if row == 0 else row - 1], dtype=ids).tobytes()
    return raw[:start] + changed + raw[start + width :]


@pytest.mark.parametrize("at", [0.1, 0.5, 0.9])
def test_a_stored_batch_with_any_byte_changed_is_drawn_again(tmp_path, at):
    """One row id changed (or any other byte): the file still parses and adds up, but
    its checksum does not, so the batch is drawn again rather than used."""
    generator = _generator(seed=3)
    SharedBatches(generator, tmp_path).batch(0)
    path = _stored(tmp_path)
    raw = path.read_bytes()
    if at == 0.1:
        damaged = _one_row_id_changed(raw)
    else:
        i = int(len(raw) * at)
        damaged = raw[:i] + bytes([raw[i] ^ 1]) + raw[i + 1 :]
    path.write_bytes(damaged)
    shared = SharedBatches(generator, tmp_path)
    _same(shared.batch(0), generator.batch(0))
    assert shared.loaded == 0


def test_a_fifo_in_the_folder_is_never_opened_for_reading(tmp_path):
    """A FIFO where a batch would be: drawn again at once (opening it to read would
    block until a writer came, and the batch-making thread with it)."""
    generator = _generator(seed=3)
    shared = SharedBatches(generator, tmp_path)
    shared.folder.mkdir(parents=True)
    os.mkfifo(shared.folder / "0.batch")
    signal.alarm(20)  # a blocked open fails the test rather than hanging it
    try:
        _same(shared.batch(0), generator.batch(0))
    finally:
        signal.alarm(0)
    assert shared.loaded == 0


def _distinct(batch: Batch, offsets, rows=None, counts=None) -> Batch:
    found_rows, found_counts = batch.distinct_rows(offsets)
    rows = found_rows if rows is None else rows
    counts = found_counts if counts is None else counts
    key = tuple(int(o) for o in offsets)
    return replace(batch, distinct=DistinctRows(key, rows, counts))


@pytest.mark.parametrize(
    "breaking, match",
    [
        (lambda b, o: replace(_distinct(b, o), offsets=[x + 1 for x in b.offsets]), "offsets"),
        (lambda b, o: _distinct(b, o, counts=b.distinct_rows(o)[1] + 1), "distinct"),
        (lambda b, o: _distinct(b, o, rows=b.distinct_rows(o)[0][::-1].copy()), "distinct"),
        (lambda b, o: _distinct(b, o, counts=b.distinct_rows(o)[1] * 0), "distinct"),
    ],
)
def test_a_stored_batch_that_does_not_add_up_is_refused(tmp_path, breaking, match):
    """Offsets that do not end at the indices, distinct rows out of order or whose
    counts do not add up to the lookups: refused, so the batch is drawn again."""
    generator = _generator(seed=3)
    offsets = generator.spec.table_offsets
    batch = generator.batch(0)
    with open(tmp_path / "x.batch", "wb") as out:
        shared_inputs.write_batch(out, breaking(batch, offsets))
    key = tuple(int(o) for o in offsets)
    with pytest.raises(ValueError, match=match):
        shared_inputs.read_batch(tmp_path / "x.batch", len(batch.indices), batch.batch_size, key)


def test_distinct_rows_found_with_other_table_offsets_are_sorted_again():
    generator = _generator(seed=3)
    batch = generator.batch(0)
    offsets = np.asarray(generator.spec.table_offsets)
    wrong = _distinct(batch, offsets, rows=np.arange(3), counts=np.ones(3, dtype=np.int64))
    assert wrong.distinct_rows(offsets)[0].size == 3  # carried: taken as they are
    moved = offsets + 7
    rows, counts = wrong.distinct_rows(moved)
    assert rows.tobytes() == np.unique(batch.global_rows(moved)).tobytes()
    assert int(counts.sum()) == sum(idx.size for idx in batch.indices)


def test_a_folder_holds_the_first_batches_up_to_its_bound(tmp_path, monkeypatch):
    """Batch i is stored while (i + 1) times its size fits the bound; the rest are drawn
    by every run, the same batches either way."""
    generator = _generator(seed=6)
    first = _distinct(generator.batch(0), generator.spec.table_offsets)
    parts = shared_inputs.stored_parts(first)
    size = len(shared_inputs.MAGIC) + sum(part.nbytes for part in parts)
    monkeypatch.setattr(shared_inputs, "MAX_FOLDER_BYTES", 3 * size + size // 2)
    shared = SharedBatches(generator, tmp_path / "bounded")
    for i in range(6):
        _same(shared.batch(i), generator.batch(i))
    stored = sorted(p.name for p in shared.folder.glob("*.batch"))
    assert stored == ["0.batch", "1.batch", "2.batch"]
    again = SharedBatches(generator, tmp_path / "bounded")
    for i in range(6):
        _same(again.batch(i), generator.batch(i))
    assert again.loaded == 3


def test_a_full_disk_or_a_read_only_folder_only_costs_cpu(tmp_path, monkeypatch):
    generator = _generator(seed=4)
    monkeypatch.setattr(shared_inputs, "MIN_FREE_BYTES", 1 << 62)
    shared = SharedBatches(generator, tmp_path / "full")
    _same(shared.batch(0), generator.batch(0))
    assert not list((tmp_path / "full").glob("*/*.batch"))
    monkeypatch.undo()
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    shared = SharedBatches(generator, blocked)
    for i in range(3):
        _same(shared.batch(i), generator.batch(i))


def test_a_sweep_shares_a_folder_only_among_runs_with_the_same_inputs(tmp_path):
    runs = [
        RunOptions(system="cxl", model="rmc1", seed=1),
        RunOptions(system="pmem", model="rmc1", seed=1),
        RunOptions(system="cxl", model="rmc1", seed=2),
        RunOptions(system="cxl", model="rmc1", seed=1, batch_size=64),
        RunOptions(system="cxl", model="rmc1", seed=1, trace="t.bin"),
        RunOptions(system="cxl", model="rmc2", seed=1),
        RunOptions(system="dram", model="rmc2", seed=1, functional=True),
        RunOptions(system="ssd", model="rmc1", seed=1, sample_plan="20"),
    ]
    given = driver.share_inputs(runs, tmp_path)
    assert [run.input_cache is not None for run in given] == [1, 1, 0, 0, 0, 0, 0, 0]
    assert inputs_key(runs[4]) is None
    assert [replace(run, input_cache=None) for run in given] == runs


def _stats(options: RunOptions) -> list[str]:
    run_job(options)
    return simulated_stats(options.outdir)


@pytest.mark.parametrize("system", ["cxl", "pmem"])
def test_runs_that_load_their_batches_give_the_same_stats(tmp_path, system):
    """The first run stores its batches, the second loads every one: both give the
    stats of a run that generated its own."""
    base = RunOptions(system=system, model="rmc1", batches=4, seed=5, progress=False)
    alone = _stats(replace(base, outdir=str(tmp_path / "alone")))
    folder = str(tmp_path / "inputs")
    storing = _stats(replace(base, outdir=str(tmp_path / "a"), input_cache=folder))
    loading = _stats(replace(base, outdir=str(tmp_path / "b"), input_cache=folder))
    assert storing == alone and loading == alone
    assert len(list(Path(folder).glob("*/*.batch"))) >= 4


def test_a_local_sweep_shares_its_batches_and_removes_them(tmp_path, monkeypatch):
    """A local sweep gives its runs of the same inputs one folder under the outroot, and
    removes it when the sweep ends; every run's stats are those of a run alone."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"outroot: {tmp_path / 'out'}\nfixed: {{model: rmc1, batches: 3, seed: 5}}\n"
        "axes: {system: [cxl, pmem]}\n"
    )
    sweep = load_sweep(spec)
    seen = []
    real = driver.executors.run_local

    def record(options, workers, report):
        seen.extend(run.input_cache for run in options)
        assert all(Path(folder).parent == sweep.outroot for folder in seen)
        real(options, workers, report)

    monkeypatch.setattr(driver.executors, "run_local", record)
    assert execute(sweep, sweep.runs, "local", 2).counts["done"] == 2
    assert len(seen) == 2 and seen[0] == seen[1] is not None
    assert not Path(seen[0]).exists()
    for run in sweep.runs:
        alone = _stats(replace(run.options, outdir=str(tmp_path / run.id), input_cache=None))
        assert simulated_stats(sweep.outroot / run.id) == alone
