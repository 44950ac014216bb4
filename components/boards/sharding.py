"""Where each embedding row lives when the tables are spread over several CXL-MEMs.

- **Table-wise** (the default): whole tables go to devices, largest first to the device
  holding the fewest bytes so far (LPT, Graham 1969: within 4/3 of the best balance),
  the placement of DLRM's model-parallel embeddings. A device pools whole bags of its
  tables.
- **Row-wise** (``--sharding row``): row i of every table lives on device i mod M, so
  every device holds 1/M of every table and a hot table's lookups spread over all of
  them; each device pools the part of every bag it holds (partial sums), and the GPU
  adds the M partial vectors of a bag. It moves M times the pooled bytes and takes a
  table no single device could hold.

Either way a device's shard is laid out as its own image (its tables, or its part of
every table, in table order, so shard-local row ids keep the global order), and a
batch's demand is cut into one demand per device with numpy masks, no per-row loop.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from components.memory.rowsort import previous_matches
from components.sim.params import ConfigError

SHARDINGS = ("table", "row")


@dataclasses.dataclass(frozen=True)
class Sharding:
    """Every global row's device and shard-local id, for ``devices`` CXL-MEMs."""

    rows_per_table: tuple[int, ...]
    devices: int

    def shard_rows(self, device: int) -> tuple[int, ...]:
        """Rows of each table part the device holds, in its image's order."""
        raise NotImplementedError

    def pooled_tables(self, device: int) -> int:
        """Pooled vectors (whole or partial) the device sends per sample."""
        raise NotImplementedError

    def locate(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(device, shard-local id) of each global row."""
        raise NotImplementedError

    @functools.cached_property
    def table_starts(self) -> np.ndarray:
        return np.concatenate(([0], np.cumsum(self.rows_per_table))).astype(np.int64)

    def split(self, demand, batch_sizes: list[int], previous: list | None) -> list:
        """One demand per device: the lookups of the rows it holds (shard-local ids),
        the pooled bytes it sends, its reuse against its own previous shard."""
        access = demand.lookup
        row_device, row_local = self.locate(access.rows)
        unique_device, unique_local = self.locate(access.unique_rows)
        out = []
        for device in range(self.devices):
            in_rows, in_unique = row_device == device, unique_device == device
            rows, unique = row_local[in_rows], unique_local[in_unique]
            before = previous[device].lookup.unique_rows if previous else None
            slot = shared = None
            reused = 0
            if before is not None and access.previous_rows is not None and before.size:
                slot, shared, reused, _ = previous_matches(before, unique)
            else:
                before = None
            pooled = sum(batch_sizes) * self.pooled_tables(device) * access.row_bytes
            shard_access = dataclasses.replace(
                access,
                rows=rows,
                unique_rows=unique,
                counts=access.counts[in_unique],
                tables=self.pooled_tables(device),
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


@dataclasses.dataclass(frozen=True)
class TableSharding(Sharding):
    tables: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def balanced(cls, rows_per_table: tuple[int, ...], row_bytes: int, devices: int,
                 device_bytes: int | None = None) -> TableSharding:  # fmt: skip
        """LPT by bytes; ``device_bytes`` the most one device holds (None: no limit)."""
        _check_devices(devices)
        if devices > len(rows_per_table):
            raise ConfigError(
                f"sharding: {devices} CXL-MEMs for {len(rows_per_table)} tables; table-wise "
                "sharding leaves a device empty (use fewer CXL-MEMs or --sharding row)"
            )
        sizes = np.asarray(rows_per_table, dtype=np.int64) * row_bytes
        if device_bytes is not None and sizes.max() > device_bytes:
            table = int(sizes.argmax())
            raise ConfigError(
                f"sharding: table {table} ({sizes[table]:,} B) is larger than one CXL-MEM "
                f"holds ({device_bytes:,} B); --sharding row spreads it"
            )
        load = np.zeros(devices, dtype=np.int64)
        owner = np.empty(len(sizes), dtype=np.int64)
        for table in np.argsort(-sizes, kind="stable"):  # one pass over tables, not rows
            device = int(load.argmin())
            owner[table] = device
            load[device] += sizes[table]
        tables = tuple(tuple(int(t) for t in np.flatnonzero(owner == d)) for d in range(devices))
        return cls(tuple(int(r) for r in rows_per_table), devices, tables)

    def shard_rows(self, device: int) -> tuple[int, ...]:
        return tuple(self.rows_per_table[t] for t in self.tables[device])

    def pooled_tables(self, device: int) -> int:
        return len(self.tables[device])

    @functools.cached_property
    def _table_map(self) -> tuple[np.ndarray, np.ndarray]:
        """Per table: its device, and its shard-local id of row 0 minus its global one
        (built once: ``locate`` runs twice a batch)."""
        owner = np.empty(len(self.rows_per_table), dtype=np.int64)
        shift = np.zeros(len(self.rows_per_table), dtype=np.int64)
        starts = self.table_starts
        for device, tables in enumerate(self.tables):
            owner[list(tables)] = device
            sizes = [self.rows_per_table[t] for t in tables]
            local = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
            shift[list(tables)] = local - starts[list(tables)]
        return owner, shift

    def locate(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        owner, shift = self._table_map
        table = np.searchsorted(self.table_starts, rows, side="right") - 1
        return owner[table], rows + shift[table]


@dataclasses.dataclass(frozen=True)
class RowSharding(Sharding):
    @classmethod
    def interleaved(cls, rows_per_table: tuple[int, ...], row_bytes: int, devices: int,
                    device_bytes: int | None = None) -> RowSharding:  # fmt: skip
        _check_devices(devices)
        if min(rows_per_table) < devices:
            table = int(np.argmin(rows_per_table))
            raise ConfigError(
                f"sharding: table {table} has {rows_per_table[table]} rows, fewer than the "
                f"{devices} CXL-MEMs row-wise sharding spreads it over"
            )
        sharding = cls(tuple(int(r) for r in rows_per_table), devices)
        if device_bytes is not None:
            held = sum(sharding.shard_rows(0)) * row_bytes  # device 0 holds the most
            if held > device_bytes:
                raise ConfigError(
                    f"sharding: 1/{devices} of the tables ({held:,} B) is more than one "
                    f"CXL-MEM holds ({device_bytes:,} B)"
                )
        return sharding

    @functools.cached_property
    def part_rows(self) -> np.ndarray:
        """(devices, tables): rows of table t on device d, ceil for the first n_t mod M."""
        n = np.asarray(self.rows_per_table, dtype=np.int64)
        d = np.arange(self.devices, dtype=np.int64)[:, None]
        return n // self.devices + (d < n % self.devices)

    def shard_rows(self, device: int) -> tuple[int, ...]:
        return tuple(int(r) for r in self.part_rows[device])

    def pooled_tables(self, device: int) -> int:
        return len(self.rows_per_table)

    @functools.cached_property
    def _part_starts(self) -> np.ndarray:
        """(devices, tables): where each table part starts in its device's shard."""
        parts = self.part_rows
        zero = np.zeros((self.devices, 1), np.int64)
        return np.concatenate((zero, np.cumsum(parts, axis=1)[:, :-1]), axis=1)

    def locate(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        starts = self.table_starts
        table = np.searchsorted(starts, rows, side="right") - 1
        index = rows - starts[table]
        device = index % self.devices
        return device, self._part_starts[device, table] + index // self.devices


def build_sharding(kind: str, rows_per_table, row_bytes: int, devices: int,
                   device_bytes: int | None = None) -> Sharding:  # fmt: skip
    if kind == "table":
        return TableSharding.balanced(rows_per_table, row_bytes, devices, device_bytes)
    if kind == "row":
        return RowSharding.interleaved(rows_per_table, row_bytes, devices, device_bytes)
    raise ConfigError(f"sharding {kind!r}: one of {', '.join(SHARDINGS)}")


def _check_devices(devices: int) -> None:
    if devices < 1:
        raise ConfigError("sharding: no CXL-MEMs to place the tables on")
