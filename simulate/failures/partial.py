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
    # CPR's prioritised checkpoints (None: every checkpoint full): after a full one,
    # ``chain`` checkpoints of chosen rows, each taking ``partial_save_s``, then a full
    # one again; "mfu" saves the same most-used rows each time, which hold ``coverage``
    # of a shard's lookups; "ssu" a fresh uniform sample, ``coverage`` of the used rows
    prioritised: str | None = None
    chain: int = 0
    partial_save_s: float = 0.0
    coverage: float = 1.0

    def unsaved(self, k: int) -> float:
        """Batches' worth of the failed shard's updates a recovery loses beyond those
        since the newest checkpoint, when ``k`` prioritised checkpoints followed the
        newest full one: a lookup in the interval before prioritised checkpoint j is
        lost unless a checkpoint from j on saved its row. MFU saves the same rows every
        time: the lookups of the rows outside them, 1 - coverage of each of the k
        intervals. SSU samples each used row with probability ``coverage`` at each
        checkpoint, independently: the interval j back from the newest is lost with
        (1 - coverage)^j (counting its rows as used again in every later interval,
        as a period of thousands of batches does with the lookups' popular rows)."""
        if self.prioritised is None or k == 0:
            return 0.0
        if self.prioritised == "mfu":
            return (1 - self.coverage) * k * self.interval
        miss = 1 - self.coverage
        return self.interval * sum(miss**j for j in range(1, k + 1))

    @property
    def mean_save(self) -> float:
        """A checkpoint's save over a cycle: the full one and its chain."""
        return (self.save_s + self.chain * self.partial_save_s) / (self.chain + 1)

    def save_at(self, position: int) -> float:
        """The save of the checkpoint at ``position`` (0: the first after a start or a
        recovery, a full one) of its cycle."""
        return self.save_s if position % (self.chain + 1) == 0 else self.partial_save_s


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
    end of the last recovery) each take one node down. Checkpoints come every
    ``interval`` batches from the start or the last recovery, the first of them full
    (a recovered shard starts a new chain), then ``chain`` prioritised ones, then a
    full one again.

    Lost samples (partial recovery) are the failed shard's share (1 / shards) of the
    samples whose updates to it the recovery does not hand back: every batch since the
    newest checkpoint, and with prioritised checkpoints the updates to rows they did
    not save since the newest full one (``ShardedScheme.unsaved``), counted as whole
    batches' worth of the shard's updates. A failure before the first checkpoint after
    a recovery loses the batches since that recovery only (the older chain's unsaved
    rows are not counted again)."""
    s = scheme
    train = s.interval * s.batch_s
    cycle = (s.chain + 1) * train + s.save_s + s.chain * s.partial_save_s
    wall = saved = loaded = rerun = lost = 0.0
    processed = failures = 0
    for gap in gaps:
        need = batches - processed
        checkpoints = need // s.interval
        fulls = -(-checkpoints // (s.chain + 1))
        cost = fulls * s.save_s + (checkpoints - fulls) * s.partial_save_s
        finish = need * s.batch_s + cost
        if gap >= finish:
            wall += finish
            saved += cost
            break
        whole, rest = divmod(gap, cycle)  # a cycle: a full checkpoint and its chain
        saved += whole * (s.save_s + s.chain * s.partial_save_s)
        done = 0  # checkpoints completed in the cycle the failure hit
        while rest >= train + s.save_at(done):
            rest -= train + s.save_at(done)
            saved += s.save_at(done)
            done += 1
        ran = min(rest, train)  # batch time since the last checkpoint
        since = min(int(rest // s.batch_s), s.interval)  # whole batches among it
        saved += rest - ran  # the share of the one cut
        wall += gap + s.load_s
        loaded += s.load_s
        failures += 1
        processed += (int(whole) * (s.chain + 1) + done) * s.interval
        if s.partial:  # the other shards keep the batches since; the one in flight reruns
            processed += since
            chained = done - 1 if done else s.chain if whole else 0  # since the full one
            lost += (since + s.unsaved(chained)) * samples_per_batch / s.shards
            rerun += ran - since * s.batch_s
        else:
            rerun += ran
    else:
        raise ValueError(f"the failure gaps ran out before {batches} batches were processed")
    parts = (saved, loaded, rerun, lost)
    return ShardedRun(scheme, batches, samples_per_batch, wall, failures, *parts)
