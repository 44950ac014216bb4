"""Bad input at every entry point: one line naming the option and the value, exit 2, no
traceback, nothing written; a run that fails half way leaves earlier outputs intact."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "trainingcxl": ROOT / "configs" / "trainingcxl.py",
    "microbench": ROOT / "configs" / "microbench.py",
    "reproduce_paper": ROOT / "scripts" / "reproduce_paper.py",
    "sensitivity": ROOT / "scripts" / "sensitivity.py",
    "failure_accuracy": ROOT / "scripts" / "failure_accuracy.py",
    "ft_accuracy": ROOT / "scripts" / "ft_accuracy.py",
    "compare_backends": ROOT / "scripts" / "compare_backends.py",
    "crashcheck": ROOT / "scripts" / "crashcheck.py",
    "collect": ROOT / "scripts" / "collect.py",
}
PMEM = "board.cxl_mem.pmem"
MB = ("--device", "pmem", "--op", "read", "--outdir", "{new}")

# (entry point, arguments, text the one error line must contain). Placeholders: {file}
# an existing file, {image} an existing PMEM image file, {outroot} a sweep outroot whose
# one complete run has a truncated results.json, {new} a fresh directory name.
CASES = [
    ("trainingcxl", ["--seed", "-1"], "--seed must be in 0..4294967295, got -1"),
    ("trainingcxl", ["--seed", "4294967296"], "--seed must be in 0..4294967295"),
    ("trainingcxl", ["--set", f"{PMEM}.read_latency=1e30s"], "'1e30s': time '1e30s' is beyond"),
    ("trainingcxl", ["--set", f"{PMEM}.read_latency=2s"], "'2s': must be at most 1s"),
    ("trainingcxl", ["--set", f"{PMEM}.ctrl_read_bandwidth=1e-30B/s"], "at least 1MB/s"),
    ("trainingcxl", ["--set", f"{PMEM}.ctrl_read_bandwidth=1e300GB/s"], "not a finite number"),
    ("trainingcxl", ["--set", f"{PMEM}.controllers=1000000000"], "'1000000000': must be <= 1024"),
    ("trainingcxl", ["--set", f"{PMEM}.access_unit=1B"], "access_unit: bad value '1B'"),
    ("trainingcxl", ["--outdir", ""], "--outdir must not be empty"),
    ("trainingcxl", ["--outdir", " "], "--outdir must not be empty"),
    ("trainingcxl", ["--outdir", "{file}"], "exists and is not a directory"),
    ("trainingcxl", ["--outdir", "{file}/sub"], "is not a directory"),
    ("trainingcxl", ["--batches", "0"], "--batches must be at least 1, got 0"),
    ("trainingcxl", ["--batches", "1000000000"], "--batches 1000000000 would need ~"),
    ("trainingcxl", ["--batch-size", "100000000"], "--batch-size 100000000 would need ~"),
    (
        "trainingcxl",
        ["--model", "rm2", "--functional", "--rows", "100000000"],
        "--rows 100000000 would need ~",
    ),
    ("trainingcxl", ["--fail-at", "soon"], "--fail-at 'soon'"),
    ("trainingcxl", ["--fail-at", "1e30s"], "--fail-at '1e30s'"),
    ("trainingcxl", ["--pmem-image", ""], "--pmem-image must not be empty"),
    ("trainingcxl", ["--pmem-image", "{file}/img"], "no directory"),
    ("trainingcxl", ["--input-cache", " "], "--input-cache must not be empty"),
    ("trainingcxl", ["--input-cache", "{file}"], "exists and is not a directory"),
    (
        "trainingcxl",
        ["--functional", "--fail-at", "1ms", "--pmem-image", "{image}"],
        "exists, and a run recovers from an existing image",
    ),
    ("trainingcxl", ["--model", "rm9"], "unknown model 'rm9'"),
    ("microbench", [*MB, "--size", "0"], "--size must be at least 1 byte, got '0'"),
    ("microbench", [*MB, "--size", "1e30"], "--size"),
    ("microbench", [*MB, "--span", "1B"], "--span '1B' is smaller than one request"),
    ("microbench", [*MB, "--requests", "0"], "--requests must be at least 1"),
    ("microbench", [*MB, "--requests", "100000000000"], "--requests 100000000000 of"),
    ("microbench", [*MB, "--seed", "-1"], "--seed must be in 1..4294967295"),
    ("microbench", [*MB, "--controllers", "100000"], "--controllers must be in 1..1024"),
    ("microbench", [*MB, "--outdir", "{file}"], "exists and is not a directory"),
    ("microbench", [*MB, "--outdir", ""], "--outdir must not be empty"),
    ("reproduce_paper", ["--batches", "0"], "--batches must be at least 2"),
    ("reproduce_paper", ["--models", ""], "--models names no model"),
    ("reproduce_paper", ["--models", " , "], "--models names no model"),
    ("reproduce_paper", ["--models", "rm1,rm9"], "unknown model 'rm9'"),
    ("reproduce_paper", ["--outdir", "{file}"], "exists and is not a directory"),
    ("reproduce_paper", ["--seed", "-1"], "--seed must be in 0..4294967295"),
    ("sensitivity", ["--batches", "0"], "--batches must be at least 2"),
    ("sensitivity", ["--outdir", "{file}"], "exists and is not a directory"),
    ("sensitivity", ["--bogus"], "unrecognized arguments: --bogus"),
    ("failure_accuracy", ["--batches", "0"], "--batches must be at least 1, got 0"),
    ("failure_accuracy", ["--failures", "0"], "--failures must be at least 1, got 0"),
    ("failure_accuracy", ["--rows", "0"], "--rows must be at least 1, got 0"),
    ("failure_accuracy", ["--model", "nope"], "unknown model 'nope'"),
    ("failure_accuracy", ["--seed", "-1"], "--seed must be in 0..4294967295"),
    ("compare_backends", ["--model", "nope"], "unknown model 'nope'"),
    ("compare_backends", ["--batches", "0"], "--batches must be at least 1"),
    ("compare_backends", ["--outdir", "x"], "unrecognized arguments: --outdir x"),
    ("compare_backends", ["--functional"], "unrecognized arguments: --functional"),
    ("crashcheck", ["--outdir", "x"], "unrecognized arguments: --outdir x"),
    ("crashcheck", ["--pmem-image", "x"], "unrecognized arguments: --pmem-image x"),
    ("crashcheck", ["--fail-at", "1ms"], "unrecognized arguments: --fail-at 1ms"),
    ("crashcheck", ["--model", "rm1"], "crash states"),
    ("crashcheck", ["--seed", "-1"], "--seed must be in 0..4294967295"),
    ("crashcheck", ["--sample", "-1"], "--sample must not be negative"),
    (
        "crashcheck",
        ["--system", "dram", "--checkpoint", "cpr", "--budget", "3"],
        "--budget explore the paper protocols' persist orders",
    ),
    (
        "trainingcxl",
        ["--system", "dram", "--checkpoint", "cpr", "--pmem-image", "{new}"],
        "keeps its checkpoints on board.ft.store",
    ),
    # absurd counts: bounded by what the run can use (8 failures per batch), before work
    ("trainingcxl", ["--fail-random", str(10**30)], "--fail-random: 10000000000000000000000000"),
    ("trainingcxl", ["--fail-random", "81", "--batches", "10"], "more than the 8 per batch"),
    (
        "trainingcxl",
        ["--fail-random", "15", "--batches", "2", "--fail-at=1ms", "--fail-at=2ms"],
        "--fail-at: 17",
    ),
    (
        "trainingcxl",
        [*[f"--fail-at={k}us" for k in range(1, 18)], "--batches", "2"],
        "--fail-at: 17",
    ),
    ("trainingcxl", ["--fail-at", "1ms", "--fail-at", "1000us"], "the same instant as"),
    ("failure_accuracy", ["--failures", str(10**12)], "--failures: 1000000000000 failures"),
    ("failure_accuracy", ["--failures", "25", "--batches", "3"], "more than the 8 per batch"),
    ("ft_accuracy", ["--interval", "0"], "--interval must be at least 1, got 0"),
    ("ft_accuracy", ["--failures", "25", "--batches", "3"], "more than the 8 per batch"),
    # parameters without a meaning at zero or tiny values, or without a physical bound
    ("trainingcxl", ["--set", f"{PMEM}.interleave=0B"], "interleave: bad value '0B': must be >="),
    (
        "trainingcxl",
        ["--system", "dram", "--set", "board.storage.interleave=16B"],
        "must be >= 32B",
    ),
    (
        "trainingcxl",
        ["--system", "ssd", "--set", "board.storage.ssd.module_capacity=1MB"],
        "per controller",
    ),
    ("trainingcxl", ["--set", f"{PMEM}.module_capacity=1KiB"], "more than 8 per controller"),
    ("trainingcxl", ["--set", f"{PMEM}.module_idle_power=1MW"], "must be at most 100kW"),
    ("trainingcxl", ["--set", "board.gpu.active_power=1e15W"], "must be at most 100kW"),
    ("trainingcxl", ["--set", f"{PMEM}.write_energy=3mJ"], "must be at most 1uJ"),
    ("trainingcxl", ["--set", "board.index_bytes=2"], "rows in the largest table need at least"),
    (
        "trainingcxl",
        ["--model", "rmc1", "--set", "board.index_bytes=1"],
        "index_bytes: bad value 1",
    ),
    # microbench: spans within the address space, windows within any device queue
    ("microbench", [*MB, "--span", "1e30B"], "--span must be at most 1PiB"),
    ("microbench", [*MB, "--span", str(2**60)], "--span must be at most 1PiB"),
    ("microbench", [*MB, "--size", "2048TiB"], "--size must be at most 1PiB"),
    ("microbench", [*MB, "--outstanding", str(10**12)], "--outstanding must be in 1..65536"),
    (
        "microbench",
        [*MB[:2], "--stream", "write:seq:4KiB:100000", "--outdir", "{new}"],
        "outstanding must be in 1..65536",
    ),
    ("collect", ["{file}"], "no such directory"),
    ("collect", ["{outroot}"], "results.json: not valid JSON"),
    ("collect", ["{outroot}", "--plot", "x"], "--plot and --x go together"),
    ("collect", ["{outroot}", "--out", "/"], "--out /: is a directory"),
    ("collect", ["{outroot}", "--out", ""], "--out must not be empty"),
    ("collect", ["{outroot}", "--out", "{new}/"], "is a directory; give a file prefix"),
    ("collect", ["{outroot}", "--out", "{file}/x"], "is not a directory"),
]


def run(script: str, args: list[str], cwd: Path, env=None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS[script]), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        **kw,
    )


@pytest.fixture
def places(tmp_path: Path) -> dict[str, str]:
    file = tmp_path / "a-file"
    file.write_text("not a directory\n")
    image = tmp_path / "cut.img"
    image.write_bytes(b"\0" * 64)
    outroot = tmp_path / "outroot"
    run_dir = outroot / "abc123"
    run_dir.mkdir(parents=True)
    (run_dir / "DONE").write_text("abc123\n")
    (run_dir / "options.json").write_text(json.dumps({"options": {"system": "cxl"}}))
    (run_dir / "results.json").write_text('{"batch_time_ms": {"mean": 1.0')  # truncated
    return {"file": str(file), "image": str(image), "outroot": str(outroot), "new": "new"}


def assert_one_error_line(proc: subprocess.CompletedProcess, prog: str, needle: str) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    assert needle in lines[0], lines[0]
    assert proc.returncode == 2


@pytest.mark.parametrize(("script", "args", "needle"), CASES, ids=lambda x: str(x)[:40])
def test_bad_input_is_one_line_naming_it_and_exit_2(tmp_path, places, script, args, needle):
    argv = [arg.format(**places) for arg in args]
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = run(script, argv, tmp_path, env={"GEM5": ""})
    assert_one_error_line(proc, f"{script}.py", needle.format(**places))
    assert proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_missing_gem5_binary_is_one_line(tmp_path):
    proc = run("compare_backends", ["--batches", "1"], tmp_path, env={"GEM5": "/no/gem5.opt"})
    assert_one_error_line(proc, "compare_backends.py", "GEM5=/no/gem5.opt: not an executable")


def test_memory_limit_is_checked_before_work_and_prints_the_estimate(tmp_path):
    proc = run(
        "trainingcxl",
        ["--model", "rmc1", "--functional", "--batches", "2", "--outdir", "o"],
        tmp_path,
        env={"TRAININGCXL_MEMORY_LIMIT": "100MiB"},
    )
    assert_one_error_line(proc, "trainingcxl.py", "would need ~")
    assert "embedding tables" in proc.stderr and "100.0 MiB of memory available" in proc.stderr
    assert not (tmp_path / "o").exists()


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def no_staging_left(folder: Path) -> bool:
    return not any(".partial-" in p.name for p in folder.rglob("*"))


GOOD = ["--system", "cxl-b", "--model", "rmc1", "--batch-size", "8", "--no-progress"]


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("good")
    out = where / "out"
    proc = run("trainingcxl", [*GOOD, "--batches", "2", "--outdir", str(out), "--plot"], where)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def good_outdir(tmp_path: Path, good_run: Path) -> Path:
    """A copy of a good run's outdir, for a test to try to damage."""
    return Path(shutil.copytree(good_run, tmp_path / "out"))


