"""Memory microbenchmark: idle latency, bandwidth and loaded latency of concurrent streams.

    python configs/microbench.py --device pmem --op read --pattern rand --size 256 --outdir out
    python configs/microbench.py --device pmem --read-fraction 0.7 --size 256 --outdir out
    python configs/microbench.py --device pmem --stream read:rand:256:64 \\
        --stream write:seq:4KiB:16 --outdir out
    python configs/microbench.py --device pmem --op read --load-sweep --outdir out

Each stream is ``--requests`` requests of one kind with ``--outstanding`` in flight (its
own window); all streams start together and share the device through the timing core's
flow network, as the threads of an Optane characterization run do. Per stream: its
bandwidth (bytes over the time it took) and its loaded latency (Little's law: requests
in flight over request throughput, at least the idle latency). ``--read-fraction F``
runs a read and a write stream whose bytes split F : 1-F. ``--load-sweep`` repeats the
run for 1, 2, 4, ... requests in flight and plots loaded latency against bandwidth
(loaded_latency.png). ``cxl-pmem`` is the PMEM behind a direct CXL link (CXL.mem
requests and responses cross it).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

try:
    import components  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from components.interconnect.cxl import CxlLink, CxlPath, mem_read, mem_write
from components.memory import Dram, MemoryDevice, Pmem, Ssd
from components.memory.base import stage
from components.sim.engine import Engine
from components.sim.params import ConfigError
from components.sim.schedule import Scheduler
from components.sim.simobject import SimObject
from components.sim.stats import format_rows
from components.sim.units import TICKS_PER_NS, TICKS_PER_SECOND, UnitError, parse_size

DEVICES = {"dram": Dram, "pmem": Pmem, "ssd": Ssd, "cxl-pmem": Pmem}
SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise ConfigError(message)


def _positive_int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{what}: expected a positive integer, got {text!r}") from None
    if value < 1:
        raise ConfigError(f"{what}: expected a positive integer, got {text!r}")
    return value


@dataclass(frozen=True)
class StreamSpec:
    op: str
    pattern: str
    size: int
    outstanding: int
    requests: int

    @classmethod
    def parse(cls, text: str, defaults: argparse.Namespace) -> StreamSpec:
        """``OP[:PATTERN[:SIZE[:OUTSTANDING[:REQUESTS]]]]``, gaps from the defaults."""
        parts = text.split(":")
        if not 1 <= len(parts) <= 5 or parts[0] not in ("read", "write"):
            raise ConfigError(f"--stream {text!r}: expected read|write[:seq|rand[:SIZE[:N[:R]]]]")
        fields = parts + [None] * (5 - len(parts))
        pattern = fields[1] or defaults.pattern
        if pattern not in ("seq", "rand"):
            raise ConfigError(f"--stream {text!r}: pattern must be seq or rand")
        return cls(
            parts[0],
            pattern,
            _size(fields[2] or defaults.size, "--stream size"),
            _positive_int(fields[3] or defaults.outstanding, "--stream outstanding"),
            _positive_int(fields[4] or defaults.requests, "--stream requests"),
        )


def _size(text: str, what: str) -> int:
    size = parse_size(text)
    if size < 1:
        raise ConfigError(f"{what}: must be at least 1 B, got {text!r}")
    return size


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(description=__doc__.splitlines()[0])
    p.add_argument("--device", required=True, choices=sorted(DEVICES))
    p.add_argument("--op", choices=("read", "write"), help="one stream of this kind")
    p.add_argument("--stream", action="append", default=[], help="a concurrent stream")
    p.add_argument("--read-fraction", type=float, help="a read and a write stream, by bytes")
    p.add_argument("--pattern", default="rand", choices=("seq", "rand"))
    p.add_argument("--size", default="64B", help="bytes per request (e.g. 128, 4KiB)")
    p.add_argument("--outstanding", default="1024", help="requests in flight per stream")
    p.add_argument("--requests", default="100000", help="requests per stream")
    p.add_argument("--controllers", default=None, help="override the device's controllers")
    p.add_argument(
        "--optane",
        action="store_true",
        help="PMEM with measured Optane DC per-DIMM figures (Pmem.optane) instead of Table 2's",
    )
    p.add_argument("--span", default="1GiB", help="address range of each stream")
    p.add_argument("--seed", default="1")
    p.add_argument("--load-sweep", action="store_true", help="latency vs load, 1..1024 in flight")
    p.add_argument("--outdir", required=True)
    return p.parse_args(argv)


def streams_of(args: argparse.Namespace) -> list[StreamSpec]:
    chosen = sum(bool(x) for x in (args.op, args.stream, args.read_fraction is not None))
    if chosen != 1:
        raise ConfigError("give exactly one of --op, --stream (repeatable) or --read-fraction")
    if args.op:
        return [StreamSpec.parse(args.op, args)]
    if args.stream:
        return [StreamSpec.parse(text, args) for text in args.stream]
    fraction = args.read_fraction
    if not 0 < fraction < 1:
        raise ConfigError(f"--read-fraction: must be in (0, 1), got {fraction}")
    total = _positive_int(args.requests, "--requests")
    reads = max(round(total * fraction), 1)
    base = StreamSpec.parse("read", args)
    return [
        StreamSpec("read", base.pattern, base.size, base.outstanding, reads),
        StreamSpec("write", base.pattern, base.size, base.outstanding, max(total - reads, 1)),
    ]


class Target(SimObject):
    """The device under test, and the CXL link in front of it for ``cxl-pmem``."""

    def __init__(self, device: MemoryDevice, name: str, cxl: bool) -> None:
        super().__init__()
        object.__setattr__(self, "_name", "system")
        setattr(self, name, device)
        object.__setattr__(self, "memory", device)
        if cxl:
            self.link = CxlLink()

    def body(self, spec: StreamSpec, addresses: np.ndarray):
        device = self.memory
        op = device.read if spec.op == "read" else device.write
        if not hasattr(self, "link"):
            return lambda now: stage(op(addresses, spec.size, spec.outstanding))

        def over_cxl(now: int):
            path = CxlPath([(self.link, "down")])
            transfer = mem_read if spec.op == "read" else mem_write
            nbytes = addresses.size * spec.size
            along = transfer(path, nbytes, max_outstanding=spec.outstanding)
            stream = op(addresses, spec.size)
            served = stage(stream, along=along)
            # the requester's window spans the link's round trip and the device
            rtt = along.latency if along.flows else 0
            served.flows[0].min_ticks = (
                (addresses.size - 1) * (rtt + stream.latency) / spec.outstanding
            )
            return served

        return over_cxl


def addresses(spec: StreamSpec, span: int, base: int, rng: np.random.Generator) -> np.ndarray:
    if spec.pattern == "seq":
        return base + np.arange(spec.requests, dtype=np.int64) * spec.size
    return base + rng.integers(0, max(span // spec.size, 1), spec.requests) * spec.size


def measure(args: argparse.Namespace, specs: list[StreamSpec]) -> dict:
    """Run the streams together on a fresh device; the idle latencies alone."""
    span = _size(args.span, "--span")
    seed = _positive_int(args.seed, "--seed")
    overrides = (
        {"controllers": _positive_int(args.controllers, "--controllers")}
        if (args.controllers)
        else {}
    )
    idle = {}
    for op in sorted({s.op for s in specs}):
        single = StreamSpec(op, "seq", specs[0].size, 1, 1)
        (record,), _, _ = _run(args, overrides, [single], span, seed)
        idle[op] = record.end - record.start
    records, scheduler, target = _run(args, overrides, specs, span, seed)
    out = []
    for spec, record in zip(specs, records, strict=True):
        ticks = record.end - record.start
        throughput = spec.requests / ticks  # requests per tick
        in_flight = min(spec.outstanding, spec.requests)
        out.append(
            {
                "op": spec.op,
                "pattern": spec.pattern,
                "size": spec.size,
                "outstanding": spec.outstanding,
                "requests": spec.requests,
                "duration_us": ticks / 1e6,
                "bandwidth_gbps": spec.requests * spec.size / (ticks / TICKS_PER_SECOND) / 1e9,
                "loaded_latency_ns": max(in_flight / throughput, idle[spec.op]) / TICKS_PER_NS,
            }
        )
    end = max(r.end for r in records)
    total = sum(s.requests * s.size for s in specs)
    return {
        "device": args.device,
        "idle_latency_ns": {op: ticks / TICKS_PER_NS for op, ticks in idle.items()},
        "streams": out,
        "total_bandwidth_gbps": total / (end / TICKS_PER_SECOND) / 1e9,
        "latency_ns": idle[specs[0].op] / TICKS_PER_NS,
        "bandwidth_gbps": out[0]["bandwidth_gbps"] if len(out) == 1 else None,
        "stats": target.stat_rows()
        + [
            (f"{key}.utilisation", use.busy / end, "busy ticks per tick", "Ratio")
            for key, use in sorted(scheduler.network.use.items())
        ],
    }


def _run(args, overrides, specs, span, seed):
    if args.optane and DEVICES[args.device] is not Pmem:
        raise ConfigError(f"--optane: applies to pmem and cxl-pmem, not {args.device}")
    device = Pmem.optane(**overrides) if args.optane else DEVICES[args.device](**overrides)
    kind = "pmem" if args.device == "cxl-pmem" else args.device
    target = Target(device, kind, args.device == "cxl-pmem")
    engine = Engine()
    scheduler = Scheduler(engine)
    device.bind(engine.event)
    rng = np.random.default_rng(seed)
    handles = [
        scheduler.op(
            f"stream{i}",
            spec.op,
            0,
            f"requester{i}",
            target.body(spec, addresses(spec, span, i * span, rng)),
        )
        for i, spec in enumerate(specs)
    ]
    engine.run()
    return [h.record for h in handles], scheduler, target


def sweep(args: argparse.Namespace, specs: list[StreamSpec]) -> list[dict]:
    """The same streams with 1, 2, 4, ... requests in flight each."""
    points = []
    for window in SWEEP:
        loaded = [StreamSpec(s.op, s.pattern, s.size, window, s.requests) for s in specs]
        result = measure(args, loaded)
        points.append({"outstanding": window, "streams": result["streams"]})
    return points


def plot_sweep(points: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for i, stream in enumerate(points[0]["streams"]):
        bandwidth = [p["streams"][i]["bandwidth_gbps"] for p in points]
        latency = [p["streams"][i]["loaded_latency_ns"] for p in points]
        ax.plot(bandwidth, latency, marker="o", label=f"{stream['op']} {stream['pattern']}")
    ax.set_xlabel("bandwidth (GB/s)")
    ax.set_ylabel("loaded latency (ns)")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title("loaded latency vs bandwidth, 1..1024 in flight", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> dict:
    specs = streams_of(args)
    result = measure(args, specs)
    out = Path(args.outdir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--outdir {args.outdir!r} is a file")
    out.mkdir(parents=True, exist_ok=True)
    if args.load_sweep:
        result["load_sweep"] = sweep(args, specs)
        plot_sweep(result["load_sweep"], out / "loaded_latency.png")
    stats = result.pop("stats")
    (out / "results.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (out / "stats.txt").write_text(format_rows(stats))
    return result


def main(argv: list[str] | None = None) -> int:
    try:
        result = run(parse_args(argv))
    except (ConfigError, UnitError, ValueError) as exc:
        print(f"microbench: error: {exc}", file=sys.stderr)
        return 2
    for stream in result["streams"]:
        print(
            f"{stream['op']:5s} {stream['pattern']:4s} {stream['size']:6d} B x "
            f"{stream['outstanding']:4d} in flight: {stream['bandwidth_gbps']:.3f} GB/s, "
            f"loaded latency {stream['loaded_latency_ns']:.1f} ns"
        )
    total = result["total_bandwidth_gbps"]
    print(f"idle latency {result['latency_ns']:.1f} ns, total {total:.3f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
