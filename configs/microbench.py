"""Memory microbenchmark: a device's idle latency and saturated bandwidth.

    python configs/microbench.py --device pmem --op read --pattern rand --size 256 --outdir out

Latency is the mean of single, unloaded requests; bandwidth is requested bytes over
the time of one stream of ``--requests`` requests with ``--outstanding`` in flight.
``cxl-pmem`` is the PMEM behind a direct CXL link (adds the link's round trip).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

try:
    import components  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from components.interconnect.cxl import CxlLink
from components.memory import Dram, MemoryDevice, Pmem, Ssd
from components.sim.params import ConfigError
from components.sim.stats import format_rows
from components.sim.units import TICKS_PER_NS, TICKS_PER_SECOND, UnitError, parse_size

DEVICES = {"dram": Dram, "pmem": Pmem, "ssd": Ssd, "cxl-pmem": Pmem}
LATENCY_SAMPLES = 8
GAP = TICKS_PER_SECOND  # between ops, so every op finds the device idle and drained


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise ConfigError(message)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(description=__doc__.splitlines()[0])
    p.add_argument("--device", required=True, choices=sorted(DEVICES))
    p.add_argument("--op", required=True, choices=("read", "write"))
    p.add_argument("--pattern", default="rand", choices=("seq", "rand"))
    p.add_argument("--size", default="64B", help="bytes per request (e.g. 128, 4KiB)")
    p.add_argument("--outstanding", default="1024", help="requests in flight")
    p.add_argument("--requests", default="100000", help="requests in the bandwidth stream")
    p.add_argument("--controllers", default=None, help="override the device's controllers")
    p.add_argument("--span", default="1GiB", help="address range of random requests")
    p.add_argument("--seed", default="1")
    p.add_argument("--outdir", required=True)
    return p.parse_args(argv)


def addresses(pattern: str, count: int, size: int, span: int, rng: np.random.Generator):
    if pattern == "seq":
        return np.arange(count, dtype=np.int64) * size
    return rng.integers(0, max(span // size, 1), count, dtype=np.int64) * size


def measure(device: MemoryDevice, args: argparse.Namespace, hop_ticks: int) -> dict:
    """Idle latency (ns) and saturated bandwidth (GB/s) of one op kind."""
    size, span = parse_size(args.size), parse_size(args.span)
    outstanding, requests = _positive_int(args.outstanding), _positive_int(args.requests)
    rng = np.random.default_rng(_positive_int(args.seed))
    op = device.read if args.op == "read" else device.write
    samples = addresses(args.pattern, LATENCY_SAMPLES, size, span, rng)
    latencies = [op(samples[i : i + 1], size, (i + 1) * GAP).ticks for i in range(samples.size)]
    latency = float(np.mean(latencies)) + hop_ticks
    stream = op(addresses(args.pattern, requests, size, span, rng), size, (samples.size + 1) * GAP)
    device_latency = device.idle_read_latency if args.op == "read" else device.idle_write_latency
    # the requester's window now has to cover the link's round trip as well
    window = (
        device_latency + hop_ticks + (requests - 1) * (device_latency + hop_ticks) / outstanding
    )
    ticks = max(stream.ticks + hop_ticks, math.ceil(window))
    return {
        "device": args.device,
        "op": args.op,
        "pattern": args.pattern,
        "size": size,
        "outstanding": outstanding,
        "requests": requests,
        "latency_ns": latency / TICKS_PER_NS,
        "bandwidth_gbps": requests * size / (ticks / TICKS_PER_SECOND) / 1e9,
        "media_bytes": stream.media_bytes,
        "media_amplification": stream.media_bytes / (requests * size),
        "raw_stall_ticks": stream.raw_stall_ticks,
    }


def run(args: argparse.Namespace) -> dict:
    overrides = {"controllers": args.controllers} if args.controllers else {}
    device = DEVICES[args.device](**overrides)
    hop = 2 * CxlLink().propagation_latency if args.device == "cxl-pmem" else 0
    result = measure(device, args, hop)
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (out / "stats.txt").write_text(format_rows(device.stat_rows()))
    return result


def main(argv: list[str] | None = None) -> int:
    try:
        result = run(parse_args(argv))
    except (ConfigError, UnitError, ValueError) as exc:
        print(f"microbench: error: {exc}", file=sys.stderr)
        return 2
    print(f"latency {result['latency_ns']:.1f} ns, bandwidth {result['bandwidth_gbps']:.3f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
