"""The command-line options of a training run, shared by configs/ and scripts/.

configs/trainingcxl.py, scripts/sweep.py and scripts/crashcheck.py all describe a run
with these options, so a sweep axis or a crash check names exactly what a user types.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from components.compute.gpu_presets import DEFAULT_GPU, UnknownGpuError, check_gpu
from components.compute.gpu_presets import PRESETS as GPU_PRESETS
from components.interconnect.topology import (
    MAX_ENDPOINTS,
    MAX_HOSTS,
    TopologySpec,
    load_topology,
)
from components.memory.pmem import PMEM_MODELS
from components.memory.stores import DEFAULT_STORE, STORES
from components.sim.params import ConfigError
from components.sim.units import UnitError, parse_time, plain_text_number
from workloads.inputs import DEFAULT_ZIPF_EXPONENT, MAX_ZIPF_EXPONENT

if TYPE_CHECKING:
    from components.boards.base import TrainingBoard
    from workloads.models import ModelSpec


class UsageError(ValueError):
    """A bad option value, reported as one line and exit status 2."""


MAX_ARGS = 4096
"""Words on one command line: argparse's time grows with the square of their number
(20,000 words take a minute), and no run needs more (failures are bounded by
MAX_FAILURES_PER_BATCH; grids belong in a sweep spec)."""


def _ascii_int(text: str) -> int:
    return int(plain_text_number(text))


def _ascii_float(text: str) -> float:
    return float(plain_text_number(text))


_ascii_int.__name__, _ascii_float.__name__ = "int", "float"  # argparse: "invalid int value"


class QuietParser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so callers decide how errors look.
    Every ``type=int`` or ``type=float`` option takes ASCII digits only (int() and
    float() also take '1_000', '٣' and '３')."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.register("type", int, _ascii_int)
        self.register("type", float, _ascii_float)

    def error(self, message: str):
        raise UsageError(message)

    def parse_known_args(self, args=None, namespace=None):
        words = sys.argv[1:] if args is None else list(args)
        if len(words) > MAX_ARGS:
            raise UsageError(f"{len(words)} command-line words, more than {MAX_ARGS}")
        return super().parse_known_args(words, namespace)


SYSTEMS = ("ssd", "pmem", "pcie", "cxl-d", "cxl-b", "cxl", "dram")
MTBF_RANGE = (1.0, 3.2e7)
"""Seconds: board.ft.mtbf's bounds (components/boards/software_ft.py), checked here so
the message names --mtbf."""
MULTI_DEVICE_SYSTEMS = ("cxl-d", "cxl-b", "cxl")
CHECKPOINTS = ("paper", "cpr", "check-n-run", "none")
# run options a tool that replays every batch of the paper's protocols does not take
SAMPLED_OR_SOFTWARE_FT = (
    "--sample",
    "--checkpoint",
    "--quantize",
    "--mtbf",
    "--ckpt-interval",
    "--store",
)
QUANTIZE = ("none", "8", "4")
RECOVERIES = ("partial", "full")
"""--recovery of a multi-device software run (simulate/failures/sharded.py)."""
MAX_SEED = 2**32 - 1  # numpy's conventional 32-bit seed range; negative seeds are refused
MAX_FAILURES_PER_BATCH = 8
"""Failures one run may inject, per batch it trains: a batch has about eight fenced
crash intervals (failures.crash_budget.INTERVALS_PER_BATCH), and a failure is a recovery plus a
resumed stretch, so more failures revisit the same states at ever more cost
(scripts/crashcheck.py explores states exhaustively instead)."""


DEFAULT_OUTDIR = "m5out"
GEM5_OUTDIR = "trainingcxl"


def resolve_outdir(given: str | None) -> str:
    """--outdir as given, else m5out. Under gem5.opt every output goes inside gem5's
    own output directory (-d, ``m5.options.outdir``), beside its stats.txt and
    config.ini: into trainingcxl/ there, or a relative --outdir taken inside it (as
    gem5 takes its own --stats-file); an absolute --outdir stays as given."""
    from components import gem5

    if not gem5.available():
        return DEFAULT_OUTDIR if given is None else given
    import m5

    return os.path.join(m5.options.outdir, GEM5_OUTDIR if given is None else given)


@dataclass
class RunOptions:
    system: str = "cxl"
    model: str = "rm1"
    batches: int = 10
    batch_size: int | None = None
    seed: int = 1
    outdir: str = DEFAULT_OUTDIR
    sets: list[tuple[str, str]] = field(default_factory=list)
    functional: bool = False
    rows: int | None = None
    reuse: float | None = None
    zipf: float | None = None
    trace: str | None = None
    """A trace file whose lookups feed the run (workloads/traces.py); None: generated."""
    fail_at: list[str] = field(default_factory=list)
    fail_random: int = 0
    fail_device: int | None = None
    pmem_image: str | None = None
    pmem: str | None = None
    """--pmem MODEL: every PMEM becomes Table 2's emulation or the measured Optane
    device (components/memory/pmem.py PMEM_MODELS); None: the board's own."""
    progress: bool = True
    plot: bool = False
    halt_on_failure: bool = False
    checkpoint: str = "paper"
    """paper: the system's own protocol; cpr, check-n-run, none: a software policy."""
    quantize: str = "none"
    mtbf: float | None = None
    ckpt_interval: float | None = None
    store: str | None = None
    """--store NAME: the software checkpoint store's preset (components/memory/stores.py)."""
    recovery: str | None = None
    """--recovery full|partial: how a multi-device software run recovers from a failure
    (None: CPR's partial recovery for cpr, a full one for check-n-run and none)."""
    sample_plan: str | None = None
    """--sample PERIOD[:WARMUP[:UNITS]]: a systematic sample of batches (simulate/sampling)."""
    gpu: str | None = None
    """--gpu NAME: a GPU preset (components/compute/gpu_presets.py); None: the board's
    own GPU (the RTX 3090 on the CLI's boards)."""
    gpu_profile: str | None = None
    """--gpu-profile FILE: kernel times measured on a GPU replace the model
    (simulate/run/gpu_profile.py)."""
    gpus: int = 1
    cxl_mems: int = 1
    topology: str | None = None
    """--topology FILE.yaml: a switch tree (components/interconnect/topology.py)."""
    per_gpu_batch: int | None = None
    sharding: str = "table"
    pool_jobs: int = 1
    """Training jobs, each from a host of its own, sharing the CXL-MEMs (CXL pooling)."""
    input_cache: str | None = None
    """--input-cache DIR: generated batches kept for other runs with the same inputs
    (workloads/shared_inputs.py); a local sweep gives its runs one. Results unchanged."""
    board: TrainingBoard | None = None
    """A board built in Python (simulate.simulator): each simulation connects a copy of
    it. None: the CLI's board for ``system``."""
    spec: ModelSpec | None = None
    """A model built in Python; None: the preset named ``model``."""


