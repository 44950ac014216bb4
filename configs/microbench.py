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

from workloads.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("microbench.py")

import numpy as np  # noqa: E402

from components.interconnect.cxl import CxlLink  # noqa: E402
from components.memory import Dram, MemoryDevice, Pmem, Ssd  # noqa: E402
from components.sim.outputs import replacing_dir  # noqa: E402
from components.sim.params import ConfigError  # noqa: E402
from components.sim.stats import format_rows  # noqa: E402
from components.sim.units import TICKS_PER_NS, TICKS_PER_SECOND, UnitError, parse_size  # noqa: E402
from workloads.cli import QuietParser, UsageError, run_main  # noqa: E402
from workloads.options import MAX_SEED  # noqa: E402
from workloads.preflight import INTERPRETER_BYTES, available_memory, check_outdir, format_bytes  # noqa: E402

PROG = "microbench.py"
DEVICES = {"dram": Dram, "pmem": Pmem, "ssd": Ssd, "cxl-pmem": Pmem}
LATENCY_SAMPLES = 8
GAP = TICKS_PER_SECOND  # between ops, so every op finds the device idle and drained
OUTPUTS = ("results.json", "stats.txt")
BYTES_PER_LINE = 256
"""Peak memory per line access of the stream (the device's per-line int64 arrays and
their sort copies): measured ~140 B (PMEM writes, 10^6 requests of 4 KiB: 2.6 GB
peak, 1.8e7 lines), rounded up."""


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return value


def _count(flag: str, text: str, low: int = 1, high: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{flag} expects an integer, got {text!r}") from None
    if value < low or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"in {low}..{high}"
        raise UsageError(f"{flag} must be {bounds}, got {text!r}")
    return value


def _size(flag: str, text: str) -> int:
    try:
        value = parse_size(text)
    except UnitError as exc:
        raise UsageError(f"{flag} {text!r}: {exc}") from None
    if value < 1:
        raise UsageError(f"{flag} must be at least 1 byte, got {text!r}")
    return value


def check_args(args: argparse.Namespace) -> None:
    """Every value before any work: the measurement code trusts them."""
    size, span = _size("--size", args.size), _size("--span", args.span)
    if span < size:
        raise UsageError(f"--span {args.span!r} is smaller than one request (--size {args.size})")
    _count("--outstanding", args.outstanding)
    requests = _count("--requests", args.requests)
    _count("--seed", args.seed, 1, MAX_SEED)
    overrides = {"controllers": args.controllers} if args.controllers is not None else {}
    try:
        device = DEVICES[args.device](**overrides)
    except ConfigError as exc:
        raise UsageError(f"--controllers {args.controllers}: {exc}") from None
    check_outdir(args.outdir)
    lines = requests * (size // device.access_unit + 2)
    need = INTERPRETER_BYTES + BYTES_PER_LINE * lines
    room = available_memory()
    if room is not None and need > room:
        raise UsageError(
            f"--requests {args.requests} of --size {args.size} would need ~{format_bytes(need)}"
            f" ({lines} line accesses), more than the {format_bytes(room)} available"
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = QuietParser(prog=PROG, description=__doc__.splitlines()[0])
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
    args = p.parse_args(argv)
    check_args(args)
    return args


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
    with replacing_dir(Path(args.outdir), OUTPUTS) as staging:
        (staging / "results.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        (staging / "stats.txt").write_text(format_rows(device.stat_rows()))
    return result


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        result = run(parse_args(argv))
        print(
            f"latency {result['latency_ns']:.1f} ns, bandwidth {result['bandwidth_gbps']:.3f} GB/s"
        )
        return 0

    return run_main(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
