"""What one failure-tolerance scheme costs, timed by the engine: a batch, a checkpoint
at a given interval, a recovery. ``scripts/compare_ft.py`` strings these into long runs
(simulate/failures/goodput.py)."""

from __future__ import annotations

import math
import tempfile
from collections import defaultdict
from dataclasses import replace

import numpy as np

from components.boards.software_ft import bulk_stage
from components.energy import EnergyReport
from components.sim.engine import Engine
from components.sim.schedule import Scheduler
from components.sim.units import TICKS_PER_SECOND
from simulate.failures.goodput import Scheme, young_interval
from simulate.failures.partial import ShardedScheme
from simulate.run.configure import batch_size_of, connected_board, input_generator, resolve_spec
from simulate.run.host import drive_batches
from simulate.run.job import run_plain
from simulate.run.options import RunOptions
from simulate.run.preflight import failure_run
from workloads.inputs import DEFAULT_ZIPF_EXPONENT
from workloads.row_union import expected_distinct_rows, rank_probabilities

TIMED_ROWS = 1 << 18  # rows of a differential timed in detail; others scale by rows


def timed_run(options: RunOptions, **fields) -> dict:
    """results.json of a run of ``options`` (outputs in a scratch directory)."""
    from simulate.failures.run import run_failure_job  # it imports this room's injection

    with tempfile.TemporaryDirectory() as outdir:
        run = replace(options, outdir=outdir, progress=False, **fields)
        return run_failure_job(run) if failure_run(run) else run_plain(run)


def _op_seconds(options: RunOptions, body) -> float:
    """Seconds one op takes on a fresh, idle board of ``options``."""
    return op_cost(options, body)[0]


def op_cost(options: RunOptions, body) -> tuple[float, float, float]:
    """(seconds, static joules, dynamic joules) of one op on a fresh, idle board: the
    whole board's static power over the op, the dynamic energy of its work."""
    spec, batch_size = resolve_spec(options), batch_size_of(options)
    engine = Engine()
    scheduler = Scheduler(engine)
    board = connected_board(options, spec, batch_size, engine, scheduler)
    op = scheduler.op("probe", "checkpoint", -1, None, lambda now: body(board))
    engine.run()
    ticks = op.record.end - op.record.start
    energy = EnergyReport.build(board, ticks)
    return ticks / TICKS_PER_SECOND, energy.static, energy.dynamic


def log_bytes_per_batch(options: RunOptions, batches: int = 3) -> float:
    """Bytes a system's own protocol writes per batch to its table device: every
    persisted request of its checkpoint ops (log records, flags), from a timing run."""
    spec, batch_size = resolve_spec(options), batch_size_of(options)
    engine = Engine()
    scheduler = Scheduler(engine)
    board = connected_board(options, spec, batch_size, engine, scheduler)
    written: dict[int, int] = defaultdict(int)

    def observe(persisted) -> None:
        if persisted.owner is not None:
            written[persisted.owner] += len(persisted.addresses) * persisted.size

    board.table_memory().write_listeners.append(observe)
    generator = input_generator(options, spec, batch_size)
    drive_batches(engine, board, spec, generator, range(batches))
    logs = {r.uid for r in scheduler.records if r.category == "checkpoint"}
    return sum(n for uid, n in written.items() if uid in logs) / batches


def batch_joules(timing: dict) -> float:
    """Joules per batch of a timing run (results.json), everything it ran included."""
    return timing["energy_j"]["total"] / timing["batches"]


def paper_scheme(options: RunOptions, batches: int) -> tuple[Scheme, dict]:
    """A system's own protocol: a checkpoint every batch, its critical-path share from
    the batch's breakdown, the recovery from an injected failure's recovery run."""
    timing = timed_run(options, batches=batches)
    batch_s = timing["batch_time_ms"]["mean"] / 1e3
    checkpoint_s = timing["breakdown_ms"]["checkpoint"] / 1e3
    middle = f"{timing['batch_time_ms']['mean'] * 1.5}ms"
    failure = timed_run(options, batches=3, fail_at=[middle])["failure"]
    scheme = Scheme(
        options.system, batch_s - checkpoint_s, checkpoint_s, failure["recovery_ms"] / 1e3, 1, True,
        batch_joules(timing), 0.0, failure["recovery_energy_j"],
    )  # fmt: skip
    return scheme, timing