_RUN_ARGUMENTS: list[tuple[tuple[str, ...], dict]] = [
    (
        ("--system",),
        dict(
            default="cxl",
            choices=SYSTEMS,
            help="system configuration from the paper (default: cxl)",
        ),
    ),
    (("--model",), dict(default="rm1", help="model preset (rm1..rm4, ...)")),
    (("--batches",), dict(type=int, default=10, help="training batches to run")),
    (
        ("--batch-size",),
        dict(
            type=int,
            default=None,
            help="samples per batch (default: the model's documented default)",
        ),
    ),
    (("--seed",), dict(type=int, default=1, help=f"seed of inputs and weights (0..{MAX_SEED})")),
    (
        ("--outdir",),
        dict(
            default=None,
            help="output directory (default m5out; under gem5, trainingcxl inside gem5's -d "
            "directory, where a relative path is taken too)",
        ),
    ),
    (
        ("--set",),
        dict(
            dest="sets",
            action="append",
            default=[],
            metavar="PATH=VALUE",
            help="override a component parameter, e.g. "
            "board.cxl_mem.pmem.read_latency=400ns (repeatable)",
        ),
    ),
    (
        ("--functional",),
        dict(
            action="store_true",
            help="train with real DLRM numerics alongside the timing model",
        ),
    ),
    (
        ("--rows",),
        dict(type=int, default=None, help="cap on rows per embedding table (functional runs)"),
    ),
    (
        ("--reuse",),
        dict(
            type=float,
            default=None,
            metavar="P",
            help="share of a batch's distinct rows the previous batch also touched, in "
            "[0, 1], with the distinct rows per batch held (default: popularity alone, "
            "about 18%% on RM1)",
        ),
    ),
    (
        ("--zipf",),
        dict(
            type=float,
            default=None,
            metavar="S",
            help=f"power-law exponent of row popularity, in (0, {MAX_ZIPF_EXPONENT:g}] "
            f"(default {DEFAULT_ZIPF_EXPONENT})",
        ),
    ),
    (
        ("--trace",),
        dict(
            default=None,
            metavar="PATH",
            help="take the batches' lookups from a trace: FBGEMM indices/offsets/lengths "
            "(dlrm_datasets .pt, .pt.gz, or .npz) or Criteo TSV (.tsv, .txt, day_N, also "
            ".gz); batch k is samples [k*B, (k+1)*B), cycling (docs/workloads.md)",
        ),
    ),
    (
        ("--fail-at",),
        dict(
            action="append",
            default=[],
            metavar="TIME",
            help="inject a power failure at this simulated time (e.g. 3.2ms)",
        ),
    ),
    (
        ("--fail-random",),
        dict(
            type=int,
            default=0,
            metavar="K",
            help="inject K power failures at seeded random instants",
        ),
    ),
    (
        ("--fail-device",),
        dict(
            type=int,
            default=None,
            metavar="M",
            help="the failures cut the power of CXL-MEM M alone; the other devices run on "
            "until they wait for it (multi-device runs)",
        ),
    ),
    (
        ("--pmem-image",),
        dict(
            default=None,
            metavar="PATH",
            help="file backing the PMEM image (functional runs); an existing image is "
            "recovered from, and cannot be combined with --fail-at or --fail-random",
        ),
    ),
    (
        ("--pmem",),
        dict(
            default=None,
            choices=PMEM_MODELS,
            help="PMEM model of every system: table2 (the paper's emulation on delayed DRAM, "
            "the default of the paper's systems) or optane (the measured Optane DC PMM: "
            "bandwidth under concurrency, queueing; docs/validation.md)",
        ),
    ),
    (
        ("--halt-on-failure",),
        dict(
            action="store_true",
            help="stop at the first injected failure, leaving --pmem-image as the power cut "
            "left it (a later run given that image recovers from it)",
        ),
    ),
    (
        ("--checkpoint",),
        dict(
            default="paper",
            choices=CHECKPOINTS,
            help="failure tolerance: the system's own protocol (paper, default), or a "
            "software checkpoint of host tables to an NVMe store (cpr, check-n-run, "
            "none; dram, pmem, ssd and cxl-d systems; docs/software_ft.md)",
        ),
    ),
    (
        ("--quantize",),
        dict(
            default="none",
            choices=QUANTIZE,
            help="bits per element of Check-N-Run's checkpointed rows (default none)",
        ),
    ),
    (
        ("--mtbf",),
        dict(
            type=float,
            default=None,
            metavar="SECONDS",
            help="mean time between failures, for CPR's checkpoint interval (default a day)",
        ),
    ),
    (
        ("--ckpt-interval",),
        dict(
            type=float,
            default=None,
            metavar="SECONDS",
            help="simulated seconds between software checkpoints (default: CPR's rule, "
            "sqrt(2 x checkpoint time x MTBF))",
        ),
    ),
    (
        ("--store",),
        dict(
            default=None,
            metavar="NAME",
            help="the software checkpoint store: "
            + ", ".join(f"{k} ({v.description})" for k, v in STORES.items())
            + f" (default {DEFAULT_STORE})",
        ),
    ),
    (
        ("--recovery",),
        dict(
            default=None,
            choices=RECOVERIES,
            help="multi-device software runs: partial (the failed CXL-MEM's shard reloaded, "
            "the others keep their state; cpr's default) or full (every shard reloaded, the "
            "batches since the checkpoint rerun; check-n-run's and none's)",
        ),
    ),
    (
        ("--sample",),
        dict(
            dest="sample_plan",
            default=None,
            metavar="P[:W[:U]]",
            help="simulate every P-th batch in detail (W warm-up batches before U measured "
            "ones, default 2 and 1), skip the rest functionally, and give means with 95%% "
            "intervals (docs/sampling.md)",
        ),
    ),
    (
        ("--gpu",),
        dict(
            default=None,
            metavar="NAME",
            help=f"the GPU: {', '.join(GPU_PRESETS)} (default {DEFAULT_GPU}, the paper's; "
            "docs/gpu.md)",
        ),
    ),
    (
        ("--gpu-profile",),
        dict(
            default=None,
            metavar="FILE",
            help="kernel times measured on a real GPU for this model and batch size "
            "(scripts/profile_gpu.py writes one) instead of the GPU model",
        ),
    ),
    (
        ("--gpus",),
        dict(
            type=int,
            default=1,
            metavar="N",
            help="CXL-GPUs training data-parallel under one switch (CXL systems; default 1; "
            "docs/topologies.md)",
        ),
    ),
    (
        ("--cxl-mems",),
        dict(
            type=int,
            default=1,
            metavar="M",
            help="CXL-MEMs the tables are sharded over, table-wise (default 1)",
        ),
    ),
    (
        ("--topology",),
        dict(
            default=None,
            metavar="FILE",
            help="a switch tree of GPUs and CXL-MEMs in YAML instead of --gpus/--cxl-mems",
        ),
    ),
    (
        ("--sharding",),
        dict(
            default="table",
            choices=("table", "row"),
            help="how tables spread over the CXL-MEMs: table (whole tables, balanced by "
            "bytes; default) or row (every table striped by row, partial sums)",
        ),
    ),
    (
        ("--pool-jobs",),
        dict(
            type=int,
            default=1,
            metavar="K",
            help="K hosts' training jobs, each on --gpus GPUs of its own, sharing the "
            "CXL-MEMs, each its partition of every device (CXL pooling; default 1)",
        ),
    ),
    (
        ("--per-gpu-batch",),
        dict(
            type=int,
            default=None,
            metavar="B",
            help="samples per GPU (weak scaling: the batch is B x GPUs); default: the "
            "batch is split over the GPUs (strong scaling)",
        ),
    ),
    (("--plot",), dict(action="store_true", help="also write timeline.png and breakdown.png")),
    (
        ("--input-cache",),
        dict(
            default=None,
            metavar="DIR",
            help="keep generated batches in DIR and load those other runs kept there (runs "
            "with the same model, batch size and seed share them; results do not change)",
        ),
    ),
    (
        ("--no-progress",),
        dict(
            dest="progress",
            action="store_false",
            help="do not show a progress bar (none is shown where stderr is not a terminal)",
        ),
    ),
    (
        ("--list-params",),
        dict(
            action="store_true",
            help="print every --set path of the board the other options build (--system, "
            "--gpus, --cxl-mems, --topology, --set) with its value, unit and source, and exit",
        ),
    ),
]


