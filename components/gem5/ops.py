"""A batch's memory ops as PyTrafficGen stream sequences (pure: no m5).

Only the ops whose cost is memory and interconnect traffic are realized in gem5: the
embedding lookup and update, the pooled-vector and gradient transfers, and the
checkpoint's MLP pull and log writes. Lookups and updates are random rows of the table
region (``createNvm`` issues a row's 64 B packets back to back), not a replay of the
batch's index trace; transfers and logs are linear sweeps. The generator named "mem" is
the embedding engine (CXL-MEM logic, PCIe card or host CPU), "gpu" the GPU's DMA/DCOH.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.gem5.translate import StreamSpec, linear_stream, row_stream


@dataclass(frozen=True)
class MemoryOp:
    """One op of one batch: which generator issues it and its streams, in order."""

    name: str
    batch: int
    generator: str
    streams: tuple[StreamSpec, ...]

    @property
    def packets(self) -> int:
        return sum(stream.count for stream in self.streams)


def batch_ops(board, demand, gpu_base: int) -> list[MemoryOp]:
    """The memory ops of one batch on a connected board; GPU memory starts at gpu_base."""
    layout, access, n = board.layout, demand.lookup, demand.batch
    data, size = layout.regions()["data"]
    table = (data, data + size)
    row = layout.row_bytes
    lookups, unique = len(access.rows), len(access.unique_rows)
    ops = [
        MemoryOp("lookup", n, "mem", (row_stream(*table, lookups, row, read=True),)),
        MemoryOp("pooled_to_gpu", n, "mem", (linear_stream(gpu_base, access.pooled_bytes, False),)),
        MemoryOp(
            "grads_to_mem",
            n,
            "gpu",
            (linear_stream(layout.offset("delta"), access.grad_bytes, False),),
        ),
        MemoryOp(
            "update",
            n,
            "mem",
            (
                row_stream(*table, unique, row, read=True),
                row_stream(*table, unique, row, read=False),
            ),
        ),
    ]
    if board.system == "dram":  # the ideal system checkpoints nothing
        return ops
    mlp = demand.mlp_param_bytes
    return ops + [
        MemoryOp("ckpt_mlp_pull", n, "mem", (linear_stream(gpu_base, mlp, True),)),
        MemoryOp(
            "emb_log",
            n,
            "mem",
            (
                row_stream(*table, unique, row, read=True),
                linear_stream(int(layout.entry_offsets(0, 1)[0]), unique * row, False),
            ),
        ),
        MemoryOp("mlp_log", n, "mem", (linear_stream(layout.mlp_offset(0), mlp, False),)),
    ]