def cpr_costs(options: RunOptions) -> dict:
    """A full CPR checkpoint: its seconds and joules (training paused: the board's
    static power throughout), its recovery's, and its bytes."""
    cpr = replace(options, checkpoint="cpr")

    def checkpoint(board):
        board.ft.checkpoints += 1
        return board.ft.dump(board, board.ft.recovery_bytes(board))

    dump = op_cost(cpr, checkpoint)
    pull = op_cost(cpr, lambda board: board.mlp_to_host(board.layout.mlp_bytes))
    recovery = op_cost(cpr, lambda board: board.ft.recovery(board))
    return {
        "checkpoint_s": dump[0] + pull[0],
        "checkpoint_j": sum(dump[1:]) + sum(pull[1:]),
        "recovery_s": recovery[0],
        "recovery_j": sum(recovery[1:]),
        "bytes": _op_value(cpr, lambda board: board.ft.recovery_bytes(board)),
    }


def hardware(options: RunOptions) -> dict:
    """What a scheme runs on: the tables' memory (modules installed, their capacity, the
    media bandwidths of every controller together), the bytes the tables take there,
    and the checkpoint store where a software policy writes one."""

    def describe(board) -> dict:
        memory = board.table_memory()
        memory = getattr(memory, "ssd", memory)  # the SSD system: the drive holds the rows
        ft = getattr(board, "ft", None)
        return {
            "memory": type(memory).__name__,
            "place": "CXL-MEM" if "cxl" in board.system else "host",
            "modules": memory.modules,
            "capacity": memory.modules * memory.module_capacity,
            "tables": board.layout.regions()["data"][1],
            "read_bw": memory.controllers * memory.ctrl_read_bandwidth,
            "write_bw": memory.controllers * memory.ctrl_write_bandwidth,
            "store_write_bw": None if ft is None else ft.store.write_bandwidth,
        }

    return _op_value(options, describe)


def hardware_text(hw: dict) -> str:
    """One line a reader compares rows by: where the tables are and what holds them."""
    text = (
        f"{hw['place']} {hw['memory']} {hw['modules']} x "
        f"{hw['capacity'] / hw['modules'] / 2**30:g} GiB, "
        f"{hw['read_bw'] / 1e9:.3g}/{hw['write_bw'] / 1e9:.3g} GB/s r/w; "
        f"tables {hw['tables'] / 1e9:.3g} GB"
    )
    if hw["store_write_bw"] is not None:
        text += f"; store {hw['store_write_bw'] / 1e9:.3g} GB/s"
    return text


def cpr_shard_costs(options: RunOptions, shards: int) -> dict:
    """One node's share of a CPR checkpoint when ``shards`` nodes like ``options``'s
    board each hold 1/shards of the tables and a store of their own: the save (the
    MLPs pulled off the GPU and saved by one node beside its shard, the others' shards
    in parallel: that node is the slowest), a shard's load (read back from its store
    into its memory), and a full recovery's (every shard at once, then the MLPs to the
    GPU)."""
    cpr = replace(options, checkpoint="cpr")

    def shard(board) -> int:
        return board.layout.regions()["data"][1] // shards

    def save(board):
        yield from board.mlp_to_host(board.layout.mlp_bytes)
        size = shard(board)
        board.ft.checkpointBytes += size + board.layout.mlp_bytes
        yield bulk_stage(
            ("read", board.checkpoint_source(), size),
            ("write", board.ft.store, size + board.layout.mlp_bytes),
            latency=board.host.op_overhead,
        )

    def load(board):
        size = shard(board)
        yield bulk_stage(
            ("read", board.ft.store, size),
            ("write", board.checkpoint_source(), size),
            latency=board.host.op_overhead,
        )

    def load_all(board):
        yield from load(board)
        yield from board.mlp_to_gpu(board.layout.mlp_bytes)

    return {
        "save_s": _op_seconds(cpr, save),
        "load_s": _op_seconds(cpr, load),
        "load_all_s": _op_seconds(cpr, load_all),
        "shard_bytes": _op_value(cpr, shard),
    }


def _op_value(options: RunOptions, read):
    spec, batch_size = resolve_spec(options), batch_size_of(options)
    engine = Engine()
    board = connected_board(options, spec, batch_size, engine, Scheduler(engine))
    return read(board)