def test_error_after_simulating_leaves_the_previous_outputs(tmp_path, good_outdir):
    before = digest(good_outdir)
    late = ["--functional", "--rows", "64", "--fail-at", "10s", "--batches", "2"]
    proc = run("trainingcxl", [*GOOD, *late, "--outdir", str(good_outdir)], tmp_path)
    assert_one_error_line(proc, "trainingcxl.py", "is after the run ends")
    assert digest(good_outdir) == before
    assert no_staging_left(tmp_path)


def _file_size_limit(nbytes: int):
    """A child whose files cannot grow past nbytes: a full disk, as far as it can tell
    (Python ignores SIGXFSZ, so the write fails with EFBIG)."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))


def test_disk_full_while_writing_leaves_the_previous_outputs(tmp_path, good_outdir):
    before = digest(good_outdir)
    proc = run(
        "trainingcxl",
        [*GOOD, "--batches", "3", "--outdir", str(good_outdir)],
        tmp_path,
        preexec_fn=_file_size_limit(4096),
    )
    assert_one_error_line(proc, "trainingcxl.py", "File too large")
    assert digest(good_outdir) == before
    assert no_staging_left(tmp_path)


def test_a_new_run_replaces_every_output_of_the_previous_one(tmp_path, good_outdir):
    (good_outdir / "notes.txt").write_text("mine\n")  # not an output: kept
    proc = run("trainingcxl", [*GOOD, "--batches", "3", "--outdir", str(good_outdir)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    names = {p.name for p in good_outdir.iterdir()}
    assert names == {"stats.txt", "stats.json", "config.json", "results.json", "timeline.csv"} | {
        "notes.txt"
    }  # the previous run's plots are gone: they belonged to its set
    assert json.loads((good_outdir / "results.json").read_text())["batches"] == 3
    assert no_staging_left(tmp_path)


@pytest.mark.parametrize(("sig", "status", "word"), [(signal.SIGINT, 130, "interrupted")])
def test_ctrl_c_is_one_line_and_leaves_the_previous_outputs(
    tmp_path, good_outdir, sig, status, word
):
    before = digest(good_outdir)
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS["trainingcxl"]), *GOOD, "--batches", "100000"]
        + ["--outdir", str(good_outdir)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)  # while importing or simulating: both must be quiet
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == status
    assert err.splitlines() == [f"trainingcxl.py: {word}"], err[-2000:]
    assert digest(good_outdir) == before
    assert no_staging_left(tmp_path)


LONG_RUNS = [
    ("crashcheck", ["--model", "rmc1", "--rows", "64", "--batch-size", "8", "--batches", "60"]),
    ("failure_accuracy", ["--batches", "300"]),
    ("sensitivity", ["--outdir", "{new}"]),
    ("reproduce_paper", ["--outdir", "{new}"]),
    ("compare_backends", ["--batches", "1000"]),  # ~4 s per 50 batches on an idle machine
    # a load sweep of writes (reads ended too close to the SIGINT: 6M in 3.6-5.5 s, then
    # 30M in 2.6-3.4 s on a faster host; 20M writes take ~8.5 s and ~0.95 GB at most,
    # which the memory check must not refuse: tests/test_microbench.py)
    ("microbench", ["--device", "pmem", "--op", "write", "--pattern", "rand", "--size", "256"]
     + ["--requests", "20000000", "--load-sweep", "--outdir", "{new}"]),
]  # fmt: skip


@pytest.mark.parametrize(("script", "args"), LONG_RUNS, ids=[s for s, _ in LONG_RUNS])
def test_every_long_run_stops_on_ctrl_c_with_one_line(tmp_path, places, script, args):
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS[script]), *[a.format(**places) for a in args]],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "GEM5": ""},
    )
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    lines = [line for line in err.splitlines() if "\r" not in line]  # progress bars
    assert proc.returncode == 130, err[-2000:]
    assert lines[-1:] == [f"{script}.py: interrupted"] and "Traceback" not in err
    assert not (tmp_path / "new").exists() and no_staging_left(tmp_path)


def test_sigterm_is_one_line_exit_143(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS["trainingcxl"]), *GOOD, "--batches", "100000"]
        + ["--outdir", str(tmp_path / "o")],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(4)  # running by now: the handler of run_main is in place
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err.splitlines() == ["trainingcxl.py: terminated"]
    assert not (tmp_path / "o").exists() and no_staging_left(tmp_path)


REPRO = ["--models", "rmc1", "--batches", "2"]


def test_reproduce_report_survives_empty_and_failing_runs(tmp_path):
    out = tmp_path / "repro"
    proc = run("reproduce_paper", [*REPRO, "--outdir", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "REPORT.md").read_text().count("| rmc1 |") == 2 + 7  # 7 breakdown rows
    before = digest(out)
    empty = run("reproduce_paper", ["--models", ",", "--outdir", str(out)], tmp_path)
    assert_one_error_line(empty, "reproduce_paper.py", "--models names no model")
    full = run(
        "reproduce_paper",
        [*REPRO, "--outdir", str(out)],
        tmp_path,
        preexec_fn=_file_size_limit(4096),
    )
    assert full.returncode == 2 and "File too large" in full.stderr
    assert "Traceback" not in full.stderr
    assert digest(out) == before
    assert no_staging_left(tmp_path)


def test_gem5_child_dies_with_its_parent(tmp_path):
    """A child started with die_with_parent() is killed when its parent is SIGKILLed."""
    parent = (
        "import subprocess, sys, time\n"
        "from simulate.run.cli import die_with_parent\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " preexec_fn=die_with_parent())\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    child = int(proc.stdout.readline())
    proc.kill()
    proc.wait(timeout=10)
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        if _zombie(child):
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child outlived its parent")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


CUT = [*GOOD[:-1], "--functional", "--rows", "64", "--batches", "4", "--no-progress"]


def _fsize_limit(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.fixture(scope="module")
def cut_image(tmp_path_factory) -> Path:
    """An image as a power cut at 0.3 ms left it (cxl-b, RMC1)."""
    where = tmp_path_factory.mktemp("cut")
    image = where / "pmem.img"
    args = [*CUT, "--fail-at", "0.3ms", "--halt-on-failure", "--pmem-image", str(image)]
    proc = run("trainingcxl", [*args, "--outdir", str(where / "o")], where)
    assert proc.returncode == 0 and image.exists(), proc.stderr
    return image


@pytest.mark.parametrize("limit", [20_000, 200_000])
def test_a_recovery_that_fails_part_way_leaves_the_cut_image_byte_for_byte(
    tmp_path, cut_image, limit
):
    """Recovery and the resumed training rewrite the image; an output write that then
    fails (the file size limit: outputs are ~20-300 KB) must leave the power-cut image
    as it was, so the same recovery can be run again, and then it succeeds."""
    image = Path(shutil.copy(cut_image, tmp_path / "pmem.img"))
    before = hashlib.sha256(image.read_bytes()).hexdigest()
    args = [*CUT, "--pmem-image", str(image), "--outdir", str(tmp_path / "o")]
    proc = run("trainingcxl", args, tmp_path, preexec_fn=_fsize_limit(limit))
    assert_one_error_line(proc, "trainingcxl.py", "File too large")
    assert hashlib.sha256(image.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pmem.img"]  # no working copy left
    again = run("trainingcxl", args, tmp_path)
    assert again.returncode == 0, again.stderr
    failure = json.loads((tmp_path / "o" / "results.json").read_text())["failure"]
    assert failure["resumed_from"] == str(image) and failure["final_model_exact"]
    assert hashlib.sha256(image.read_bytes()).hexdigest() != before  # recovered and sealed


def test_a_fresh_image_is_written_only_by_a_run_that_succeeds(tmp_path):
    image = tmp_path / "pmem.img"
    args = [*CUT, "--fail-at", "0.3ms", "--halt-on-failure", "--pmem-image", str(image)]
    proc = run("trainingcxl", [*args, "--outdir", "o"], tmp_path, preexec_fn=_fsize_limit(20_000))
    assert proc.returncode == 2 and "File too large" in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_image_path_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    image = tmp_path / "img"
    if kind == "fifo":
        os.mkfifo(image)
    else:
        image.symlink_to("/dev/null")
    args = [*CUT, "--pmem-image", str(image), "--outdir", "o"]
    proc = run("trainingcxl", args, tmp_path)
    assert_one_error_line(proc, "trainingcxl.py", "not a regular file")
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("option", ["--out", "--png"])
@pytest.mark.parametrize("kind", ["fifo", "symlink-to-fifo"])
def test_collect_never_renames_over_a_fifo(tmp_path, places, option, kind):
    """An output path naming a FIFO (or a link to one) is refused in one line and the
    FIFO stays (as root, renaming over /dev/null would replace the device)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    target = tmp_path / ("out.csv" if option == "--out" else "plot.png")
    if kind == "symlink-to-fifo":
        target.symlink_to(fifo)
    else:
        fifo.rename(target)
        fifo = target
    root = _plottable_outroot(tmp_path)
    value = str(target.with_suffix("")) if option == "--out" else str(target)
    plot = ["--plot", "batch_time_ms.mean", "--x", "seed"] if option == "--png" else []
    proc = run("collect", [str(root), option, value, *plot], tmp_path)
    assert_one_error_line(proc, "collect.py", "is a FIFO, not a regular file")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def _plottable_outroot(where: Path, mean: str = "1.5", seed: str = "1") -> Path:
    root = where / "runs"
    run_dir = root / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "DONE").write_text("r1\n")
    (run_dir / "options.json").write_text(
        json.dumps({"options": {"system": "cxl", "seed": int(seed), "sets": {}, "fail_at": []}})
    )
    (run_dir / "results.json").write_text(f'{{"batch_time_ms": {{"mean": {mean}}}, "note": "x"}}')
    return root


