"""CPR's partial recovery where it pays: tables sharded over several nodes.

Each of ``shards`` nodes (a host, or a host driving a CXL-MEM) holds an equal share of
the embedding tables and checkpoints it to a store of its own; the nodes save in
parallel while training waits. A failure takes one node down. Full recovery: every
node reloads its shard from the last checkpoint and the batches since are run again.
Partial recovery (CPR, Maeng et al., MLSys 2021): only the failed node reloads its
shard, the others keep their state, training goes on from where the data reader is,
and the failed shard's updates since the checkpoint are lost (its share of those
batches' samples). A long run reports what failure tolerance costs in three separate
parts, as CPR does: time saving checkpoints, time loading them, time rerunning work;
and, beside them, the samples whose updates were lost.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ShardedScheme:
    """What the engine measured of one node's shard (seconds), and the recovery rule."""

    name: str
    batch_s: float  # one batch of the whole job
    save_s: float  # one checkpoint: every node saves its shard at once, training waits
    load_s: float  # one shard read back into its node (full recovery: all at once)
    interval: int  # batches between checkpoints
    shards: int  # nodes holding a share of the tables each
    partial: bool  # True: only the failed node reloads, its shard's updates are lost


@dataclass(frozen=True)
class ShardedRun:
    scheme: ShardedScheme
    batches: int
    samples_per_batch: int
    wall_s: float
    failures: int
    save_s: float  # checkpoints written (one cut by a failure: the time it ran)
    load_s: float  # checkpoints read back
    rerun_s: float  # work run again: the batches since the checkpoint, or the one in flight
    lost_samples: float  # samples whose updates to the failed shard were given up

    @property
    def overhead(self) -> float:
        """Share of wall time spent saving, loading and rerunning."""
        return (self.save_s + self.load_s + self.rerun_s) / self.wall_s

    @property
    def lost_share(self) -> float:
        """Lost samples over the samples trained (CPR's portion of lost samples)."""
        return self.lost_samples / (self.batches * self.samples_per_batch)


def lost_share_interval(
    target: float, shards: int, mtbf_s: float, batch_s: float, save_s: float
) -> int:
    """The longest interval (batches) whose expected lost share stays within ``target``
    under partial recovery. A failure lands uniformly in a period of I batches and a
    save; it loses the batches since the checkpoint (on average I / 2 while training,
    all I while the save that would have held them runs) for one shard of ``shards``,
    once per MTBF, so the lost share is (I x batch / 2 + save) / (shards x MTBF) (while a
    period is short against the MTBF; longer ones see failures early in them more
    often, and lose less)."""
    return max(1, math.floor(2 * (target * shards * mtbf_s - save_s) / batch_s))


def sharded_run(
    scheme: ShardedScheme, batches: int, samples_per_batch: int, gaps: Iterable[float]
) -> ShardedRun:
    """Process ``batches`` batches; failures ``gaps`` apart (from the start, or from the
    end of the last recovery) each take one node down."""
    s = scheme
    period = s.interval * s.batch_s + s.save_s
    wall = saved = loaded = rerun = lost = 0.0
    processed = failures = 0
    for gap in gaps:
        need = batches - processed
        checkpoints = need // s.interval
        finish = need * s.batch_s + checkpoints * s.save_s
        if gap >= finish:
            wall += finish
            saved += checkpoints * s.save_s
            break
        whole, rest = divmod(gap, period)
        ran = min(rest, s.interval * s.batch_s)  # batch time since the last checkpoint
        since = min(int(rest // s.batch_s), s.interval)  # whole batches among it
        saved += whole * s.save_s + (rest - ran)  # and the share of the one cut
        wall += gap + s.load_s
        loaded += s.load_s
        failures += 1
        processed += int(whole) * s.interval
        if s.partial:  # the other shards keep the batches since; the one in flight reruns
            processed += since
            lost += since * samples_per_batch / s.shards
            rerun += ran - since * s.batch_s
        else:
            rerun += ran
    else:
        raise ValueError(f"the failure gaps ran out before {batches} batches were processed")
    parts = (saved, loaded, rerun, lost)
    return ShardedRun(scheme, batches, samples_per_batch, wall, failures, *parts)
