"""One run's model and board, resolved the same way by every path that simulates it.

The plain run (job.py), the recorded runs of the failure model (recording.py) and the
gem5 replay (gem5_run.py) must see the same table sizes and the same parameters, or a
failure run would judge a different machine than the one it reports on.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from components.boards import BOARDS, build_board
from components.boards.base import TrainingBoard
from components.boards.disaggregated import DisaggregatedBoard
from components.boards.software_ft import (
    POLICIES,
    SOFTWARE_FT_SYSTEMS,
    CprCheckpoint,
    SoftwareCheckpoint,
)
from components.compute.gpu import Gpu
from components.compute.gpu_presets import apply_preset
from components.memory.base import MemoryDevice
from components.memory.pmem import pmem_modules, use_model
from components.memory.stores import apply_store
from components.sim.engine import Engine
from components.sim.params import ConfigError
from components.sim.schedule import Scheduler
from simulate.run.gpu_profile import apply_profile
from simulate.run.options import SYSTEMS, RunOptions, UsageError, multi_device, resolve_topology
from workloads.inputs import DEFAULT_ZIPF_EXPONENT, BatchSource, InputGenerator
from workloads.models import DEFAULT_BATCH_SIZE, ModelSpec, get_model
from workloads.shared_inputs import SharedBatches
from workloads.traces import open_trace, trace_pooling

FUNCTIONAL_DEFAULT_ROWS = 100_000  # rows per table when real numerics must fit in memory


def resolve_spec(options: RunOptions) -> ModelSpec:
    """The model, its tables capped by --rows (or the functional default). With --trace,
    its lookups per table are the trace's bound (the boards size per-batch buffers and
    the image's update logs by them)."""
    spec = options.spec or get_model(options.model)
    rows = options.rows or (FUNCTIONAL_DEFAULT_ROWS if options.functional else None)
    spec = spec.capped(rows) if rows else spec
    if options.trace is not None:
        pooling = trace_pooling(options.trace, spec, batch_size_of(options))
        spec = replace(spec, lookups_per_table=pooling)
    return spec


def resolve_functional(options: RunOptions) -> tuple[ModelSpec, int]:
    """Model and batch size of a run that carries real numerics (failure runs always do)."""
    return resolve_spec(replace(options, functional=True)), batch_size_of(options)


def input_generator(options: RunOptions, spec: ModelSpec, batch_size: int) -> BatchSource:
    """The run's inputs: every path that replays a batch must draw the same one. With
    --trace, the trace's reader; an FBGEMM trace's dense features and labels are the
    seeded generator's (its lookups, drawn one per bag, are not used)."""
    if options.trace is not None:
        synthetic = InputGenerator(
            replace(spec, lookups_per_table=1), batch_size, seed=options.seed
        )
        return open_trace(options.trace, spec, batch_size, synthetic)
    zipf = DEFAULT_ZIPF_EXPONENT if options.zipf is None else options.zipf
    generator = InputGenerator(
        spec, batch_size, seed=options.seed, zipf_exponent=zipf, reuse=options.reuse
    )
    if options.input_cache is None:
        return generator
    return SharedBatches(generator, options.input_cache)


def inputs_key(options: RunOptions) -> tuple | None:
    """What decides a run's generated batches (runs with one key draw the same ones);
    None for a trace's runs, which read theirs, and for sampled runs: they draw few
    batches in detail, and the ones they fast-forward through are drawn only by boards
    with state to warm (an SSD's cache), so storing them would cost more than it saves."""
    if options.trace is not None or options.sample_plan is not None:
        return None
    spec = resolve_spec(options)
    return (repr(spec), batch_size_of(options), options.seed, options.zipf, options.reuse)


def batch_size_of(options: RunOptions) -> int:
    return options.batch_size or DEFAULT_BATCH_SIZE


def prepare(options: RunOptions) -> tuple[ModelSpec, int, TrainingBoard]:
    """Resolve the model and build the board with its --gpu preset, every --set and its
    --gpu-profile applied, in that order (no simulation)."""
    board = fresh_board(options)
    if options.pmem is not None:
        if not pmem_modules(board):
            raise UsageError(f"--pmem {options.pmem}: --system {options.system} has no PMEM")
        use_model(board, options.pmem)
    if options.checkpoint != "paper":
        policy = software_policy(options, getattr(board, "ft", None))
        if isinstance(board, DisaggregatedBoard):
            board.set_policy(policy)  # a copy per CXL-MEM, each with its own store
        else:
            board.ft = policy
    if options.gpu is not None:
        for gpu in board.descendants():
            if isinstance(gpu, Gpu):
                apply_preset(gpu, options.gpu)
    for path, value in options.sets:
        board.set_by_path(path, value)
    check_prioritised(board)
    spec, batch_size = resolve_spec(options), batch_size_of(options)
    if options.gpu_profile is not None:
        apply_profile(board, options.gpu_profile, spec, batch_size)
    return spec, batch_size, board