def snapshot_rates(options: RunOptions) -> dict:
    """Check-N-Run's snapshot on an idle board: the MLP pull alone, per row of a
    differential (``TIMED_ROWS`` rows spread over the tables, timed in detail), and a
    full snapshot."""
    cnr = replace(options, checkpoint="check-n-run")
    layout, mlps = _op_value(cnr, lambda b: (b.layout, b.layout.mlp_bytes))
    start, data = layout.regions()["data"]
    count = data // layout.row_bytes
    sample = min(count, TIMED_ROWS)
    step = max(count // sample, 1) * layout.row_bytes
    addresses = start + np.arange(sample, dtype=np.int64) * step
    mlp_only = op_cost(cnr, lambda b: b.ft.snapshot(b, addresses[:0], mlps))
    rows = op_cost(cnr, lambda b: b.ft.snapshot(b, addresses, mlps))
    full = op_cost(cnr, lambda b: b.ft.snapshot(b, None, mlps))
    return {
        "mlp_s": mlp_only[0],
        "per_row_s": (rows[0] - mlp_only[0]) / sample,
        "full_s": full[0],
        "static_w": full[1] / full[0],
        "mlp_j": mlp_only[2],
        "per_row_j": (rows[2] - mlp_only[2]) / sample,
        "full_j": full[2],
    }


def cnr_costs(options: RunOptions, interval: int, batch_s: float, rates: dict) -> dict:
    """Check-N-Run every ``interval`` batches: the differential holds the rows those
    batches touched (their expected union), its snapshot blocks training, its write
    overlaps the interval's batches and blocks only where it outlasts them; a new
    baseline comes once the chain would outgrow a full checkpoint, so a recovery reads
    on average the full one and half a chain."""
    cnr = replace(options, checkpoint="check-n-run")
    spec, batch_size = resolve_spec(cnr), batch_size_of(cnr)
    zipf = DEFAULT_ZIPF_EXPONENT if cnr.zipf is None else cnr.zipf
    (rows,) = expected_distinct_rows(spec, batch_size, zipf, np.array([interval]))
    layout, stored_row = _op_value(cnr, lambda b: (b.layout, b.ft.row_bytes_stored(b)))
    mlps, data = layout.mlp_bytes, layout.regions()["data"][1]
    full_stored = data // layout.row_bytes * stored_row + mlps
    diff_stored = int(rows * stored_row) + mlps
    snapshot_s = rates["mlp_s"] + rates["per_row_s"] * rows
    write_s, _, write_j = op_cost(
        cnr, lambda b: b.ft.write(b, int(rows) * layout.row_bytes, diff_stored)
    )
    full_write_s, _, full_write_j = op_cost(cnr, lambda b: b.ft.write(b, data, full_stored))
    chain = max(int(full_stored // diff_stored), 1)  # checkpoints per baseline
    window = interval * batch_s
    diff_cost = snapshot_s + max(0.0, write_s - window)
    full_cost = rates["full_s"] + max(0.0, full_write_s - window)
    # the work's dynamic energy, and the board's static power while training waits
    diff_j = rates["mlp_j"] + rates["per_row_j"] * rows + write_j
    diff_j += rates["static_w"] * diff_cost
    full_j = rates["full_j"] + full_write_j + rates["static_w"] * full_cost

    def recovery(board):
        object.__setattr__(board.ft, "_full", full_stored)
        object.__setattr__(board.ft, "_since_full", (chain - 1) * diff_stored // 2)
        return board.ft.recovery(board)

    recovery_s, recovery_static, recovery_dynamic = op_cost(cnr, recovery)
    return {
        "checkpoint_s": (full_cost + (chain - 1) * diff_cost) / chain,
        "checkpoint_j": (full_j + (chain - 1) * diff_j) / chain,
        "recovery_s": recovery_s,
        "recovery_j": recovery_static + recovery_dynamic,
        "bytes_per_checkpoint": (full_stored + (chain - 1) * diff_stored) / chain,
        "stored_bytes": full_stored + (chain - 1) * diff_stored / 2,
        "rows": rows,
    }


def cpr_prioritised_costs(
    options: RunOptions, shards: int, interval: int, share: float, kind: str
) -> dict:
    """One node's prioritised CPR checkpoint (``kind`` "mfu" or "ssu" at ``share``) when
    ``shards`` nodes each hold 1/shards of the tables, taken every ``interval`` batches:
    the rows it saves (MFU: ceil(share x the shard's rows), at most the rows the interval
    used; SSU: share x the rows the interval used, their expected union,
    workloads/row_union.py), what they cover (MFU: the lookups those most popular rows
    draw under the generator's law; SSU: the share of used rows), its stored bytes (the
    rows and the MLPs, which the slowest node saves) and its save, timed on the engine:
    the MLP pull, the rows' scattered reads from the tables' memory (``TIMED_ROWS`` of
    them spread over the shard in detail, the rest at that per-row rate), the store
    write (CprCheckpoint.save_rows), and its joules (the board's while training waits)
    at the same per-row rate. ``chain``: prioritised checkpoints per full one
    (a new full once the partials would outgrow it)."""
    cpr = replace(options, checkpoint="cpr")
    spec, batch_size = resolve_spec(cpr), batch_size_of(cpr)
    zipf = DEFAULT_ZIPF_EXPONENT if cpr.zipf is None else cpr.zipf
    layout = _op_value(cpr, lambda b: b.layout)
    mlps, data, row_bytes = layout.mlp_bytes, layout.regions()["data"][1], layout.row_bytes
    shard_rows = data // row_bytes // shards
    (used,) = expected_distinct_rows(spec, batch_size, zipf, np.array([interval])) / shards
    if kind == "mfu":
        rows = min(math.ceil(share * shard_rows), int(used))
        coverage = 1.0 if rows >= used else _top_lookup_share(spec, share, zipf)
    else:
        rows, coverage = math.ceil(share * used), share
    stored = rows * row_bytes + mlps
    sample = max(min(rows, TIMED_ROWS), 2)
    step = max(shard_rows // sample, 1)

    def save(count: int) -> tuple[float, float]:
        def body(board):
            yield from board.mlp_to_host(mlps)
            picked = np.arange(count, dtype=np.int64) * step
            yield from board.ft.save_rows(board, picked, stored)

        seconds, static, dynamic = op_cost(cpr, body)
        return seconds, static + dynamic

    one, many = save(1), save(sample)
    at_rows = [a + (b - a) / (sample - 1) * (rows - 1) for a, b in zip(one, many, strict=True)]
    return {
        "save_s": at_rows[0],
        "save_j": at_rows[1],
        "rows": rows,
        "stored": stored,
        "coverage": coverage,
        "chain": int((data // shards + mlps) // stored),
    }


def cpr_prioritised_scheme(
    options: RunOptions,
    full: dict,
    shards: int,
    mtbf: float,
    batch_s: float,
    share: float,
    kind: str,
    name: str,
) -> tuple[ShardedScheme, dict]:
    """Partial recovery with CPR-MFU or CPR-SSU checkpoints (``kind``) of ``share`` of the
    rows, at Young's interval on their mean save (full and prioritised ones over a
    chain): the interval sets the rows a checkpoint saves, which set its save, so three
    rounds from the full checkpoint's interval settle it. ``full``: the full checkpoint's
    ``save_s`` and the shard's ``load_s``. Returns the scheme and the prioritised
    checkpoint's costs at its interval (cpr_prioritised_costs)."""
    interval = young_interval(full["save_s"], mtbf, batch_s)
    for _ in range(3):
        chosen = cpr_prioritised_costs(options, shards, interval, share, kind)
        mean = (full["save_s"] + chosen["chain"] * chosen["save_s"]) / (chosen["chain"] + 1)
        interval = young_interval(mean, mtbf, batch_s)
    chosen = cpr_prioritised_costs(options, shards, interval, share, kind)
    scheme = ShardedScheme(
        name, batch_s, full["save_s"], full["load_s"], interval, shards, True, kind,
        chosen["chain"], chosen["save_s"], chosen["coverage"],
    )  # fmt: skip
    return scheme, chosen


def _top_lookup_share(spec, share: float, exponent: float) -> float:
    """The share of lookups the ceil(share x n) most popular rows of each table draw
    (every table's lookups alike)."""
    sizes = list(spec.rows_per_table)
    total = 0.0
    for n in sizes:
        q = rank_probabilities(n, exponent)
        total += float(q[: math.ceil(share * n)].sum())
    return total / len(sizes)
