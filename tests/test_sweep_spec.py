"""Sweep specs: every malformed spec names its field; ids are stable and distinct."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

from simulate.run.options import RunOptions  # noqa: E402
from simulate.sweeps.runid import run_id  # noqa: E402
from simulate.sweeps.slurm import sbatch_directives  # noqa: E402
from simulate.sweeps.spec import SpecError, load_sweep  # noqa: E402


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def sweep_of(tmp_path: Path, body: str):
    return load_sweep(write(tmp_path, f"outroot: {tmp_path / 'out'}\n{body}"))


@pytest.mark.parametrize(
    "body, message",
    [
        ("axes: {batch_size: []}", "spec: axes.batch_size: empty axis"),
        ("axes: {colour: [1]}", "spec: axes.colour: unknown option"),
        ("fixed: {batches: -1}", "spec: fixed.batches: --batches must be at least 1"),
        ("axes: {batches: [2, -1]}", "spec: axes.batches[1]: --batches must be at least 1"),
        ("axes: {system: [cxl, nope]}", "spec: axes.system[1]: argument --system"),
        ("axes: {seed: 3}", "spec: axes.seed: expected a list"),
        ("fixed: {seed: 1}\naxes: {seed: [1, 2]}", "spec: axes.seed: also given in fixed"),
        ("fixed: {model: rm9}", "spec: fixed.model: unknown model"),
        ("fixed: {functional: 3}", "spec: fixed.functional: expected true or false"),
        ("fixed: {seed: [1]}", "spec: fixed.seed: expected a single value"),
        ("axes: {seed: [1, 1]}", "spec: axes: runs 0 and 1 resolve to the same options"),
        ("axes: {seed: [1, 2]}\nzip: [[seed, model]]", "spec: zip[0]: 'model' is not an axis"),
        ("axes: {seed: [1, 2], batches: [1]}\nzip: [[seed, batches]]", "spec: zip[0]: zipped"),
        ("slurm: {time: soon}", "spec: slurm.time: expected minutes"),
        ("slurm: {mem: lots}", "spec: slurm.mem: expected a size"),
        ("slurm: {gpu: 1}", "spec: slurm.gpu: unknown resource"),
        ("colour: red", "spec: colour: unknown field"),
        (
            "axes: {set.board.nope.read_latency: [300ns]}",
            "spec: axes.set.board.nope.read_latency: unknown parameter path",
        ),
    ],
)
def test_malformed_spec_names_the_field(tmp_path, body, message):
    with pytest.raises(ValueError) as info:
        sweep_of(tmp_path, body)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_bad_yaml_and_missing_outroot(tmp_path):
    with pytest.raises(SpecError, match=r"bad YAML: .* at line 2"):
        load_sweep(write(tmp_path, "outroot: x\naxes: {seed: [1, 2}\n"))
    with pytest.raises(SpecError, match="spec: outroot: expected a directory path"):
        load_sweep(write(tmp_path, "axes: {seed: [1]}\n"))


def test_cli_reports_one_line_and_exit_2_before_any_run(tmp_path):
    spec = write(tmp_path, f"outroot: {tmp_path / 'out'}\naxes: {{batch_size: []}}\n")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sweep.py"), str(spec)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "sweep.py: error: spec: axes.batch_size: empty axis"
    ]
    assert not (tmp_path / "out").exists()


def test_grid_zip_and_toml_nested_sets(tmp_path):
    spec = write(
        tmp_path,
        f"""
outroot = "{tmp_path / "out"}"
zip = [["seed", "batch-size"]]
[fixed]
model = "rm3"
[axes]
system = ["cxl", "pmem"]
seed = [1, 2, 3]
batch-size = [16, 32, 64]
set.board.gpu.peak_flops = ["10TFLOPS", "20TFLOPS"]
""",
        "spec.toml",
    )
    sweep = load_sweep(spec)
    assert len(sweep.runs) == 2 * 3 * 2
    first = sweep.runs[0].options
    assert (first.system, first.seed, first.batch_size) == ("cxl", 1, 16)
    assert first.sets == [("board.gpu.peak_flops", "10TFLOPS")]
    assert {(r.options.seed, r.options.batch_size) for r in sweep.runs} == {
        (1, 16),
        (2, 32),
        (3, 64),
    }
    assert all(Path(r.options.outdir) == sweep.outroot / r.id for r in sweep.runs)


def test_ids_are_stable_and_distinct(tmp_path):
    # A fixed expectation: ids name outdirs across sweeps, machines and releases.
    assert run_id(RunOptions(system="cxl", model="rm3", batches=2, seed=1)) == "d4ec0e3b3cf5"
    same = RunOptions(
        system="cxl",
        model="rm3",
        batches=2,
        seed=1,
        batch_size=128,
        outdir="elsewhere",
        progress=False,
    )
    assert run_id(same) == run_id(RunOptions(system="cxl", model="rm3", batches=2, seed=1))
    sweep = sweep_of(tmp_path, "axes: {system: [cxl, pmem], seed: [1, 2, 3], batches: [1, 2]}")
    assert len({run.id for run in sweep.runs}) == 12
    assert [r.id for r in sweep_of(tmp_path, "axes: {seed: [1, 2]}").runs] == [
        r.id for r in sweep_of(tmp_path, "axes: {seed: [1, 2]}").runs
    ]


def test_a_trace_in_fixed_loads_and_is_checked_before_any_run(tmp_path):
    import numpy as np

    trace = tmp_path / "t.npz"  # 8 tables (rmc1's) x 32 samples, one lookup per bag
    lengths = np.ones((8, 32), dtype=np.int64)
    offsets = np.arange(8 * 32 + 1, dtype=np.int64)
    np.savez(trace, indices=offsets[:-1] % 64, offsets=offsets, lengths=lengths)
    small = "model: rmc1, rows: 64, batch_size: 16"
    sweep = sweep_of(tmp_path, f"fixed: {{trace: {trace}, {small}}}\naxes: {{system: [cxl, pmem]}}")
    assert [r.options.trace for r in sweep.runs] == [str(trace)] * 2
    plain = sweep_of(tmp_path, f"fixed: {{{small}}}\naxes: {{system: [cxl, pmem]}}")
    assert {r.id for r in sweep.runs}.isdisjoint(r.id for r in plain.runs)
    with pytest.raises(ValueError) as info:
        sweep_of(tmp_path, f"fixed: {{trace: {trace}, model: rm1}}")
    assert str(info.value).startswith("spec: run 0 (system cxl): --trace "), str(info.value)
    assert str(info.value).endswith("t.npz: 8 tables, model rm1 has 20")


def test_sbatch_directives():
    lines = sbatch_directives(
        {"time": 90, "cpus": 2, "mem": "8G", "partition": "gpu", "array_parallelism": 4},
        list(range(24)),
    )
    assert lines[:4] == [
        "#SBATCH --array=0-23%4",
        "#SBATCH --time=01:30:00",
        "#SBATCH --cpus-per-task=2",
        "#SBATCH --mem=8G",
    ]
    assert "#SBATCH --partition=gpu" in lines
    # resubmitting after a partial failure: only the unfinished runs' indices
    sparse = sbatch_directives({"time": 1, "cpus": 1, "mem": "1G"}, [11, 0, 3, 4, 5, 9, 10])
    assert sparse[0] == "#SBATCH --array=0,3-5,9-11"
