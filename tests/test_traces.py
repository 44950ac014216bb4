"""Traces as inputs (workloads/traces.py): FBGEMM arrays (.pt, .pt.gz, .npz) and Criteo
TSV give exactly the batches of their samples, cycling; TSV reading is one pass and its
memory flat in the file's length; a run on a trace simulates the trace's lookups; every
trace that does not fit the run is one error line and exit 2 before any work."""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import workloads.traces as traces
from simulate.run.options import UsageError
from simulate.simulator import Simulator
from simulate.sweeps.runid import canonical
from workloads.inputs import InputGenerator
from workloads.models import ModelSpec, get_model
from workloads.traces import BagTrace, TraceError, open_trace, trace_pooling
from workloads.workload import DlrmWorkload

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "trainingcxl.py"
RMC1 = get_model("rmc1").capped(64)  # 8 tables: the end-to-end runs cap them at 64 rows
KAGGLE = get_model("dlrm_kaggle").capped(1000)  # 26 tables, among them of 3, 4 and 10 rows


def bag_arrays(seed: int, tables: int, samples: int, rows: int, longest: int = 5):
    """FBGEMM-layout arrays: lengths (T, B), offsets T*B+1 (table-major), indices."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, longest + 1, size=(tables, samples)).astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths.reshape(-1)))).astype(np.int64)
    indices = rng.integers(0, rows, size=int(offsets[-1])).astype(np.int64)
    return indices, offsets, lengths


def expected_batch(arrays, batch_size: int, k: int):
    """Batch k's per-table (indices, offsets), sliced from the arrays by hand."""
    indices, offsets, lengths = arrays
    tables, samples = lengths.shape
    out = []
    for t in range(tables):
        bounds = offsets[t * samples + k * batch_size : t * samples + (k + 1) * batch_size + 1]
        out.append((indices[bounds[0] : bounds[-1]], bounds - bounds[0]))
    return out


def assert_batch(batch, expected) -> None:
    assert len(batch.indices) == len(expected)
    for idx, off, (want_idx, want_off) in zip(batch.indices, batch.offsets, expected, strict=True):
        assert idx.dtype == np.int64 and off.dtype == np.int64
        np.testing.assert_array_equal(idx, want_idx)
        np.testing.assert_array_equal(off, want_off)


def save_bags(folder: Path, arrays, name: str = "trace") -> dict[str, Path]:
    """The same arrays as .npz (stored and deflated) and, with torch, .pt and .pt.gz."""
    indices, offsets, lengths = arrays
    paths = {"npz": folder / f"{name}.npz", "npz-deflated": folder / f"{name}-deflated.npz"}
    np.savez(paths["npz"], indices=indices, offsets=offsets, lengths=lengths)
    np.savez_compressed(paths["npz-deflated"], indices=indices, offsets=offsets, lengths=lengths)
    try:
        import torch
    except ImportError:
        return paths
    paths["pt"] = folder / f"{name}.pt"
    torch.save(tuple(torch.from_numpy(a) for a in arrays), paths["pt"])
    paths["pt.gz"] = folder / f"{name}.pt.gz"
    paths["pt.gz"].write_bytes(gzip.compress(paths["pt"].read_bytes()))
    return paths


def small_spec(tables: int, rows: int) -> ModelSpec:
    return ModelSpec("t3", 8, 13, tables, rows, 1, (13, 8), (1,), "random", "test", "test")


