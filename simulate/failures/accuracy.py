"""What the accuracy studies share: their options and the held-out scores of a model.

scripts/failure_accuracy.py (the relaxed MLP log's gap) and scripts/ft_accuracy.py (the
software policies) train a small functional model through failures and score it
against the failure-free run on the same held-out batches.
"""

from __future__ import annotations

from simulate.run.cli import QuietParser, UsageError
from simulate.run.configure import input_generator, resolve_functional
from simulate.run.options import RunOptions, check_failure_count, check_seed
from workloads.metrics import evaluate
from workloads.training import EVAL_BATCH_OFFSET

HELD_OUT_BATCHES = 16


def scores(options: RunOptions, model) -> dict[str, float]:
    """Log loss, accuracy and AUC of ``model`` on the run's held-out batches."""
    spec, batch_size = resolve_functional(options)
    held_out = input_generator(options, spec, batch_size).batches(
        HELD_OUT_BATCHES, EVAL_BATCH_OFFSET
    )
    return evaluate(model, held_out)


def study_parser(prog: str, description: str) -> QuietParser:
    """The options every accuracy study takes (a small functional model)."""
    parser = QuietParser(prog=prog, description=description)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--model", default="dlrm_kaggle")
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--failures", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    return parser


def check_study(args, counts: tuple[str, ...] = ()) -> None:
    """Counts at least 1 (the common ones and ``counts``), a valid seed, failures that
    fit the batches: one line each."""
    for name in ("batches", "rows", "batch_size", "failures", *counts):
        value = getattr(args, name)
        if value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    check_seed(args.seed)
    check_failure_count(args.failures, args.batches, "--failures")
