"""What a run needs, checked before any work starts: its paths and its memory.

The memory estimate adds up the large arrays a run holds, each sized from the options
(batch size, rows, the model's shape, batches, failure recording). Per-item costs of
the timing model are measured (benchmarks/bench_preflight.py prints the estimate next
to the measured peak; tests/test_preflight.py checks that it bounds the peak). A run whose
estimate exceeds what the machine has available is refused with the estimate, instead
of running until numpy fails.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from components.memory import SsdWithCache
from components.memory.lru import COMPACT_FLOOR
from components.sim.mpl import check_backend
from components.sim.outputs import RUN_OUTPUTS, NotRegularFile, check_outputs, check_replaceable
from simulate.run.configure import (
    batch_size_of,
    input_generator,
    resolve_spec,
)
from simulate.run.options import RunOptions, UsageError
from workloads.models import FLOAT_BYTES, ModelSpec

MEMORY_LIMIT_ENV = "TRAININGCXL_MEMORY_LIMIT"
"""Overrides the memory a run may use (e.g. "8GiB"), instead of what the machine has free."""

INTERPRETER_BYTES = 200 * 2**20
"""Python, numpy, SimPy, numba with the compiled stream kernels (115 MiB of it: LLVM
and the cached machine code) and the simulator's modules: measured 186 MiB peak for a
3-batch RM3 run, whose batches are small (bench_preflight.py)."""
BYTES_PER_LOOKUP = 320
"""Inputs and memory timing of one batch in flight, per embedding lookup: measured
up to 260 B (RM1 at batch size 1024 on dram; 177 B for RM2 on cxl), plus a margin."""
BYTES_PER_MLP_BYTE = 0.25
"""The line plans of one MLP checkpoint or log write: RM3 on pmem, whose 170 MB of
MLPs it writes each batch, peaks 38 MiB above RM3 on cxl (bench_preflight.py)."""
BYTES_PER_BATCH = 8 * 2**10
"""Op records, batch windows and timeline.csv rows kept for every batch until the
run writes its outputs: measured 4 KB per batch of RMC1 (tracemalloc), doubled for
the timeline's text."""


@dataclass(frozen=True)
class MemoryEstimate:
    """A run's expected peak memory, by part (bytes)."""

    parts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def describe(self, largest: int = 3) -> str:
        ranked = sorted(self.parts.items(), key=lambda item: -item[1])[:largest]
        detail = ", ".join(f"{name} {format_bytes(size)}" for name, size in ranked if size)
        return f"~{format_bytes(self.total)} ({detail})"


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def failure_run(options: RunOptions) -> bool:
    """Whether the run records its stretches for the failure model."""
    return bool(options.fail_at or options.fail_random or options.pmem_image)


def functional_spec(options: RunOptions) -> ModelSpec:
    """The model a run carrying real numerics holds in memory (recording runs and
    crash checks always do: configure.resolve_functional)."""
    return resolve_spec(replace(options, functional=True))


