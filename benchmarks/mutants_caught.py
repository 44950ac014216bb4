"""Which broken protocols of tests/protocol_mutants.py crashcheck catches at its default
settings, on the runs tests/test_crashcheck.py uses (rmc1, batch 8: cxl 64 rows and 6
batches, the others 128 rows and 4), with the crash-state families that caught each;
then the software checkpoint policies' mutants (FT_MUTANTS) on their dram runs. With
--late: the cross-device adversaries of tests/late_mutants.py instead, each on its run
(2 x 2, 8 batches of cxl for three MLP copies, or 1 GPU x 2 CXL-MEMs).

    python benchmarks/mutants_caught.py [--late] [MUTANT ...]

Against an older checker, run it from that checkout with this file and
tests/protocol_mutants.py copied in (issue 26's closing note does so for c720055).
"""

from __future__ import annotations

import os
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from late_mutants import ADVERSARIES, RUNS  # noqa: E402
from protocol_mutants import FT_MUTANTS, MUTANTS  # noqa: E402

from simulate.failures.crashcheck import crashcheck  # noqa: E402
from simulate.run.options import RunOptions  # noqa: E402


def run_for(system: str) -> RunOptions:
    rows, batches = (64, 6) if system == "cxl" else (128, 4)
    return RunOptions(
        system=system, model="rmc1", rows=rows, batch_size=8, batches=batches, progress=False
    )


def software_run(policy: str, quantize: str) -> RunOptions:
    """The software policies' runs (tests/test_software_crashcheck.py): dram, rmc1, 64 rows,
    batch 8, 5 batches, a checkpoint every batch."""
    return RunOptions(system="dram", model="rmc1", rows=64, batch_size=8, batches=5,
                      progress=False, checkpoint=policy, quantize=quantize,
                      ckpt_interval=1e-9)  # fmt: skip


def main(names: list[str]) -> int:
    warnings.simplefilter("ignore", RuntimeWarning)
    caught = 0
    if names[:1] == ["--late"]:
        names = names[1:]
        chosen = [(RUNS[run](s), f"{s} {run}", m) for s, m, run in ADVERSARIES]
    else:
        chosen = [(run_for(s), s, m) for s, m in MUTANTS]
        chosen += [(software_run(p, q), f"{p}{'' if q == 'none' else '/' + q}", m)
                   for p, q, m in FT_MUTANTS]  # fmt: skip
    chosen = [c for c in chosen if not names or c[2].__name__ in names]
    for options, system, mutant in chosen:
        started = time.perf_counter()
        report = crashcheck(options, protocol_class=mutant)
        modes = sorted({v["mode"] for v in report.violations})
        caught += bool(report.violations)
        verdict = "CAUGHT" if report.violations else "escaped"
        print(
            f"{mutant.__name__:24s} {system:18s} {verdict:8s} {len(report.violations):5d} "
            f"{modes} {time.perf_counter() - started:.1f}s",
            flush=True,
        )
    print(f"{caught} of {len(chosen)} caught")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