@dataclass(frozen=True)
class SamplePlan:
    """Every ``period`` batches: ``warmup`` detailed batches, ``units`` measured ones."""

    period: int
    warmup: int = 2
    units: int = 1

    @classmethod
    def parse(cls, text: str) -> SamplePlan:
        """PERIOD[:WARMUP[:UNITS]], e.g. 100, 100:2 or 200:2:3."""
        parts = text.split(":")
        if not 1 <= len(parts) <= 3 or not all(p.isascii() and p.isdigit() for p in parts):
            raise UsageError(f"--sample expects PERIOD[:WARMUP[:UNITS]] in batches, got {text!r}")
        plan = cls(*(int(p) for p in parts))
        if plan.warmup < 1 or plan.units < 1:
            raise UsageError(f"--sample {text}: warm-up and units must be at least 1 batch")
        if plan.period < plan.detail:
            raise UsageError(
                f"--sample {text}: a period of {plan.period} batches is shorter than a unit's "
                f"{plan.detail} detailed batches; run without --sample"
            )
        return plan

    @property
    def detail(self) -> int:
        """Detailed batches per unit: warm-up, measured, and the successor batch."""
        return self.warmup + self.units + 1

    def starts(self, batches: int) -> range:
        """First measured batch of each unit; the first unit's warm-up is batch 0."""
        return range(self.warmup, batches - self.units, self.period)

    def check(self, batches: int) -> None:
        if len(self.starts(batches)) < 2:
            raise UsageError(
                f"--sample {self.period}:{self.warmup}:{self.units} over {batches} batches "
                "gives fewer than 2 units, so no interval; raise --batches or lower the period"
            )


