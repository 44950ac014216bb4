"""A PMEM image outlives the process: halt at a power cut, recover in a later run; an
image is only ever recovered by the configuration that wrote it."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "trainingcxl.py"
SMALL = ["--model", "rmc1", "--batch-size", "8", "--batches", "6", "--functional", "--no-progress"]


def run(args, outdir, rows=64):
    command = [sys.executable, str(CONFIG), *SMALL, "--rows", str(rows), *args]
    command += ["--outdir", str(outdir)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def cut_images(tmp_path_factory):
    """Per system: an image as a power cut at 0.2 ms left it, and the halted entry."""
    out = {}
    for system in ("cxl-b", "pmem"):
        where = tmp_path_factory.mktemp(system)
        image = where / "pmem.img"
        args = ["--system", system, "--fail-at", "0.2ms", "--pmem-image", str(image)]
        cut = run([*args, "--halt-on-failure"], where / "cut")
        assert cut.returncode == 0, cut.stderr
        out[system] = (image, json.loads((where / "cut" / "results.json").read_text())["failure"])
    return out


def copy_of(cut_images, tmp_path, system="cxl-b") -> Path:
    image = tmp_path / "pmem.img"
    shutil.copy(cut_images[system][0], image)
    return image


def one_line_error(proc, needle):
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


@pytest.mark.parametrize("system", ["cxl-b", "pmem"])
def test_halted_image_is_recovered_by_a_later_process(cut_images, tmp_path, system):
    image = copy_of(cut_images, tmp_path, system)
    halted = cut_images[system][1]
    assert halted["halted"] and halted["tick"] == 200_000_000
    back = run(["--system", system, "--pmem-image", str(image)], tmp_path / "back")
    assert back.returncode == 0, back.stderr
    resumed = json.loads((tmp_path / "back" / "results.json").read_text())["failure"]
    assert resumed["verdict"] == "exact"
    assert resumed["resume_batch"] <= halted["batch"]
    assert resumed["final_model_exact"] is True and resumed["recovery_ms"] > 0


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[:5000]), "truncated"),
        (lambda p: p.write_bytes(b"garbage!" + p.read_bytes()[8:]), "bad magic"),
        (lambda p: p.write_bytes(b""), "shorter than its header"),
    ],
)
def test_corrupt_image_is_one_clear_error(cut_images, tmp_path, damage, needle):
    image = copy_of(cut_images, tmp_path)
    damage(image)
    proc = run(["--system", "cxl-b", "--pmem-image", str(image)], tmp_path / "back")
    one_line_error(proc, "corrupt PMEM image")
    assert needle in proc.stderr


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--system", "pmem"], "system 'cxl-b' (these options: 'pmem')"),
        (["--system", "cxl-b", "--batch-size", "4"], "batch_size 8 (these options: 4)"),
        (["--system", "cxl-b", "--seed", "2"], "seed 1 (these options: 2)"),
        (["--system", "cxl-b", "--set", "board.cxl_mem.pmem.read_latency=400ns"], "params "),
        (["--system", "cxl-b", "--model", "dlrm_kaggle"], "model 'rmc1'"),
    ],
)
def test_image_of_another_configuration_is_refused_unmodified(cut_images, tmp_path, args, field):
    image = copy_of(cut_images, tmp_path)
    before = image.read_bytes()
    proc = run([*args, "--pmem-image", str(image)], tmp_path / "x")
    one_line_error(proc, "was written by another configuration")
    assert field in proc.stderr
    assert image.read_bytes() == before


def test_rows_of_another_configuration_are_refused(cut_images, tmp_path):
    image = copy_of(cut_images, tmp_path)
    proc = run(["--system", "cxl-b", "--pmem-image", str(image)], tmp_path / "x", rows=32)
    one_line_error(proc, "rows 64 (these options: 32)")


def test_fail_at_with_an_existing_image_is_an_error_not_ignored(cut_images, tmp_path):
    image = copy_of(cut_images, tmp_path)
    before = image.read_bytes()
    args = ["--system", "cxl-b", "--pmem-image", str(image), "--fail-at", "0.1ms"]
    proc = run(args, tmp_path / "x")
    one_line_error(proc, "exists, and a run recovers from an existing image without injecting")
    assert image.read_bytes() == before and not (tmp_path / "x" / "results.json").exists()
