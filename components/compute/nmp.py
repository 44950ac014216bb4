"""CXL-MEM's near-memory logic: the computing logic (gather + sum-reduce lookup,
scatter update) and the checkpointing logic (a DMA engine and the MLP size counters).

Rows stream from PMEM through a scratchpad that holds the rows in flight, so the
outstanding PMEM requests are bounded by both the request tags and the scratchpad.
Reading, adding and writing are pipelined: each op is one stage whose PMEM reads,
writes and arithmetic flow together (components/memory/base.py ``stage``). Functions
return stages; the board schedules them and the flow network times them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from components.compute.gather import in_order_segments
from components.memory.base import MemoryDevice
from components.memory.stages import MemStream, concurrent, split_stream, stage, write_range
from components.persistence.image import RECORD_HEADER
from components.sim.params import Energy, Frequency, Int, MemorySize, Power, positive
from components.sim.schedule import Stage, alone_ticks
from components.sim.simobject import SimObject
from components.sim.units import TICKS_PER_SECOND

_PG213 = "Xilinx PG213 UltraScale+ PCIe Gen3 x16 integrated block: 250 MHz, 512-bit AXI user clock"


class NearMemoryEngine(SimObject):
    """FPGA-class defaults (the paper's CXL-MEM prototype is an FPGA)."""

    clock = Frequency("250MHz", "logic clock", _PG213)
    lanes = Int(
        64,
        "FP32 adder/multiplier lanes: a 512-bit (16-lane) pipeline per memory controller",
        f"{_PG213}; 4 controllers in the paper's CXL-MEM",
        low=1,
    )
    outstanding = Int(
        256,
        "PMEM requests in flight, the in-order gather pipeline's slots (64 per memory "
        "controller); a read waiting on a draining line holds its slot",
        "gem5 src/mem/NVMInterface.py NVM_2400_1x64: read_buffer_size = max_pending_reads "
        "= 64 per controller, x 4 controllers in the paper's CXL-MEM",
        low=1,
    )
    scratchpad = MemorySize(
        "256KiB", "scratchpad for rows in flight", "estimate: FPGA on-chip BRAM", check=positive
    )
    bag_buffer = MemorySize(
        "4MiB",
        "on-chip SRAM that holds the next batch's pooled vectors while the update corrects "
        "them (CXL's relaxed lookup)",
        "estimate: a small share of the 140-287 Mb of M20K SRAM of an Intel Agilex 7 "
        "F-series FPGA (device overview); RM1-RM4 at batch 128 need 0.3-1.3 MB",
        check=positive,
    )
    log_burst = MemorySize(
        "4KiB", "DMA write burst to the MLP log", "AXI 4 KiB burst boundary", low="64B", high="1MiB"
    )  # a cache line at least (one array entry per burst); 1 MiB at most (lines per burst)
    flop_energy = Energy("10pJ", "energy per FP32 operation", "estimate: FPGA DSP-based FP32 add")
    static_power = Power("5W", "logic power while on", "estimate: mid-range FPGA fabric")

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.busyTicks = self.scalar("busyTicks", "ticks the FP32 lanes were busy", "Tick")
        self.flops = self.scalar("flops", "floating-point operations", "Count", served=True)
        self.rowsCopied = self.scalar("rowsCopied", "rows copied to the embedding log", "Count")
        self.mlpBytesExpected = self.scalar(
            "mlpBytesExpected", "MLP size counter: bytes the MLP log needs", "Byte"
        )
        self.mlpBytesReceived = self.scalar(
            "mlpBytesReceived", "MLP size counter: bytes written to the MLP log", "Byte"
        )
        self.dynamicEnergy = self.scalar("dynamicEnergy", "arithmetic energy", "Joule", served=True)
        self.gatedSegments = self.scalar(
            "gatedSegments",
            "gather segments that waited for a draining line read before them (in-order pipeline)",
            "Count",
        )

    def window(self, row_bytes: int) -> int:
        """Rows in flight: request tags, and rows the scratchpad can hold."""
        return max(min(self.outstanding, self.scratchpad // row_bytes), 1)

    def lookup(
        self,
        pmem: MemoryDevice,
        addresses: np.ndarray,
        row_bytes: int,
        distinct: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> Stage | Iterator[Stage]:
        """Gather rows and sum-reduce them into bags (one add per element); ``distinct``:
        the rows' distinct addresses and lookups of each, where known (MemoryDevice.read).
        Reads of lines still draining hold their slots of the in-order pipeline
        (components/compute/gather.py): the reads behind them issue as those drain."""
        window = self.window(row_bytes)
        read = pmem.read(addresses, row_bytes, window, distinct=distinct)
        flops = len(addresses) * row_bytes // 4
        self._book(flops)
        waits = pmem.pending_keys(addresses, row_bytes) if read.gates else []
        starts, keys = in_order_segments([wait for _, wait in waits], window)
        if starts.size == 1:
            return stage(read, compute=self._lanes(flops))
        streams = [stream for stream, _ in waits]
        gates = [
            [streams[s].drained(float(key)) for s, key in enumerate(keys[:, j]) if key > 0]
            for j in range(1, starts.size)
        ]
        self.gatedSegments += starts.size - 1
        whole = alone_ticks(stage(read, compute=self._lanes(flops)))
        return self._segments(split_stream(read, addresses, starts), flops, gates, whole)

    def _segments(
        self, parts: list[MemStream], flops: float, gates: list[list], whole: int
    ) -> Iterator[Stage]:
        """The gather's segments in turn: each computes its share of the additions, and
        the next issues once the drain positions it waits for have drained. Alone (no
        line draining) the gather is one stream: ``whole`` ticks, said by the first."""
        count = sum(part.requests for part in parts)
        for j, part in enumerate(parts):
            piece = stage(part, compute=self._lanes(flops * part.requests / count))
            piece.alone = whole if j == 0 else 0
            if j + 1 < len(parts):
                piece.gates = piece.gates + gates[j]
            yield piece

    def update(self, pmem: MemoryDevice, addresses: np.ndarray, row_bytes: int) -> Stage:
        """Scatter update in place: read, w -= lr * g (2 flops/element), write back; the
        reads and writes share the controllers' media as they stream."""
        window = self.window(row_bytes)
        read = pmem.read(addresses, row_bytes, window)
        write = pmem.write(addresses, row_bytes, window)
        return stage(read, write, compute=self._compute(2 * len(addresses) * row_bytes // 4))

    def update_correcting(
        self, pmem: MemoryDevice, addresses: np.ndarray, row_bytes: int, corrections: int
    ) -> Stage:
        """The update, also adding each row's delta (-lr * g, which the update computes
        anyway) into the held bags of the next batch that looked the row up:
        ``corrections`` such lookups, one add per element each. The additions share the
        lanes with the update's as they stream; no delta leaves the engine."""
        window = self.window(row_bytes)
        read = pmem.read(addresses, row_bytes, window)
        write = pmem.write(addresses, row_bytes, window)
        flops = (2 * len(addresses) + corrections) * (row_bytes // 4)
        return stage(read, write, compute=self._compute(flops))

    def update_with_deltas(
        self, pmem: MemoryDevice, addresses: np.ndarray, row_bytes: int, deltas: np.ndarray
    ) -> Stage:
        """The update, also keeping each row's delta at ``deltas`` (the relaxed lookup of
        the next batch reads them back and adds them into its bags)."""
        window = self.window(row_bytes)
        read = pmem.read(addresses, row_bytes, window)
        write = pmem.write(np.concatenate([addresses, deltas]), row_bytes, window)
        return stage(read, write, compute=self._compute(2 * len(addresses) * row_bytes // 4))

    def copy_rows(
        self,
        pmem: MemoryDevice,
        sources: np.ndarray,
        row_bytes: int,
        entries: np.ndarray,
        entry_bytes: int,
        header: int,
    ) -> Stage:
        """DMA rows into log entries (row id + values at ``entries``), streamed, and the
        record's header (with the entries' CRC) at ``header``."""
        read = pmem.read(sources, row_bytes, self.window(row_bytes))
        write = pmem.write(entries, entry_bytes, self.window(entry_bytes))
        self.rowsCopied += len(sources)
        return stage(read, concurrent(write, self._header(pmem, header)))

    def write_log(
        self,
        pmem: MemoryDevice,
        start: int,
        nbytes: int,
        header: int | None,
        along: Stage | None = None,
    ) -> Stage:
        """Write bytes [start, start + nbytes) arriving ``along`` a transfer to a log in DMA
        bursts of ``log_burst`` bytes (and the record's header when it is complete)."""
        burst = self.log_burst
        write = write_range(pmem, start, nbytes, burst, self.window(burst))
        if header is not None:
            write = concurrent(write, self._header(pmem, header))
        return stage(write, along=along)

    @staticmethod
    def _header(pmem: MemoryDevice, address: int):
        return pmem.write(np.array([address], dtype=np.int64), RECORD_HEADER)

    def start_mlp_log(self, nbytes: int) -> None:
        """Arm the MLP size counter with the MMIO-programmed parameter size."""
        self.mlpBytesExpected.set(nbytes)
        self.mlpBytesReceived.set(0)

    def count_mlp(self, nbytes: int) -> None:
        """The counter of MLP bytes written to the log."""
        self.mlpBytesReceived += nbytes

    @property
    def mlp_log_complete(self) -> bool:
        return self.mlpBytesReceived.value >= self.mlpBytesExpected.value

    def _compute(self, flops: float) -> dict[str, float]:
        """The lanes' work for ``flops`` FP32 operations, booked (with its energy)."""
        self._book(flops)
        return self._lanes(flops)

    def _book(self, flops: float) -> None:
        self.flops += flops
        self.dynamicEnergy += flops * self.flop_energy

    def _lanes(self, flops: float) -> dict[str, float]:
        """The lanes' ticks for ``flops`` FP32 operations."""
        return {self.path: flops * TICKS_PER_SECOND / (self.lanes * self.clock)}

    def absorb_use(self, use, units) -> None:
        self.busyTicks.set(use[self.path].busy if self.path in use else 0)
