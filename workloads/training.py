"""Functional training: the real DLRM numerics in the order a system applies them.

Strict systems look up batch N on the table after batch N-1's update. The relaxed
CXL system looks batch N up on the table before that update and corrects the pooled
vectors with the update's row deltas, exactly as its near-memory engine does; the
result differs from strict order only by float32 rounding (see
``DLRM.relaxed_lookup`` for the bound).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workloads.dlrm import DLRM, Grads
from workloads.inputs import Batch, BatchSource
from workloads.metrics import evaluate
from workloads.models import ModelSpec
from workloads.opgraph import split_samples

EVAL_BATCH_OFFSET = 1_000_000  # held-out batches come from indices no run trains on
DEFAULT_LR = 0.01  # SGD at dlrm's 0.1 diverges on the paper's 8192-16384-wide bottom MLPs
PRESET_LR = {"rmc2": 0.003}
"""Presets that leave SGD's stability region at DEFAULT_LR. A sum-pooled bag of P
lookups drawn from a power law holds its table's hottest row h = P * p0 times, and the
loss's curvature along that row grows as h^2: RMC2 (P = 120, 64-wide rows) capped at
64 rows has h ~ 28 (p0 ~ 0.23) and diverges within 10 batches at 0.01; at 0.003 it
trains at every cap and batch size tested (tests/test_training_stability.py). The
other presets look up 1-80 rows per bag and train at 0.01."""


def default_lr(spec: ModelSpec) -> float:
    """The SGD learning rate a preset trains stably at (capped or not)."""
    return PRESET_LR.get(spec.name, DEFAULT_LR)


class TrainingDiverged(ArithmeticError):
    """A functional run whose loss or gradients stopped being finite numbers."""


@dataclass
class FunctionalTrainer:
    """Trains a DLRM batch by batch, strictly or with the relaxed lookup. A batch whose
    loss or gradients are not finite stops training before it changes the model
    (``TrainingDiverged``): a NaN never reaches the results or a checkpoint."""

    model: DLRM
    relaxed: bool = False
    losses: list[float] = field(default_factory=list)
    first_batch: int = 0  # the index of the first batch this trainer steps (for messages)
    replicas: int = 1  # data-parallel GPUs, each stepping its share of the samples
    _pending: tuple[Batch, np.ndarray, np.ndarray] | None = None

    @classmethod
    def create(
        cls,
        spec: ModelSpec,
        seed: int,
        relaxed: bool,
        lr: float | None = None,
        optimizer: str = "sgd",
        replicas: int = 1,
    ) -> FunctionalTrainer:
        """A trainer from the seeded initial weights; lr defaults to the preset's."""
        lr = default_lr(spec) if lr is None else lr
        model = DLRM(spec, lr=lr, optimizer=optimizer, seed=seed)
        return cls(model, relaxed, replicas=replicas)

    def step(self, batch: Batch) -> float:
        model = self.model
        if self.relaxed and self._pending is not None:
            _, rows, new_values = self._pending
            stale = model.lookup(batch)  # the table before the previous update
            deltas = new_values - model.table[rows]
            model.apply_rows(rows, new_values)
            pooled = model.relaxed_lookup(batch, stale, rows, deltas)
        else:
            self.flush()
            pooled = model.lookup(batch)
        if self.replicas > 1:
            sizes = split_samples(batch.batch_size, self.replicas)
            loss, grads = model.data_parallel_forward_backward(batch, pooled, sizes)
        else:
            loss, grads = model.forward_backward(batch, pooled)
        self._check_finite(loss, grads)
        rows, values = model.embedding_update(batch, grads.bags)
        model.apply_mlp(grads)
        self._pending = (batch, rows, values)
        if not self.relaxed:
            self.flush()
        self.losses.append(loss)
        return loss

    def _check_finite(self, loss: float, grads: Grads) -> None:
        """The loss and the pooled bags' gradients (cheap: T x B x dim); an overflow
        confined to the MLP gradients shows as a non-finite loss one batch later."""
        what = None
        if not np.isfinite(loss):
            what = f"the loss is {loss}"
        elif not np.isfinite(grads.bags).all():
            what = "the embedding gradients are not finite"
        if what is not None:
            raise TrainingDiverged(
                f"functional training diverged at batch {self.first_batch + len(self.losses)} "
                f"of {self.model.spec.name} (lr {self.model.lr:g}): {what}"
            )

    def flush(self) -> None:
        """Apply the last batch's embedding update (at the end of a strict step or a run)."""
        if self._pending is not None:
            _, rows, values = self._pending
            self.model.apply_rows(rows, values)
            self._pending = None

    def evaluate(self, generator: BatchSource, batches: int = 8) -> dict[str, float]:
        self.flush()
        held_out = generator.batches(batches, start=EVAL_BATCH_OFFSET)
        return evaluate(self.model, held_out)
