"""N CXL-GPUs and M CXL-MEMs behind a switch tree: sharded tables, data-parallel MLPs.

Each CXL-MEM runs its system's protocol on its own shard of the tables: a *shard* is
the system's own single-device board (CXL-D, CXL-B or CXL) bound to one CXL-MEM, its
units renamed per device, its paths routed through the fabric, its ordering rules
(RAW gates, relaxed corrections, undo logs, MLP-log slices) unchanged. This board owns
what is shared: the GPUs, the switches and links, and the batch skeleton that joins
them. Per batch:

- every GPU runs bottom MLP, interaction + top MLP and backward on its share of the
  samples (strong scaling; the global batch stays the model's);
- every CXL-MEM looks up its tables for all samples; its DCOH flushes each GPU's
  pooled vectors to that GPU (an all-to-all through the tree), and each GPU's DCOH
  flushes the bag gradients back to every CXL-MEM;
- the GPUs all-reduce the MLP gradients with a ring over the fabric (peer-to-peer
  CXL.mem writes, CXL 3.x): 2(G-1) steps of 1/G of the bytes each, the bandwidth-optimal
  schedule (Patarasuk & Yuan, JPDC 2009) that NCCL uses within a node, then each GPU
  applies the update;
- the MLP log is striped: CXL-MEM m logs 1/M of the parameters (pulled from GPU m mod G),
  so the log's PMEM writes and link bytes divide over the devices, and the GPUs'
  update waits for every stripe (the parameters before the update are durable).

Tables are placed table-wise or row-wise (components/boards/sharding.py; row-wise, the
GPUs add the devices' partial sums). With ``jobs`` > 1 several hosts' jobs, each on GPUs
of its own, share the CXL-MEMs (pooling): each job has its own shards (protocol state)
in its own partition of every device, and all of them share the devices' units.

One consistent checkpoint across devices: a batch is recoverable only once every
device holds it, so CXL-MEM 0 (each job's shard 0) coordinates. Per batch, once every
shard has logged it, a ``commit`` op gathers each device's acknowledgement over CXL.io
and persists the batch's commit word on the coordinator's PMEM; a redo shard applies
the batch only after it, and every shard overwrites log slot N % 2 only after the
commit of batch N-1. Relaxed MLP log copies start on every shard together and are
committed (``mlp_commit``) once the last stripe is logged (docs/topologies.md).

Every flow crosses the links and switch ports of its route in the flow network, so the
all-to-all, the all-reduce, the logs and the acknowledgements share them. Failures
across devices (every device cut at once, or one alone) and their recovery to the
commit are components/persistence/cluster.py's and simulate/failures/inject.py's
(docs/failures.md, "Across devices").
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections.abc import Iterator

import numpy as np

from components.boards.base import BatchOps, TrainingBoard, index_payload
from components.boards.cxl import CxlBoard, CxlDBoard
from components.boards.sharding import SHARDINGS, build_sharding
from components.compute.gpu import DeviceCopy, Gpu
from components.interconnect.cxl import (
    TLP_HEADER_BYTES,
    CxlLink,
    CxlPath,
    CxlSwitch,
    Type2Device,
    mem_write,
    mmio_write,
)
from components.interconnect.nvlink import NvLink
from components.interconnect.topology import Fabric, TopologySpec, host_name
from components.memory.base import MAX_MODULES_PER_CONTROLLER
from components.memory.stages import stage
from components.sim.flows import Flow
from components.sim.params import ConfigError, Enum, MemorySize
from components.sim.schedule import Op, Stage, critical_path
from components.sim.simobject import SimObject

_SHARED = ("gpu", "host", "host_link", "cxl_switch", "cxl_gpu")  # the board's, not a shard's
_DURABLE = ("ckpt_log", "emb_log", "mlp_log")
"""A shard's ops that make a batch durable on its device, where its protocol has them
(``BatchOps.extra``): CXL-D's redo log; CXL-B's embedding and MLP undo logs; CXL's
embedding log (its MLP log copies commit on their own, ``mlp_commit``)."""
_COMMITS = ("commit", "mlp_commit")
_UNITS = (
    "embedding_resource",
    "lookup_resource",
    "checkpoint_resource",
    "mlp_log_resource",
    "to_gpu_resource",
    "to_mem_resource",
)


def add_commit_stats(obj: SimObject) -> None:
    """One job's cross-device commit stats, on the board (job 0) or its ``job{j}``."""
    obj.commits = obj.scalar("commits", "batches committed across every device", "Count")
    obj.mlpCommits = obj.scalar(
        "mlpCommits", "MLP log copies committed across every device", "Count"
    )
    obj.commitTicks = obj.average(
        "commitTicks", "a commit op from ready (every device logged) to its word persisted", "Tick"
    )
    obj.commitAckBytes = obj.scalar(
        "commitAckBytes", "acknowledgement bytes (TLPs) the devices sent the coordinator", "Byte"
    )
    obj.commitSwitchedBytes = obj.scalar(
        "commitSwitchedBytes",
        "acknowledgement bytes switched (once per switch crossed, as bytesForwarded)",
        "Byte",
    )
    obj.commitCriticalTicks = obj.average(
        "commitCriticalTicks", "commit ops' ticks on a batch's critical path", "Tick"
    )
    obj.commitShare = obj.formula(
        "commitShare",
        "commit ops' share of the batch time (critical path; a commit that delays a "
        "background log is charged to that log)",
        "Ratio",
        lambda: obj.commitCriticalTicks.total / max(obj.batchTicks.total, 1),
    )


