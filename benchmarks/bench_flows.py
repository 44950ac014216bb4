"""Wall time of the flow solver with G concurrent flows on a multi-device board.

    python benchmarks/bench_flows.py [--flows 4,16,64,256] [--repeats 3] [--baseline CHECKOUT]

The scenario: ``G`` requester streams on 8 devices behind one switch; each stream runs
a chain of ops back to back (reads over the switch's downstream port, its device's link
and one PMEM controller; fenced writes, some of them with a WPQ drain that follows;
GPU compute), with mixed weights, window bounds and staggered starts, so about ``G``
flows are active at every event and starts and finishes interleave. Each scenario runs
in a fresh subprocess per checkout (the minimum of ``--repeats``, noise only adds
time); the digest of every flow's end tick, history, waited, waited_on and every
resource's use shows that both checkouts computed the same results. With
``--baseline`` another checkout (``git worktree add --detach ../base <commit>``) runs
the same scenarios alongside and the table adds its time and the speed-up.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICES = 8
OPS_PER_STREAM = 6


def scenario(flows: int, seed: int = 7) -> tuple[float, str, int]:
    """Run the scenario with ``flows`` streams; wall ms, results digest, flows run."""
    import numpy as np

    from components.sim.engine import Engine
    from components.sim.flows import Flow, FlowNetwork

    rng = np.random.default_rng(seed)
    engine = Engine()
    net = FlowNetwork(engine)
    every: list[Flow] = []

    def op(stream: int, k: int) -> Flow:
        device = int(rng.integers(DEVICES))
        ctrl = f"cxl{device}.pmem.ctrl{int(rng.integers(2))}"
        size = float(rng.integers(2_000, 40_000))
        kind = rng.choice(["read", "write", "compute"], p=[0.5, 0.3, 0.2])
        owner = stream * OPS_PER_STREAM + k
        if kind == "compute":
            flow = Flow({f"gpu{device % 4}": size}, weight=float(rng.choice([1.0, 2.0])))
        elif kind == "read":
            needs = {"switch.down": size / 4, f"link{device}.down": size / 2, ctrl: size}
            bound = float(rng.choice([0.0, size * 1.5]))
            flow = Flow(needs, min_ticks=bound, weight=float(rng.choice([1.0, 1.0, 2.0])))
        else:
            needs = {"switch.up": size / 4, f"link{device}.up": size / 2, ctrl: size * 0.6}
            flow = Flow(needs, min_ticks=size * 0.8, alone_needs={**needs, ctrl: size * 0.5})
            if rng.random() < 0.5:
                flow.fence_ticks, flow.fence_chains = size * 0.7, int(rng.integers(1, 5))
            if rng.random() < 0.5:
                drain = Flow({ctrl: size * 0.4}, weight=2.0, label="drain")
                flow.then.append(drain)
                every.append(drain)
        flow.owner = owner
        flow.bytes = {next(iter(flow.needs)): size * 64}
        every.append(flow)
        return flow

    def stream(index: int):
        yield engine.timeout(int(rng.integers(0, 20_000)))
        for k in range(OPS_PER_STREAM):
            flow = op(index, k)
            done = net.start(flow)
            if k % 3 == 1:
                yield net.milestone(flow, 0.5)
                yield engine.timeout(int(rng.integers(1, 500)))
            yield done
            yield engine.timeout(int(rng.integers(0, 1_000)))

    for index in range(flows):
        engine.process(stream(index))
    start = time.process_time()
    engine.run()
    wall = 1e3 * (time.process_time() - start)
    digest = hashlib.sha256()
    for flow in every:
        digest.update(repr((flow.end, flow.history, flow.waited, flow.waited_on)).encode())
    for key in sorted(net.use):
        use = net.use[key]
        digest.update(repr((key, use.busy, use.queueing, use.bytes, use.flows)).encode())
    return wall, digest.hexdigest()[:16], len(every)


def measure(flows: int, repo: str) -> tuple[float, str, int]:
    """One scenario in a fresh interpreter importing ``repo``'s flow solver."""
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", str(flows)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": repo},
        cwd=repo,
    )
    wall, digest, count = json.loads(out.stdout.strip().splitlines()[-1])
    return wall, digest, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", default="4,16,64,256")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", help="another checkout to measure alongside")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        sys.path.insert(0, os.environ.get("PYTHONPATH", REPO))
        print(json.dumps(scenario(args.worker)))
        return 0
    repos = [REPO] + ([os.path.abspath(args.baseline)] if args.baseline else [])
    head = "| concurrent flows | flows run | ms | digest |"
    head += " baseline ms | baseline digest | speed-up |" if args.baseline else ""
    print(head)
    print("|---" * (4 + 3 * bool(args.baseline)) + "|")
    for flows in (int(g) for g in args.flows.split(",")):
        best = {repo: (float("inf"), "", 0) for repo in repos}
        for _ in range(args.repeats):
            for repo in repos:  # alternate, so both see the same load
                run = measure(flows, repo)
                best[repo] = min(best[repo], run)
        wall, digest, count = best[REPO]
        row = f"| {flows} | {count} | {wall:.1f} | {digest} |"
        if args.baseline:
            base, base_digest, _ = best[repos[1]]
            row += f" {base:.1f} | {base_digest} | {base / wall:.1f}x |"
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