@pytest.mark.parametrize(
    ("results", "needle"),
    [
        ('{"batch_time_ms": {"mean": NaN}}', "NaN is not standard JSON"),
        ('{"a": -Infinity}', "-Infinity is not standard JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('"text"', "expected a JSON object, got str"),
        (b"\xff\xfe{}", "not UTF-8 (byte 0)"),
        ('{"a": 1', "not valid JSON"),
        ("[" * 100_000, "not valid JSON"),
    ],
)
def test_collect_refuses_damaged_results_naming_the_file(tmp_path, results, needle):
    root = _plottable_outroot(tmp_path)
    path = root / "r1" / "results.json"
    path.write_bytes(results if isinstance(results, bytes) else results.encode())
    proc = run("collect", [str(root)], tmp_path)
    assert_one_error_line(proc, "collect.py", needle)
    assert str(path) in proc.stderr
    assert not (root / "sweep.csv").exists()


@pytest.mark.parametrize(
    "options",
    ["[]", '{"options": 3}', '{"options": {"sets": [1]}}', '{"options": {"fail_at": 5}}'],
)
def test_collect_refuses_options_of_the_wrong_shape(tmp_path, options):
    root = _plottable_outroot(tmp_path)
    (root / "r1" / "options.json").write_text(options)
    proc = run("collect", [str(root)], tmp_path)
    assert_one_error_line(proc, "collect.py", "options.json")


@pytest.mark.parametrize(
    ("mean", "metric", "needle"),
    [
        ("1e999", "batch_time_ms.mean", "has inf, not a finite number"),
        ("1.5", "note", "has 'x', not a finite number"),
        ("1.5", "system", "has 'cxl', not a finite number"),
    ],
)
def test_collect_plots_finite_numbers_only(tmp_path, mean, metric, needle):
    root = _plottable_outroot(tmp_path, mean)
    proc = run("collect", [str(root), "--plot", metric, "--x", "seed"], tmp_path)
    assert_one_error_line(proc, "collect.py", needle)
    assert not list(root.glob("*.png"))


@pytest.mark.parametrize("script", ["trainingcxl", "collect", "microbench"])
def test_an_unusable_plotting_backend_is_refused_before_any_work(tmp_path, script):
    argv = {
        "trainingcxl": [*GOOD, "--batches", "2", "--plot", "--outdir", "o"],
        "collect": [
            str(_plottable_outroot(tmp_path)),
            "--plot",
            "batch_time_ms.mean",
            "--x",
            "seed",
        ],
        "microbench": [*MB[:4], "--load-sweep", "--outdir", "o"],
    }[script]
    started = time.monotonic()
    proc = run(script, argv, tmp_path, env={"MPLBACKEND": "no-such-backend"})
    assert_one_error_line(proc, f"{script}.py", "MPLBACKEND='no-such-backend' is not a matplotlib")
    assert time.monotonic() - started < 30
    assert not (tmp_path / "o").exists() and not (tmp_path / "runs" / "sweep.csv").exists()


def test_a_valid_plotting_backend_from_the_environment_still_writes_png(tmp_path):
    root = _plottable_outroot(tmp_path)
    proc = run(
        "collect", [str(root), "--plot", "batch_time_ms.mean", "--x", "seed"], tmp_path,
        env={"MPLBACKEND": "svg"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (root / "batch_time_ms.mean-vs-seed.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("status", [1, 3])
def test_a_failing_gem5_binary_is_one_line_and_exit_2(tmp_path, status):
    gem5 = tmp_path / "gem5.opt"
    gem5.write_text(
        f"#!/bin/sh\necho 'panic: first' >&2\necho 'fatal: last words' >&2\nexit {status}\n"
    )
    gem5.chmod(0o755)
    proc = run(
        "compare_backends", ["--batches", "1", *GOOD[2:6]], tmp_path, env={"GEM5": str(gem5)}
    )
    assert_one_error_line(
        proc, "compare_backends.py", f"gem5 exited with {status}: fatal: last words"
    )


def test_an_output_name_taken_by_a_fifo_in_the_outdir_is_refused_and_kept(tmp_path, good_outdir):
    """The outdir's previous set is replaced entry by entry only when each is a regular
    file: a FIFO named stats.txt is refused, and it and the other outputs stay."""
    (good_outdir / "stats.txt").unlink()
    os.mkfifo(good_outdir / "stats.txt")
    before = digest(good_outdir)
    proc = run("trainingcxl", [*GOOD, "--batches", "2", "--outdir", str(good_outdir)], tmp_path)
    assert_one_error_line(proc, "trainingcxl.py", "stats.txt")
    assert "is a FIFO, not a regular file" in proc.stderr
    assert stat.S_ISFIFO(os.stat(good_outdir / "stats.txt").st_mode)
    assert digest(good_outdir) == before and no_staging_left(tmp_path)