class PoolJob(SimObject):
    """One more host's training job on a pooled system (``board.job{j}``): its own GPUs
    and its partition of every CXL-MEM; job 0's stats are the board's own."""

    def __init__(self) -> None:
        super().__init__()
        self.batchTicks = self.average("batchTicks", "mean time per batch", "Tick")
        self.batches = self.scalar("batches", "batches completed", "Count")
        add_commit_stats(self)


@dataclasses.dataclass(eq=False)
class Job:
    """What one training job owns: its host, its GPUs (global indices), its shards (one
    per CXL-MEM, each with the job's protocol state), its batches issued so far, its
    batch ends (for the commit's critical-path share) and, relaxed, the MLP log copy in
    flight: each shard's latest slice of it and the commit of the last one logged."""

    index: int
    host: str
    gpus: list[int]
    shards: list
    stats: SimObject
    history: list = dataclasses.field(default_factory=list)
    ends: list[Op] = dataclasses.field(default_factory=list)
    copy_slices: dict[int, Op] = dataclasses.field(default_factory=dict)
    copy_commit: tuple[int, Op] | None = None


class DisaggregatedBoard(TrainingBoard):
    """A CXL system of GPUs and ``topology.mems`` CXL-MEMs: ``jobs`` hosts each training
    on ``topology.gpus / jobs`` GPUs of its own, all sharing the CXL-MEMs (CXL 2.0
    pooling: each job its partition of every device, the devices' engines, DMA
    channels, PMEM controllers, links and switch ports shared)."""

    allreduce_link = Enum(
        "fabric",
        "what the GPUs' ring all-reduce crosses: fabric (their CXL links and switches) or "
        "nvlink (a direct NVLink port per GPU, ``board.nvlink{g}``, as through an NVSwitch)",
        "paper: GPUs and CXL-MEMs share one CXL switch; NVLink is the usual alternative",
        choices=("fabric", "nvlink"),
    )
    sharding = Enum(
        "table",
        "how the tables are spread over the CXL-MEMs: table (whole tables, balanced by "
        "bytes) or row (row i of every table on device i mod M; partial sums added on the "
        "GPU)",
        "DLRM model-parallel embeddings (table-wise); row-wise as in TorchRec's sharders",
        choices=SHARDINGS,
    )
    commit_ack_bytes = MemorySize(
        "8B",
        "payload of the acknowledgement each CXL-MEM sends the coordinator (CXL-MEM 0) over "
        "CXL.io once it holds a batch (or an MLP log copy): the batch number, one word",
        "assumption: one 8 B word as the flags; a posted MWr TLP (16 B 4DW header + 8 B) "
        "fits one 68B flit (CXL 2.0 spec §4.2; PCIe base spec §2.2)",
        low="1B",
    )

    def __init__(
        self, shard_board: type[CxlDBoard], topology: TopologySpec, jobs: int = 1, **overrides
    ) -> None:
        super().__init__(**overrides)
        if jobs < 1 or topology.gpus % jobs or topology.hosts != jobs:
            raise ConfigError(
                f"topology: {jobs} jobs need {jobs} hosts and a multiple of {jobs} GPUs, got "
                f"{topology.hosts} hosts and {topology.gpus} GPUs"
            )
        object.__setattr__(self, "system", shard_board.system)
        object.__setattr__(self, "topology", topology)
        add_commit_stats(self)
        del self._children["gpu"]
        object.__delattr__(self, "gpu")
        links = {}
        for j in range(jobs):
            name = "host_link" if j == 0 else f"host_link{j}"
            setattr(self, name, CxlLink())
            links[host_name(j)] = getattr(self, name)
        switches = {}
        for spec in topology.switches:
            if hasattr(self, spec.name) or spec.name in self._children:
                raise ConfigError(f"topology: switch name {spec.name!r} is taken by the board")
            switch = CxlSwitch()
            if spec.parent is not None:
                switch.uplink = CxlLink()
            setattr(self, spec.name, switch)
            switches[spec.name] = switch
        gpus, devices = [], []
        for g in range(topology.gpus):
            setattr(self, f"gpu{g}", Gpu())
            setattr(self, f"cxl_gpu{g}", Type2Device())
            setattr(self, f"nvlink{g}", NvLink())
            gpus.append(getattr(self, f"gpu{g}"))
            devices.append(getattr(self, f"cxl_gpu{g}"))
            links[f"gpu{g}"] = devices[g].link
        object.__setattr__(self, "gpus", gpus)
        object.__setattr__(self, "cxl_gpus", devices)
        per_job = topology.gpus // jobs
        job_list = []
        for j in range(jobs):
            stats = self if j == 0 else PoolJob()
            if j > 0:
                setattr(self, f"job{j}", stats)
            shards = []
            for m in range(topology.mems):
                shard = shard_board()
                setattr(stats, f"shard{m}", shard)
                if j == 0:
                    links[f"mem{m}"] = shard.cxl_mem.link
                shards.append(shard)
            owned = list(range(j * per_job, (j + 1) * per_job))
            job_list.append(Job(j, host_name(j), owned, shards, stats))
        object.__setattr__(self, "jobs", job_list)
        object.__setattr__(self, "fabric", Fabric(topology, links, switches))
        for job in job_list:
            for m, shard in enumerate(job.shards):
                self._bind(job, m, shard)

    def _bind(self, job: Job, m: int, shard: CxlDBoard) -> None:
        """Make a single-device board one shard: its job's GPU ``m mod G`` as its GPU,
        CXL-MEM m (job 0's shard holds it; the others share it) as its device, its
        units named per device (shared by every job's shard of it), its paths the
        fabric's from its job's host."""
        source = job.gpus[m % len(job.gpus)]
        for name in _SHARED:
            shard._children.pop(name, None)
        if job.index > 0:
            shard._children.pop("cxl_mem")
            object.__setattr__(shard, "cxl_mem", self.jobs[0].shards[m].cxl_mem)
        names = _board_stat_names()
        object.__setattr__(shard, "_stats", [s for s in shard._stats if s.name not in names])
        object.__setattr__(shard, "gpu", self.gpus[source])
        object.__setattr__(shard, "cxl_gpu", self.cxl_gpus[source])
        object.__setattr__(shard, "gpu_resource", f"gpu{source}")
        for attr in _UNITS:
            if isinstance(getattr(type(shard), attr), property):
                continue  # derived from the others
            unit = getattr(shard, attr).replace("cxl_mem.", f"cxl_mem{m}.")
            object.__setattr__(shard, attr, unit.replace("cxl_gpu.", f"cxl_gpu{source}."))
        ends = {"host": job.host, "gpu": f"gpu{source}", "mem": f"mem{m}"}
        object.__setattr__(
            shard, "cxl_path", lambda a, b: self.fabric.path(ends.get(a, a), ends.get(b, b))
        )

    # ----- a software checkpoint instead (CXL-D only): the host saves each shard ------------
    @property
    def ft(self):
        """CXL-MEM 0's software checkpoint policy (every shard has a copy; None: the
        paper's protocol)."""
        return getattr(self.shards[0], "ft", None)

    def set_policy(self, policy) -> None:
        """Every CXL-MEM's shard checkpointed by the host with a copy of ``policy`` (a
        SoftwareCheckpoint), each to a store of its own (``shard{m}.ft.store``) and on a
        copy thread and store queue of its own, so the devices save in parallel."""
        if self.system != "cxl-d" or len(self.jobs) > 1:
            raise ConfigError(
                "a software checkpoint on several devices is modelled for CXL-D, one job"
            )
        object.__setattr__(policy, "_parent", None)  # copied alone, not with a board
        copies = [policy] + [copy.deepcopy(policy) for _ in self.shards[1:]]
        for m, (shard, copy_) in enumerate(zip(self.shards, copies, strict=True)):
            shard.ft = copy_
            object.__setattr__(copy_, "unit", f"host.ckpt{m}")
            object.__setattr__(copy_, "store_unit", f"host.ckpt_store{m}")

    @property
    def software(self) -> bool:
        return self.ft is not None

    @property
    def gpu_count(self) -> int:
        """GPUs of one job (the data-parallel replicas its numerics split over)."""
        return len(self.jobs[0].gpus)

    @property
    def shards(self) -> list:
        return self.jobs[0].shards

    # ----- wiring -------------------------------------------------------------------------
    def connect(self, engine, scheduler, spec, batch_size: int, mlp_count=None) -> None:
        """Place the tables, then connect every job's shards to their part of the model,
        each job's in its own partition of the devices."""
        object.__setattr__(self, "engine", engine)
        object.__setattr__(self, "scheduler", scheduler)
        object.__setattr__(self, "spec", spec)
        self._check_index_width(spec)
        if batch_size < self.gpu_count:
            raise ConfigError(
                f"topology: {self.gpu_count} GPUs for a batch of {batch_size} samples; "
                "each GPU needs at least one"
            )
        pmem = self.shards[0].pmem
        most = pmem.controllers * MAX_MODULES_PER_CONTROLLER * pmem.module_capacity
        mems = len(self.shards)
        placement = build_sharding(self.sharding, spec.rows_per_table, spec.row_bytes, mems, most)
        object.__setattr__(self, "placement", placement)
        count = spec.mlp_param_count
        used = [0] * mems
        for job in self.jobs:
            job.history, job.ends, job.copy_slices, job.copy_commit = [], [], {}, None
            for m, shard in enumerate(job.shards):
                rows = placement.shard_rows(m)
                part = dataclasses.replace(
                    spec, num_tables=len(rows), rows_per_table=rows, uncapped_rows=None
                )
                stripe = count // mems + (m < count % mems)
                shard.connect(engine, scheduler, part, batch_size, mlp_count=max(stripe, 1))
                layout = dataclasses.replace(shard.layout, base=used[m], commit=m == 0)
                object.__setattr__(shard, "layout", layout)
                used[m] += layout.size
        if self.software:  # one interval: CPR's rule on the largest shard's checkpoint
            largest = max(
                sh.layout.regions()["data"][1] + sh.layout.mlp_bytes for sh in self.shards
            )
            for shard in self.shards:
                object.__setattr__(shard.ft, "rule_bytes", largest)
        for m, shard in enumerate(self.shards):  # every partition, side by side
            shard.pmem.capacity = f"{used[m]}B"
            shard.pmem.check_modules()
            if used[m] > most:
                raise ConfigError(
                    f"pooling: {len(self.jobs)} jobs' partitions of CXL-MEM {m} take "
                    f"{used[m]:,} B, more than it holds ({most:,} B)"
                )
        for gpu in self.gpus:
            gpu.check_fits(2 * spec.mlp_param_bytes, "the MLPs and their log snapshot")
        for g in range(len(self.gpus)):
            scheduler.resource(f"gpu{g}")
            scheduler.resource(f"cxl_gpu{g}.dcoh")
        scheduler.resource(self.commit_resource)

    @property
    def commit_resource(self) -> str:
        """The coordinator's commit logic (CXL-MEM 0's checkpointing logic): it counts
        one commit's acknowledgements and writes its word, one commit at a time (every
        job's, as the other units of the device), apart from the log DMA channels,
        which would hold a commit behind milliseconds of the next batch's log."""
        return "cxl_mem0.commit"

    def table_memory(self):
        raise ConfigError("a disaggregated board has no single table memory")

    def size_memories(self, layout) -> None:
        """Each shard sizes its own CXL-MEM when it connects."""

    def resources(self) -> tuple[str, ...]:
        return ()

    def record_batch(self, ticks: int, job: int = 0) -> None:
        stats = self.jobs[job].stats
        stats.batchTicks.sample(ticks)
        stats.batches += 1

    # ----- the batch skeleton ------------------------------------------------------------
    def issue_batch(self, demand, job: int = 0) -> BatchOps:
        """One batch of job ``job``: its GPUs, its shards on every CXL-MEM (a pool's
        other jobs' ops are named ``job{j}.op``)."""
        self.scheduler.prefix = f"job{job}." if job else ""
        try:
            return self._issue(demand, self.jobs[job])
        finally:
            self.scheduler.prefix = ""

    def _issue(self, demand, own: Job) -> BatchOps:
        job = own.index
        s, n, shards, gpus = self.scheduler, demand.batch, own.shards, own.gpus
        prev = own.history[-1] if own.history else None
        if job == 0:
            self.sample_reuse(demand, prev)
        count = len(gpus)
        sizes = demand.gpu_batch_sizes if count > 1 else [demand.batch_size]
        kernels = list(demand.gpu_kernels) or [demand.kernels]
        parts = self.placement.split(demand, sizes, prev.extra["demands"] if prev else None)
        parts = [
            dataclasses.replace(
                part, kernels=kernels[m % count], mlp_param_bytes=4 * shard.layout.mlp_count
            )
            for m, (part, shard) in enumerate(zip(parts, shards, strict=True))
        ]
        before = [shard._history[-1] if shard._history else None for shard in shards]
        gate = [op for m, sh in enumerate(shards) for op in sh.next_batch_gate(before[m])]
        gate = list(dict.fromkeys(gate))
        copy_gate = self._copy_gate(own)
        for shard in shards:
            committed = prev.extra["commit"] if prev else None
            object.__setattr__(shard, "log_gate", (committed,) if committed else ())
            object.__setattr__(shard, "copy_gate", copy_gate or ())

        bottoms = []
        for g in range(count):
            deps = list(gate) + ([prev.extra["mlp_updates"][g]] if prev else [])
            for m, shard in enumerate(shards):
                if m % count == g and copy_gate is not None:
                    deps += shard.bottom_deps(n, parts[m], before[m])
            bottoms.append(
                self._gpu_op("bottom_fwd", "bottom_mlp", n, gpus[g], kernels[g]["bottom_fwd"], deps)
            )

        lookups, to_gpus, shard_ops = [], [], []
        for m, shard in enumerate(shards):
            part = parts[m]
            indices = s.op(
                "indices", "transfer", n, shard.indices_resource,
                lambda now, shard=shard, part=part: self._send_indices(shard, part), deps=gate,
            )  # fmt: skip
            lookup = s.op(
                "lookup", "embedding", n, shard.lookup_resource,
                lambda now, shard=shard, part=part: shard.lookup(part),
                deps=[indices, *shard.lookup_deps(before[m])],
                start_with=shard.lookup_start(before[m]),
            )  # fmt: skip
            ready = shard.pooled_ready(part, lookup, before[m])
            to_gpu = s.op(
                "pooled_to_gpu", "transfer", n, shard.to_gpu_resource,
                lambda now, m=m: self._all_to_gpus(m, gpus, sizes), deps=[ready],
            )  # fmt: skip
            lookups.append(lookup)
            to_gpus.append(to_gpu)

        tops, grads = [], []
        for g in range(count):
            top_kernels = self._combine(sizes[g]) + kernels[g]["interaction_top_fwd"]
            top_kernels += kernels[g]["top_bwd_interaction"]
            top = self._gpu_op(
                "interaction_top", "top_mlp", n, gpus[g], top_kernels, [bottoms[g], *to_gpus]
            )
            tops.append(top)
            grads.append(
                s.op(
                    "grads_to_mem",
                    "transfer",
                    n,
                    f"cxl_gpu{gpus[g]}.dcoh",
                    lambda now, g=g: self._all_to_mems(gpus[g], sizes[g]),
                    deps=[top],
                )  # fmt: skip
            )
        arrived = grads[0] if len(grads) == 1 else s.op(
            "grads_joined", "idle", n, None, lambda now: 0, deps=grads
        )  # fmt: skip

        mlp_deps = []
        for m, shard in enumerate(shards):
            g = m % count
            ops = BatchOps(
                n, parts[m], lookups[m], [bottoms[g], to_gpus[m]], tops[g], grads=arrived
            )
            shard_ops.append(ops)
            mlp_deps += shard.mlp_update_deps(ops, before[m])
        self._watch_copy(own, n, shard_ops)
        updates_mlp = self._mlp_update(n, gpus, kernels, tops, mlp_deps, demand.mlp_param_bytes)
        update_deps = []
        for m, shard in enumerate(shards):
            shard_ops[m].bottom_bwd = updates_mlp[m % count]
            update_deps.append(shard.update_deps(shard_ops[m], before[m]))
        durable = [ops.extra[name] for ops in shard_ops for name in _DURABLE if name in ops.extra]
        # a software checkpoint has no per-batch log to commit across the devices
        commit = None if self.software else self.commit(own, "commit", n, "commit", durable)
        closing = [*updates_mlp, *([commit] if commit else [])]
        for m, shard in enumerate(shards):
            ops = shard_ops[m]
            ops.update = s.op(
                "update", "embedding", n, shard.embedding_resource,
                lambda now, shard=shard, part=parts[m]: shard.update(part),
                deps=[arrived, *update_deps[m], *self.update_commit_deps(ops, commit)],
            )  # fmt: skip
            closing += [ops.update, *shard.checkpoint(ops, before[m])]
        end = s.op("batch_end", "idle", n, None, lambda now: 0, deps=closing)
        own.ends.append(end.record.uid)
        for shard, ops in zip(shards, shard_ops, strict=True):
            ops.end = end
            shard._history.append(ops)
            if len(shard._history) > 3:
                shard._history.pop(0)
        joined = lookups[0] if len(lookups) == 1 else s.op(
            "lookups_joined", "idle", n, None, lambda now: 0, deps=lookups
        )  # fmt: skip
        ops = BatchOps(n, demand, joined, bottoms + to_gpus, tops[0], updates_mlp[0], None, end)
        ops.extra.update(demands=parts, mlp_updates=updates_mlp, commit=commit)
        own.history = own.history[-2:] + [ops]
        return ops

    # ----- one consistent checkpoint across devices ------------------------------------------
    def update_commit_deps(self, ops: BatchOps, commit: Op | None) -> list[Op]:
        """Redo (a shard with a ``ckpt_log``) applies batch N in place only after the
        commit of N: a device that applied N while another had not logged it would leave
        no batch that every device can recover to. Undo logs keep the old values, so
        their updates need not wait."""
        return [commit] if "ckpt_log" in ops.extra else []

    def commit(self, own: Job, name: str, n: int, word: str, deps: list[Op]) -> Op:
        """The coordinator's commit (``commit`` of batch n, or ``mlp_commit`` of an MLP log
        copy), once ``deps`` (what makes it durable on every device) have ended: every
        other device's acknowledgement, then the 8 B word ``word`` persisted on the
        coordinator's PMEM (a flag's write: it must reach the persistence domain)."""
        coordinator, stats = own.shards[0], own.stats

        def body() -> Iterator[Stage]:
            if name == "commit":
                stats.commits += 1
            else:
                stats.mlpCommits += 1
            yield self._acks(own)
            offset = np.array([coordinator.layout.commit_offset(word)], dtype=np.int64)
            yield stage(coordinator.pmem.write(offset, 8))

        prefix = self.scheduler.prefix  # an mlp_commit is made at run time, not at issue
        self.scheduler.prefix = f"job{own.index}." if own.index else ""
        try:
            return self.scheduler.op(
                name, "checkpoint", n, self.commit_resource, lambda now: body(), deps=deps,
                background=True,
            )  # fmt: skip
        finally:
            self.scheduler.prefix = prefix

    def _acks(self, own: Job) -> Stage:
        """Every CXL-MEM but the coordinator posts it an acknowledgement over CXL.io
        through the fabric, all at once (their flows share the links they cross); the
        coordinator's own is local: no traffic."""
        paths = [self.fabric.path(f"mem{m}", "mem0") for m in range(1, len(own.shards))]
        tlp = TLP_HEADER_BYTES + self.commit_ack_bytes
        own.stats.commitAckBytes += tlp * len(paths)
        own.stats.commitSwitchedBytes += tlp * sum(len(path.switches) for path in paths)
        return merged(mmio_write(path, self.commit_ack_bytes) for path in paths)

    def _copy_gate(self, own: Job) -> tuple[Op, ...] | None:
        """Relaxed MLP log copies start on every shard in the same batch: None (no shard
        may start one) while any shard's copy is in flight or the last copy's
        ``mlp_commit`` has not ended; else what the new copy waits for (that commit).
        The shards' own rule (``mlp_log_gap``) is the same on every shard. Protocols
        without copies: ()."""
        if not isinstance(own.shards[0], CxlBoard):
            return ()
        copies = [shard._copy for shard in own.shards]
        if any(copy["moved"] < copy["total"] for copy in copies):
            return None
        if copies[0]["id"] == 0:
            return ()  # no copy yet
        if own.copy_commit is None or own.copy_commit[0] != copies[0]["id"]:
            return None
        committed = own.copy_commit[1]
        return (committed,) if committed.record.end >= 0 else None

    def _watch_copy(self, own: Job, n: int, shard_ops: list[BatchOps]) -> None:
        """Relaxed: once batch n's MLP-log slices have ended, commit the copy if they
        completed it on the last shard (``mlp_commit``, after each shard's latest slice)."""
        slices = {m: ops.extra["mlp_slice"] for m, ops in enumerate(shard_ops)
                  if "mlp_slice" in ops.extra}  # fmt: skip
        if not slices:
            return
        own.copy_slices.update(slices)
        latest = list(own.copy_slices.values())

        def watch() -> Iterator:
            yield self.engine.all_of([op.done for op in latest])
            copies = [shard._copy for shard in own.shards]
            copy = copies[0]["id"]
            logged = all(state["moved"] >= state["total"] for state in copies)
            if logged and (own.copy_commit is None or own.copy_commit[0] != copy):
                word = f"mlpc{copies[0]['slot']}"
                own.copy_commit = (copy, self.commit(own, "mlp_commit", n, word, latest))

        self.engine.process(watch())

    def absorb(self, scheduler) -> None:
        """Also each job's commit latencies, and the commit ops' ticks on each batch's
        critical path (the walk of simulate/run/job.py, commits told apart from the logs)."""
        super().absorb(scheduler)
        records = [
            dataclasses.replace(r, category="commit") if _op_name(r) in _COMMITS else r
            for r in scheduler.records
        ]
        for job in self.jobs:
            prefix = f"job{job.index}." if job.index else ""
            for record in scheduler.records:
                if record.end >= 0 and record.name in (prefix + name for name in _COMMITS):
                    job.stats.commitTicks.sample(record.end - record.ready)
            start = 0
            for uid in job.ends:
                path = critical_path(records, uid, start)
                job.stats.commitCriticalTicks.sample(path.get("commit", 0))
                start = records[uid].end

    def _gpu_op(self, name, category, n, g, kernels, deps) -> Op:
        gpu = self.gpus[g]
        return self.scheduler.op(
            name, category, n, f"gpu{g}", lambda now: gpu.run(kernels), deps=deps
        )

    def _mlp_update(self, n, gpus, kernels, tops, mlp_deps, nbytes) -> list[Op]:
        """Backward, the all-reduce and the optimizer step; the step waits for the MLP
        log's stripes. One GPU: backward and step in one op, as a single device runs."""
        if len(gpus) == 1:
            step = kernels[0]["bottom_bwd"]
            return [
                self._gpu_op("bottom_bwd", "bottom_mlp", n, gpus[0], step, [tops[0], *mlp_deps])
            ]
        backward = [
            self._gpu_op(
                "bottom_bwd", "bottom_mlp", n, gpu, _backward(kernels[g]["bottom_bwd"]), [tops[g]]
            )
            for g, gpu in enumerate(gpus)
        ]
        reduce = self.scheduler.op(
            "allreduce", "allreduce", n, None, lambda now: self.allreduce(nbytes, gpus),
            deps=backward,
        )  # fmt: skip
        return [
            self._gpu_op(
                "mlp_step",
                "bottom_mlp",
                n,
                gpu,
                _step(kernels[g]["bottom_bwd"]),
                [reduce, *mlp_deps],
            )
            for g, gpu in enumerate(gpus)
        ]

    def _combine(self, samples: int) -> list[DeviceCopy]:
        """Row-wise: the GPU adds each bag's M partial sums (reads M vectors, writes one)."""
        mems = len(self.shards)
        if self.sharding != "row" or mems == 1:
            return []
        vectors = samples * self.spec.num_tables
        flops = vectors * self.spec.embedding_dim * (mems - 1)
        return [DeviceCopy("combine_partials", flops, (mems + 1) * vectors * self.spec.row_bytes)]

    # ----- data movement -----------------------------------------------------------------
    def _send_indices(self, shard, part) -> Stage:
        """The host writes a CXL-MEM its tables' indices over CXL.io (MMIO)."""
        return mmio_write(shard.cxl_path("host", "mem"), index_payload(part, self.index_bytes))

    def _all_to_gpus(self, m: int, gpus: list[int], sizes: list[int]) -> Stage:
        """CXL-MEM m's DCOH flushes each GPU its samples' pooled vectors of m's tables."""
        dcoh = self.shards[m].cxl_mem.dcoh
        per_sample = self.placement.pooled_tables(m) * self.spec.row_bytes
        return merged(
            dcoh.flush(self.fabric.path(f"mem{m}", f"gpu{gpu}"), size * per_sample)
            for gpu, size in zip(gpus, sizes, strict=True)
        )

    def _all_to_mems(self, gpu: int, samples: int) -> Stage:
        """A GPU's DCOH flushes every CXL-MEM the bag gradients of the bags it pooled."""
        dcoh, row = self.cxl_gpus[gpu].dcoh, self.spec.row_bytes
        return merged(
            dcoh.flush(self.fabric.path(f"gpu{gpu}", f"mem{m}"), samples * tables * row)
            for m, tables in enumerate(map(self.placement.pooled_tables, range(len(self.shards))))
        )

    def allreduce(self, nbytes: int, gpus: list[int] | None = None) -> Stage:
        """Ring all-reduce of ``nbytes`` over ``gpus`` (default: job 0's): each GPU writes
        2(G-1) chunks of nbytes/G to the next over the fabric (a flow per GPU, sharing
        every link it crosses), and each of the 2(G-1) steps waits for its first line's
        round trip (a step's chunk can only go once the previous step's has arrived)."""
        gpus = self.jobs[0].gpus if gpus is None else gpus
        count = len(gpus)
        chunk = math.ceil(nbytes / count)
        stages, first = [], 0
        for g, gpu in enumerate(gpus):
            following = gpus[(g + 1) % count]
            if self.allreduce_link == "nvlink":
                ports = getattr(self, f"nvlink{gpu}"), getattr(self, f"nvlink{following}")
                stages.append(bulk_write(CxlPath([(ports[0], "up"), (ports[1], "down")]),
                                         2 * (count - 1) * chunk))  # fmt: skip
            else:
                path = self.fabric.path(f"gpu{gpu}", f"gpu{following}")
                window = self.cxl_gpus[gpu].dcoh.max_outstanding
                stages.append(mem_write(path, 2 * (count - 1) * chunk, max_outstanding=window))
            first = max(first, stages[-1].latency)
        stage = merged(stages)
        stage.latency = 2 * (count - 1) * first
        return stage


def _op_name(record) -> str:
    """An op's name without a pooled job's ``job{j}.`` prefix."""
    return record.name.rpartition(".")[2]


@functools.cache
def _board_stat_names() -> frozenset[str]:
    """The stats every board keeps of whole batches: the shared board's, not a shard's."""
    return frozenset(stat.name for stat in TrainingBoard()._stats)


def bulk_write(path: CxlPath, nbytes: int) -> Stage:
    """A GPU's posted writes over a direct link: its packets' serialization, one way."""
    path.record(nbytes)
    return Stage([Flow(path.needs(nbytes))], path.one_way_ticks(0))


def merged(stages) -> Stage:
    """Stages that run together: all their flows, then the longest latency."""
    stages = list(stages)
    return Stage(
        [flow for stage in stages for flow in stage.flows],
        max((stage.latency for stage in stages), default=0),
    )


def _step(kernels: list) -> list:
    """The optimizer's kernels of a backward op (they run after the all-reduce)."""
    return [k for k in kernels if getattr(k, "kind", "") == "optimizer"]


def _backward(kernels: list) -> list:
    """The gradient kernels of a backward op (before the all-reduce)."""
    return [k for k in kernels if getattr(k, "kind", "") != "optimizer"]
