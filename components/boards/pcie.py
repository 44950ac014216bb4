"""The PCIe system: near-data embedding ops on a PCIe FPGA card with emulated PMEM.

Lookup and update run next to the card's PMEM, but every transfer is software-driven:
pooled vectors go card -> host -> GPU and gradients GPU -> host -> card, each leg a
cudaMemcpy-style copy followed by a synchronization, and the redo checkpoint pulls
the MLPs off the GPU the same way before the card logs them.
"""

from __future__ import annotations

from components.boards.base import BatchOps, index_payload
from components.boards.near_memory import NearMemoryBoard
from components.compute.nmp import NearMemoryEngine
from components.interconnect.pcie import CudaRuntime, PcieLink
from components.memory.pmem import Pmem
from components.sim.schedule import Op


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

    def indices_ticks(self, demand) -> int:
        return self._copy(self.card_link, index_payload(demand, self.index_bytes), "down")

    def to_gpu_ticks(self, nbytes: int) -> int:
        return self._copy(self.card_link, nbytes, "up") + self._copy(self.pcie, nbytes, "down")

    def to_mem_ticks(self, nbytes: int) -> int:
        return self._copy(self.pcie, nbytes, "up") + self._copy(self.card_link, nbytes, "down")

    def _copy(self, link: PcieLink, nbytes: int, direction: str) -> int:
        copy = self.cuda.memcpy_ticks(link, nbytes, direction, record=True)
        return copy + self.cuda.sync_ticks(record=True)

    def update_deps(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        """Software redo checkpoint after the step's compute: MLPs GPU -> host, then DMA'd
        to the card, whose log writes stream behind the incoming data; the rows are
        updated in place only after the log (log before apply)."""
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
            lambda now: self.redo_log_ticks(demand, now),
            deps=[pull],
        )
        return [log]

    def redo_log_ticks(self, demand, now: int) -> int:
        """Copy the updated rows into the log, then receive and log the MLPs."""
        layout, nbytes = self.layout, demand.mlp_param_bytes
        rows = self.unique_addresses(demand)
        copy = self.nmp.copy_rows(self.pmem, rows, layout.emb_log_base, layout.row_bytes, now)
        self.nmp.start_mlp_log(nbytes)
        inbound = self._copy(self.card_link, nbytes, "down")
        mlp = self.nmp.write_log(self.pmem, nbytes, layout.mlp_log_base, now + copy.ticks)
        return copy.ticks + max(inbound, mlp.ticks)
