"""What a crash check will cost, checked before it starts: its states and seconds,
estimated from the options, and a check that would not finish in a budget refused."""

from __future__ import annotations

from components.compute.host import COPY_CHUNK
from simulate.failures.crash_report import CheckSettings
from simulate.failures.recording import image_layout
from simulate.run.configure import FUNCTIONAL_DEFAULT_ROWS
from simulate.run.options import RunOptions, UsageError
from simulate.run.preflight import (
    check_memory,
    drivers,
    format_bytes,
    format_duration,
    functional_spec,
)

CRASH_STATES_PER_UPDATED_ROW = 4
"""Persist events per row a batch updates: each row is logged (entry), written in place
and flagged; measured 3.6 on RMC1, 64 rows, batch 8."""
INTERVALS_PER_BATCH = 8
"""Crash intervals (fenced epochs) per batch the explorer reorders in: rows, records,
flags and updates; measured 4-6 on RMC1 (scripts/crashcheck.py prints them)."""
MLP_LOG_BURST = COPY_CHUNK
"""Bytes per MLP-log write request: the host's page-sized persist chunks, which the
near-memory DMA burst (NearMemoryEngine.log_burst, 4 KiB) equals; each persists at its
own tick, so the prefix walk visits one state per burst."""
SECONDS_PER_STATE = 0.0006
"""One crash state: its prefix or reordering applied lazily per region, recovery rerun
only when a region it reads changed, and the oracle: bench_crashcheck.py measures
~1,500-2,500 states/s at the test scale on a loaded 2-core machine."""
METADATA_FLIPS_PER_STATE = 39
"""Bit flips per metadata-fault state: one in each of the 4 flag words and 7 in each
record header recovery may read (5: both embedding logs, both MLP slots, the base):
batch at its 4 low bits and one more, count, CRC (simulate/failures/crashcheck.py)."""
SCHEDULE_STATES_PER_BATCH = 64
"""Crash states per batch in the reordered schedules (the window between one op's moved
commit and the end of the op it now overtakes); measured 62 on CXL-B, RMC1, 64 rows,
batch 8 (crashcheck's summary: by_mode.schedule / batches)."""
CRASHCHECK_BUDGET_S = 600.0
"""Longest crash check run without --sample: 10 minutes. Beyond it, a sample is the
useful check (and the full one is a batch job, not a command)."""


def crashcheck_cost(options: RunOptions, sample: int = 0, settings=None) -> tuple[int, float]:
    """Crash states a check will visit and the seconds it is expected to take: the
    prefix walk's persist events (each updated row's, and each MLP-log burst's), the
    reorderings per crash interval, failures during recovery, media and metadata faults,
    the reordered schedules and the resumed runs' states."""
    settings = settings or CheckSettings()
    layout = image_layout(options)
    bursts = -(-functional_spec(options).mlp_param_bytes // MLP_LOG_BURST)
    prefix = (CRASH_STATES_PER_UPDATED_ROW * layout.max_rows + bursts) * options.batches
    if sample:
        prefix = min(prefix, sample)
    explored = settings.explore.budget * INTERVALS_PER_BATCH * options.batches
    states = prefix + explored + settings.interrupted + settings.media
    states += settings.metadata * METADATA_FLIPS_PER_STATE
    if settings.schedules:
        states += SCHEDULE_STATES_PER_BATCH * options.batches
    resumed = min(prefix, settings.resumed_prefix) + 4 * INTERVALS_PER_BATCH * options.batches
    states += settings.resumed * (resumed + 20)  # each with 20 failures during recovery
    return states, states * SECONDS_PER_STATE


def check_crashcheck(options: RunOptions, sample: int, settings=None) -> None:
    """Refuse a crash check that would not finish in CRASHCHECK_BUDGET_S (or not fit in
    memory), with the estimate and what to change."""
    check_memory(options, crash_states=True)
    if options.checkpoint != "paper":  # a few dozen crash instants per checkpoint
        return
    states, seconds = crashcheck_cost(options, sample, settings)
    if seconds > CRASHCHECK_BUDGET_S:
        image = format_bytes(image_layout(options).size)
        hint = "a smaller --sample" if sample else "--sample K (e.g. 1000)"
        rows = "" if options.rows else f" (default --rows {FUNCTIONAL_DEFAULT_ROWS})"
        raise UsageError(
            f"{drivers(options)}{rows}: about {states} crash states of a "
            f"{image} image, ~{format_duration(seconds)}; use {hint}, or fewer "
            "--rows, --batches or --batch-size"
        )
