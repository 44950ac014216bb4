"""Per-op and per-batch durations of one configuration on the built-in engine and in gem5.

    python scripts/compare_backends.py --system cxl --model rm1 --batches 2
    python scripts/compare_backends.py --system cxl --batches 2 --no-xpbuffer
    python scripts/compare_backends.py --system pmem --model rm4 --gem5-sample 2000
    python scripts/compare_backends.py --system cxl-b --gpus 2 --cxl-mems 2 --model rmc1

gem5 is ``GEM5`` or ../shared/gem5/gem5 beside the checkout (``GEM5=``, empty: none);
this script runs itself again under it (as __m5_main__, with the environment its
embedded Python needs), where the run is recorded by the built-in engine and each
memory op replayed in gem5 twice: in the built-in schedule next to the others
(concurrent) and by itself (alone). The table gives both sides and gem5/built-in for
every op and batch. ``--no-xpbuffer`` takes the tables' XPBuffer away on both sides
(buffer_lines=0). ``--gem5-sample N`` replays at most N packets per stream: it checks
that a configuration runs in gem5, its durations mean nothing. Without gem5 only the
built-in side is printed. Errors in the options print one line and exit with 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("compare_backends.py")

from simulate.run.cli import QuietParser, UsageError, die_with_parent, run_main  # noqa: E402
from simulate.run.options import (  # noqa: E402
    SAMPLED_OR_SOFTWARE_FT,
    add_run_options,
    options_from_args,
)

PROG = "compare_backends.py"
GEM5_SIDE = "--gem5-side"  # internal: argv[1] under gem5.opt, then a JSON path, a sample
NO_XPBUFFER = "--no-xpbuffer"
SAMPLE = "--gem5-sample"
LOW, HIGH = 0.85, 1.15
UNUSED = ("--outdir", "--functional", "--fail-at", "--fail-random", "--pmem-image")
UNUSED += SAMPLED_OR_SOFTWARE_FT
UNUSED += ("--halt-on-failure", "--plot")  # per-op durations of plain runs, in a temp dir


def parse_run_options(argv: list[str], prog: str, description: str):
    """The run options this script uses; the others are refused as unrecognized."""
    parser = QuietParser(prog=prog, description=description.splitlines()[0])
    add_run_options(parser, exclude=UNUSED)
    return options_from_args(parser.parse_args(argv))


class Gem5Failed(UsageError):
    """The gem5 side ended with an error: the binary GEM5 names cannot run this
    (reported as one line, exit 2, with the last line gem5 printed)."""


def check_gem5(gem5: str) -> None:
    if not (os.path.isfile(gem5) and os.access(gem5, os.X_OK)):
        raise UsageError(f"GEM5={gem5}: not an executable file (a gem5.opt build, docs/gem5.md)")


def gem5_side(out: str, sample: str, argv: list[str]) -> None:
    """Under gem5.opt: record the run, replay its memory ops, write both sides to out."""
    from components.gem5.bootstrap import ensure_dependencies

    ensure_dependencies(ROOT)
    from simulate.run.gem5_run import run_under_gem5

    options = parse_run_options(argv, PROG, __doc__)
    results = run_under_gem5(options, int(sample))
    Path(out).write_text(json.dumps(results, indent=1) + "\n")


def builtin_only(argv: list[str]) -> dict:
    """The built-in side alone (no gem5 here), in the gem5 side's layout."""
    from simulate.run.gem5_run import record_builtin

    _, traces, _ = record_builtin(parse_run_options(argv, PROG, __doc__))
    ops = [
        {
            "batch": trace.record.batch,
            "op": trace.record.name,
            "builtin": {"concurrent": trace.builtin_ticks, "alone": trace.builtin_alone},
        }
        for trace in sorted(traces.values(), key=lambda t: t.record.uid)
        if any(stage.streams for stage in trace.stages)
    ]
    return {"ops": ops, "batches": []}