def software_policy(
    options: RunOptions, given: SoftwareCheckpoint | None = None
) -> SoftwareCheckpoint:
    """The --checkpoint policy with --mtbf, --ckpt-interval and --quantize applied; a
    board built in Python keeps its own subclass of that policy (``given``)."""
    if options.system not in SOFTWARE_FT_SYSTEMS:
        raise UsageError(
            f"--checkpoint {options.checkpoint} is the host's checkpoint of host-resident tables "
            f"or of CXL-D's: use --system {', '.join(SOFTWARE_FT_SYSTEMS)} ({options.system} "
            "keeps its tables on a device with its own protocol)"
        )
    kind = POLICIES[options.checkpoint]
    policy = type(given)() if isinstance(given, kind) else kind()
    if options.mtbf is not None:
        policy.mtbf = options.mtbf
    if options.ckpt_interval is not None:
        policy.interval = options.ckpt_interval
    if options.quantize != "none":
        policy.quantize = options.quantize
    if options.store is not None:
        apply_store(policy.store, options.store)
    object.__setattr__(policy, "seed", options.seed)  # CPR-SSU draws its samples from it
    return policy


def check_prioritised(board: TrainingBoard) -> None:
    """CPR-MFU and CPR-SSU are alternatives: both shares below 1 are refused."""
    for obj in board.descendants():
        if isinstance(obj, CprCheckpoint):
            try:
                obj.prioritised  # noqa: B018 (the property checks the pair)
            except ValueError as exc:
                raise UsageError(str(exc)) from None


def fresh_board(options: RunOptions) -> TrainingBoard:
    """The CLI's board for the system, or a copy of the one built in Python: every
    simulation of a run (a failure run has several) connects a board of its own."""
    if options.board is None:
        if not multi_device(options):
            return build_board(options.system)
        topology = resolve_topology(
            options.topology, options.gpus, options.cxl_mems, options.pool_jobs
        )
        board = DisaggregatedBoard(BOARDS[options.system], topology, jobs=options.pool_jobs)
        board.sharding = options.sharding
        return board
    board = options.board
    if not isinstance(board, TrainingBoard):
        raise UsageError(f"board must be a TrainingBoard, got {type(board).__name__}")
    if board.system not in SYSTEMS:
        raise UsageError(
            f"board {type(board).__name__}: system {board.system!r} names no system's "
            f"checkpoint protocol (one of {', '.join(SYSTEMS)}): subclass one of the boards"
        )
    if board.system != options.system:
        raise UsageError(f"board is a {board.system} board, but system is {options.system!r}")
    if "engine" in vars(board):
        raise UsageError("board is already connected to a simulation: pass an unconnected one")
    return copy.deepcopy(board)


def connected_board(
    options: RunOptions, spec: ModelSpec, batch_size: int, engine: Engine, scheduler: Scheduler
) -> TrainingBoard:
    """A board attached to an engine. --set is applied again after connecting, so a
    user's value wins over the sizing the board derives from the model."""
    _, _, board = prepare(options)
    board.connect(engine, scheduler, spec, batch_size)
    placed = _placed_bytes(board)
    for path, value in options.sets:
        board.set_by_path(path, value)
    _check_capacities(board, placed, options.sets)
    return board


def check_connected(options: RunOptions) -> None:
    """Connect the run's board to a fresh engine, simulating nothing: what only a
    connected board checks (GPUs against the batch, tables against the devices, a
    --set capacity against what is placed) raises here."""
    engine = Engine()
    connected_board(options, resolve_spec(options), batch_size_of(options), engine,
                    Scheduler(engine))  # fmt: skip


def _placed_bytes(board: TrainingBoard) -> dict[str, int]:
    """Bytes the board placed on each memory device (the capacity it sized it to)."""
    return {
        obj.path: obj.capacity
        for obj in board.descendants()
        if isinstance(obj, MemoryDevice) and obj.capacity > 0
    }


def _check_capacities(
    board: TrainingBoard, placed: dict[str, int], sets: list[tuple[str, str]]
) -> None:
    """A --set capacity below what the board placed on the device describes a device
    that cannot hold its tables and logs: refused, naming the --set."""
    given = dict(sets)
    for obj in board.descendants():
        need = placed.get(obj.path)
        if need is not None and isinstance(obj, MemoryDevice) and obj.capacity < need:
            path = f"{obj.path}.capacity"
            raise ConfigError(
                f"--set {path}={given.get(path, obj.capacity)}: the device holds {need:,} "
                "bytes of tables and logs; its capacity cannot be smaller"
            )
