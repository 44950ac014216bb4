"""The paper's seven systems end to end: orderings the paper reports, from real runs.

Each (system, model) pair is simulated once per session for 3 batches (the first is
warm-up); the assertions are the qualitative results of the paper's evaluation that
follow from the mechanisms, not fitted numbers.
"""

import csv
import functools
import json

import pytest

from simulate.run.options import SYSTEMS, RunOptions
from simulate.simulator import run_job

MODELS = ("rm1", "rm2", "rm3", "rm4")
ORDER = ("ssd", "pmem", "pcie", "cxl-d", "cxl-b", "cxl")

pytestmark = pytest.mark.slow


@functools.cache
def result(system: str, model: str, outdir: str) -> dict:
    options = RunOptions(system=system, model=model, batches=3, outdir=outdir, progress=False)
    return run_job(options)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("systems")


@pytest.fixture(scope="module")
def runs(root):
    return lambda system, model: result(system, model, str(root / f"{system}-{model}"))


def batch_ms(runs, system, model):
    return runs(system, model)["batch_time_ms"]["mean"]


@pytest.mark.parametrize("model", MODELS)
def test_systems_are_ordered_as_in_the_paper(runs, model):
    times = [batch_ms(runs, system, model) for system in ORDER]
    assert times == sorted(times, reverse=True), dict(zip(ORDER, times, strict=True))
    # SSD is slower than PMEM by at least an order of magnitude everywhere; excluding
    # checkpoint time (as the paper's 949x does) by two on the embedding-intensive models,
    # from Table 2's 165x latency and 0.02x bandwidth
    assert times[0] > 10 * times[1]
    if model in ("rm1", "rm2"):
        compute = [
            batch_ms(runs, s, model) - runs(s, model)["breakdown_ms"]["checkpoint"]
            for s in ("ssd", "pmem")
        ]
        assert compute[0] > 100 * compute[1]


@pytest.mark.parametrize("model", MODELS)
def test_breakdown_sums_to_batch_time_and_ends_are_complete(runs, model):
    for system in SYSTEMS:
        r = runs(system, model)
        parts = sum(r["breakdown_ms"].values()) + r["idle_ms"]
        assert parts == pytest.approx(r["batch_time_ms"]["mean"], rel=1e-6, abs=1e-6)
        assert r["batch_time_ms"]["p50"] <= r["batch_time_ms"]["p99"]


def test_near_data_processing_helps_embedding_intensive_models_more(runs):
    """NDP gain = PMEM (host embedding ops) over CXL-D (near-memory), same redo policy."""
    gain = {m: batch_ms(runs, "pmem", m) / batch_ms(runs, "cxl-d", m) for m in MODELS}
    assert min(gain["rm1"], gain["rm2"]) > max(gain["rm3"], gain["rm4"]), gain
    pcie = {m: batch_ms(runs, "pmem", m) / batch_ms(runs, "pcie", m) for m in MODELS}
    assert min(pcie["rm1"], pcie["rm2"]) > max(pcie["rm3"], pcie["rm4"]), pcie


@pytest.mark.parametrize("model", MODELS)
def test_cxl_uses_least_energy_of_the_failure_tolerant_systems(runs, model):
    energy = {s: runs(s, model)["energy_j"]["total"] for s in ORDER}
    assert min(energy, key=energy.get) == "cxl", energy


@pytest.mark.parametrize("model", MODELS)
def test_only_checkpointing_systems_spend_time_checkpointing(runs, model):
    assert runs("dram", model)["breakdown_ms"]["checkpoint"] == 0
    for system in ("ssd", "pmem", "pcie", "cxl-d"):
        assert runs(system, model)["breakdown_ms"]["checkpoint"] > 0


def test_redo_checkpoint_of_cxl_d_precedes_the_update(runs, root):
    """CXL-D's timeline: lookup, then the redo log (new rows, the MLPs pulled over
    CXL.cache, the flag), then the in-place update ends the batch: log before apply, so
    a failure mid-update replays."""
    runs("cxl-d", "rm1")
    with open(root / "cxl-d-rm1" / "timeline.csv") as f:
        rows = [row for row in csv.DictReader(f) if row["batch"] == "1"]
    by_op = {row["op"]: (float(row["start_ms"]), float(row["end_ms"])) for row in rows}
    assert by_op["lookup"][1] <= by_op["ckpt_log"][0] <= by_op["ckpt_log"][1] <= by_op["update"][0]


def test_results_json_round_trips(runs, tmp_path):
    r = runs("cxl", "rm1")
    assert json.loads(json.dumps(r)) == r
