"""Accuracy after CPR's partial recovery with the tables sharded over nodes.

    python scripts/cpr_shards_accuracy.py [--shards 1,2,4,8] [--interval 25]
        [--batches 300] [--failures 2] [--model dlrm_kaggle] [--rows 200]
        [--batch-size 64] [--seed 1] [--share 0.125] [--schemes plain,mfu,ssu]

Trains a small functional model on the DRAM system; a checkpoint every --interval
batches; --failures failures at even fractions of training, each taking one node of N
down: its tables go back to the checkpoint, the others and the MLPs keep their state,
training resumes at the interrupted batch (simulate/failures/shard_accuracy.py).
Schemes: plain (every checkpoint full), mfu and ssu (CPR's prioritised checkpoints of
--share of the rows after a full one: the failed node's rows go back to the newest
checkpoint that saved each).
Reports held-out log loss, accuracy and AUC against the failure-free run of the same
inputs (full recovery replays and ends on it exactly). docs/software_ft.md discusses it.
"""

from __future__ import annotations

import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("cpr_shards_accuracy.py")

from simulate.failures.accuracy import check_study, scores, study_parser  # noqa: E402
from simulate.failures.recording import run_stretch  # noqa: E402
from simulate.failures.shard_accuracy import partial_recovery_run  # noqa: E402
from simulate.run.cli import UsageError, run_main  # noqa: E402
from simulate.run.configure import resolve_functional  # noqa: E402
from simulate.run.options import RunOptions  # noqa: E402
from workloads.training import default_lr  # noqa: E402

PROG = "cpr_shards_accuracy.py"


def parse_args(argv: list[str]):
    parser = study_parser(PROG, __doc__.splitlines()[0])
    parser.add_argument("--interval", type=int, default=25, help="batches between checkpoints")
    parser.add_argument("--shards", default="1,2,4,8", help="nodes, comma-separated")
    parser.add_argument("--share", type=float, default=0.125, help="MFU / SSU rows share")
    parser.add_argument("--schemes", default="plain,mfu,ssu", help="plain, mfu, ssu")
    args = parser.parse_args(argv)
    check_study(args, ("interval",))
    if not 0 < args.share < 1:
        raise UsageError(f"--share must be in (0, 1), got {args.share}")
    args.schemes = [x.strip() for x in args.schemes.split(",") if x.strip()]
    if not args.schemes or set(args.schemes) - {"plain", "mfu", "ssu"}:
        raise UsageError(f"--schemes: plain, mfu or ssu, got {args.schemes}")
    try:
        args.shards = [int(x) for x in args.shards.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--shards expects whole numbers, got {args.shards!r}") from None
    if not args.shards or min(args.shards) < 1:
        raise UsageError("--shards values must be at least 1")
    return args


def report(args) -> int:
    warnings.simplefilter("ignore", RuntimeWarning)
    base = RunOptions(system="dram", model=args.model, rows=args.rows, seed=args.seed,
                      batch_size=args.batch_size, batches=args.batches, progress=False)  # fmt: skip
    spec, _ = resolve_functional(base)
    if max(args.shards) > len(spec.rows_per_table):
        raise UsageError(f"--shards: at most {len(spec.rows_per_table)} (one table a node)")
    lr = default_lr(spec)
    ref = scores(base, run_stretch(base, lr=lr).model)
    failures = [args.batches * (k + 1) * 4 // (5 * args.failures) for k in range(args.failures)]
    print(f"failure-free: log loss {ref['log_loss']:.6f}, accuracy {ref['accuracy']:.6f}, "
          f"AUC {ref['auc']:.6f}; checkpoints every {args.interval} batches, failures in "
          f"batches {failures}")  # fmt: skip
    print("| nodes | checkpoints | nodes failed | failed shard's batches lost since the "
          "checkpoint | lost share | log loss | accuracy | AUC | loss change % |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for shards in args.shards:
        for scheme in args.schemes:
            chosen = None if scheme == "plain" else (scheme, args.share)
            name = "full" if chosen is None else f"{scheme.upper()} {args.share:g}"
            model, lost, nodes, _ = partial_recovery_run(
                base, lr, shards, args.interval, failures, chosen
            )
            got = scores(base, model)
            change = 100 * (got["log_loss"] - ref["log_loss"]) / ref["log_loss"]
            share = lost / shards / args.batches
            print(f"| {shards} | {name} | {nodes} | {lost} | {share:.2%} | "
                  f"{got['log_loss']:.6f} | {got['accuracy']:.6f} | {got['auc']:.6f} | "
                  f"{change:+.4f} |", flush=True)  # fmt: skip
    return 0


def main(argv: list[str]) -> int:
    return run_main(PROG, lambda: report(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
