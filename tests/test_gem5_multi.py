"""The gem5 realization of disaggregated boards (N GPUs x M CXL-MEMs behind a switch
tree, components/boards/disaggregated.py): plans checked without gem5 against the CXL
message sizes, then 2 x 2 CXL-B and CXL replayed in a real gem5.opt (``GEM5``, else
../shared/gem5/gem5; those tests are skipped without one)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

import pytest

from components.gem5 import binary
from components.gem5.ops import Leg, LinearStream, TraceStream, plan_ops, table_devices
from components.gem5.ops import transfer_latency as first_line
from components.interconnect.cxl import HEADER_BITS, LINE_BYTES
from components.interconnect.link import SerialLink
from simulate.run.gem5_run import record_builtin
from simulate.run.options import parse_run_options
from tests.gem5_compare import compare

GEM5 = binary()
ROOT = Path(__file__).resolve().parents[1]
TWO_BY_TWO = ("--gpus", "2", "--cxl-mems", "2")
SMALL = ("--model", "rmc1", "--batch-size", "32", "--batches", "2")
TREE = ("--topology", str(ROOT / "configs/topologies/two_level_4x4.yaml"))
LOW, HIGH = 0.85, 1.15
MLP_LOGS = ("mlp_log", "mlp_log_slice")
needs_gem5 = pytest.mark.skipif(GEM5 is None, reason="no gem5 binary (GEM5 or ../shared/gem5/gem5)")


@cache
def _recorded(system: str, argv: tuple[str, ...]):
    options = parse_run_options(["--system", system, *argv], "test", "")
    board, traces, demands = record_builtin(options)
    return board, plan_ops(board, traces, demands)


def _links(board) -> dict[str, SerialLink]:
    return {
        link.resource(d): link
        for link in board.descendants()
        if isinstance(link, SerialLink)
        for d in ("up", "down")
    }


def _dcoh(board, side: str):
    index = int(side[3:])
    return (board.shards[index].cxl_mem if side.startswith("mem") else board.cxl_gpus[index]).dcoh


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _header(message: str) -> int:
    return math.ceil(HEADER_BITS[message] / 8)


def _wire(kind: str, nbytes: int) -> tuple[int, int]:
    """Bytes a transfer puts on its path forward and back, from the CXL messages: a
    flush's DirtyEvict + data out and GO_WritePull back, a read's request out and data
    back, a CXL.mem write's RwD out and NDR back, a posted CXL.io write one way."""
    lines = math.ceil(nbytes / LINE_BYTES)
    if kind == "mmio":
        return nbytes, 0
    per_line = {
        "flush": (_header("D2H Req") + _header("D2H Data") + LINE_BYTES, _header("H2D Rsp")),
        "read": (_header("D2H Req"), _header("H2D Data") + LINE_BYTES),
        "memwr": (_header("M2S RwD") + LINE_BYTES, _header("S2M NDR")),
    }[kind]
    return lines * per_line[0], lines * per_line[1]


# ----- plans, without gem5 ---------------------------------------------------------------
@pytest.mark.parametrize(
    "system, argv",
    [("cxl-d", TWO_BY_TWO), ("cxl-b", TWO_BY_TWO), ("cxl", TWO_BY_TWO), ("cxl", TREE)],
)
def test_each_flow_becomes_a_transfer_that_moves_what_the_links_carried(system, argv):
    """Rebuilt from the CXL message sizes over each transfer's route, the link needs of
    every stage are exactly the built-in engine's: one transfer per flow (the pooled
    vectors to every GPU, the gradients to every CXL-MEM, the ring's GPU-to-GPU writes),
    with the bytes each flow moved."""
    board, plans = _recorded(system, (*argv, "--model", "rmc1", "--batch-size", "8"))
    links = _links(board)
    seen = set()
    for plan in plans:
        if not plan.realized:  # kernels and joins: nothing on a link
            assert not any(r in links for s in plan.trace.stages for r in s.needs)
            continue
        for stage, recorded in zip(plan.stages, plan.trace.stages, strict=True):
            expected: dict[str, int] = {}
            for transfer in (s for s in stage.streams if isinstance(s, LinearStream)):
                issuer, target, kind = transfer.route
                seen.add((plan.name, kind))
                forward, back = _wire(kind, transfer.nbytes)
                for link, way in board.fabric.path(issuer, target).hops:
                    other = "down" if way == "up" else "up"
                    for nbytes, direction in ((forward, way), (back, other)):
                        if nbytes:
                            key = link.resource(direction)
                            expected[key] = expected.get(key, 0) + link.serialization_ticks(nbytes)
            used = {r: round(v) for r, v in recorded.needs.items() if r in links}
            assert used == expected, (plan.batch, plan.name)
            shared: dict[str, list[int]] = {}  # a DCOH's legs share its trackers
            for s in stage.streams:
                if isinstance(s, LinearStream) and s.route[2] in ("flush", "read"):
                    shared.setdefault(s.route[0], []).append(s.window)
            for issuer, windows in shared.items():
                dcoh = _dcoh(board, issuer)
                assert abs(sum(windows) - dcoh.max_outstanding) <= len(windows) / 2, plan.name
            if plan.name == "allreduce":  # a ring: each GPU sends to one other, once
                pairs = [s.route[:2] for s in stage.streams]
                gpus = {f"gpu{g}" for g in range(board.gpu_count)}
                assert {a for a, _ in pairs} == {b for _, b in pairs} == gpus
                assert len(pairs) == len(gpus) and all(a != b for a, b in pairs)
    assert {
        ("indices", "mmio"),
        ("pooled_to_gpu", "flush"),
        ("grads_to_mem", "flush"),
        ("allreduce", "memwr"),
    } <= seen


