"""A CXL memory expander: DRAM behind a CXL memory controller (a CXL Type-3 device).

Why a device of its own: the paper's systems put their memory behind a CXL link, and
genuine CXL memory devices, with published measurements, are what that link model can
be checked against. Sun et al. (MICRO'23) and the vendors' figures show three mechanisms
that a host DRAM channel lacks, and this module adds exactly those on top of the DRAM
media model (``Dram``):

- **the link**: a CXL.mem read sends an M2S Req down and gets an S2M DRS (header + 64 B)
  back up; a write sends an M2S RwD (header + 64 B) down and gets an S2M NDR back. Each
  direction of the link (lanes x 32 GT/s x 128b/130b, 68 B flits of 64 B payload) is a
  resource of its own, so reads fill one direction and writes the other
  (components/interconnect/cxl.py, the paper's link model, used as it is);
- **the controller**: its added latency on every request, and its throughput limit: its
  read path and its write path each move at most ``controller_read_bandwidth`` /
  ``controller_write_bandwidth`` of 64 B lines (an early ASIC's or an FPGA soft IP's
  pipeline, not the DRAM, bounds what Sun et al. measured);
- **the media**: the DRAM channels behind the controller (rows, ranks, refresh), the
  ``Dram`` model with DDR5-4800 parameters (``ddr5_4800``).

A stream's needs are the media's plus the link directions' serialization plus the
controller paths' time; its latency is the media's plus the controller's plus the link's
round trip; the requester's window spans all of it. The flow network decides how long
the stream takes next to everything else (docs/architecture.md): nothing here advances
time. ``remote_ddr5`` is the baseline Sun et al. compare against (DDR5-R: the same
media on the other socket, one inter-socket hop away, no CXL path).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from components.interconnect.cxl import HEADER_BITS, LINE_BYTES, CxlLink, CxlPath
from components.memory.dram import Dram
from components.memory.stages import MemStream, add_needs, with_needs
from components.sim.params import Bandwidth, ConfigError, Latency
from components.sim.simobject import SimObject
from components.sim.units import TICKS_PER_SECOND

_JESD79_5 = "JEDEC JESD79-5 (DDR5)"
DDR5_4800: dict[str, Any] = {
    # one DDR5 DIMM channel = two independent 32-bit subchannels (JESD79-5), each a
    # controller here: a 64 B burst (BL16 x 32 bit) at 4800 MT/s x 4 B = 19.2 GB/s
    "controllers": 2,
    "ctrl_read_bandwidth": "19.2GB/s",
    "ctrl_write_bandwidth": "19.2GB/s",
    "ranks": 2,  # assumption: a dual-rank RDIMM (64 GB RDIMMs of 16 Gb x4 devices are 2R)
    "banks": 32,  # 8 bank groups x 4 banks (JESD79-5, 16 Gb)
    "row_buffer": "4KiB",  # assumption: 1 KiB page x 4 x8 devices on a 32-bit subchannel
    "rank_switch": "0.833ns",  # assumption: 2 tCK at 2400 MHz, as DDR4's tCS is 2 tCK
    "activation_window": "13.33ns",  # tFAW 32 nCK at 4800 MT/s (JESD79-5, 1 KiB page)
    "row_cycle": "48.64ns",  # tRAS 32 ns + tRP 16.64 ns (JESD79-5, DDR5-4800B)
    "refresh_cycle": "295ns",  # tRFC1, 16 Gb (JESD79-5)
    "refresh_interval": "3.9us",  # tREFI (JESD79-5, normal temperature)
}
"""One DDR5-4800 channel (38.4 GB/s) as ``Dram`` parameters; sources in
docs/parameters.md, 'CXL memory expander'."""

INTER_SOCKET_HOP = "60ns"
"""Added idle latency of a load served by the other socket's memory: assumption (the
local-to-remote difference Intel MLC reports on two-socket Xeons is ~50-70 ns); it makes
``remote_ddr5`` the DDR5-R of Sun et al., whose absolute latencies we do not use."""


def ddr5_4800(channels: int = 1, **overrides: Any) -> Dram:
    """``channels`` DDR5-4800 channels as the ``Dram`` media model (2 subchannels each)."""
    params = {**DDR5_4800, "controllers": 2 * channels}
    return Dram(**{**params, **overrides})


def remote_ddr5(**overrides: Any) -> Dram:
    """DDR5-R: one DDR5-4800 channel on the other socket (``INTER_SOCKET_HOP`` added to
    the local idle latency); ``controllers`` counts subchannels."""
    base = Dram.read_latency.default
    hop = f"{_ns(base) + _ns(INTER_SOCKET_HOP):g}ns"
    return ddr5_4800(1, **{"read_latency": hop, "write_latency": hop, **overrides})


def _ns(text: str) -> float:
    return float(text.removesuffix("ns"))


def _header_bytes(message: str) -> int:
    return math.ceil(HEADER_BITS[message] / 8)


# what one 64 B line puts on the link: (out, back) payload bytes, CXL 2.0 spec §4.2
READ_LINE = (_header_bytes("M2S Req"), _header_bytes("S2M DRS") + LINE_BYTES)
WRITE_LINE = (_header_bytes("M2S RwD") + LINE_BYTES, _header_bytes("S2M NDR"))


class CxlMemoryExpander(SimObject):
    """DRAM (child ``media``) behind a CXL controller and its link (child ``link``)."""

    controller_latency = Latency(
        "40ns",
        "latency the expander's CXL controller adds to every request (both ways together)",
        "assumption: not published for the devices modelled; industry breakdowns put an "
        "endpoint controller at 30-50 ns (secondary); checked only through the idle "
        "latencies (Melody's 140-410 ns, Sun et al.'s CXL-A / DDR5-R 1.35)",
    )
    controller_read_bandwidth = Bandwidth(
        "64GB/s",
        "lines/s x 64 B the controller's read path serves (its throughput limit)",
        "default: not below a x16 link's 63 GB/s per direction (no limit of its own); "
        "presets set their own",
    )
    controller_write_bandwidth = Bandwidth(
        "64GB/s",
        "lines/s x 64 B the controller's write path serves",
        "as controller_read_bandwidth",
    )

    PRESETS: dict[str, dict[str, Any]] = {
        # Sun et al. MICRO'23 CXL-A: hard-IP ASIC, one DDR5-4800 channel; x16 assumed
        # (x8 would give the same all-read bound: the controller binds first)
        "asic": {
            "lanes": 16,
            "channels": 1,
            "controller_read_bandwidth": "17.664GB/s",
            "controller_write_bandwidth": "17.664GB/s",
        },  # fmt: skip
        # Micron CZ120: PCIe 5.0 x8, Microchip SMC 2000 (two DDR channels), DDR5-4800
        "cz120": {"lanes": 8, "channels": 2},
        # Samsung CMM-D: PCIe 5.0 x8, DDR5; two channels assumed as for the CZ120
        "cmm-d": {"lanes": 8, "channels": 2},
    }
    """Each preset: the link's lanes, the media's DDR5-4800 channels, and the controller
    throughput where it is calibrated (CXL-A: 46% of 38.4 GB/s, Sun et al.'s all-read
    efficiency; docs/calibration.md, 'CXL memory expander')."""

    def __init__(
        self, media: Dram | None = None, link: CxlLink | None = None, **overrides: Any
    ) -> None:
        super().__init__(**overrides)
        self.media = media if media is not None else ddr5_4800(1)
        self.link = link if link is not None else CxlLink()
        self.linesRead = self.scalar("linesRead", "64 B lines read over CXL.mem", "Count")
        self.linesWritten = self.scalar("linesWritten", "64 B lines written over CXL.mem", "Count")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> CxlMemoryExpander:
        """A device family by name (``PRESETS``); ``controllers`` (DDR5 subchannels) goes
        to the media, the rest to the expander."""
        if name not in cls.PRESETS:
            raise ConfigError(
                f"CxlMemoryExpander: unknown preset {name!r}; one of {sorted(cls.PRESETS)}"
            )
        spec = dict(cls.PRESETS[name])
        media = {k: overrides.pop(k) for k in ("controllers",) if k in overrides}
        lanes, channels = spec.pop("lanes"), spec.pop("channels")
        return cls(ddr5_4800(channels, **media), CxlLink(lanes=lanes), **{**spec, **overrides})

    # ----- what the microbench and boards ask of a memory device -------------------
    @property
    def access_unit(self) -> int:
        return self.media.access_unit

    @property
    def controllers(self) -> int:
        return self.media.controllers

    @property
    def peak_bandwidth(self) -> float:
        """The media's theoretical bandwidth, the denominator of an efficiency."""
        return self.media.read_bandwidth

    def bind(self, event_source) -> None:
        self.media.bind(event_source)

    def resource(self, kind: str) -> str:
        """The controller's read or write path in the flow network."""
        return f"{self.path}.controller.{kind}"

    @property
    def cxl_path(self) -> CxlPath:
        return CxlPath([(self.link, "down")])

    @property
    def idle_read_latency(self) -> int:
        """A lone read: the media, the controller and the link's round trip."""
        return self.media.read_latency + self._added(READ_LINE)

    @property
    def idle_write_latency(self) -> int:
        """A lone write, until its completion (NDR) reaches the host."""
        return self.media.write_latency + self._added(WRITE_LINE)

    def _added(self, line: tuple[int, int]) -> int:
        return self.controller_latency + self.cxl_path.round_trip_ticks(*line)

    # ----- streams ---------------------------------------------------------------
    def read(
        self,
        addresses: np.ndarray,
        size: int,
        outstanding: int | None = None,
        *,
        distinct: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> MemStream:
        """Reads of ``size`` bytes each: the media's stream (its own window left open:
        the requester's spans the whole path) with the link and controller added."""
        media = self.media.read(addresses, size, None, distinct=distinct)
        return self._over_cxl(media, "read", size, outstanding)

    def write(self, addresses: np.ndarray, size: int, outstanding: int | None = None) -> MemStream:
        """Writes, done for the requester when their completions arrive; what the
        media's write queue holds then drains afterwards (the media's own flow)."""
        media = self.media.write(addresses, size, None)
        return self._over_cxl(media, "write", size, outstanding)

    def _over_cxl(
        self, media: MemStream, kind: str, size: int, outstanding: int | None
    ) -> MemStream:
        if not media.requests:
            return media
        if outstanding is not None and outstanding < 1:
            raise ValueError(f"{self.path}: outstanding must be >= 1, got {outstanding}")
        lines = media.requests * -(-size // LINE_BYTES)
        line = READ_LINE if kind == "read" else WRITE_LINE
        path = self.cxl_path
        out, back = lines * line[0], lines * line[1]
        path.record(out)
        path.record(back, forward=False)
        rate = self.controller_read_bandwidth if kind == "read" else self.controller_write_bandwidth
        added = add_needs(
            [
                path.needs(out, back),
                {self.resource(kind): lines * LINE_BYTES * TICKS_PER_SECOND / rate},
            ]
        )
        if kind == "read":
            self.linesRead += lines
        else:
            self.linesWritten += lines
        full = self.idle_read_latency if kind == "read" else self.idle_write_latency
        window = (media.requests - 1) * full / outstanding if outstanding else 0.0
        return with_needs(
            media,
            added,
            min_ticks=max(media.min_ticks, window),
            latency=media.latency + self._added(line),
        )
