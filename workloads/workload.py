"""What a simulation trains: a DLRM model and the inputs it is fed.

The Python API's counterpart of --model, --batch-size, --seed, --rows and --trace: a preset by
name or a ModelSpec built in a script (a model no preset describes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from workloads.models import ModelSpec, get_model


@dataclass(frozen=True)
class DlrmWorkload:
    """A DLRM training workload. ``batch_size`` None: the model's documented default;
    ``rows`` caps every table (functional runs keep the tables in memory); ``reuse``
    sets the share of a batch's distinct rows the previous batch touched (None: by
    popularity alone) and ``zipf`` the popularity exponent (None: the default 1.05);
    ``trace`` a trace file whose lookups feed the run instead (workloads/traces.py)."""

    model: str | ModelSpec = "rm1"
    batch_size: int | None = None
    seed: int = 1
    rows: int | None = None
    reuse: float | None = None
    zipf: float | None = None
    trace: str | os.PathLike | None = None

    @property
    def spec(self) -> ModelSpec:
        """The model's shape (a preset's errors name the valid presets)."""
        return self.model if isinstance(self.model, ModelSpec) else get_model(self.model)

    @property
    def name(self) -> str:
        return self.spec.name