def vector_cache_bytes(options: RunOptions, spec: ModelSpec) -> int:
    """The SSD's LRU (components/memory/lru.py): a stamp per table row, and where the
    tables outgrow the cache a log of up to 1.5x the rows it holds, plus the floor."""
    param = SsdWithCache.cache_capacity
    raw = dict(options.sets).get("board.storage.cache_capacity", param.default)
    capacity = param.convert(raw, "board.storage.cache_capacity")
    held = max(capacity // spec.row_bytes, 1)
    log = 0 if spec.total_rows <= held else 8 * (3 * held // 2 + COMPACT_FLOOR)
    return 8 * spec.total_rows + log


def estimate_memory(options: RunOptions, crash_states: bool = False) -> MemoryEstimate:
    """The peak memory a run with these options will need (crash_states: crashcheck's
    exploration on top of the recorded run)."""
    timed = resolve_spec(options)
    batch = batch_size_of(options)
    lookups = batch * timed.num_tables * timed.lookups_per_table
    parts = {
        "interpreter": INTERPRETER_BYTES,
        "batch inputs and memory timing": BYTES_PER_LOOKUP * lookups,
        "per-batch records": BYTES_PER_BATCH * options.batches,
        "MLP write plans": int(BYTES_PER_MLP_BYTE * timed.mlp_param_bytes),
    }
    if options.system == "ssd":
        parts["vector cache residency"] = vector_cache_bytes(options, timed)
    recording = failure_run(options) or crash_states
    if not (options.functional or recording):
        return MemoryEstimate(parts)
    spec = functional_spec(options)
    table, mlp = spec.table_bytes, spec.mlp_param_bytes
    largest = max(spec.rows_per_table) * spec.row_bytes
    rows = min(spec.total_rows, lookups)  # rows one batch can update
    widths = sum(spec.bottom_mlp) + sum(spec.top_widths) + spec.interaction_features**2
    # the table, plus the init's two temporaries of one table
    parts["embedding tables"] = table + 2 * largest
    # weights, gradients, optimizer state and the update's temporary (lr * grad): one
    # model when training plainly (measured RM1 at 1000 rows: 4x its 68 MB of MLPs);
    # the reference, the resumed stretch and the image-formatting copies when recording
    parts["MLP weights, gradients, optimizer state"] = (12 if recording else 4) * mlp
    parts["activations and updated rows"] = 4 * FLOAT_BYTES * batch * widths
    parts["activations and updated rows"] += 4 * rows * spec.row_bytes
    if recording:
        update = rows * (8 + 2 * spec.row_bytes)  # row ids, old and new values
        image = table + 2 * rows * (8 + spec.row_bytes) + 3 * mlp  # layout of image.py
        parts["embedding tables"] += 5 * table  # reference, image, recovered, resumed
        parts["PMEM image"] = image
        # per batch of the reference run and of a resumed stretch: the MLPs after the
        # batch (RecordingDLRM.mlp_states) and the MLP log written into the journal;
        # measured 2.5 GB for RM1 (68 MB of MLPs), 8 batches, one failure (est. 3.6 GB)
        parts["recorded MLP states and logs"] = 4 * (options.batches + 1) * mlp
        # the update, its journal entries (log and in place), in both stretches;
        # measured 66 MB for RMC1, 10k rows, batch 8, 8 batches (est. 86 MB)
        parts["recorded row updates"] = 8 * options.batches * update
    if crash_states:
        parts["reference table per batch"] = (options.batches + 1) * table
        parts["crash-state images"] = 2 * image
    return MemoryEstimate(parts)


def available_memory() -> int | None:
    """Bytes this process may still use: MemAvailable, within a cgroup limit if any
    (or MEMORY_LIMIT_ENV). None when the platform does not say."""
    override = os.environ.get(MEMORY_LIMIT_ENV)
    if override:
        from components.sim.units import UnitError, parse_size

        try:
            return parse_size(override)
        except UnitError as exc:
            raise UsageError(f"{MEMORY_LIMIT_ENV}={override!r}: {exc}") from None
    free = _meminfo_available()
    limit = _cgroup_room()
    if free is None:
        return limit
    return free if limit is None else min(free, limit)


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_room() -> int | None:
    """The cgroup v2 limit minus current usage (containers), if there is a limit."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        usage = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        return max(int(limit) - int(usage), 0)
    except (OSError, ValueError):
        return None


def check_memory(options: RunOptions, crash_states: bool = False) -> MemoryEstimate:
    """Refuse a run whose estimate exceeds the memory available, naming the options
    that drive it; returns the estimate otherwise."""
    estimate = estimate_memory(options, crash_states)
    room = available_memory()
    if room is not None and estimate.total > room:
        raise UsageError(
            f"{drivers(options)} would need {estimate.describe()}, more than the "
            f"{format_bytes(room)} of memory available; reduce them"
        )
    return estimate


def drivers(options: RunOptions) -> str:
    """The options that size the run, as the user would type them."""
    words = [f"--model {options.model}", f"--batches {options.batches}"]
    if options.batch_size is not None:
        words.append(f"--batch-size {options.batch_size}")
    if options.rows is not None:
        words.append(f"--rows {options.rows}")
    return " ".join(words)


def check_outdir(text: str, option: str = "--outdir") -> None:
    """An output directory that can be written: not empty, not a file, under a
    writable directory."""
    if not text.strip():
        raise UsageError(f"{option} must not be empty")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {text}: exists and is not a directory")
    ancestor = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not ancestor.is_dir():
        raise UsageError(f"{option} {text}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {text}: {ancestor} is not writable")


def check_pmem_image(options: RunOptions) -> None:
    """An existing image is recovered from, never cut again: asking for new failures on
    it is refused rather than silently ignored (docs/failures.md)."""
    if options.pmem_image is None:
        return
    image = Path(options.pmem_image)
    if image.is_dir():
        raise UsageError(f"--pmem-image {options.pmem_image}: is a directory")
    if image.exists() and (options.fail_at or options.fail_random):
        asked = "--fail-at" if options.fail_at else "--fail-random"
        raise UsageError(
            f"--pmem-image {options.pmem_image} exists, and a run recovers from an existing "
            f"image without injecting failures: drop {asked} to recover from it, or remove "
            "the file to cut a fresh run"
        )
    folder = image.parent
    if not image.exists() and not folder.is_dir():
        raise UsageError(f"--pmem-image {options.pmem_image}: no directory {folder}")
    if not image.exists() and not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"--pmem-image {options.pmem_image}: {folder} is not writable")
    try:
        check_replaceable(image)
    except NotRegularFile as exc:
        raise UsageError(f"--pmem-image {options.pmem_image}: {exc.strerror}") from None


def check_trace(options: RunOptions) -> None:
    """A trace that fits the run's model: readable, of a known format, with the model's
    tables and at least a batch of samples, its first batch's rows inside the tables
    (later batches are checked as they are read, with the same message)."""
    if options.trace is None:
        return
    spec = functional_spec(options) if failure_run(options) else resolve_spec(options)
    reader = input_generator(options, spec, batch_size_of(options))
    reader.batch(0)
    close = getattr(reader, "close", None)
    if close is not None:
        close()


def check_paths(options: RunOptions, writes_outdir: bool = True) -> None:
    if writes_outdir:
        check_outdir(options.outdir)
        check_outputs(Path(options.outdir), RUN_OUTPUTS)
    if options.plot:
        check_backend()
    check_pmem_image(options)
    check_trace(options)


def format_duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
