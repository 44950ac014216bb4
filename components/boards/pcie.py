"""The PCIe system: near-data embedding ops on a PCIe FPGA card with emulated PMEM.

Lookup and update run next to the card's PMEM, but every transfer is software-driven:
pooled vectors go card -> host -> GPU and gradients GPU -> host -> card, each leg a
cudaMemcpy-style copy followed by a synchronization, and the redo checkpoint pulls
the MLPs off the GPU the same way before the card logs them.
"""

from __future__ import annotations

from collections.abc import Iterator

from components.boards.base import BatchOps, index_payload
from components.boards.near_memory import NearMemoryBoard
from components.compute.nmp import NearMemoryEngine
from components.interconnect.pcie import CudaRuntime, PcieLink
from components.memory.pmem import Pmem
from components.persistence.image import log_slot
from components.sim.schedule import Op, Stage


class PcieBoard(NearMemoryBoard):
    system = "pcie"
    embedding_resource = "card.nmp"
    to_gpu_resource = "pcie"
    to_mem_resource = "pcie"

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        self.pcie = PcieLink()
        self.card_link = PcieLink()
        self.cuda = CudaRuntime()
        self.nmp = NearMemoryEngine()
        self.pmem = Pmem()

    def resources(self) -> tuple[str, ...]:
        return ("gpu", "card.nmp", "pcie")

    def send_indices(self, demand) -> Iterator[Stage]:
        return self._copy(self.card_link, index_payload(demand, self.index_bytes), "down")

    def to_gpu(self, nbytes: int) -> Iterator[Stage]:
        yield from self._copy(self.card_link, nbytes, "up")
        yield from self._copy(self.pcie, nbytes, "down")

    def to_mem(self, nbytes: int) -> Iterator[Stage]:
        yield from self._copy(self.pcie, nbytes, "up")
        yield from self._copy(self.card_link, nbytes, "down")

    def _copy(self, link: PcieLink, nbytes: int, direction: str) -> Iterator[Stage]:
        yield self.cuda.memcpy(link, nbytes, direction)
        yield self.cuda.sync()

    def update_deps(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        """Software redo checkpoint after the step's compute: MLPs GPU -> host, then DMA'd
        to the card, whose log writes stream behind the incoming data; the rows are
        updated in place only after the log and its flag (log before apply)."""
        s, n, demand = self.scheduler, ops.batch, ops.demand
        pull = s.op(
            "ckpt_mlp_pull",
            "checkpoint",
            n,
            "pcie",
            lambda now: self._copy(self.pcie, demand.mlp_param_bytes, "up"),
            deps=[ops.bottom_bwd, ops.grads],
        )
        log = s.op(
            "ckpt_log",
            "checkpoint",
            n,
            "card.nmp",
            lambda now: self.redo_log(demand, log_slot(n)),
            deps=[pull],
        )
        return [log]

    def redo_log(self, demand, slot: int) -> Iterator[Stage]:
        """Copy the updated rows into the log, receive and log the MLPs, set the flag."""
        nbytes = demand.mlp_param_bytes
        yield self.copy_rows(demand, slot)
        self.nmp.start_mlp_log(nbytes)
        self.nmp.count_mlp(nbytes)
        inbound = self.cuda.memcpy(self.card_link, nbytes, "down")
        yield self.mlp_log_writes(slot, 0, nbytes, header=True, along=inbound)
        yield self.cuda.sync()
        yield self.set_flag(f"emb{slot}")