def run_gem5(gem5: str, argv: list[str], outdir: Path, sample: int = 0) -> dict:
    """This script under gem5.opt; its JSON, or the tail of gem5's output on failure."""
    from components.gem5 import environment

    out = outdir / "gem5_ops.json"
    script = [__file__, GEM5_SIDE, str(out), str(sample)]
    command = [gem5, "-d", str(outdir / "m5out"), *script, *argv]
    run = subprocess.run(  # the gem5 run dies with this process, however this one ends
        command, env=environment(), capture_output=True, text=True, preexec_fn=die_with_parent()
    )
    if run.returncode != 0 or not out.exists():
        lines = [line.strip() for line in (run.stderr or run.stdout or "").splitlines()]
        last = next((line for line in reversed(lines) if line), "no output")
        raise Gem5Failed(f"GEM5={gem5}: gem5 exited with {run.returncode}: {last}")
    return json.loads(out.read_text())


def table(results: dict) -> list[str]:
    """Rows of both sides in microseconds, ratios gem5/built-in, flagged outside 15%."""
    gem5 = any("gem5" in op for op in results["ops"])
    head = f"{'batch':>5} {'op':<16}"
    for mode in ("concurrent", "alone"):
        head += f" {mode + ' built-in':>20}"
        if gem5:
            head += f" {'gem5':>10} {'ratio':>7}"
    lines = [head]
    for row in results["ops"] + [{**b, "op": "(batch)"} for b in results["batches"]]:
        line = f"{row['batch']:>5} {row['op']:<16}"
        for mode in ("concurrent", "alone"):
            ours = row["builtin"][mode] / 1e6
            line += f" {ours:>20.3f}"
            if gem5:
                theirs = row["gem5"][mode] / 1e6
                ratio = theirs / ours if ours else float("nan")
                flag = " " if LOW <= ratio <= HIGH else "*"
                line += f" {theirs:>10.3f} {ratio:>6.3f}{flag}"
        lines.append(line)
    return lines


def _own_options(argv: list[str]) -> tuple[list[str], bool, int]:
    """This script's own options out of argv: (the run's argv, no XPBuffer, sample)."""
    no_buffer = NO_XPBUFFER in argv
    argv = [arg for arg in argv if arg != NO_XPBUFFER]
    sample = 0
    if SAMPLE in argv:
        at = argv.index(SAMPLE)
        value = argv[at + 1] if at + 1 < len(argv) else ""
        if not value.isdigit() or int(value) < 1:
            raise UsageError(f"{SAMPLE} expects a positive number of packets, got {value!r}")
        sample, argv = int(value), argv[:at] + argv[at + 2 :]
    return argv, no_buffer, sample


def main(argv: list[str]) -> int:
    def body() -> int:
        from components.gem5 import binary
        from components.gem5.ops import table_devices
        from simulate.run.configure import prepare
        from simulate.run.gem5_run import refusal
        from simulate.run.preflight import check_memory
        from simulate.simulator import validate

        run_argv, no_buffer, sample = _own_options(argv)
        options = parse_run_options(run_argv, PROG, __doc__)
        validate(options, writes_outdir=False)
        check_memory(options)
        _, _, board = prepare(options)
        if no_buffer:
            for _, device, _ in table_devices(board):  # every CXL-MEM's, on many
                run_argv += ["--set", f"{device.path}.buffer_lines=0"]
        gem5 = binary()
        if gem5:
            check_gem5(gem5)
            reason = refusal(run_argv)
            if reason:
                raise UsageError(reason)
        with tempfile.TemporaryDirectory() as outdir:
            results = run_gem5(gem5, run_argv, Path(outdir), sample) if gem5 else None
        results = results if gem5 else builtin_only(run_argv)
        report(results, gem5)
        return 0

    return run_main(PROG, body)


def report(results: dict, gem5: str | None) -> None:
    print("durations in us; ratio = gem5 / built-in, * outside 0.85-1.15")
    print("\n".join(table(results)))
    if "wall_s" in results:
        wall = results["wall_s"]
        print(
            f"wall: built-in {wall['builtin_recorded']:.2f} s (recording run), gem5 "
            f"{wall['gem5_concurrent']:.2f} s concurrent + {wall['gem5_alone']:.2f} s alone"
        )
    if not gem5:
        print("note: no gem5 binary (GEM5, or ../shared/gem5/gem5): built-in side only")


if __name__ == "__m5_main__" and sys.argv[1:2] == [GEM5_SIDE]:
    gem5_side(sys.argv[2], sys.argv[3], sys.argv[4:])
elif __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
