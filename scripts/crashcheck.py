"""Explore the crash states of one recorded run and check each system's recovery.

    python scripts/crashcheck.py --system cxl-b --model rmc1 --rows 64 --batch-size 8 \
        --batches 4 [--sample K] [--budget N] [--interrupted N] [--media-faults N] \
        [--metadata-faults N] [--resumed N] [--no-schedules] [--no-late-devices]

Simulates the run once and walks the crash states the persistency model allows
(docs/failures.md): the timing's own persist order at every persist tick (or K sampled
ones), then in every crash interval the reorderings and torn subsets of the writes in
flight (all of them when at most --budget, else --budget seeded samples), the other
finishing order of every pair of concurrent ops the board does not order, each
commit as late as what waits for it allows and each device made slow (its logs, flags
and commits as late as what waits for them allows: --no-late-devices), failures
during recovery and in the training resumed after one, bit flips in the records
recovery reads and in its metadata (headers, flags, commit words, base record: every
bit of a flag, commit or count word over the drawn states). Prints every
violation (tick, mode, regions, why), the system's absolute guarantee and a summary
line on stderr (states per second, coverage of the sampled intervals), then a JSON
summary line on stdout. Exit 0 clean, 1 with
violations, 2 bad input.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("crashcheck.py")

from components.persistence.explorer import ExploreSettings  # noqa: E402
from components.persistence.image import OPTIMIZERS  # noqa: E402
from simulate.failures.crash_budget import check_crashcheck  # noqa: E402
from simulate.failures.crashcheck import CheckSettings, crashcheck  # noqa: E402
from simulate.run.cli import QuietParser, UsageError, run_main  # noqa: E402
from simulate.run.options import (  # noqa: E402
    add_run_options,
    multi_device,
    options_from_args,
    refuse_pooled_failures,
)
from simulate.simulator import validate  # noqa: E402

PROG = "crashcheck.py"
UNUSED = ("--outdir", "--functional", "--fail-at", "--fail-random", "--fail-device")
UNUSED += ("--pmem-image",)
UNUSED += ("--halt-on-failure", "--plot")  # a crash check writes no outputs, cuts every state
UNUSED += ("--sample",)  # its own --sample below; --checkpoint checks a software policy
DEFAULTS = CheckSettings()
PERSIST_ORDER_KNOBS = ("sample", "budget", "interrupted", "media_faults", "metadata_faults")
PERSIST_ORDER_KNOBS += ("no_schedules", "no_late_devices")


def settings_from_args(args, seed: int) -> CheckSettings:
    for name in ("sample", "budget", "interrupted", "media_faults", "metadata_faults", "resumed"):
        if getattr(args, name) < 0:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} must not be negative, got {getattr(args, name)}")
    explore = ExploreSettings(prefix=args.sample or -1, budget=args.budget, seed=seed)
    return CheckSettings(
        explore,
        args.interrupted,
        args.media_faults,
        metadata=args.metadata_faults,
        resumed=args.resumed,
        schedules=not args.no_schedules,
        late_devices=not args.no_late_devices,
    )


def check_software(parser, args, options) -> None:
    """A software policy's crash states are instants around its checkpoints: the
    persist-order knobs of the paper's protocols mean nothing there."""
    if options.checkpoint == "paper":
        return
    given = [f"--{name.replace('_', '-')}" for name in PERSIST_ORDER_KNOBS
             if getattr(args, name) != parser.get_default(name)]  # fmt: skip
    if args.optimizer != "sgd":
        given.append("--optimizer")
    if given:
        raise UsageError(
            f"--checkpoint {options.checkpoint} is checked at instants around its "
            f"checkpoints: {', '.join(given)} explore the paper protocols' persist orders"
        )


def guarantee_line(bounds: dict) -> str:
    """The absolute bound the oracle enforced, in words."""
    if "policy" in bounds:  # a software checkpoint policy (simulate/failures/oracle.py)
        held = "exactly" if bounds["bits"] == 32 else f"within half a {bounds['bits']}-bit step of"
        what = "the state of the newest checkpoint whose write ended"
        if bounds["rows"] == "as last saved":
            what = "each row as the newest complete checkpoint that saved it"
        if "devices" in bounds:  # each CXL-MEM's shard on a store of its own
            what = (
                "a failed device's shard at its newest complete checkpoint, the other "
                "shards at their state at the crash"
                if bounds["recovery"] == "partial"
                else "every shard at the newest checkpoint complete on all "
                f"{bounds['devices']} devices"
            )
        return (
            f"{bounds['policy']}: {held} {what} ({bounds['checkpoints']} taken), "
            f"resume: {bounds['resume']}"
        )
    line = "resume at or after the newest batch whose checkpoint ops ended"
    if bounds.get("max_mlp_age") is None:
        return line
    line += f"; MLPs at most {bounds['max_mlp_age']} batches older than the resume batch"
    if "mlp_log_gap" in bounds:
        line += (
            f" (MLP-log gap {bounds['mlp_log_gap']} + 2 x the longest copy, "
            f"{bounds['copy_batches']} batch{'es' if bounds['copy_batches'] != 1 else ''})"
        )
    return line


