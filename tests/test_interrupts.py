"""Ctrl-C stops every entry point with one line and exit 130, wherever it lands.

Two places lost it: while an entry point was still importing (a traceback), and inside
a finalizer, where Python drops the KeyboardInterrupt the handler raises (a sweep's run
then finished and exited 0). Both are made to happen here on purpose, not by timing.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # the entry points, imported as modules

from test_sweep_bad_input import spec_file  # noqa: E402

from simulate import simulator  # noqa: E402
from simulate.run import cli, job, prefetch  # noqa: E402
from simulate.sweeps import runner, store  # noqa: E402
from simulate.sweeps.spec import load_sweep  # noqa: E402
from workloads.inputs import InputGenerator  # noqa: E402

ENTRY_POINTS = [
    *sorted((ROOT / "configs").glob("*.py")),
    *[p for p in sorted((ROOT / "scripts").glob("*.py")) if p.name != "slurm_cluster.py"],
]
RUN = ["--system", "cxl-b", "--model", "rmc1", "--batch-size", "8", "--no-progress"]


class DropsInterrupt:
    """Delivers SIGINT inside its own finalizer: the handler's KeyboardInterrupt is then
    dropped, as when the collector finalizes an object just as Ctrl-C arrives."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)


def drop_interrupt() -> None:
    DropsInterrupt()  # no reference is kept: finalized on this line


def test_python_drops_an_interrupt_raised_in_a_finalizer(monkeypatch):
    """The premise: without raise_received, such a Ctrl-C is simply gone."""
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_type))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        drop_interrupt()  # raises nothing
    finally:
        signal.signal(signal.SIGINT, previous)
    assert dropped == [KeyboardInterrupt]


def test_run_main_reports_a_dropped_interrupt_after_the_work(capsys):
    def work() -> int:
        drop_interrupt()
        return 0

    assert cli.run_main("prog.py", work) == 130
    assert capsys.readouterr().err.splitlines() == ["prog.py: interrupted"]
    assert signal.getsignal(signal.SIGINT) is not cli._raise_stop  # handler restored


class FailsInFinalizer:
    def __del__(self) -> None:
        raise ValueError("a real bug in a finalizer")


def test_a_dropped_interrupt_prints_nothing_but_other_finalizer_errors_do(monkeypatch):
    reported = []

    def report(unraisable) -> None:
        reported.append(unraisable.exc_type)

    monkeypatch.setattr(sys, "unraisablehook", report)
    with cli.raising_on(signal.SIGINT):
        drop_interrupt()
        FailsInFinalizer()
        with pytest.raises(KeyboardInterrupt):
            cli.raise_received()
    assert reported == [ValueError]
    assert sys.unraisablehook is report
    try:
        cli.raise_received()
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C outlived its raising_on block")


@pytest.fixture
def drop_at_batch(monkeypatch):
    """Drop a Ctrl-C while batch ``at`` is generated; returns the batches generated."""
    generated: list[int] = []
    real = InputGenerator.batch

    def arm(at: int) -> list[int]:
        def batch(self, n: int):
            generated.append(n)
            if n == at:
                drop_interrupt()
            return real(self, n)

        monkeypatch.setattr(InputGenerator, "batch", batch)
        return generated

    return arm


@pytest.mark.parametrize("cpus", [1, 2])
def test_a_dropped_interrupt_stops_a_run_before_its_next_batch(
    tmp_path, capsys, monkeypatch, drop_at_batch, cpus
):
    """In line (one CPU) the batch is made in the main thread, where the finalizer drops
    the Ctrl-C; with a second CPU it is made ahead on the worker thread and the handler
    raises in the main thread: either way the run stops, with at most the one batch the
    worker makes ahead made after it."""
    monkeypatch.setattr(prefetch, "usable_cpus", lambda: cpus)
    generated = drop_at_batch(1)
    outdir = tmp_path / "out"
    argv = [*RUN, "--batches", "6", "--outdir", str(outdir)]
    assert simulator.run_from_command_line(argv, "trainingcxl.py") == 130
    assert generated == [0, 1] if cpus == 1 else generated in ([0, 1], [0, 1, 2])
    assert capsys.readouterr().err.splitlines() == ["trainingcxl.py: interrupted"]
    assert not outdir.exists()