def test_pt_and_npz_give_the_batches_of_their_arrays_cycling(tmp_path):
    arrays = bag_arrays(1, tables=3, samples=40, rows=50)
    spec, bs = small_spec(3, 50), 16  # 40 samples: 2 batches, the last 8 unused
    synthetic = InputGenerator(spec, bs, seed=5)
    paths = save_bags(tmp_path, arrays)
    assert {"npz", "npz-deflated", "pt", "pt.gz"} <= set(paths)
    for kind, path in paths.items():
        reader = open_trace(str(path), spec, bs, synthetic)
        assert reader.count == 2, kind
        for k in range(5):
            batch = reader.batch(k)
            assert_batch(batch, expected_batch(arrays, bs, k % 2))
            np.testing.assert_array_equal(batch.dense, synthetic.batch(k).dense)
            np.testing.assert_array_equal(batch.labels, synthetic.batch(k).labels)
        assert [b.indices[0].size for b in reader.batches(2, start=1)] == [
            reader.batch(1).indices[0].size,
            reader.batch(0).indices[0].size,
        ]
    lazy = traces._bags(str(paths["npz"]))
    assert all(isinstance(a, np.memmap) for a in lazy)  # a stored .npz is mapped, not read


@settings(max_examples=40)
@given(
    tables=st.integers(1, 4),
    samples=st.integers(1, 30),
    longest=st.integers(0, 6),
    data=st.data(),
)
def test_any_fbgemm_arrays_round_trip_through_batches(tables, samples, longest, data):
    """Batches 0..n-1 hold every table's bags of samples [0, n*bs) in order, n = B // bs,
    and batch n + k is batch k."""
    bs = data.draw(st.integers(1, samples))
    seed = data.draw(st.integers(0, 2**16))
    arrays = bag_arrays(seed, tables, samples, rows=20, longest=longest)
    indices, offsets, lengths = arrays
    spec = small_spec(tables, 20)
    reader = BagTrace("mem.npz", *arrays, spec, bs, InputGenerator(spec, bs))
    n = samples // bs
    assert reader.count == n
    got = list(reader.batches(n))
    for t in range(tables):
        start, end = offsets[t * samples], offsets[t * samples + n * bs]
        np.testing.assert_array_equal(
            np.concatenate([b.indices[t] for b in got]), indices[start:end]
        )
        np.testing.assert_array_equal(
            np.concatenate([np.diff(b.offsets[t]) for b in got]), lengths[t, : n * bs]
        )
    assert_batch(reader.batch(n + bs % n), expected_batch(arrays, bs, bs % n))
    most = max(b.global_rows(spec.table_offsets).size for b in got)
    assert trace_pooling_of(arrays, bs) * tables * bs >= most


def trace_pooling_of(arrays, bs: int) -> int:
    indices, offsets, lengths = arrays
    tables, samples = lengths.shape
    n = samples // bs
    totals = [lengths[:, k * bs : (k + 1) * bs].sum() for k in range(n)]
    return max(1, math.ceil(max(totals) / (tables * bs)))


def test_trace_pooling_bounds_every_batch(tmp_path):
    arrays = bag_arrays(2, tables=3, samples=64, rows=50, longest=9)
    path = save_bags(tmp_path, arrays)["npz"]
    for bs in (1, 5, 16, 64):
        assert trace_pooling(str(path), small_spec(3, 50), bs) == trace_pooling_of(arrays, bs)


# ----- Criteo TSV ---------------------------------------------------------------------
def criteo_lines(count: int, seed: int = 3) -> list[str]:
    """Lines as in Criteo's day files, with empty fields, negative integers and a few
    upper-case hex digits."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(count):
        label = str(int(rng.integers(0, 2)))
        ints = ["" if rng.random() < 0.2 else str(int(rng.integers(-3, 5000))) for _ in range(13)]
        cats = []
        for _ in range(26):
            value = "" if rng.random() < 0.1 else f"{int(rng.integers(0, 2**32)):08x}"
            cats.append(value.upper() if rng.random() < 0.1 else value)
        lines.append("\t".join([label, *ints, *cats]))
    return lines


def write_tsv(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def expected_criteo(lines: list[str], rows: tuple[int, ...]):
    """Labels, dense and hashed rows in plain Python, as dlrm's data_utils computes them."""
    labels, dense, hashed = [], [], []
    for line in lines:
        fields = line.split("\t")
        labels.append(float(int(fields[0] or "0")))
        dense.append([math.log(max(int(x or "0"), 0) + 1) for x in fields[1:14]])
        hashed.append([int(v or "0", 16) % n for v, n in zip(fields[14:], rows, strict=True)])
    return np.array(labels), np.array(dense), np.array(hashed)


