"""What a software checkpoint store holds across power failures, and reading it back.

The store (an NVMe SSD, durable) keeps every checkpoint a policy wrote
(components/boards/software_ft.py): a full one (every row and the MLPs) or a
differential (the rows modified since the previous checkpoint and the MLPs), rows FP32
or quantized (components/persistence/quantize.py). A checkpoint's rows are written in
row order, then its MLPs, then its commit record; it counts once the commit record is
durable (its write op has ended). A power failure in the middle of a write leaves a
torn checkpoint: the rows written by then, no MLPs, no commit record, and it never
completes. ``ChainRecovery`` reads the newest complete full checkpoint and every
complete differential chained after it; a torn newer full falls back to the previous
chain, which the store keeps until a newer full is complete.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from components.persistence.quantize import dequantize, quantize

NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Payload:
    """A checkpoint's rows as stored: FP32 ``values``, or ``bits``-bit codes with each
    row's min and step."""

    values: np.ndarray | None = None
    codes: np.ndarray | None = None
    low: np.ndarray | None = None
    step: np.ndarray | None = None
    bits: int = 32

    def head(self, count: int) -> Payload:
        """The first ``count`` rows (a torn write's durable prefix)."""
        parts = [
            None if a is None else a[:count] for a in (self.values, self.codes, self.low, self.step)
        ]
        return Payload(*parts, self.bits)


@dataclass(frozen=True)
class Stored:
    """One checkpoint on the store. ``seq``: write order; ``base``: the seq of the
    checkpoint a differential applies on (None for a full); ``batch``: the batch
    whose state it holds; ``rows``: the row ids it holds, in write order; ``begin``/
    ``end``: ticks its store write began and its commit record became durable
    (``NEVER``: torn, with only the first ``durable`` rows written)."""

    seq: int
    base: int | None
    batch: int
    rows: np.ndarray
    payload: Payload
    mlp: np.ndarray
    stored: int
    begin: int
    end: int
    durable: int | None = None

    @property
    def full(self) -> bool:
        return self.base is None

    def complete(self, tick: int) -> bool:
        return self.end <= tick


class CheckpointStore:
    """The checkpoints written so far (in write order), immutable: a power failure
    returns the store as it survived (``at``)."""

    def __init__(self, checkpoints: tuple[Stored, ...] = ()) -> None:
        self.checkpoints = tuple(checkpoints)

    def __len__(self) -> int:
        return len(self.checkpoints)

    def next_seq(self) -> int:
        return self.checkpoints[-1].seq + 1 if self.checkpoints else 0

    def added(self, *more: Stored) -> CheckpointStore:
        return CheckpointStore(self.checkpoints + more)

    def prune(self, tick: int) -> CheckpointStore:
        """Without what no recovery at ``tick`` or later reads: everything before the
        newest full checkpoint complete by then."""
        fulls = [c.seq for c in self.checkpoints if c.full and c.complete(tick)]
        if not fulls:
            return self
        return CheckpointStore(tuple(c for c in self.checkpoints if c.seq >= fulls[-1]))

    def at(self, tick: int) -> CheckpointStore:
        """The store after the power fails at ``tick``: writes not begun are gone, the
        one in flight is torn at the row its share of the write interval reached."""
        kept = []
        for c in self.checkpoints:
            if c.begin > tick:
                continue
            if not c.complete(tick):
                share = (tick - c.begin) / max(c.end - c.begin, 1) if c.end != NEVER else 1.0
                count = c.durable if c.durable is not None else int(len(c.rows) * min(share, 1.0))
                c = replace(c, end=NEVER, durable=count)
            kept.append(c)
        return CheckpointStore(tuple(kept))


@dataclass
class ChainState:
    """A recovery's result: the batch whose state was read back (-1: none, the initial
    weights), its tables and MLPs, the checkpoints read (seqs) and their bytes."""

    batch: int
    table: np.ndarray
    mlp: np.ndarray
    chain: list[int]
    bytes_read: int


class ChainRecovery:
    """Reads back the newest complete checkpoint chain (the real policies' recovery;
    tests/protocol_mutants.py breaks it)."""

    def encode(self, values: np.ndarray, bits: int) -> Payload:
        """Rows as the policy writes them: FP32, or quantized per row."""
        if bits == 32:
            return Payload(values=np.array(values, dtype=np.float32, copy=True), bits=32)
        codes, low, step = quantize(values, bits)
        return Payload(codes=codes, low=low, step=step, bits=bits)

    def decode(self, payload: Payload) -> np.ndarray:
        if payload.bits == 32:
            return payload.values
        return dequantize(payload.codes, payload.low, payload.step)

    def chain(self, store: CheckpointStore, tick: int) -> list[Stored]:
        """The newest complete full checkpoint and the complete differentials chained
        after it, oldest first (empty: nothing complete)."""
        done = [c for c in store.checkpoints if c.complete(tick)]
        fulls = [c for c in done if c.full]
        if not fulls:
            return []
        out = [fulls[-1]]
        by_base = {c.base: c for c in done if not c.full}
        while out[-1].seq in by_base:
            out.append(by_base[out[-1].seq])
        return out

    def recover(
        self,
        store: CheckpointStore,
        tick: int,
        initial: tuple[np.ndarray, np.ndarray],
        volatile: np.ndarray | None = None,
    ) -> ChainState:
        """The state of the newest complete chain, or ``initial`` (tables, MLPs) when
        none is. ``volatile``: what host memory held at the failure, lost with the
        power (a real recovery never reads it)."""
        chain = self.chain(store, tick)
        table, mlp = initial[0].copy(), initial[1].copy()
        for c in chain:
            self.apply(table, c)
            mlp = c.mlp.copy()
        batch = chain[-1].batch if chain else -1
        read = int(sum(c.stored for c in chain))
        return ChainState(batch, table, mlp, [c.seq for c in chain], read)

    def apply(self, table: np.ndarray, c: Stored) -> None:
        table[c.rows] = self.decode(c.payload)
