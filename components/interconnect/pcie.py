"""PCIe Gen3 x16 and the CUDA software data path that the baselines pay for.

The PCIe link reuses SerialLink with TLPs in place of flits: a TLP carries up to the
max payload size plus a fixed framing/header/CRC overhead, and a short last TLP is not
padded. ``CudaRuntime`` adds what software costs on top of the wire: the fixed cost of a
cudaMemcpy call, the host staging copy of pageable memory, and cudaStreamSynchronize.
"""

from __future__ import annotations

from typing import Any

from components.interconnect.link import SerialLink
from components.sim.flows import Flow
from components.sim.params import Bandwidth, Float, Latency, MemorySize
from components.sim.schedule import Stage
from components.sim.simobject import SimObject
from components.sim.units import transfer_ticks


class PcieLink(SerialLink):
    """PCIe 3.0 x16 (8 GT/s, 128b/130b) with 256 B max payload TLPs."""

    PADDED_FLITS = False

    lane_rate = Float(
        8.0, "raw signalling rate per lane", "PCIe 3.0 base spec: 8 GT/s", low=0.001, unit="GT/s"
    )
    flit_bytes = MemorySize(
        "280B",
        "largest TLP on the wire: 256 B max payload + 24 B overhead",
        "PCIe 3.0 base spec §2.2 (MPS 256 B, common for host bridges)",
    )
    flit_overhead_bytes = MemorySize(
        "24B",
        "per-TLP overhead: 4 B STP token (incl. sequence no.), 16 B 4DW header, 4 B LCRC",
        "PCIe 3.0 base spec §4.2.2.3 (framing tokens), §2.2.1 (header), §3.5.2 (LCRC)",
    )
    propagation_latency = Latency(
        "250ns",
        "one-way latency of a small TLP through root complex, link and endpoint",
        "Neugebauer et al. SIGCOMM'18: ~500 ns round trip for a small DMA read on Gen3",
    )


class CudaRuntime(SimObject):
    """Host-side CUDA costs of explicit copies (the PCIe/SSD/PMEM baselines)."""

    memcpy_overhead = Latency(
        "10us",
        "fixed cost of one synchronous cudaMemcpy (driver call, DMA setup, completion)",
        "Univ. of Virginia CUDA notes: ~10 us constant below 8 KB (GTX 280); Wu et al. "
        "2026 (DualPath): 5-7 us per cudaMemcpyAsync submission",
    )
    sync_overhead = Latency(
        "5us",
        "cudaStreamSynchronize after the work is done: completion signal to host wake-up",
        "assumption: one driver round trip, the order of a kernel launch (~5 us)",
    )
    staging_bandwidth = Bandwidth(
        "10GB/s",
        "host memcpy rate into the pinned staging buffer for pageable memory",
        "assumption: one-thread memcpy on dual-channel DDR4 (paper's i5-9600K host); "
        "NVIDIA blog 'How to Optimize Data Transfers in CUDA C/C++' on pageable staging",
    )
    dma_efficiency = Float(
        0.9,
        "fraction of the link's TLP payload rate a copy engine sustains (DLLPs, read rounds)",
        "assumption: gives ~13 GB/s pinned on Gen3 x16, as bandwidthTest commonly reports",
        low=0.01,
        high=1.0,
    )

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.memcpyCalls = self.scalar("memcpyCalls", "cudaMemcpy calls", "Count")
        self.memcpyBytes = self.scalar("memcpyBytes", "bytes copied by cudaMemcpy", "Byte")
        self.syncCalls = self.scalar("syncCalls", "cudaStreamSynchronize calls", "Count")
        self.overheadTicks = self.scalar(
            "overheadTicks", "software overhead (call, staging, sync) beyond the wire", "Tick"
        )

    def memcpy(
        self, link: SerialLink, nbytes: int, direction: str = "down", *, pinned: bool = True
    ) -> Stage:
        """A synchronous cudaMemcpy of nbytes over link: the copy engine's share of the
        wire (a flow on that direction), the call's fixed cost and the propagation;
        pageable memory adds a (non-overlapped) host staging copy."""
        software = self.memcpy_overhead
        if not pinned:
            software += transfer_ticks(nbytes, self.staging_bandwidth)
        link.record(nbytes, direction)
        self.memcpyCalls += 1
        self.memcpyBytes += nbytes
        self.overheadTicks += software
        wire = link.serialization_ticks(nbytes) / self.dma_efficiency
        return Stage([Flow({link.resource(direction): wire})], software + link.propagation_latency)

    def sync(self) -> int:
        """cudaStreamSynchronize once the stream's work has finished (ticks)."""
        self.syncCalls += 1
        self.overheadTicks += self.sync_overhead
        return self.sync_overhead