def add_run_options(parser: argparse.ArgumentParser, exclude: Iterable[str] = ()) -> None:
    """The run options, except the ``exclude``d ones (by flag, e.g. "--outdir"): a script
    that does not use an option does not accept it (argparse refuses it as unrecognized)
    and gets RunOptions' default for it."""
    excluded = set(exclude)
    unknown = excluded - {flags[0] for flags, _ in _RUN_ARGUMENTS}
    if unknown:
        raise ValueError(f"no run options {sorted(unknown)}")
    defaults = RunOptions()
    for flags, kwargs in _RUN_ARGUMENTS:
        if flags[0] in excluded:
            dest = kwargs.get("dest", flags[0].lstrip("-").replace("-", "_"))
            parser.set_defaults(**{dest: getattr(defaults, dest)})
        else:
            parser.add_argument(*flags, **kwargs)


def check_seed(seed: int) -> None:
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed must be in 0..{MAX_SEED}, got {seed}")


def check_failure_count(count: int, batches: int, flag: str) -> None:
    """At most MAX_FAILURES_PER_BATCH failures per batch of the run."""
    most = MAX_FAILURES_PER_BATCH * batches
    if count > most:
        raise UsageError(
            f"{flag}: {count} failures in {batches} batches, more than the "
            f"{MAX_FAILURES_PER_BATCH} per batch a run can use ({most}); "
            "use scripts/crashcheck.py to explore crash states exhaustively"
        )


