"""Accuracy after failures under each software checkpoint policy (docs/software_ft.md).

    python scripts/ft_accuracy.py [--batches 300] [--failures 2] [--interval 25]
        [--model dlrm_kaggle] [--rows 200] [--batch-size 64] [--seed 1]

Trains a small model on the DRAM system under each policy (--checkpoint none, cpr,
cpr with MFU partial checkpoints of an eighth of the rows, check-n-run at FP32, 8 and
4 bits), a checkpoint due every --interval batches (of the
policy-free run's batch time), injects --failures seeded power failures at the same
fractions of each policy's own failure-free run, recovers by the policy (CPR: the
batches since the checkpoint lost; Check-N-Run: replayed from the dequantized
checkpoint; none: replayed from the initial weights) and trains to the same batch
count; reports held-out log loss, accuracy and AUC against the failure-free run of the
same inputs, as scripts/failure_accuracy.py does for the relaxed MLP log.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("ft_accuracy.py")

from tqdm import tqdm  # noqa: E402

from components.sim.units import TICKS_PER_SECOND  # noqa: E402
from simulate.failures.accuracy import check_study, scores, study_parser  # noqa: E402
from simulate.failures.inject import inject  # noqa: E402
from simulate.failures.recording import run_stretch  # noqa: E402
from simulate.run.cli import run_main  # noqa: E402
from simulate.run.configure import resolve_functional  # noqa: E402
from simulate.run.options import RunOptions  # noqa: E402
from simulate.run.preflight import check_memory  # noqa: E402
from simulate.simulator import validate  # noqa: E402
from workloads.training import default_lr  # noqa: E402

PROG = "ft_accuracy.py"
MFU = [("board.ft.mfu_share", "0.125")]
POLICIES = (("none", "none", "none", []), ("cpr", "cpr", "none", []),
            ("cpr-mfu 1/8", "cpr", "none", MFU), ("check-n-run", "check-n-run", "none", []),
            ("check-n-run 8-bit", "check-n-run", "8", []),
            ("check-n-run 4-bit", "check-n-run", "4", []))  # fmt: skip


def parse_args(argv: list[str]):
    parser = study_parser(PROG, __doc__.splitlines()[0])
    parser.add_argument("--interval", type=int, default=25, help="batches between checkpoints")
    args = parser.parse_args(argv)
    check_study(args, ("interval",))
    return args


def main(argv: list[str]) -> int:
    return run_main(PROG, lambda: report(parse_args(argv)))


def stall_s(options: RunOptions, lr: float) -> float:
    """Seconds training waits for one checkpoint (its foreground ops in a one-batch
    run), so that checkpoints come every --interval batches whatever they cost."""
    probe = run_stretch(replace(options, batches=1, ckpt_interval=1e-9), lr=lr)
    ops = [r for r in probe.records if r.category == "checkpoint" and not r.background]
    return sum(r.end - r.start for r in ops) / TICKS_PER_SECOND


def training_end(stretch) -> int:
    """The tick training's last foreground op ends (a background write may go on)."""
    return max(r.end for r in stretch.records if not r.background)


def report(args) -> int:
    warnings.simplefilter("ignore", RuntimeWarning)
    base = RunOptions(system="dram", model=args.model, rows=args.rows, seed=args.seed,
                      batch_size=args.batch_size, batches=args.batches, progress=False)  # fmt: skip
    worst = replace(base, checkpoint="check-n-run", fail_at=["0"])
    validate(worst, writes_outdir=False)
    check_memory(worst)
    lr = default_lr(resolve_functional(base)[0])
    clean = run_stretch(base, lr=lr)
    ref = scores(base, clean.model)
    batch_s = clean.end_tick / args.batches / TICKS_PER_SECOND
    print(f"failure-free: log loss {ref['log_loss']:.6f}, accuracy {ref['accuracy']:.6f}, "
          f"AUC {ref['auc']:.6f}; a checkpoint every {args.interval} batches")  # fmt: skip
    print(
        "| policy | failed in batch | checkpoint read (batch) | batches lost | batches "
        "replayed | log loss | accuracy | AUC | loss change % |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    bar = tqdm(POLICIES, desc="policies", file=sys.stderr, disable=None, leave=False)
    for name, policy, quantize, sets in bar:
        options = replace(base, checkpoint=policy, quantize=quantize, sets=sets)
        interval = args.interval * batch_s + stall_s(options, lr)
        options = replace(options, ckpt_interval=interval)
        recorded = run_stretch(options, lr=lr)
        end = training_end(recorded)
        at = [end * (k + 1) * 4 // (5 * args.failures) for k in range(args.failures)]
        entries, last = inject(options, lr, recorded, pending=at)
        got = scores(options, last.model)
        change = 100 * (got["log_loss"] - ref["log_loss"]) / ref["log_loss"]
        failed = [e["batch"] for e in entries]
        read = [e["checkpoint_batch"] for e in entries]
        lost = sum(e.get("batches_lost", 0) for e in entries)
        redone = sum(e.get("batches_redone", 0) for e in entries)
        print(f"| {name} | {failed} | {read} | {lost} | {redone} | "
              f"{got['log_loss']:.6f} | {got['accuracy']:.6f} | {got['auc']:.6f} | "
              f"{change:+.4f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