def main(argv: list[str]) -> int:
    parser = QuietParser(prog=PROG, description=__doc__.splitlines()[0])
    add_run_options(parser, exclude=UNUSED)
    parser.add_argument(
        "--sample", type=int, default=0, help="prefix walk at K random persist ticks (0: all)"
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=DEFAULTS.explore.budget,
        help="states per crash interval, reordered and torn (0: the prefix walk only)",
    )
    parser.add_argument(
        "--interrupted",
        type=int,
        default=DEFAULTS.interrupted,
        help="failures during recovery to check",
    )
    parser.add_argument(
        "--media-faults",
        type=int,
        default=DEFAULTS.media,
        help="bit flips in records recovery reads to check",
    )
    parser.add_argument(
        "--metadata-faults",
        type=int,
        default=DEFAULTS.metadata,
        help="states whose every record header field and flag is flipped in turn",
    )
    parser.add_argument(
        "--resumed",
        type=int,
        default=DEFAULTS.resumed,
        help="recoveries whose resumed training is recorded and crashed again",
    )
    parser.add_argument(
        "--no-schedules",
        action="store_true",
        help="do not explore the other order of concurrent unordered ops",
    )
    parser.add_argument(
        "--no-late-devices",
        action="store_true",
        help="do not explore each device slow (its logs, flags and commits as late as "
        "what waits for them allows)",
    )
    parser.add_argument("--optimizer", default="sgd", choices=OPTIMIZERS, help="training optimizer")

    def body() -> int:
        args = parser.parse_args(argv)
        options = options_from_args(args)
        refuse_pooled_failures(options.pool_jobs, True, PROG)
        if multi_device(options) and args.optimizer != "sgd":
            raise UsageError("--optimizer adagrad: multi-device clusters log SGD state only")
        settings = settings_from_args(args, options.seed)
        check_software(parser, args, options)
        validate(options, writes_outdir=False)
        check_crashcheck(options, args.sample, settings)
        options.progress = False
        report = crashcheck(options, settings, optimizer=args.optimizer)
        for violation in report.violations:
            print(
                f"violation at tick {violation['tick']} ({violation['mode']}) in "
                f"{violation['regions']}: {violation['why']}"
            )
        summary = report.summary()
        print(f"{options.system}: guarantee: {guarantee_line(report.guarantee)}", file=sys.stderr)
        coverage = summary["sampled_pair_coverage"]
        if "policy" in report.guarantee:  # crash instants, no persist orders
            print(
                f"{options.system}: {report.states} crash points in {report.seconds:.1f} s "
                f"({report.resumed_runs} resumed runs), {dict(report.verdicts)}",
                file=sys.stderr,
            )
            print(json.dumps(summary))
            return 1 if report.violations else 0
        print(
            f"{options.system}: {report.states} crash states in {report.seconds:.1f} s "
            f"({report.states_per_second:.0f}/s; {report.recoveries} recoveries run), "
            f"{report.intervals} crash intervals ({report.exhaustive_intervals} exhaustive; "
            f"sampled ones: ordered-pair coverage mean {coverage['mean']:.3f}, "
            f"min {coverage['min']:.3f}), {dict(report.verdicts)}",
            file=sys.stderr,
        )
        if report.cross_device:
            kinds = ", ".join(f"{n} {k}" for k, n in sorted(report.cross_device.items()))
            print(f"{options.system}: cross-device states: {kinds}", file=sys.stderr)
        if report.unmatched_bytes or report.unhonoured_fences:
            print(
                f"{options.system}: {report.unmatched_bytes} B of functional writes no device "
                f"request carried; {len(report.unhonoured_fences)} declared fences the timing "
                "did not honour",
                file=sys.stderr,
            )
        print(json.dumps(summary))
        return 1 if report.violations else 0

    return run_main(PROG, body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