def check_steady_batches(batches: int) -> None:
    """Scripts that report steady-state means need a batch beyond the warm-up."""
    if batches < 2:
        raise UsageError(
            f"--batches must be at least 2 (batch 0 is warm-up, excluded), got {batches}"
        )


def options_from_args(args: argparse.Namespace) -> RunOptions:
    if args.batches < 1:
        raise UsageError(f"--batches must be at least 1, got {args.batches}")
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.rows is not None and args.rows < 1:
        raise UsageError(f"--rows must be at least 1, got {args.rows}")
    if args.halt_on_failure and not (args.pmem_image and (args.fail_at or args.fail_random)):
        raise UsageError("--halt-on-failure needs --pmem-image and --fail-at or --fail-random")
    if args.fail_random < 0:
        raise UsageError(f"--fail-random must not be negative, got {args.fail_random}")
    check_seed(args.seed)
    if args.reuse is not None and not 0.0 <= args.reuse <= 1.0:
        raise UsageError(f"--reuse must be in [0, 1], got {args.reuse}")
    if args.zipf is not None and not 0.0 < args.zipf <= MAX_ZIPF_EXPONENT:
        raise UsageError(f"--zipf must be in (0, {MAX_ZIPF_EXPONENT:g}], got {args.zipf}")
    if args.trace is not None and not args.trace.strip():
        raise UsageError("--trace must not be empty")
    if args.trace is not None and (args.reuse is not None or args.zipf is not None):
        given = "--reuse" if args.reuse is not None else "--zipf"
        raise UsageError(f"{given} shapes generated lookups; with --trace the trace gives them")
    if args.outdir is not None and not args.outdir.strip():
        raise UsageError("--outdir must not be empty")
    if args.pmem_image is not None and not args.pmem_image.strip():
        raise UsageError("--pmem-image must not be empty")
    if args.pmem is not None and args.pmem not in PMEM_MODELS:
        raise UsageError(f"--pmem {args.pmem!r}: one of {', '.join(PMEM_MODELS)}")
    _check_input_cache(args.input_cache)
    gpu = check_gpu_name(args.gpu)
    if args.gpu_profile is not None and not args.gpu_profile.strip():
        raise UsageError("--gpu-profile must not be empty")
    check_failure_count(args.fail_random, args.batches, "--fail-random")
    check_failure_count(len(args.fail_at) + args.fail_random, args.batches, "--fail-at")
    instants: dict[int, str] = {}
    for text in args.fail_at:
        tick = _check_time("--fail-at", text)
        if tick in instants:
            raise UsageError(
                f"--fail-at {text!r}: the same instant as --fail-at {instants[tick]!r} "
                "(power fails once at an instant)"
            )
        instants[tick] = text
    if args.sample_plan is not None:
        _check_sample(args)
    _check_software_ft(args)
    gpus, mems = _check_topology(args)
    sets = []
    for item in args.sets:
        path, sep, value = item.partition("=")
        if not sep or not path.strip() or not value.strip():
            raise UsageError(f"--set expects PATH=VALUE, got {item!r}")
        sets.append((path.strip(), value.strip()))
    return RunOptions(
        system=args.system,
        model=args.model,
        batches=args.batches,
        batch_size=args.batch_size if args.per_gpu_batch is None else args.per_gpu_batch * gpus,
        seed=args.seed,
        outdir=resolve_outdir(args.outdir),
        sets=sets,
        functional=args.functional,
        rows=args.rows,
        reuse=args.reuse,
        zipf=args.zipf,
        trace=args.trace,
        fail_at=list(args.fail_at),
        fail_random=args.fail_random,
        fail_device=args.fail_device,
        pmem_image=args.pmem_image,
        pmem=args.pmem,
        progress=args.progress,
        plot=args.plot,
        halt_on_failure=args.halt_on_failure,
        sample_plan=args.sample_plan,
        checkpoint=args.checkpoint,
        quantize=args.quantize,
        mtbf=args.mtbf,
        ckpt_interval=args.ckpt_interval,
        gpu=gpu,
        gpu_profile=args.gpu_profile,
        store=args.store,
        recovery=args.recovery,
        gpus=gpus,
        cxl_mems=mems,
        topology=args.topology,
        per_gpu_batch=args.per_gpu_batch,
        sharding=args.sharding,
        pool_jobs=args.pool_jobs,
        input_cache=args.input_cache,
    )


