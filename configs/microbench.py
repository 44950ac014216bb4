"""Memory microbenchmark: idle latency, bandwidth and loaded latency of concurrent streams.

    python configs/microbench.py --device pmem --op read --pattern rand --size 256 --outdir out
    python configs/microbench.py --device pmem --read-fraction 0.7 --size 256 --outdir out
    python configs/microbench.py --device pmem --stream read:rand:256:64 \\
        --stream write:seq:4KiB:16 --outdir out
    python configs/microbench.py --device pmem --op read --load-sweep --outdir out
    python configs/microbench.py --device pmem --optane --op write --size 256 --threads 24 \
        --controllers 1 --outdir out

Each stream is ``--requests`` requests of one kind with ``--outstanding`` in flight (its
own window); all streams start together and share the device through the timing core's
flow network, as the threads of an Optane characterization run do. Per stream: its
bandwidth (bytes over the time it took) and its loaded latency (Little's law: requests
in flight over request throughput, at least the idle latency). ``--read-fraction F``
runs a read and a write stream whose bytes split F : 1-F. ``--load-sweep`` repeats the
run for 1, 2, 4, ... requests in flight and plots loaded latency against bandwidth
(loaded_latency.png). ``--threads N`` runs every stream as N requesters, each one thread
of the published Optane studies (LATTester, Yang et al. FAST'20): its own address range,
``--requests`` requests, and as many in flight as a core's fill buffers hold (the PMEM's
``thread_bytes`` over the request size; a request larger than they hold is a share of
one, one request at a time, except behind a CXL link); a writing thread is also bound
by its core's store rate (``THREAD_STORE_BANDWIDTH``). ``cxl-pmem`` is the PMEM behind
a direct CXL link (CXL.mem requests and responses cross it). ``cxl-mem-<preset>`` is a
CXL memory expander (DDR5 behind a CXL controller and its link,
components/memory/cxl_expander.py), ``ddr5-r`` a DDR5-4800 channel on the other socket,
the baseline Sun et al. compare CXL memory with; ``--baseline DEVICE`` runs the same
streams on DEVICE too and reports the idle latency's ratio and the efficiency's gap
(``efficiency``: bandwidth over the media's peak).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

try:
    import components  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulate.run.startup import note_first_compile, quiet_interrupts  # noqa: E402

quiet_interrupts("microbench.py")
note_first_compile("microbench.py")

import numpy as np  # noqa: E402

from components.interconnect.cxl import CxlLink, CxlPath, mem_read, mem_write  # noqa: E402
from components.memory import Dram, MemoryDevice, Pmem, Ssd  # noqa: E402
from components.memory.cxl_expander import CxlMemoryExpander, remote_ddr5  # noqa: E402
from components.memory.stages import MemStream, owned_by, stage, with_needs  # noqa: E402
from components.sim.engine import Engine  # noqa: E402
from components.sim.mpl import check_backend  # noqa: E402
from components.sim.outputs import replacing_dir  # noqa: E402
from components.sim.params import ConfigError  # noqa: E402
from components.sim.schedule import Scheduler, Stage  # noqa: E402
from components.sim.simobject import SimObject  # noqa: E402
from components.sim.stats import format_rows  # noqa: E402
from components.sim.units import TICKS_PER_NS, TICKS_PER_SECOND, UnitError, parse_size  # noqa: E402
from simulate.run.cli import QuietParser, UsageError, run_main  # noqa: E402
from simulate.run.options import MAX_SEED  # noqa: E402
from simulate.run.preflight import (  # noqa: E402
    INTERPRETER_BYTES,
    available_memory,
    check_outdir,
    format_bytes,
)

PROG = "microbench.py"
EXPANDERS = {f"cxl-mem-{name}": name for name in CxlMemoryExpander.PRESETS}
"""CXL memory expanders by device name: ``cxl-mem-<preset>`` (CxlMemoryExpander.PRESETS)."""
DEVICES = {
    "dram": Dram,
    "pmem": Pmem,
    "ssd": Ssd,
    "cxl-pmem": Pmem,
    "ddr5-r": remote_ddr5,
    **{
        device: functools.partial(CxlMemoryExpander.preset, preset)
        for device, preset in EXPANDERS.items()
    },
}
SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
OUTPUTS = ("results.json", "stats.txt", "loaded_latency.png")
BYTES_PER_LINE = {
    "dram": 160,
    "pmem": 64,
    "cxl-pmem": 64,
    "ssd": 64,
    "ddr5-r": 160,
    **dict.fromkeys(EXPANDERS, 160),
}
"""Peak memory per line access of the streams, by device, over the interpreter's: DRAM's
per-line int64 arrays and their sort copies measured ~125 B (10^6 random 4 KiB writes:
7.9 GB peak, 6.6e7 lines; 3x10^5 sequential: 2.5 GB, 2.0e7 lines); PMEM's fused
kernels ~36 B (10^6 random 4 KiB writes: 0.85 GB, 1.8e7 lines) and SSD's under 10 B;
rounded up."""


MAX_OUTSTANDING = 65536
"""Requests in flight per stream: NVMe's deepest queue (64 Ki entries) is the largest
window any device here accepts; the Optane studies use at most a few hundred."""
MAX_SPAN = 2**50
"""Address range of a stream: 1 PiB, the bound on every size parameter
(MemorySize.physical) and far beyond the 48-bit physical addresses of the hosts
modelled; larger spans overflow the int64 addresses the device models draw."""


def _count(flag: str, text: str, low: int = 1, high: int | None = None) -> int:
    """An integer written in ASCII digits (int() would also take '٣' or '1_0')."""
    try:
        if not (text.isascii() and text.lstrip("+-").isdigit()):
            raise ValueError(text)
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
    if value > MAX_SPAN:
        raise UsageError(f"{flag} must be at most 1PiB (an address range), got {text!r}")
    return value


@dataclass(frozen=True)
class StreamSpec:
    op: str
    pattern: str
    size: int
    outstanding: float  # under 1: a thread whose request is larger than its fill buffers
    requests: int
    thread: bool = False  # a requester thread (--threads): its core's store rate bounds it

    @classmethod
    def parse(cls, text: str, defaults: argparse.Namespace) -> StreamSpec:
        """``OP[:PATTERN[:SIZE[:OUTSTANDING[:REQUESTS]]]]``, gaps from the defaults."""
        parts = text.split(":")
        if not 1 <= len(parts) <= 5 or parts[0] not in ("read", "write"):
            raise UsageError(f"--stream {text!r}: expected read|write[:seq|rand[:SIZE[:N[:R]]]]")
        fields = parts + [None] * (5 - len(parts))
        pattern = fields[1] or defaults.pattern
        if pattern not in ("seq", "rand"):
            raise UsageError(f"--stream {text!r}: pattern must be seq or rand")
        # values given in the stream are named as such, defaults by their own option
        named = [f"--stream {text!r} " if given else "--" for given in fields[2:]]
        return cls(
            parts[0],
            pattern,
            _size(f"{named[0]}size", fields[2] or defaults.size),
            _count(f"{named[1]}outstanding", fields[3] or defaults.outstanding, 1, MAX_OUTSTANDING),
            _count(f"{named[2]}requests", fields[4] or defaults.requests),
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = QuietParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--device", required=True, choices=sorted(DEVICES), help="the device measured")
    p.add_argument("--op", choices=("read", "write"), help="one stream of this kind")
    p.add_argument("--stream", action="append", default=[], help="a concurrent stream")
    p.add_argument("--read-fraction", type=float, help="a read and a write stream, by bytes")
    p.add_argument(
        "--pattern", default="rand", choices=("seq", "rand"), help="address order (default rand)"
    )
    p.add_argument("--size", default="64B", help="bytes per request (e.g. 128, 4KiB)")
    p.add_argument("--outstanding", default="1024", help="requests in flight per stream")
    p.add_argument("--requests", default="100000", help="requests per stream")
    p.add_argument("--controllers", default=None, help="override the device's controllers")
    p.add_argument(
        "--optane",
        action="store_true",
        help="PMEM with measured Optane DC per-DIMM figures (Pmem.optane) instead of Table 2's",
    )
    p.add_argument("--threads", default=None, help="run each stream as N requester threads")
    p.add_argument("--span", default="1GiB", help="address range of each stream")
    p.add_argument("--seed", default="1", help="seed of the random addresses (default 1)")
    p.add_argument("--load-sweep", action="store_true", help="latency vs load, 1..1024 in flight")
    p.add_argument(
        "--baseline",
        choices=sorted(DEVICES),
        help="also run the same streams on this device and compare (results.json: baseline)",
    )
    p.add_argument("--outdir", required=True, help="where results.json, stats.txt and the plot go")
    args = p.parse_args(argv)
    args.specs = check_args(args)
    return args


def check_args(args: argparse.Namespace) -> list[StreamSpec]:
    """Every value before any work (the measurement code trusts them); the streams."""
    specs = threaded(streams_of(args), args)
    span = _size("--span", args.span)
    if args.load_sweep:
        check_backend()
    for spec in specs:
        if span < spec.size:
            raise UsageError(
                f"--span {args.span!r} is smaller than one request (--size {spec.size} B)"
            )
    _count("--seed", args.seed, 1, MAX_SEED)
    try:
        device = DEVICES[args.device](**controllers(args))
    except ConfigError as exc:
        raise UsageError(f"--controllers {args.controllers}: {exc}") from None
    if args.optane and DEVICES[args.device] is not Pmem:
        raise UsageError(f"--optane: applies to pmem and cxl-pmem, not {args.device}")
    check_outdir(args.outdir)
    lines, need = memory_needed(args.device, specs, device.access_unit)
    room = available_memory()
    if room is not None and need > room:
        raise UsageError(
            f"--requests {args.requests} of --size {args.size} would need ~{format_bytes(need)}"
            f" ({lines} line accesses), more than the {format_bytes(room)} available"
        )
    return specs


def memory_needed(device: str, specs: list[StreamSpec], access_unit: int) -> tuple[int, int]:
    """The streams' line accesses and the peak bytes they need (checked before the run)."""
    lines = sum(s.requests * (s.size // access_unit + 2) for s in specs)
    return lines, INTERPRETER_BYTES + BYTES_PER_LINE[device] * lines


def controllers(args: argparse.Namespace) -> dict:
    if args.controllers is None:
        return {}
    return {"controllers": _count("--controllers", args.controllers, 1, 1024)}


THREAD_BYTES = 12 * 64
"""Bytes a requester thread keeps in flight where the device has no ``thread_bytes``:
a core's 12 L1D fill buffers of 64 B (components/compute/host.py)."""
RUN_THREAD_BYTES = 16 * 64
"""Bytes a requester thread keeps in flight reading a request larger than its fill
buffers (a 4 KiB block): the 12 fill buffers' demand loads and the L2 prefetcher's
lines ahead of them on the block's sequential run. Fit: one thread's random 4 KiB reads
on one Optane DIMM, 3.19 GB/s x 305 ns = 973 B (NVSL/OptaneStudy data/bandwidth.csv,
RandBW Load, 1 DIMM, 4096 B, 1 thread, median of 7), about 16 lines."""
THREAD_STORE_BANDWIDTH = 4.56e9
"""Bytes/s of non-temporal stores one thread (core) issues at most, whatever the memory:
NVSL/OptaneStudy data/bandwidth.csv, RandBW NTStore on local DRAM, 1 thread, 4.53-4.60
GB/s at every access size from 64 B to 2 MiB (line 7640: 256 B, 4.56 GB/s), twice that on
2 threads; measured on DRAM, so nothing of Optane is fitted here."""
MAX_THREADS = 1024


def threaded(specs: list[StreamSpec], args: argparse.Namespace) -> list[StreamSpec]:
    """With ``--threads N``, N copies of every stream, each a requester thread with the
    window of one (the bytes a thread keeps in flight over the request size)."""
    if args.threads is None:
        return specs
    count = _count("--threads", args.threads, 1, MAX_THREADS)
    if args.load_sweep:
        raise UsageError("--threads: sets each thread's window; give it without --load-sweep")
    in_flight = getattr(DEVICES[args.device](), "thread_bytes", THREAD_BYTES)
    linked = args.device == "cxl-pmem" or args.device in EXPANDERS
    return [
        StreamSpec(s.op, s.pattern, s.size, thread_window(s, in_flight, linked), s.requests, True)
        for s in specs
        for _ in range(count)
    ]


def thread_window(spec: StreamSpec, in_flight: int, linked: bool) -> float:
    """Requests one thread keeps in flight: its fill buffers' bytes over the request
    size. A request larger than they hold is a share of one request, ``RUN_THREAD_BYTES``
    of a read (demand loads and the prefetcher's lines ahead), the fill buffers' bytes
    of a write, except behind a CXL link, whose line window counts whole requests."""
    if spec.size > in_flight and not linked:
        return (RUN_THREAD_BYTES if spec.op == "read" else in_flight) / spec.size
    return max(in_flight // spec.size, 1)


def streams_of(args: argparse.Namespace) -> list[StreamSpec]:
    chosen = sum(bool(x) for x in (args.op, args.stream, args.read_fraction is not None))
    if chosen != 1:
        raise UsageError("give exactly one of --op, --stream (repeatable) or --read-fraction")
    if args.op:
        return [StreamSpec.parse(args.op, args)]
    if args.stream:
        return [StreamSpec.parse(text, args) for text in args.stream]
    fraction = args.read_fraction
    if not 0 < fraction < 1:  # NaN fails too
        raise UsageError(f"--read-fraction must be in (0, 1), got {fraction}")
    total = _count("--requests", args.requests)
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
        self.rename("system")
        setattr(self, name, device)
        object.__setattr__(self, "memory", device)
        if cxl:
            self.link = CxlLink()

    def body(self, spec: StreamSpec, addresses: np.ndarray, requester: str):
        device = self.memory
        op = device.read if spec.op == "read" else device.write
        if not hasattr(self, "link"):
            if spec.outstanding < 1:
                return lambda now: one_at_a_time(op, addresses, spec, requester)
            return lambda now: stage(
                core_bound(op(addresses, spec.size, spec.outstanding), spec, requester)
            )

        def over_cxl(now: int):
            path = CxlPath([(self.link, "down")])
            transfer = mem_read if spec.op == "read" else mem_write
            nbytes = addresses.size * spec.size
            along = transfer(path, nbytes, max_outstanding=spec.outstanding)
            stream = core_bound(op(addresses, spec.size), spec, requester)
            served = stage(stream, along=along)
            # the requester's window spans the link's round trip and the device
            rtt = along.latency if along.flows else 0
            served.flows[0].min_ticks = (
                (addresses.size - 1) * (rtt + stream.latency) / spec.outstanding
            )
            return served

        return over_cxl


def one_at_a_time(op, addresses: np.ndarray, spec: StreamSpec, requester: str) -> Iterator[Stage]:
    """A thread that keeps part of one request in flight: a stage per request, so the
    thread is on one module for a whole request, as a LATTester thread reading a 4 KiB
    block is on one DIMM. Threads then pile up on whichever module is slowest, which a
    stream spread over the modules cannot show."""
    for i in range(addresses.size):
        request = owned_by(op(addresses[i : i + 1], spec.size, spec.outstanding), requester)
        yield stage(core_bound(request, spec, requester))


def core_bound(stream: MemStream, spec: StreamSpec, requester: str) -> MemStream:
    """A requester thread's writes also need its core's store path (a resource of its
    own, ``THREAD_STORE_BANDWIDTH``): one thread cannot write faster than its core
    issues non-temporal stores, however many DIMMs take them."""
    if not (spec.thread and spec.op == "write" and stream.requests):
        return stream
    busy = stream.requests * spec.size * TICKS_PER_SECOND / THREAD_STORE_BANDWIDTH
    return with_needs(stream, {f"{requester}.core.store": busy})


def addresses(spec: StreamSpec, span: int, base: int, rng: np.random.Generator) -> np.ndarray:
    if spec.pattern == "seq":
        return base + np.arange(spec.requests, dtype=np.int64) * spec.size
    return base + rng.integers(0, max(span // spec.size, 1), spec.requests) * spec.size


def measure(args: argparse.Namespace, specs: list[StreamSpec], name: str | None = None) -> dict:
    """Run the streams together on a fresh device (``name``, else --device); the idle
    latencies alone."""
    name = name or args.device
    span = parse_size(args.span)
    seed = int(args.seed)
    overrides = controllers(args) if name == args.device else {}
    idle = {}
    for op in sorted({s.op for s in specs}):
        single = StreamSpec(op, "seq", specs[0].size, 1, 1)
        (record,), _, _ = _run(args, overrides, [single], span, seed, name)
        idle[op] = record.end - record.start
    records, scheduler, target = _run(args, overrides, specs, span, seed, name)
    out = []
    for spec, record in zip(specs, records, strict=True):
        ticks = record.end - record.start
        throughput = spec.requests / ticks  # requests per tick
        in_flight = min(spec.outstanding, spec.requests)
        floor = idle[spec.op]
        if spec.op == "read" and spec.pattern == "seq":  # a run the buffer serves
            floor = min(floor, getattr(target.memory, "sequential_read_latency", floor))
        out.append(
            {
                "op": spec.op,
                "pattern": spec.pattern,
                "size": spec.size,
                "outstanding": spec.outstanding,
                "requests": spec.requests,
                "duration_us": ticks / 1e6,
                "bandwidth_gbps": spec.requests * spec.size / (ticks / TICKS_PER_SECOND) / 1e9,
                "loaded_latency_ns": max(in_flight / throughput, floor) / TICKS_PER_NS,
            }
        )
    end = max(r.end for r in records)
    total = sum(s.requests * s.size for s in specs)
    device = target.memory
    peak = getattr(device, "peak_bandwidth", None) or device.read_bandwidth
    return {
        "device": name,
        "idle_latency_ns": {op: ticks / TICKS_PER_NS for op, ticks in idle.items()},
        "streams": out,
        "total_bandwidth_gbps": total / (end / TICKS_PER_SECOND) / 1e9,
        "efficiency": total / (end / TICKS_PER_SECOND) / peak,
        "latency_ns": idle[specs[0].op] / TICKS_PER_NS,
        "bandwidth_gbps": out[0]["bandwidth_gbps"] if len(out) == 1 else None,
        "stats": target.stat_rows()
        + [
            (f"{key}.utilisation", use.busy / end, "busy ticks per tick", "Ratio")
            for key, use in sorted(scheduler.network.use.items())
        ],
    }


def _run(args, overrides, specs, span, seed, name):
    optane = args.optane and DEVICES[name] is Pmem
    device = Pmem.optane(**overrides) if optane else DEVICES[name](**overrides)
    kind = {"cxl-pmem": "pmem", "ddr5-r": "dram"}.get(name, name.replace("-", "_"))
    target = Target(device, kind, name == "cxl-pmem")
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
            target.body(spec, addresses(spec, span, i * span, rng), f"requester{i}"),
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
    """What the model does under load, as Optane papers plot it: bandwidth against the
    requests in flight (where it saturates), and latency against bandwidth (the knee),
    each point labelled by its requests in flight, the idle latency marked."""
    from matplotlib.ticker import FuncFormatter

    from components.sim.mpl import pyplot

    plt = pyplot()
    plain = FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 1 else f"{value:g}")
    fig, (rate, knee) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    windows = [p["outstanding"] for p in points]
    for i, stream in enumerate(points[0]["streams"]):
        name = f"{stream['op']} {stream['pattern']} {stream['size']} B"
        bandwidth = [p["streams"][i]["bandwidth_gbps"] for p in points]
        latency = [p["streams"][i]["loaded_latency_ns"] for p in points]
        (line,) = rate.plot(windows, bandwidth, marker="o", label=name)
        knee.plot(bandwidth, latency, marker="o", color=line.get_color(), label=name)
        for window, x, y in zip(windows, bandwidth, latency, strict=True):
            if window in (1, 16, 256, 1024):
                knee.annotate(f"{window}", (x, y), textcoords="offset points", xytext=(4, 2),
                              fontsize=7, color=line.get_color())  # fmt: skip
        knee.axhline(latency[0], color=line.get_color(), linestyle=":", linewidth=0.8)
    rate.set_xscale("log", base=2)
    rate.set_xticks(windows, [str(w) for w in windows], fontsize=7)
    rate.minorticks_off()
    rate.set_xlabel("requests in flight per stream")
    rate.set_ylabel("bandwidth (GB/s)")
    rate.set_ylim(bottom=0)
    rate.set_title("bandwidth saturates as requests are added", fontsize=9)
    knee.set_yscale("log")
    knee.yaxis.set_major_formatter(plain)
    knee.yaxis.set_minor_formatter(plain)
    knee.tick_params(axis="y", which="both", labelsize=7)
    knee.set_xlim(left=0)
    knee.set_xlabel("bandwidth (GB/s)")
    knee.set_ylabel("loaded latency (ns, log scale)")
    knee.set_title("latency rises once bandwidth is spent (labels: in flight;\n"
                   "dotted: the latency with one request in flight)", fontsize=9)  # fmt: skip
    rate.legend(fontsize=8)
    rate.grid(alpha=0.3)
    knee.grid(alpha=0.3, which="both")
    fig.savefig(path, dpi=200)
    plt.close(fig)


def versus(result: dict, baseline: dict) -> dict:
    """The run next to the same streams on a baseline device (Sun et al. compare CXL
    memory with DDR5-R so): its figures, the idle latency's ratio and the efficiency's
    difference in percentage points."""
    return {
        "device": baseline["device"],
        "latency_ns": baseline["latency_ns"],
        "total_bandwidth_gbps": baseline["total_bandwidth_gbps"],
        "efficiency": baseline["efficiency"],
        "latency_ratio": result["latency_ns"] / baseline["latency_ns"],
        "efficiency_gap_pp": 100 * (result["efficiency"] - baseline["efficiency"]),
    }


def run(args: argparse.Namespace) -> dict:
    specs = args.specs
    result = measure(args, specs)
    if args.baseline:
        result["baseline"] = versus(result, measure(args, specs, args.baseline))
    if args.load_sweep:
        result["load_sweep"] = sweep(args, specs)
    stats = result.pop("stats")
    with replacing_dir(Path(args.outdir), OUTPUTS) as staging:
        if args.load_sweep:
            plot_sweep(result["load_sweep"], staging / "loaded_latency.png")
        (staging / "results.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        (staging / "stats.txt").write_text(format_rows(stats))
    return result


def main(argv: list[str] | None = None) -> int:
    return run_main(PROG, lambda: report(run(parse_args(argv))))


def report(result: dict) -> int:
    for stream in result["streams"]:
        print(
            f"{stream['op']:5s} {stream['pattern']:4s} {stream['size']:6d} B x "
            f"{stream['outstanding']:4g} in flight: {stream['bandwidth_gbps']:.3f} GB/s, "
            f"loaded latency {stream['loaded_latency_ns']:.1f} ns"
        )
    total = result["total_bandwidth_gbps"]
    print(
        f"idle latency {result['latency_ns']:.1f} ns, total {total:.3f} GB/s, "
        f"{100 * result['efficiency']:.1f}% of the media's peak"
    )
    base = result.get("baseline")
    if base:
        print(
            f"baseline {base['device']}: idle latency {base['latency_ns']:.1f} ns "
            f"(x{base['latency_ratio']:.2f} here), total {base['total_bandwidth_gbps']:.3f} GB/s, "
            f"{100 * base['efficiency']:.1f}% of its peak ({base['efficiency_gap_pp']:+.1f} "
            "points here)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