def test_each_cxl_mem_has_its_own_controllers_and_address_range():
    board, plans = _recorded("cxl-b", (*TWO_BY_TWO, *SMALL))
    placed = table_devices(board)
    assert [side for side, _, _ in placed] == ["mem0", "mem1"]
    assert placed[0][1] is board.shard0.cxl_mem.pmem and placed[1][1] is board.shard1.cxl_mem.pmem
    span = placed[1][2]
    sides = set()
    for plan in plans:
        for stage in plan.stages:
            for stream in (s for s in stage.streams if isinstance(s, TraceStream)):
                m = int(stream.side.removeprefix("mem"))
                assert (stream.addr // span == m).all(), (plan.name, stream.side)
                sides.add(stream.side)
    assert sides == {"mem0", "mem1"}


# ----- gem5 ------------------------------------------------------------------------------
@cache
def _compare(*args: str) -> dict:
    return compare(Path(tempfile.mkdtemp(prefix="gem5-multi-")), *args)


def _outside(rows: list[dict], mode: str) -> dict:
    ratios = {
        (r["batch"], r.get("op", "batch")): r["gem5"][mode] / r["builtin"][mode] for r in rows
    }
    return {key: round(r, 3) for key, r in ratios.items() if not LOW <= r <= HIGH}


@needs_gem5
@pytest.mark.gem5
@pytest.mark.parametrize("system", ["cxl-b", "cxl"])
def test_2x2_each_op_alone_and_each_batch_agree_within_15_percent(system):
    """Every op but the MLP log's stripe (next test) alone, and every batch both ways.
    A stage of several flows (the pooled vectors to both GPUs, the gradients to both
    CXL-MEMs, the ring) is, alone, its flows together on an idle network
    (``alone_ticks``): they share the issuer's link and DCOH, in gem5 too."""
    results = _compare("--system", system, *TWO_BY_TWO, *SMALL)
    board, plans = _recorded(system, (*TWO_BY_TWO, *SMALL))
    names = {op["op"] for op in results["ops"]}
    assert {"indices", "lookup", "pooled_to_gpu", "grads_to_mem", "allreduce"} <= names
    assert {"emb_log", "update"} <= names and names & set(MLP_LOGS)
    realized = [plan for plan in plans if plan.realized]
    assert [op["op"] for op in results["ops"]] == [plan.name for plan in realized]
    rows = []
    for op in results["ops"]:
        if op["op"] not in MLP_LOGS:
            rows.append(op)
    # per batch: each CXL-MEM's indices, lookup, pooled vectors, embedding log and
    # update, each GPU's gradients, one all-reduce, the cross-device commit; CXL also
    # commits the MLP log copy its first batch completes
    copies = sum(op["op"] == "mlp_commit" for op in rows)
    assert copies == (system == "cxl")
    assert len(rows) == 2 * (2 * 5 + 2 + 1 + 1) + copies
    assert _outside(rows, "alone") == {}
    for mode in ("alone", "concurrent"):
        assert _outside(results["batches"], mode) == {}


@needs_gem5
@pytest.mark.gem5
@pytest.mark.parametrize("system", ["cxl-b", "cxl"])
def test_2x2_mlp_log_stripe_differs_by_two_mechanisms(system):
    """A CXL-MEM's stripe of the MLP log is half the single device's: each controller's
    log writes fit its empty WPQ, so alone the stripe is bound by the pull over the link.
    Two mechanisms keep the built-in alone figure off gem5's there:
    - the built-in's alone figure counts the writes' full media time when an empty WPQ
      would take all of them (components/memory/base.py: an empty idle correction, {},
      reads as "no correction" in ``s.idle_needs or s.needs``): its alone is at least the
      stage latency plus the busiest controller's media need;
    - gem5 issues the log's writes alongside the pull, while the built-in engine adds a
      write's latency after the first pulled line (a log writes what it pulled).
    Without both, a stage is the pull's first line plus the busiest link (or, without a
    pull, a write's latency into an empty WPQ): gem5 agrees with that within 15%."""
    results = _compare("--system", system, *TWO_BY_TWO, *SMALL)
    board, plans = _recorded(system, (*TWO_BY_TWO, *SMALL))
    links = _links(board)
    logs = [op for op in results["ops"] if op["op"] in MLP_LOGS]
    ours = [plan for plan in plans if plan.realized and plan.name in MLP_LOGS]
    assert logs and len(logs) == len(ours)
    for op, plan in zip(logs, ours, strict=True):
        for (builtin, gem5), stage, recorded in zip(
            op["stages_alone"], plan.stages, plan.trace.stages, strict=True
        ):
            for side, device, base in table_devices(board):
                writes = [s for s in stage.streams if isinstance(s, TraceStream) and s.write]
                per_ctrl = [0] * device.controllers
                for s in (s for s in writes if s.side == side):
                    for addr in (s.addr - base) // device.interleave % device.controllers:
                        per_ctrl[int(addr)] += 1
                assert max(per_ctrl) <= device.write_queue  # an empty WPQ takes them all
            media = max((v for r, v in recorded.needs.items() if ".pmem." in r), default=0)
            assert builtin >= recorded.latency + media - 1
            pulls = [s for s in stage.streams if isinstance(s, LinearStream)]
            if pulls:
                link = max(v for r, v in recorded.needs.items() if r in links)
                expected = max(first_line(board, Leg(*p.route)) for p in pulls) + link
            else:
                expected = recorded.latency
            assert LOW <= gem5 / expected <= HIGH, (op["batch"], op["op"], gem5, expected)


@needs_gem5
@pytest.mark.gem5
def test_a_two_level_tree_runs_in_gem5():
    """A sampled replay of the CXL 3.x example tree (4 GPUs under the root, 4 CXL-MEMs
    behind a leaf switch): every route, switch and uplink is built and crossed."""
    argv = ("--system", "cxl", *TREE, "--model", "rmc1", "--batch-size", "8", "--batches", "1")
    results = _compare(*argv, "--rows", "1000", "--gem5-sample", "200")
    names = {op["op"] for op in results["ops"]}
    assert {"pooled_to_gpu", "grads_to_mem", "allreduce"} <= names
    assert all(op["gem5"]["alone"] > 0 for op in results["ops"])


@needs_gem5
@pytest.mark.gem5
def test_compare_backends_prints_both_sides_for_2x2():
    argv = ["--system", "cxl-b", *TWO_BY_TWO, "--model", "rmc1", "--batch-size", "8"]
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts/compare_backends.py"), *argv, "--batches", "1"]
        + ["--rows", "1000", "--gem5-sample", "200"],
        capture_output=True,
        text=True,
        env={**_clean_env(), "GEM5": GEM5},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert "gem5" in lines[1] and "(batch)" in run.stdout
    assert sum(" allreduce " in line for line in lines) == 1
    assert sum(" pooled_to_gpu " in line for line in lines) == 2  # one per CXL-MEM


@needs_gem5
@pytest.mark.gem5
def test_trainingcxl_config_replays_a_2x2_run_under_gem5(tmp_path):
    """Under gem5.opt the config no longer refuses --gpus/--cxl-mems: results.json gains
    the gem5 side of every CXL-MEM's and GPU's memory ops."""
    argv = ["--system", "cxl", *TWO_BY_TWO, "--model", "rmc1", "--batch-size", "16"]
    run = subprocess.run(
        [GEM5, "-d", str(tmp_path / "m5"), str(ROOT / "configs/trainingcxl.py"), *argv]
        + ["--batches", "1", "--outdir", str(tmp_path / "out"), "--no-progress"],
        capture_output=True,
        text=True,
        env={**_clean_env(), "VIRTUAL_ENV": str(Path(sys.prefix))},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    names = [op["op"] for op in results["gem5"]["ops"]]
    assert names.count("lookup") == names.count("pooled_to_gpu") == 2
    assert names.count("grads_to_mem") == 2 and names.count("allreduce") == 1