def check_gpu_name(name: str | None) -> str | None:
    """A preset's name (lower-cased), or None for the board's own GPU."""
    if name is None:
        return None
    try:
        return check_gpu(name)
    except UnknownGpuError as exc:
        raise UsageError(f"--gpu: {exc}") from None


def _check_input_cache(folder: str | None) -> None:
    """A folder, or a path where one can be made."""
    if folder is None:
        return
    if not folder.strip():
        raise UsageError("--input-cache must not be empty")
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UsageError(f"--input-cache {folder!r}: exists and is not a directory")


def multi_device(options: RunOptions) -> bool:
    """Whether the run has more than one GPU or CXL-MEM, or a switch tree of its own."""
    return (options.gpus, options.cxl_mems, options.topology, options.pool_jobs) != (1, 1, None, 1)


def refuse_pooled_failures(pool_jobs: int, failures: object, what: str = "--fail-at") -> None:
    """One consistent checkpoint is kept per cluster of one job; a pool's jobs would each
    need their own recovery of shared devices (not modelled): refused in one line."""
    if pool_jobs > 1 and failures:
        raise UsageError(
            f"{what} with --pool-jobs {pool_jobs}: failures are modelled for one job's "
            "cluster (its commit across devices), not for several jobs sharing them"
        )


def _check_topology(args: argparse.Namespace) -> tuple[int, int]:
    """GPUs and CXL-MEMs of the run (a topology file's, loaded and checked here, before
    any work); multi-device runs are refused what only a single device models yet."""
    for flag, value in (("--gpus", args.gpus), ("--cxl-mems", args.cxl_mems),
                        ("--pool-jobs", args.pool_jobs)):  # fmt: skip
        if value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    if args.pool_jobs > MAX_HOSTS:
        raise UsageError(f"--pool-jobs must be at most {MAX_HOSTS}, got {args.pool_jobs}")
    if args.gpus * args.pool_jobs + args.cxl_mems > MAX_ENDPOINTS:  # before any is built
        raise UsageError(
            f"--gpus {args.gpus} x --pool-jobs {args.pool_jobs} GPUs and --cxl-mems "
            f"{args.cxl_mems}: more than {MAX_ENDPOINTS} devices in all"
        )
    if args.per_gpu_batch is not None:
        if args.per_gpu_batch < 1:
            raise UsageError(f"--per-gpu-batch must be at least 1, got {args.per_gpu_batch}")
        if args.batch_size is not None:
            raise UsageError("--per-gpu-batch sets the batch size: drop --batch-size")
    gpus, mems = args.gpus, args.cxl_mems
    if args.topology is not None:
        if gpus != 1 or mems != 1:
            raise UsageError("--topology gives the devices: drop --gpus and --cxl-mems")
        topology = resolve_topology(args.topology, 1, 1)
        if topology.hosts != args.pool_jobs:
            raise UsageError(
                f"--topology {args.topology}: {topology.hosts} hosts for --pool-jobs "
                f"{args.pool_jobs} (one host a job)"
            )
        if topology.gpus % topology.hosts:
            raise UsageError(
                f"--topology {args.topology}: {topology.gpus} GPUs do not split over "
                f"{topology.hosts} jobs"
            )
        gpus, mems = topology.gpus // topology.hosts, topology.mems
    if args.fail_device is not None and not (args.fail_at or args.fail_random):
        raise UsageError("--fail-device names whose power fails: add --fail-at or --fail-random")
    if args.fail_device is not None and mems < 2:
        raise UsageError("--fail-device cuts one of several CXL-MEMs: add --cxl-mems 2 or more")
    if args.sharding != "table" and mems < 2:
        raise UsageError(
            f"--sharding {args.sharding} places rows over several CXL-MEMs: add --cxl-mems 2 "
            "or more (one device holds every row)"
        )
    if args.recovery not in (None, *RECOVERIES):
        raise UsageError(f"--recovery {args.recovery!r}: one of {', '.join(RECOVERIES)}")
    if args.recovery is not None and (args.checkpoint == "paper" or mems < 2):
        raise UsageError(
            "--recovery chooses how a software checkpoint recovers on several CXL-MEMs: add "
            "--system cxl-d --cxl-mems 2 or more and --checkpoint cpr, check-n-run or none"
        )
    if (gpus, mems, args.topology, args.pool_jobs) == (1, 1, None, 1):
        return gpus, mems
    if args.system not in MULTI_DEVICE_SYSTEMS:
        raise UsageError(
            f"--system {args.system}: several devices are modelled for "
            f"{', '.join(MULTI_DEVICE_SYSTEMS)} (the CXL systems)"
        )
    if args.pmem_image is not None:
        raise UsageError(
            "--pmem-image holds one CXL-MEM's image; a multi-device cluster keeps its "
            "devices' images in memory (docs/failures.md): drop it"
        )
    if args.checkpoint != "paper" and (
        args.system != "cxl-d" or args.topology is not None or args.pool_jobs > 1
    ):
        raise UsageError(
            f"--checkpoint {args.checkpoint} on several devices: the host checkpoints each "
            "CXL-MEM's shard of --system cxl-d under one switch (--gpus, --cxl-mems; no "
            "--topology or --pool-jobs); the other multi-device systems checkpoint with "
            "the paper's protocols"
        )
    refuse_pooled_failures(args.pool_jobs, args.fail_at or args.fail_random)
    if args.recovery == "partial" and args.checkpoint != "cpr":
        raise UsageError(
            f"--recovery partial is CPR's: --checkpoint {args.checkpoint} replays from "
            "its checkpoint (drop --recovery or use --checkpoint cpr)"
        )
    if args.fail_device is not None and not 0 <= args.fail_device < mems:
        raise UsageError(f"--fail-device {args.fail_device}: CXL-MEMs are 0 to {mems - 1}")
    if args.sample_plan is not None:
        raise UsageError(
            "--sample carries one device's state between units; multi-device runs simulate "
            "every batch (docs/topologies.md)"
        )
    if args.functional and args.pool_jobs > 1:
        raise UsageError("--functional trains one job's numerics: drop it or --pool-jobs")
    return gpus, mems


