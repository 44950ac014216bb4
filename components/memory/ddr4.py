"""DDR4 row and rank activity of a sequence of line accesses (vectorized, no per-line code).

A channel's lines map to (rank, bank, row) as gem5's default ``RoRaBaCoCh`` does: a row
holds ``lines_per_row`` consecutive controller-local lines, consecutive rows go to the
next bank, then the next rank. In issue order per controller, an access activates a row
unless the previous access to its bank was to the same row (open-page policy); the data
bus switches rank whenever consecutive accesses go to different ranks. ``Dram`` turns
these counts into media time (rank switches on the bus, the four-activate window per
rank, the row cycle per bank).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.memory.base import _small

ACTIVATIONS_PER_WINDOW = 4  # JEDEC DDR4 (JESD79-4) tFAW: at most 4 ACT per rank in the window


@dataclass(frozen=True)
class RowActivity:
    """Per controller: row activations per rank, those of its busiest bank, rank switches."""

    activations: np.ndarray  # controllers x ranks
    busiest_bank: np.ndarray  # controllers
    rank_switches: np.ndarray  # controllers


def row_activity(
    ctrl: np.ndarray,
    local: np.ndarray,
    position: np.ndarray | None,
    controllers: int,
    lines_per_row: int,
    banks: int,
    ranks: int,
) -> RowActivity:
    """Row activity of accesses to controller-local lines ``local`` on controllers
    ``ctrl``, issued in the order of ``position`` within each controller (None: in array
    order)."""
    if position is None:
        order = np.argsort(_small(ctrl), kind="stable")
    else:
        order = np.lexsort((position, ctrl))
    c = ctrl[order].astype(np.int64)
    row_index = local[order] // lines_per_row
    bank = row_index % banks
    rank = (row_index // banks) % ranks
    row = row_index // (banks * ranks)
    switched = np.zeros(c.size, dtype=bool)
    switched[1:] = (c[1:] == c[:-1]) & (rank[1:] != rank[:-1])
    switches = np.bincount(c, weights=switched, minlength=controllers)
    bank_id = (c * ranks + rank) * banks + bank
    by_bank = np.argsort(_small(bank_id), kind="stable")
    same_bank, same_row = bank_id[by_bank], row[by_bank]
    opens = np.ones(c.size, dtype=bool)  # every bank starts precharged
    opens[1:] = (same_bank[1:] != same_bank[:-1]) | (same_row[1:] != same_row[:-1])
    per_bank = np.bincount(same_bank, weights=opens, minlength=controllers * ranks * banks)
    per_bank = per_bank.reshape(controllers, ranks, banks)
    return RowActivity(per_bank.sum(axis=2), per_bank.max(axis=(1, 2)), switches)