def test_criteo_tsv_gives_hashed_rows_dense_and_labels(tmp_path):
    lines = criteo_lines(50)
    path = write_tsv(tmp_path / "day_0", lines)
    bs = 8  # 50 lines: 6 batches, cycling
    reader = open_trace(str(path), KAGGLE, bs)
    labels, dense, hashed = expected_criteo(lines, KAGGLE.rows_per_table)
    for k in [0, 1, 2, 3, 4, 5, 6, 9, 2, 0]:  # past the end (cycles) and back (re-reads)
        batch = reader.batch(k)
        part = slice((k % 6) * bs, (k % 6 + 1) * bs)
        np.testing.assert_array_equal(batch.labels, labels[part])
        assert batch.dense.dtype == np.float32
        np.testing.assert_allclose(batch.dense, dense[part], rtol=1e-6)
        for t in range(26):
            np.testing.assert_array_equal(batch.indices[t], hashed[part, t])
            np.testing.assert_array_equal(batch.offsets[t], np.arange(bs + 1))
    assert reader.count == 6
    gz = tmp_path / "day_0.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    for k in range(7):
        a, b = open_trace(str(gz), KAGGLE, bs).batch(k), reader.batch(k)
        assert all(np.array_equal(x, y) for x, y in zip(a.indices, b.indices, strict=True))
    reader.close()


def test_criteo_batches_in_order_are_one_pass(tmp_path, monkeypatch):
    path = write_tsv(tmp_path / "train.txt", criteo_lines(64))
    opened = []
    real = traces.open_binary
    monkeypatch.setattr(traces, "open_binary", lambda p: opened.append(p) or real(p))
    reader = open_trace(str(path), KAGGLE, 8)
    before = len(opened)  # the existence check at open
    assert [b.batch_size for b in reader.batches(8)] == [8] * 8
    assert len(opened) - before == 1
    reader.batch(2)  # back to an earlier batch: one more pass from the start
    assert len(opened) - before == 2


def peak_reading(path: Path, index: int) -> int:
    tracemalloc.start()
    try:
        open_trace(str(path), KAGGLE, 128).batch(index)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_criteo_memory_is_flat_in_the_files_length(tmp_path):
    lines = criteo_lines(2_000, seed=4)
    short = write_tsv(tmp_path / "short.tsv", lines)
    long = write_tsv(tmp_path / "long.tsv", lines * 10)  # 20,000 lines, ~5 MB
    assert long.stat().st_size > 4 * 2**20
    small, large = peak_reading(short, 0), peak_reading(long, 0)
    assert large < 1.5 * small, (small, large)
    last = peak_reading(long, 20_000 // 128 - 1)  # skipping to the end reads, never holds
    assert last < 1.5 * small, (small, last)


# ----- runs on a trace ------------------------------------------------------------------
def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(CONFIG), *args, "--no-progress"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "GEM5": ""},
    )


def stat(outdir: Path, name: str) -> float:
    return json.loads((outdir / "stats.json").read_text())[name]["value"]


