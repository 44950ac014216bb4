"""Every run records the code that made it; a sweep refuses to mix code versions."""

import json
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import simulate.simulator
from simulate.run import provenance
from simulate.run.options import UsageError
from simulate.simulator import Simulator
from simulate.sweeps import store
from simulate.sweeps.driver import execute
from simulate.sweeps.spec import load_sweep

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout


def test_a_run_records_version_commit_dirty_flag_python_and_packages(tmp_path):
    results = Simulator("pmem", batches=2, outdir=tmp_path, progress=False).run()
    config = json.loads((tmp_path / "config.json").read_text())
    written = json.loads((tmp_path / "results.json").read_text())
    assert results["provenance"] == written["provenance"] == config["provenance"]
    recorded = written["provenance"]
    assert recorded["git_commit"] == git("rev-parse", "HEAD").strip()
    assert recorded["git_dirty"] == bool(git("status", "--porcelain", "--untracked-files=no"))
    assert recorded["python"] == platform.python_version()
    assert recorded["packages"]["numpy"] == np.__version__
    assert f'version = "{recorded["version"]}"' in (ROOT / "pyproject.toml").read_text()


def test_the_code_hash_follows_the_source(tmp_path, monkeypatch):
    (tmp_path / "components").mkdir()
    source = tmp_path / "components" / "device.py"
    source.write_text("LATENCY = 305\n")
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    before = provenance.code_hash.__wrapped__()
    source.write_text("LATENCY = 306\n")
    assert provenance.code_hash.__wrapped__() != before
    source.write_text("LATENCY = 305\n")
    assert provenance.code_hash.__wrapped__() == before


def fake_run_job(options):
    results = {"system": options.system, "seed": options.seed, "batch_time_ms": {"mean": 1.0}}
    Path(options.outdir, "results.json").write_text(json.dumps(results))
    return results


def test_a_sweep_over_changed_code_refuses_to_mix_unless_allowed(tmp_path, monkeypatch):
    monkeypatch.setattr(simulate.simulator, "run_job", fake_run_job)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"outroot: {tmp_path / 'out'}\nfixed: {{batches: 1}}\naxes: {{seed: [1, 2]}}\n")
    sweep = load_sweep(spec)
    assert execute(sweep, sweep.runs, "debug", 1).counts["done"] == 2
    assert execute(sweep, sweep.runs, "debug", 1).counts["skipped"] == 2  # same code: done

    first = sweep.outroot / sweep.runs[0].id / store.OPTIONS
    record = json.loads(first.read_text())
    record["provenance"]["code"] = "0123456789ab"  # the run an older checkout made
    first.write_text(json.dumps(record))
    with pytest.raises(UsageError, match=r"1 of 2 finished runs .* other code .*--allow-mixed"):
        execute(sweep, sweep.runs, "debug", 1)
    import sweep as sweep_script

    assert sweep_script.main([str(spec), "--executor", "debug"]) == 2
    mixed = execute(sweep, sweep.runs, "debug", 1, allow_mixed=True)
    assert mixed.counts["skipped"] == 2
