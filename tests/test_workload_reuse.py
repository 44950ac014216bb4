"""Inputs whose reuse is a knob: --reuse P sets the share of a batch's distinct rows the
previous batch touched, with the distinct rows per batch held; --zipf sets popularity.
Both reach the stats, the Python API and sweep specs, and bad values are refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_cli import parse_stats

from simulate.simulator import Simulator
from simulate.sweeps.spec import load_sweep
from workloads.inputs import InputGenerator, reuse_fraction
from workloads.models import get_model
from workloads.workload import DlrmWorkload

ROOT = Path(__file__).resolve().parents[1]
RM1 = get_model("rm1")


def _reuse(generator: InputGenerator, batches: int = 4) -> list[float]:
    spec = generator.spec
    drawn = [generator.batch(i) for i in range(batches)]
    pairs = zip(drawn, drawn[1:], strict=False)
    return [reuse_fraction(a, b, spec.table_offsets) for a, b in pairs]


def _distinct(generator: InputGenerator, index: int) -> int:
    rows = generator.batch(index).global_rows(generator.spec.table_offsets)
    return len(np.unique(rows))


@pytest.mark.parametrize("target", [0.0, 0.5, 0.8, 0.95])
def test_measured_reuse_is_the_target_on_rm1(target):
    measured = _reuse(InputGenerator(RM1, 128, seed=3, reuse=target))
    assert all(abs(value - target) <= 0.02 for value in measured), measured


def test_the_distinct_rows_per_batch_stay_as_the_reuse_moves():
    natural = np.mean([_distinct(InputGenerator(RM1, 128, seed=3), i) for i in range(1, 4)])
    for target in (0.0, 0.2, 0.5, 0.8, 0.95):
        generator = InputGenerator(RM1, 128, seed=3, reuse=target)
        for index in range(1, 4):
            assert abs(_distinct(generator, index) / natural - 1) <= 0.05


def test_a_batch_depends_only_on_seed_and_index():
    """Recovery replays batch i alone: it must not depend on having drawn i-1."""
    first = InputGenerator(RM1, 64, seed=9, reuse=0.8)
    in_order = [first.batch(i) for i in range(6)][5]
    alone = InputGenerator(RM1, 64, seed=9, reuse=0.8).batch(5)
    for a, b in zip(in_order.indices, alone.indices, strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(in_order.labels, alone.labels)


def test_popularity_skews_the_lookups_within_a_batch():
    """A steeper power law repeats the hot rows more: fewer distinct rows per lookup
    (by popularity alone), and with --reuse more lookups on the window's hottest rows."""
    flat = _distinct(InputGenerator(RM1, 128, seed=2, zipf_exponent=0.6), 1)
    steep = _distinct(InputGenerator(RM1, 128, seed=2, zipf_exponent=1.6), 1)
    assert steep < flat

    def top_share(exponent: float) -> float:
        batch = InputGenerator(RM1, 128, seed=2, zipf_exponent=exponent, reuse=0.5).batch(1)
        _, counts = np.unique(batch.indices[0], return_counts=True)
        return np.sort(counts)[-10:].sum() / counts.sum()

    assert top_share(1.6) > top_share(0.6)


@given(
    reuse=st.floats(0.0, 1.0),
    zipf=st.floats(0.3, 3.0),
    batch_size=st.integers(1, 48),
    rows=st.integers(2, 5000),
    seed=st.integers(0, 2**32 - 1),
)
def test_windowed_batches_are_well_formed(reuse, zipf, batch_size, rows, seed):
    """Indices stay in their tables, bags have their lengths, every batch touches the
    same number of distinct rows, and where the tables hold two windows the reuse is
    the target up to rounding each table's step to a whole row."""
    spec = get_model("rmc1").capped(rows)
    generator = InputGenerator(spec, batch_size, seed=seed, zipf_exponent=zipf, reuse=reuse)
    drawn = [generator.batch(i) for i in range(3)]
    sizes = []
    for batch in drawn:
        per_table = []
        for t, (idx, off) in enumerate(zip(batch.indices, batch.offsets, strict=True)):
            assert idx.min() >= 0 and idx.max() < spec.rows_per_table[t]
            assert off[-1] == len(idx) and len(off) == batch_size + 1
            per_table.append(len(np.unique(idx)))
        sizes.append(per_table)
    assert sizes[0] == sizes[1] == sizes[2]
    if all(2 * size <= n for size, n in zip(sizes[0], spec.rows_per_table, strict=True)):
        bound = 0.5 * len(sizes[0]) / sum(sizes[0]) + 1e-9
        for a, b in zip(drawn, drawn[1:], strict=False):
            assert abs(reuse_fraction(a, b, spec.table_offsets) - reuse) <= bound


def _stat(outdir: Path, name: str) -> float:
    return float(parse_stats(outdir / "stats.txt")[name])


def test_the_stats_report_inter_and_intra_batch_reuse(tmp_path):
    workload = DlrmWorkload("rmc1", batch_size=32, reuse=0.8, zipf=1.2)
    Simulator("cxl-b", workload, 4, tmp_path, progress=False).run()
    assert abs(_stat(tmp_path, "board.reuseFraction") - 0.8) <= 0.02
    generator = InputGenerator(workload.spec, 32, seed=1, zipf_exponent=1.2, reuse=0.8)
    offsets = workload.spec.table_offsets
    intra = [
        1 - len(np.unique(b.global_rows(offsets))) / len(b.global_rows(offsets))
        for b in generator.batches(4)
    ]
    assert _stat(tmp_path, "board.intraBatchReuse") == pytest.approx(np.mean(intra), abs=1e-6)


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--reuse", "-0.1"), ("--reuse", "1.5"), ("--reuse", "nan"), ("--zipf", "0"),
     ("--zipf", "6"), ("--zipf", "inf"), ("--reuse", "half")],
)  # fmt: skip
def test_bad_reuse_and_popularity_are_one_line(tmp_path, flag, value):
    done = subprocess.run(
        [sys.executable, str(ROOT / "configs" / "trainingcxl.py"), flag, value,
         "--outdir", str(tmp_path / "out")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("trainingcxl.py: error:") and flag in line
    assert not (tmp_path / "out").exists()


def test_a_sweep_spec_takes_reuse_and_zipf_axes(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"outroot: {tmp_path / 'out'}\nfixed: {{model: rmc1, zipf: 1.3}}\n"
        "axes: {reuse: [0.2, 0.8]}\n"
    )
    runs = load_sweep(spec).runs
    assert [run.options.reuse for run in runs] == [0.2, 0.8]
    assert {run.options.zipf for run in runs} == {1.3}
    assert len({run.id for run in runs}) == 2
