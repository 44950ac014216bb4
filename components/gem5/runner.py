"""Runs memory ops in gem5 one at a time and reads each one's duration back.

An op starts its generator with its streams followed by an exit state, so
``m5.simulate()`` returns once the last request is issued; bounded ``m5.simulate(step)``
runs then drain it until the generator's response counters (totalReads + totalWrites)
account for every request. The op's duration is the tick of that last step minus its
start, to within ``resolution`` ticks. Ops run in isolation (nothing else in flight), so
the durations are per-op costs for the scheduler, not a replay of the overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.gem5.ops import MemoryOp
from components.gem5.system import Gem5System
from components.gem5.translate import PACKET_BYTES, StreamSpec, pow2_at_least

FAILURE_CAUSE = "trainingcxl power failure"
ISSUE_DONE = "has encountered the exit state"


class PowerFailure(Exception):
    """A scheduled failure tick was reached while an op ran."""

    def __init__(self, tick: int, op: MemoryOp) -> None:
        super().__init__(f"power failure at tick {tick} during {op.name} of batch {op.batch}")
        self.tick, self.op = tick, op


@dataclass
class Gem5Runner:
    sim: Gem5System
    resolution: int = 10_000  # 10 ns drain-polling step
    drain_limit: int = 10**12  # 1 s without the last response is a broken system

    def schedule_failure(self, tick: int) -> None:
        """Cut the power at an absolute gem5 tick (the next op to reach it raises)."""
        import m5

        m5.scheduleTickExitAbsolute(tick, FAILURE_CAUSE)

    def run_op(self, op: MemoryOp) -> int:
        """Ticks from issuing op's first request to receiving its last response."""
        import m5

        gen = self.sim.generators[op.generator]
        if op.packets == 0:
            return 0
        target = _responses(gen) + op.packets
        start = m5.curTick()
        gen.start(self._states(gen, op.streams))
        cause = m5.simulate().getCause()
        self._check(cause, op, issue=True)
        while _responses(gen) < target:
            if m5.curTick() - start > self.drain_limit:
                raise RuntimeError(f"{op.name} of batch {op.batch}: responses never arrived")
            self._check(m5.simulate(self.resolution).getCause(), op, issue=False)
        return m5.curTick() - start

    def _check(self, cause: str, op: MemoryOp, issue: bool) -> None:
        import m5

        if cause == FAILURE_CAUSE:
            raise PowerFailure(m5.curTick(), op)
        if issue and ISSUE_DONE not in cause:
            raise RuntimeError(f"gem5 stopped during {op.name}: {cause}")

    def _states(self, gen, streams: tuple[StreamSpec, ...]):
        for stream in streams:
            yield self._state(gen, stream)
        yield gen.createExit(0)

    def _state(self, gen, s: StreamSpec):
        """Duration 0: the state lasts until its data limit, then the next one starts."""
        common = (s.block, s.period_ticks, s.period_ticks, s.read_percent, s.data_limit)
        if s.kind == "linear":
            return gen.createLinear(0, s.start, s.end, *common)
        if s.kind == "random":
            return gen.createRandom(0, s.start, s.end, *common)
        import m5.internal.params as params

        mapping = params.enum_AddrMap.__members__["RoRaBaCoCh"]
        row_buffer = pow2_at_least(s.seq_packets * PACKET_BYTES)
        banks = self.sim.banks
        return gen.createNvm(
            0, s.start, s.end, *common, s.seq_packets, row_buffer, banks, banks, mapping, 1
        )


def _responses(gen) -> int:
    """Responses the generator has received so far (its totalReads + totalWrites stats)."""
    group = gen.getCCObject()
    return int(sum(group.resolveStat(name).value for name in ("totalReads", "totalWrites")))
