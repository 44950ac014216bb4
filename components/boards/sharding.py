"""Where each embedding table lives when the tables are spread over several CXL-MEMs.

Table-wise (the default): whole tables go to devices, largest first to the device
holding the fewest bytes so far (LPT, Graham 1969: within 4/3 of the best balance), the
placement DLRM's model-parallel training uses. Each device's shard is laid out as its
own image (its tables in increasing table order, so a shard's row ids keep the global
order), and a batch's demand is cut into one demand per device with numpy masks, no
per-row loop.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from components.sim.params import ConfigError


@dataclasses.dataclass(frozen=True)
class TableSharding:
    """Tables of each device, and every global row's device and shard-local id."""

    tables: tuple[tuple[int, ...], ...]
    rows_per_table: tuple[int, ...]

    @classmethod
    def balanced(cls, rows_per_table: tuple[int, ...], row_bytes: int, devices: int,
                 device_bytes: int | None = None) -> TableSharding:  # fmt: skip
        """LPT by bytes; ``device_bytes`` the most one device holds (None: no limit)."""
        if devices < 1:
            raise ConfigError("sharding: no CXL-MEMs to place the tables on")
        if devices > len(rows_per_table):
            raise ConfigError(
                f"sharding: {devices} CXL-MEMs for {len(rows_per_table)} tables; table-wise "
                "sharding leaves a device empty (use fewer CXL-MEMs)"
            )
        sizes = np.asarray(rows_per_table, dtype=np.int64) * row_bytes
        if device_bytes is not None and sizes.max() > device_bytes:
            table = int(sizes.argmax())
            raise ConfigError(
                f"sharding: table {table} ({sizes[table]:,} B) is larger than one CXL-MEM "
                f"holds ({device_bytes:,} B)"
            )
        load = np.zeros(devices, dtype=np.int64)
        owner = np.empty(len(sizes), dtype=np.int64)
        for table in np.argsort(-sizes, kind="stable"):  # one pass over tables, not rows
            device = int(load.argmin())
            owner[table] = device
            load[device] += sizes[table]
        tables = tuple(tuple(int(t) for t in np.flatnonzero(owner == d)) for d in range(devices))
        return cls(tables, tuple(int(r) for r in rows_per_table))

    @property
    def devices(self) -> int:
        return len(self.tables)

    def shard_rows(self, device: int) -> tuple[int, ...]:
        return tuple(self.rows_per_table[t] for t in self.tables[device])

    @property
    def device_of_table(self) -> np.ndarray:
        owner = np.empty(len(self.rows_per_table), dtype=np.int64)
        for device, tables in enumerate(self.tables):
            owner[list(tables)] = device
        return owner

    @property
    def local_offset(self) -> np.ndarray:
        """Per table: its row 0's id inside its device's shard minus its global id."""
        global_start = np.concatenate(([0], np.cumsum(self.rows_per_table)[:-1]))
        shift = np.zeros(len(self.rows_per_table), dtype=np.int64)
        for tables in self.tables:
            sizes = [self.rows_per_table[t] for t in tables]
            local_start = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
            shift[list(tables)] = local_start - global_start[list(tables)]
        return shift

    def split(self, demand, batch_sizes: list[int], previous: list | None) -> list:
        """One demand per device: its tables' lookups with shard-local row ids, the
        pooled bytes of its tables, its reuse against its own previous shard."""
        access = demand.lookup
        starts = np.concatenate(([0], np.cumsum(self.rows_per_table)))
        owner, shift = self.device_of_table, self.local_offset
        row_table = np.searchsorted(starts, access.rows, side="right") - 1
        unique_table = np.searchsorted(starts, access.unique_rows, side="right") - 1
        out = []
        for device, tables in enumerate(self.tables):
            in_rows = owner[row_table] == device
            in_unique = owner[unique_table] == device
            rows = access.rows[in_rows] + shift[row_table[in_rows]]
            unique = access.unique_rows[in_unique] + shift[unique_table[in_unique]]
            before = previous[device].lookup.unique_rows if previous else None
            slot = shared = None
            reused = 0
            if before is not None and access.previous_rows is not None:
                slot = np.minimum(np.searchsorted(before, unique), max(before.size - 1, 0))
                shared = before[slot] == unique if before.size else np.zeros(0, bool)
                reused = int(shared.sum())
            else:
                before = None
            pooled = sum(batch_sizes) * len(tables) * access.row_bytes
            shard_access = dataclasses.replace(
                access,
                rows=rows,
                unique_rows=unique,
                counts=access.counts[in_unique],
                tables=len(tables),
                lookups=int(rows.size),
                pooled_bytes=pooled,
                grad_bytes=pooled,
                reused_rows=reused,
                previous_rows=before,
                previous_slot=slot,
                previous_shared=shared,
            )
            out.append(dataclasses.replace(demand, lookup=shard_access))
        return out