def test_a_run_on_an_fbgemm_trace_simulates_its_lookups(tmp_path):
    arrays = bag_arrays(6, tables=8, samples=64, rows=64)
    path = save_bags(tmp_path, arrays)["npz"]
    argv = ["--model", "rmc1", "--rows", "64", "--batch-size", "16", "--batches", "6"]
    proc = cli(tmp_path, *argv, "--trace", str(path), "--outdir", "out")
    assert proc.returncode == 0, proc.stderr
    lengths = arrays[2]
    per_batch = [lengths[:, (k % 4) * 16 : (k % 4 + 1) * 16].sum() for k in range(6)]
    assert stat(tmp_path / "out", "board.lookupsPerBatch") == pytest.approx(np.mean(per_batch))
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["options"]["trace"] == str(path)
    workload = DlrmWorkload("rmc1", batch_size=16, rows=64, trace=path)  # a PathLike
    api = Simulator("cxl", workload, 6, tmp_path / "api", progress=False).run()
    assert api == json.loads((tmp_path / "out" / "results.json").read_text())


def test_a_functional_run_on_a_criteo_trace(tmp_path):
    path = write_tsv(tmp_path / "day_1", criteo_lines(40))
    argv = ["--model", "dlrm_kaggle", "--batch-size", "8", "--batches", "3", "--functional"]
    proc = cli(tmp_path, *argv, "--trace", str(path), "--outdir", "out")
    assert proc.returncode == 0, proc.stderr
    assert stat(tmp_path / "out", "board.lookupsPerBatch") == 26 * 8
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert len(results["train"]["loss"]) == 3


def test_a_trace_is_refused_with_generated_input_options():
    with pytest.raises(UsageError, match="workload's reuse shapes generated lookups"):
        Simulator("cxl", DlrmWorkload("rmc1", reuse=0.5, trace="x.npz"))
    with pytest.raises(UsageError, match="workload's trace must not be empty"):
        Simulator("cxl", DlrmWorkload("rmc1", trace=" "))


def test_a_spec_without_a_trace_keeps_its_run_ids():
    from simulate.run.options import RunOptions

    assert "trace" not in canonical(RunOptions())
    assert canonical(RunOptions(trace="t.npz"))["trace"] == "t.npz"


# ----- bad traces: one line, exit 2, nothing written --------------------------------------
def bad_traces(folder: Path) -> dict[str, Path]:
    """Files each of which a run on rmc1 (8 tables, 64 rows) at batch size 16 refuses."""
    made = {"tables": save_bags(folder, bag_arrays(1, 3, 64, 64), "three")["npz"]}
    made["rows"] = save_bags(folder, bag_arrays(1, 8, 64, 1000), "wide")["npz"]
    made["samples"] = save_bags(folder, bag_arrays(1, 8, 8, 64), "short")["npz"]
    late = list(bag_arrays(1, 8, 64, 64))  # batch 2 (samples 32-47) of table 5: row 64
    late[0] = late[0].copy()
    start, end = late[1][5 * 64 + 32], late[1][5 * 64 + 48]
    assert end > start
    late[0][start:end] = 64
    np.savez(folder / "late.npz", indices=late[0], offsets=late[1], lengths=late[2])
    made["late"] = folder / "late.npz"
    made["missing"] = folder / "missing.npz"
    made["extension"] = folder / "trace.csv"
    made["extension"].write_text("1,2,3\n")
    made["notzip"] = folder / "junk.npz"
    made["notzip"].write_bytes(b"not a zip file")
    lines = criteo_lines(20)
    lines[12] = "\t".join(lines[12].split("\t")[:30])
    made["fields"] = write_tsv(folder / "fields.tsv", lines)
    made["criteo-short"] = write_tsv(folder / "few.tsv", criteo_lines(10))
    hexless = criteo_lines(20)
    hexless[3] = "\t".join([*hexless[3].split("\t")[:20], "zz", *hexless[3].split("\t")[21:]])
    made["hex"] = write_tsv(folder / "hex.tsv", hexless)
    return made