def resolve_topology(path: str | None, gpus: int, mems: int, jobs: int = 1) -> TopologySpec:
    """The run's topology: the file's, else one switch over ``jobs`` hosts, ``gpus`` GPUs
    a job and ``mems`` CXL-MEMs."""
    try:
        if path is not None:
            return load_topology(path)
        return TopologySpec.single_switch(gpus * jobs, mems, hosts=jobs)
    except ConfigError as error:
        raise UsageError(str(error)) from None


def _check_software_ft(args: argparse.Namespace) -> None:
    """A software policy's knobs need that policy (configure.software_policy checks that
    the system keeps its tables on the host)."""
    if args.checkpoint not in CHECKPOINTS:
        raise UsageError(f"--checkpoint {args.checkpoint!r}: one of {', '.join(CHECKPOINTS)}")
    if args.quantize not in QUANTIZE:
        raise UsageError(f"--quantize {args.quantize!r}: one of {', '.join(QUANTIZE)}")
    software = args.checkpoint != "paper"  # its system is checked with the board
    if args.quantize != "none" and args.checkpoint != "check-n-run":
        raise UsageError("--quantize is Check-N-Run's: add --checkpoint check-n-run")
    if args.store is not None and args.store not in STORES:
        raise UsageError(f"--store {args.store!r}: one of {', '.join(STORES)}")
    if args.store is not None and not software:
        raise UsageError(
            "--store is where a software checkpoint goes: add --checkpoint cpr, check-n-run or none"
        )
    for flag, value in (("--mtbf", args.mtbf), ("--ckpt-interval", args.ckpt_interval)):
        if value is not None and args.checkpoint in ("paper", "none"):
            raise UsageError(
                f"{flag} sets a software checkpoint's interval: --checkpoint "
                f"{args.checkpoint} takes none (add --checkpoint cpr or check-n-run)"
            )
        if isinstance(value, float) and not (math.isfinite(value) and value > 0):
            raise UsageError(f"{flag} must be a positive number of seconds, got {value}")
    if args.mtbf is not None and args.ckpt_interval is not None:
        raise UsageError(
            "--mtbf sets the interval by CPR's rule, --ckpt-interval gives it: drop one"
        )
    if args.mtbf is not None and not MTBF_RANGE[0] <= args.mtbf <= MTBF_RANGE[1]:
        raise UsageError(
            f"--mtbf must be in {MTBF_RANGE[0]:g}..{MTBF_RANGE[1]:g} seconds, got {args.mtbf:g}"
        )
    if software and args.pmem_image:
        raise UsageError(
            f"--checkpoint {args.checkpoint} keeps its checkpoints on board.ft.store: "
            "--pmem-image is the paper protocols' PMEM image"
        )


def _check_sample(args: argparse.Namespace) -> None:
    """A sampled run skips timing only: numerics, failures and plots need every batch."""
    SamplePlan.parse(args.sample_plan).check(args.batches)
    needs_all = {
        "--functional": args.functional,
        "--fail-at": args.fail_at,
        "--fail-random": args.fail_random,
        "--pmem-image": args.pmem_image,
        "--plot": args.plot,
        f"--checkpoint {args.checkpoint}": args.checkpoint != "paper",
    }
    flag = first_given(needs_all)
    if flag is not None:
        raise UsageError(f"--sample times a sample of batches; {flag} needs every batch")


def first_given(flags: dict[str, object]) -> str | None:
    """The first of ``flags`` (option as typed -> its value) that was given, if any."""
    return next((flag for flag, given in flags.items() if given), None)


def _check_time(option: str, text: str) -> int:
    try:
        return parse_time(text)
    except UnitError as exc:
        raise UsageError(f"{option} {text!r}: {exc}") from None


def parse_run_options(argv: list[str] | None, prog: str, description: str) -> RunOptions:
    parser = QuietParser(prog=prog, description=description)
    add_run_options(parser)
    return options_from_args(parser.parse_args(argv))
