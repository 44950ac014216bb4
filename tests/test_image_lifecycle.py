"""A PMEM image outlives the process: halt at a power cut, recover in a later run."""

import json
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


def cut_image(tmp_path, system="cxl-b"):
    """Run until a power cut at 0.2 ms and leave the image as the cut left it."""
    image = tmp_path / "pmem.img"
    args = ["--system", system, "--fail-at", "0.2ms", "--pmem-image", str(image)]
    cut = run([*args, "--halt-on-failure"], tmp_path / "cut")
    assert cut.returncode == 0, cut.stderr
    return image, json.loads((tmp_path / "cut" / "results.json").read_text())["failure"]


def one_line_error(proc, needle):
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


@pytest.mark.parametrize("system", ["cxl-b", "pmem"])
def test_halted_image_is_recovered_by_a_later_process(tmp_path, system):
    image, halted = cut_image(tmp_path, system)
    assert halted["halted"] and halted["tick"] == 200_000_000 and image.is_file()
    back = run(["--system", system, "--pmem-image", str(image)], tmp_path / "back")
    assert back.returncode == 0, back.stderr
    resumed = json.loads((tmp_path / "back" / "results.json").read_text())["failure"]
    assert resumed["verdict"] == "exact"
    assert resumed["resume_batch"] <= halted["batch"]
    assert resumed["final_model_exact"] is True


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[:5000]), "truncated"),
        (lambda p: p.write_bytes(b"garbage!" + p.read_bytes()[8:]), "bad magic"),
        (lambda p: p.write_bytes(b""), "shorter than its header"),
    ],
)
def test_corrupt_image_is_one_clear_error(tmp_path, damage, needle):
    image, _ = cut_image(tmp_path)
    damage(image)
    proc = run(["--system", "cxl-b", "--pmem-image", str(image)], tmp_path / "back")
    one_line_error(proc, "corrupt PMEM image")
    assert needle in proc.stderr


def test_image_of_another_configuration_is_refused(tmp_path):
    image, _ = cut_image(tmp_path)
    proc = run(["--system", "cxl-b", "--pmem-image", str(image)], tmp_path / "x", 32)
    one_line_error(proc, "another model")
