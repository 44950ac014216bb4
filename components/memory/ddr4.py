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

from components.memory import fused, kernels
from components.memory.streams import as_int64, small_keys

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
    ``ctrl``, issued in array order on each controller, or at ``position`` (each
    access's place, 0 .. n-1, among its controller's n accesses)."""
    if kernels.COMPILED:
        issued = as_int64(position if position is not None else ctrl[:0])
        per_bank, switches = fused.row_activity(
            as_int64(ctrl), as_int64(local), issued, controllers, lines_per_row, banks, ranks
        )
        per_bank = per_bank.reshape(controllers, ranks, banks)
        return RowActivity(per_bank.sum(axis=2), per_bank.max(axis=(1, 2)), switches)
    if position is not None:  # into issue order by scattering, not sorting
        per_ctrl = np.bincount(ctrl, minlength=controllers)
        order = np.empty(ctrl.size, dtype=np.int64)
        order[(np.cumsum(per_ctrl) - per_ctrl)[ctrl] + position] = np.arange(ctrl.size)
        ctrl, local = ctrl[order], local[order]
    slots = banks * ranks
    row_index = local // lines_per_row
    row = row_index // slots
    bank_id = small_keys(ctrl * slots + row_index % slots)  # (controller, rank, bank)
    rank = bank_id // banks  # controller x ranks + rank
    switches = np.zeros(controllers)
    for c in range(controllers):  # per controller, not per line
        mine = rank[ctrl == c] if controllers > 1 else rank
        switches[c] = np.count_nonzero(mine[1:] != mine[:-1])
    by_bank = np.argsort(bank_id, kind="stable")
    same_bank, same_row = bank_id[by_bank], row[by_bank]
    opens = np.ones(ctrl.size, dtype=bool)  # every bank starts precharged
    opens[1:] = (same_bank[1:] != same_bank[:-1]) | (same_row[1:] != same_row[:-1])
    per_bank = np.bincount(same_bank[opens], minlength=controllers * slots)
    per_bank = per_bank.reshape(controllers, ranks, banks)
    return RowActivity(per_bank.sum(axis=2), per_bank.max(axis=(1, 2)), switches)
