"""A run with power failures: the recorded run whose stats are reported, the failures
injected into it, recovered from and judged; results.json's ``failure`` field."""

from __future__ import annotations

import time
from typing import Any

from simulate.failures.image_copy import named_as_given, working_image
from simulate.failures.inject import failure_field, record_run
from simulate.run.configure import resolve_functional
from simulate.run.job import Simulated, write_run
from simulate.run.options import RunOptions


def run_failure_job(options: RunOptions) -> dict[str, Any]:
    """Simulate once (the recorded run is both the stats and the failure reference),
    inject, and write the outputs; returns results.json's content. A --pmem-image is
    changed only once everything else succeeded (image_copy)."""
    with working_image(options) as working:
        started = time.monotonic()
        recorded = record_run(working)
        spec, batch_size = resolve_functional(options)
        simulated = Simulated(
            spec, batch_size, recorded.board, recorded.scheduler, recorded.ends,
            recorded.trainer, recorded.generator, recorded.end_tick,
        )  # fmt: skip

        def failure() -> dict[str, Any]:
            field = failure_field(working, recorded)
            return {"failure": named_as_given(field, working, options)}

        return write_run(options, simulated, started, failure)
