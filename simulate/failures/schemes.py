"""Which failure-tolerance scheme a run's options name: the system's own persistence
protocol (--checkpoint paper) or a software checkpoint policy (cpr, check-n-run, none),
on one device or on each of several CXL-MEMs."""

from __future__ import annotations

from simulate.failures.hardware import PersistenceProtocol
from simulate.failures.sharded import ShardedCheckpointPolicy
from simulate.failures.software import CheckpointPolicy
from simulate.failures.tolerance import FailureTolerance
from simulate.run.options import RunOptions, multi_device


def scheme_for(options: RunOptions) -> type[FailureTolerance]:
    """The scheme class whose guarantee a failure of this run is judged by."""
    if options.checkpoint == "paper":
        return PersistenceProtocol
    return ShardedCheckpointPolicy if multi_device(options) else CheckpointPolicy