BAD = [
    ("tables", "rmc1", "three.npz: 3 tables, model rmc1 has 8"),
    ("rows", "rmc1", "batch 0 looks up row"),
    ("samples", "rmc1", "short.npz: 8 samples, fewer than the batch size 16"),
    ("late", "rmc1", "late.npz: batch 2 looks up row 64 of table 5, model rmc1 has 64 rows"),
    ("missing", "rmc1", "missing.npz: no such file"),
    ("extension", "rmc1", "trace.csv: unknown trace format"),
    ("notzip", "rmc1", "junk.npz: not a readable .npz file"),
    ("fields", "dlrm_kaggle", "fields.tsv: line 13 has 30 tab-separated fields"),
    ("criteo-short", "dlrm_kaggle", "few.tsv: 10 samples, fewer than the batch size 16"),
    ("hex", "dlrm_kaggle", "hex.tsv: line 4: C7 is 'zz', not hexadecimal"),
    ("fields", "rmc1", "fields.tsv: 26 tables, model rmc1 has 8"),
]


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory) -> dict[str, Path]:
    return bad_traces(tmp_path_factory.mktemp("bad"))


@pytest.mark.parametrize(("which", "model", "needle"), BAD, ids=[b[0] + b[1] for b in BAD])
def test_a_bad_trace_is_one_line_and_exit_2(tmp_path, bad_files, which, model, needle):
    argv = ["--model", model, "--rows", "64", "--batch-size", "16", "--batches", "4"]
    proc = cli(tmp_path, *argv, "--trace", str(bad_files[which]), "--outdir", "out")
    lines = proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("trainingcxl.py: error: --trace "), lines[0]
    assert needle in lines[0], lines[0]
    assert proc.returncode == 2
    assert not (tmp_path / "out").exists()


def test_bad_traces_are_refused_before_any_work(bad_files):
    """validate (every entry point's check before work) reads the header and batch 0."""
    from simulate.run.options import RunOptions
    from simulate.simulator import validate

    for which in ("tables", "rows", "samples", "missing", "extension", "notzip", "fields"):
        model = "dlrm_kaggle" if which == "fields" else "rmc1"
        options = RunOptions(model=model, rows=64, batch_size=16, trace=str(bad_files[which]))
        with pytest.raises(TraceError, match=r"^--trace "):
            validate(options, writes_outdir=False)
    late = RunOptions(model="rmc1", rows=64, batch_size=16, trace=str(bad_files["late"]))
    validate(late, writes_outdir=False)  # batch 2's row is found when batch 2 is read


def test_fbgemm_arrays_that_disagree_are_refused(tmp_path):
    indices, offsets, lengths = bag_arrays(1, 3, 32, 50)
    spec = small_spec(3, 50)
    with pytest.raises(TraceError, match="96 offsets for 3 tables x 32 samples"):
        BagTrace("x.npz", indices, offsets[:-1], lengths, spec, 8, InputGenerator(spec, 8))
    wrong = lengths.copy()
    wrong[1, 9] += 1
    reader = BagTrace("x.npz", indices, offsets, wrong, spec, 8, InputGenerator(spec, 8))
    reader.batch(0)
    with pytest.raises(TraceError, match="batch 1: table 1's offsets and lengths disagree"):
        reader.batch(1)
    with pytest.raises(TraceError, match="lengths holds float64, expected integers"):
        BagTrace("x.npz", indices, offsets, lengths * 1.0, spec, 8, InputGenerator(spec, 8))
    torch = pytest.importorskip("torch")
    odd = tmp_path / "odd.pt"
    torch.save({"indices": torch.zeros(3)}, odd)
    with pytest.raises(TraceError, match="expected a tuple of three tensors"):
        open_trace(str(odd), spec, 8, InputGenerator(spec, 8))


def test_an_unreadable_trace_is_named(tmp_path, monkeypatch):
    """(Faked: the tests may run as root, who reads any file.)"""
    import workloads.trace_files as trace_files

    path = write_tsv(tmp_path / "locked.tsv", criteo_lines(20))

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(trace_files, "open", refuse, raising=False)
    with pytest.raises(TraceError, match=r"locked.tsv: cannot read it \(Permission denied\)$"):
        open_trace(str(path), KAGGLE, 8)
