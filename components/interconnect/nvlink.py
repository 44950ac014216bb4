"""A GPU's NVLink port: the direct GPU-to-GPU link a data-parallel all-reduce may take
instead of the CXL fabric (``board.allreduce_link=nvlink``)."""

from __future__ import annotations

from components.interconnect.link import SerialLink
from components.sim.params import Float, Int, Latency, MemorySize


class NvLink(SerialLink):
    """The RTX 3090's NVLink bridge port: 4 NVLink 3 links of 4 signal pairs each way,
    112.5 GB/s both ways together (56.25 GB/s a direction). Its packets are variable:
    a 16 B header flit per up-to-256 B of data (Foley & Danskin, IEEE Micro 2017)."""

    PADDED_FLITS = False

    lanes = Int(
        16, "signal pairs per direction", "NVLink 3: 4 links x 4 pairs (RTX 3090 bridge)", low=1
    )
    lane_rate = Float(
        28.125,
        "signalling rate per pair",
        "NVIDIA RTX 3090 spec: 112.5 GB/s bidirectional over 16 pairs a direction",
        low=0.001,
        unit="GT/s",
    )
    encoding_efficiency = Float(
        1.0,
        "line-code efficiency",
        "assumption: the spec's 112.5 GB/s is the data rate (no line code to remove)",
        check=lambda v: None if 0 < v <= 1 else "must be in (0, 1]",
    )
    flit_bytes = MemorySize(
        "272B",
        "largest packet: 16 B header flit + 256 B of data",
        "Foley & Danskin, Ultra-performance Pascal GPU and NVLink interconnect, IEEE Micro 2017",
    )
    flit_overhead_bytes = MemorySize("16B", "header flit of a packet", "ibid.")
    propagation_latency = Latency(
        "350ns",
        "one-way latency of one port (a GPU-to-GPU write crosses two, through the switch)",
        "assumption: Li et al., Evaluating Modern GPU Interconnect (TPDS 2020) measure "
        "~1-2 us GPU-GPU round trips over NVLink: ~0.7 us one way, half a port",
    )