def import_sweep():
    """scripts/sweep.py as a module, with pytest's Ctrl-C handler put back in place of
    the one it sets while importing (exit at once)."""
    previous = signal.getsignal(signal.SIGINT)
    try:
        return importlib.import_module("sweep")
    finally:
        signal.signal(signal.SIGINT, previous)


def one_run_spec(tmp_path: Path, batches: int) -> Path:
    return spec_file(tmp_path, {}, {"model": "rmc1", "batch_size": 8, "batches": batches})


def test_a_dropped_interrupt_in_a_sweep_run_keeps_nothing(tmp_path, capsys, drop_at_batch):
    """The CI failure of 2026-11-30: this sweep exited 0 with the run complete."""
    sweep = import_sweep()
    drop_at_batch(1)
    assert sweep.main([str(one_run_spec(tmp_path, 6)), "--id", "0"]) == 130
    assert capsys.readouterr().err.splitlines() == [sweep.INTERRUPTED["local"]]
    assert [p.name for p in (tmp_path / "out").iterdir()] == []  # no run, no temp dir


def test_a_run_interrupted_after_simulating_is_not_finalized(tmp_path, monkeypatch):
    """Dropped while the outputs are written: the sweep must not mark the run done."""
    real = job.write_outdir

    def write_then_drop(*args, **kwargs):
        real(*args, **kwargs)
        drop_interrupt()

    monkeypatch.setattr(job, "write_outdir", write_then_drop)
    (run,) = load_sweep(str(one_run_spec(tmp_path, 2))).runs
    with cli.raising_on(signal.SIGINT), pytest.raises(KeyboardInterrupt):
        runner.run_one(run.options)
    assert not store.is_complete(tmp_path / "out", run.id)
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("script", ENTRY_POINTS, ids=lambda p: p.name)
def test_ctrl_c_while_importing_is_one_line(tmp_path, script):
    """A numpy whose import delivers SIGINT: every entry point imports numpy, after
    simulate.run.startup has made Ctrl-C quiet."""
    shadow = tmp_path / "shadow" / "numpy"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(10)\n"
        "raise SystemExit('the interrupt was not handled')\n"
    )
    done = subprocess.run(
        [sys.executable, str(script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(shadow.parent)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        cwd=tmp_path,
    )
    assert (done.returncode, done.stderr) == (130, f"{script.name}: interrupted\n")


@pytest.mark.parametrize(
    ("stop", "status", "line"),
    [(KeyboardInterrupt, 130, "interrupted"), (cli.Terminated, 143, "terminated")],
)
def test_a_stop_inside_a_compiled_kernel_is_one_line(capsys, stop, status, line):
    """numba's dispatcher reports a signal's exception, raised while it ran, as a
    SystemError chained to it (the flaky Ctrl-C traceback of compare_backends)."""

    def main() -> int:
        try:
            raise stop()
        except stop as pending:
            raise SystemError("CPUDispatcher returned a result with an exception set") from pending

    assert cli.run_main("prog", main) == status
    assert capsys.readouterr().err.strip().splitlines() == [f"prog: {line}"]


def test_other_system_errors_are_not_taken_for_stops():
    def main() -> int:
        raise SystemError("a real bug")

    with pytest.raises(SystemError, match="a real bug"):
        cli.run_main("prog", main)


def test_a_stop_inside_numba_waits_for_its_code_to_return():
    """Ctrl-C while numba's own Python code runs (loading a compiled function from its
    cache, boxing a tuple result) is held: raised there it left a function or a tuple
    half-built, and the next use crashed the process (SIGSEGV, no error line)."""

    def frame_of(module: str):
        scope = {"__name__": module, "sys": sys}
        exec("def here():\n    return sys._getframe()\n", scope)
        return scope["here"]()

    with cli.raising_on(signal.SIGINT):
        cli._raise_stop(signal.SIGINT, frame_of("numba.core.dispatcher"))  # held
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0  # and tried again shortly
        cli._raise_held(signal.SIGALRM, frame_of("numba.core.caching"))  # still inside
        with pytest.raises(KeyboardInterrupt):  # outside numba now
            cli._raise_held(signal.SIGALRM, frame_of("workloads.inputs"))
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0
    assert signal.getsignal(signal.SIGALRM) is not cli._raise_held
    with cli.raising_on(signal.SIGINT), pytest.raises(KeyboardInterrupt):
        cli._raise_stop(signal.SIGINT, frame_of("workloads.inputs"))
