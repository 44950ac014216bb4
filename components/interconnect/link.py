"""A serial point-to-point link: lanes, line encoding, flits, latency and energy.

Both PCIe and CXL move data as fixed-overhead units (TLPs, flits) over lanes with a
line code, so one model covers both: the payload bandwidth is the raw lane rate x
lanes x encoding efficiency x (payload / flit bytes). Latency of a transfer is the
one-way propagation (PHY, link layer, wire) plus serialization of its flits. The link
answers what a transfer needs of each direction (serialization ticks) and its fixed
latency; the flow network decides how long a transfer takes next to the others.
"""

from __future__ import annotations

import math

from components.sim.params import ConfigError, Energy, Float, Int, Latency, MemorySize, Power
from components.sim.simobject import SimObject
from components.sim.units import TICKS_PER_SECOND

DIRECTIONS = ("down", "up")


def _fraction(value: float) -> str | None:
    return None if 0 < value <= 1 else "must be in (0, 1]"


LINK_WIDTHS = (1, 2, 4, 8, 16)


def _link_width(lanes: int) -> str | None:
    """A CXL link trains to one of the widths its spec defines (x16, x8, x4, and x2, x1
    degraded); the PCIe boards' links use the same set."""
    return None if lanes in LINK_WIDTHS else "a PCIe/CXL link is x1, x2, x4, x8 or x16"


class SerialLink(SimObject):
    """One full-duplex link; each direction has the full bandwidth.

    ``down`` is away from the host (host -> device), ``up`` towards it.
    """

    # Whether a partly filled flit still costs a whole flit on the wire (fixed-size
    # flits, as in CXL) or only its bytes plus one flit's overhead (variable TLPs).
    PADDED_FLITS = True

    lanes = Int(
        16,
        "lanes per direction",
        "PCIe/CXL x16 slot; CXL 2.0 Flex Bus widths x16, x8, x4, degraded x2, x1",
        low=1,
        unit="lane",
        check=_link_width,
    )
    lane_rate = Float(
        32.0, "raw signalling rate per lane", "PCIe 5.0 base spec: 32 GT/s", low=0.001, unit="GT/s"
    )
    encoding_efficiency = Float(
        128 / 130,
        "line-code efficiency (data bits / transmitted bits)",
        "PCIe 3.0-5.0 base spec: 128b/130b encoding",
        check=_fraction,
    )
    flit_bytes = MemorySize("68B", "bytes of one flit on the wire", "CXL 2.0 spec §4.2 (68B flit)")
    flit_overhead_bytes = MemorySize(
        "4B", "per-flit bytes that are not payload (header, protocol ID, CRC)", "CXL 2.0 spec §4.2"
    )
    propagation_latency = Latency(
        "40ns", "one-way latency of a flit through both link ends and the wire", "see subclass"
    )
    energy_per_bit = Energy(
        "5pJ",
        "energy per bit on the wire, both link ends together",
        "assumption: PCIe 4/5-era SerDes PHYs are reported at a few pJ/bit per end",
    )
    static_power = Power("0W", "idle PHY power not charged per bit", "assumption: charged per bit")

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        self.bytes = self.vector("bytes", "payload bytes carried", "Byte", DIRECTIONS, served=True)
        self.flits = self.vector("flits", "flits (or TLPs) sent", "Count", DIRECTIONS, served=True)
        self.wireBytes = self.vector(
            "wireBytes", "bytes on the wire incl. overhead", "Byte", DIRECTIONS, served=True
        )
        self.busyTicks = self.vector(
            "busyTicks", "serialization ticks", "Tick", DIRECTIONS, served=True
        )
        self.dynamicEnergy = self.scalar(
            "dynamicEnergy", "energy of bits moved", "Joule", served=True
        )

    # ----- derived, from current parameter values -----------------------------------
    @property
    def flit_payload_bytes(self) -> int:
        payload = self.flit_bytes - self.flit_overhead_bytes
        if payload <= 0:
            raise ConfigError(f"{self.path}.flit_overhead_bytes: must be smaller than flit_bytes")
        return payload

    @property
    def raw_bandwidth(self) -> float:
        """Bytes/s per direction after line encoding, before flit overhead."""
        return self.lanes * self.lane_rate * 1e9 / 8 * self.encoding_efficiency

    @property
    def efficiency(self) -> float:
        """Payload fraction of a full flit."""
        return self.flit_payload_bytes / self.flit_bytes

    @property
    def effective_bandwidth(self) -> float:
        """Payload bytes/s per direction for a long stream of full flits."""
        return self.raw_bandwidth * self.efficiency

    # ----- queries (no side effects) -------------------------------------------------
    def flits_for(self, nbytes: int) -> int:
        return math.ceil(nbytes / self.flit_payload_bytes) if nbytes > 0 else 0

    def wire_bytes(self, nbytes: int) -> int:
        """Bytes on the wire for nbytes of payload."""
        flits = self.flits_for(nbytes)
        if self.PADDED_FLITS:
            return flits * self.flit_bytes
        return nbytes + flits * self.flit_overhead_bytes

    def serialization_ticks(self, nbytes: int) -> int:
        wire = self.wire_bytes(nbytes)
        return math.ceil(wire * TICKS_PER_SECOND / self.raw_bandwidth) if wire else 0

    def transfer_ticks(self, nbytes: int, direction: str = "down") -> int:
        """Ticks from the first bit sent to the last payload byte received."""
        _check_direction(direction)
        return self.propagation_latency + self.serialization_ticks(nbytes)

    def resource(self, direction: str) -> str:
        """Name of one direction of the link in the flow network (and in stats)."""
        _check_direction(direction)
        return f"{self.path}.{direction}"

    # ----- accounting ----------------------------------------------------------------
    def record(self, nbytes: int, direction: str) -> int:
        """Count nbytes of payload sent in direction; returns its serialization ticks."""
        _check_direction(direction)
        index = DIRECTIONS.index(direction)
        wire = self.wire_bytes(nbytes)
        busy = self.serialization_ticks(nbytes)
        for vector, amount in (
            (self.bytes, nbytes),
            (self.flits, self.flits_for(nbytes)),
            (self.wireBytes, wire),
            (self.busyTicks, busy),
        ):
            vector.add_at(index, amount)
        self.dynamicEnergy += wire * 8 * self.energy_per_bit
        return busy


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
