"""--gpu-profile: measured kernel times replace the GPU model. A profile holding the
model's own predictions changes nothing; one measured for another run is refused in
one line; --gpu picks a preset the same way from the CLI and the Python API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from components.compute.gpu import Gpu
from simulate.run.gpu_profile import TICKS_PER_US, profile_document
from simulate.run.options import UsageError
from simulate.simulator import Simulator
from workloads.models import get_model
from workloads.opgraph import batch_kernels
from workloads.workload import DlrmWorkload

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "trainingcxl.py"
MODEL, BATCH = "rmc1", 32
HOST_LINES = ("hostSeconds", "hostMemory")


def simulated(outdir: Path) -> list[str]:
    lines = (outdir / "stats.txt").read_text().splitlines()
    return [line for line in lines if not line.startswith(HOST_LINES)]


def run(outdir: Path, **kw) -> Path:
    workload = DlrmWorkload(MODEL, batch_size=BATCH)
    Simulator("cxl", workload, 3, outdir, progress=False, **kw).run()
    return outdir


def predictions(path: Path, per: str, model: str = MODEL, batch: int = BATCH) -> Path:
    """A profile file holding what the default GPU model predicts."""
    spec, gpu = get_model(model), Gpu()
    step = batch_kernels(spec, batch)
    if per == "kernels":
        times = {k.name: gpu.model_ticks(k) / TICKS_PER_US for g in step.values() for k in g}
    else:
        times = {op: sum(map(gpu.model_ticks, ks)) / TICKS_PER_US for op, ks in step.items()}
    document = profile_document(spec, batch, "model", "predictions", {per: times})
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("per", ["kernels", "groups"])
def test_a_profile_of_the_models_own_predictions_gives_identical_stats(tmp_path, per):
    plain = run(tmp_path / "plain")
    profile = predictions(tmp_path / "profile.json", per)
    replayed = run(tmp_path / "replayed", gpu_profile=profile)
    assert simulated(replayed) == simulated(plain)


def busy_ticks(outdir: Path) -> int:
    line = next(x for x in simulated(outdir) if x.startswith("board.gpu.busyTicks"))
    return int(line.split()[1])


def test_measured_times_reach_the_stats(tmp_path):
    """Every step kernel measured at twice the model's time: the GPU is busy about
    twice as long (the MLP snapshot's copies are not step kernels and stay modelled)."""
    profile = predictions(tmp_path / "profile.json", "kernels")
    document = json.loads(profile.read_text())
    document["kernels"] = {k: 2 * v for k, v in document["kernels"].items()}
    profile.write_text(json.dumps(document))
    plain, slow = run(tmp_path / "plain"), run(tmp_path / "slow", gpu_profile=profile)
    assert busy_ticks(slow) == pytest.approx(2 * busy_ticks(plain), rel=0.02)
    assert busy_ticks(slow) < 2 * busy_ticks(plain)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda p, t: predictions(p, "kernels", model="rmc2"), "measured for model 'rmc2'"),
        (lambda p, t: predictions(p, "kernels", batch=64), "measured at batch size 64"),
        (lambda p, t: _drop(predictions(p, "kernels")), "missing ['top_fc2_sigmoid']"),
        (lambda p, t: p.write_text("{"), "not JSON"),
        (lambda p, t: p.write_text('{"format": "other"}'), "not a GPU profile"),
    ],
)
def test_a_profile_of_another_run_is_refused(tmp_path, change, words):
    path = tmp_path / "profile.json"
    change(path, tmp_path)
    with pytest.raises(UsageError, match=words.replace("[", r"\[").replace("]", r"\]")):
        run(tmp_path / "out", gpu_profile=path)


def _drop(path: Path) -> None:
    document = json.loads(path.read_text())
    del document["kernels"]["top_fc2_sigmoid"]
    path.write_text(json.dumps(document))


def test_cli_refuses_a_mismatched_profile_and_an_unknown_gpu_in_one_line(tmp_path):
    profile = predictions(tmp_path / "profile.json", "groups", batch=64)
    for extra in (["--gpu-profile", str(profile)], ["--gpu", "v100"]):
        done = subprocess.run(
            [sys.executable, str(CONFIG), "--model", MODEL, "--batch-size", str(BATCH),
             "--batches", "2", "--outdir", str(tmp_path / "cli"), "--no-progress", *extra],
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 2
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Traceback" not in done.stderr


def test_gpu_preset_from_the_api_equals_the_cli(tmp_path):
    api = run(tmp_path / "api", gpu="h100")
    subprocess.run(
        [sys.executable, str(CONFIG), "--system", "cxl", "--model", MODEL, "--batch-size",
         str(BATCH), "--batches", "3", "--gpu", "h100", "--outdir", str(tmp_path / "cli"),
         "--no-progress"],
        check=True, capture_output=True,
    )  # fmt: skip
    assert simulated(api) == simulated(tmp_path / "cli")
    assert simulated(api) != simulated(run(tmp_path / "default"))
    gpu = json.loads((api / "config.json").read_text())["board"]["gpu"]
    assert gpu["preset"] == "h100"
    assert gpu["params"]["peak_flops"]["value"] == 67e12
    assert "H100 datasheet" in gpu["params"]["peak_flops"]["source"]


def test_a_sweep_spec_takes_the_gpu_as_an_axis(tmp_path):
    from simulate.sweeps.spec import SpecError, load_sweep

    spec = tmp_path / "spec.yaml"
    spec.write_text(f"outroot: {tmp_path}/out\nfixed:\n  model: rmc1\naxes:\n  gpu: [a100, h200]\n")
    assert [run.options.gpu for run in load_sweep(spec).runs] == ["a100", "h200"]
    spec.write_text(spec.read_text().replace("h200", "h2000"))
    with pytest.raises(SpecError, match="unknown GPU 'h2000'"):
        load_sweep(spec)


def test_data_parallel_gpus_replay_the_profile_of_their_share(tmp_path):
    """Two GPUs of 32 samples each replay a batch-32 profile: the model's own
    predictions change nothing; an uneven split (33 samples) is refused."""
    profile = predictions(tmp_path / "profile.json", "groups")
    runs = {}
    for label, path in (("plain", None), ("replayed", profile)):
        out = tmp_path / label
        workload = DlrmWorkload(MODEL, batch_size=2 * BATCH)
        Simulator("cxl", workload, 3, out, gpus=2, progress=False, gpu_profile=path).run()
        runs[label] = simulated(out)
    assert runs["replayed"] == runs["plain"]
    workload = DlrmWorkload(MODEL, batch_size=2 * BATCH + 1)
    with pytest.raises(UsageError, match="splits unevenly over the GPUs"):
        Simulator("cxl", workload, 3, tmp_path / "odd", gpus=2, gpu_profile=profile).run()


def test_a_profile_that_is_not_a_regular_file_is_refused_without_reading(tmp_path):
    """A FIFO would block the run and /dev/zero would fill memory: both refused in one
    line before they are opened for reading."""
    import os

    fifo = tmp_path / "profile.json"
    os.mkfifo(fifo)
    for path, why in ((fifo, "a FIFO"), ("/dev/zero", "a character device")):
        done = subprocess.run(
            [sys.executable, str(CONFIG), "--model", MODEL, "--batches", "1", "--outdir",
             str(tmp_path / "cli"), "--no-progress", "--gpu-profile", str(path)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            f"trainingcxl.py: error: --gpu-profile {path}: not a regular file ({why})"
        ]
