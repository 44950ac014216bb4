"""One functional DLRM training step, numpy vs PyTorch CPU, for RM1-RM4, plus RM2 input
generation. Scale: tables capped at 100k rows, batch 128, SGD, one thread for both (BLAS
threads pinned by environment before numpy loads). Prints a table; run from the repo root:

    python benchmarks/bench_dlrm.py [--rows 100000] [--threads 1] [--steps 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

THREADS = next((a.split("=")[1] for a in sys.argv if a.startswith("--threads=")), "1")
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = THREADS

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from workloads.dlrm import DLRM  # noqa: E402
from workloads.inputs import Batch, InputGenerator  # noqa: E402
from workloads.models import get_model  # noqa: E402


class TorchDLRM(nn.Module):
    """dlrm_s_pytorch-style model over one EmbeddingBag holding all tables."""

    def __init__(self, model: DLRM) -> None:
        super().__init__()
        self.spec = model.spec
        self.emb = nn.EmbeddingBag.from_pretrained(
            torch.from_numpy(model.table.copy()), freeze=False, mode="sum", sparse=True
        )
        self.bot = nn.ModuleList(_linear(w, b) for w, b in model.bottom)
        self.top = nn.ModuleList(_linear(w, b) for w, b in model.top)
        li, lj = np.tril_indices(model.spec.interaction_features, k=-1)
        self.li, self.lj = torch.from_numpy(li), torch.from_numpy(lj)

    def forward(self, dense, rows, bag_offsets, batch_size: int) -> torch.Tensor:
        x = dense
        for layer in self.bot:
            x = torch.relu(layer(x))
        pooled = self.emb(rows, bag_offsets).view(self.spec.num_tables, batch_size, -1)
        t = torch.cat([x.unsqueeze(0), pooled], dim=0).transpose(0, 1)
        z = torch.bmm(t, t.transpose(1, 2))
        r = torch.cat([x, z[:, self.li, self.lj]], dim=1)
        for i, layer in enumerate(self.top):
            r = layer(r)
            r = torch.sigmoid(r) if i == len(self.top) - 1 else torch.relu(r)
        return r[:, 0]


def _linear(w: np.ndarray, b: np.ndarray) -> nn.Linear:
    layer = nn.Linear(w.shape[1], w.shape[0])
    layer.weight.data = torch.from_numpy(w.copy())
    layer.bias.data = torch.from_numpy(b.copy())
    return layer


def _torch_inputs(batch: Batch, offsets: np.ndarray):
    rows = torch.from_numpy(batch.global_rows(offsets))
    lengths = batch.bag_lengths().reshape(-1)
    bag_offsets = torch.from_numpy(np.concatenate(([0], np.cumsum(lengths)[:-1])))
    return torch.from_numpy(batch.dense), rows, bag_offsets, torch.from_numpy(batch.labels)


def _median_time(fn, steps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def bench_model(name: str, rows: int, batch_size: int, steps: int) -> dict[str, float]:
    spec = get_model(name).capped(rows)
    gen = InputGenerator(spec, batch_size=batch_size, seed=0)
    batches = [gen.batch(i) for i in range(steps + 1)]
    model = DLRM(spec, lr=0.01, seed=0)
    net = TorchDLRM(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = nn.BCELoss()
    it = iter(range(10**9))

    def np_step() -> None:
        model.train_step(batches[next(it) % len(batches)])

    phases = {"lookup": 0.0, "fwd_bwd": 0.0, "emb_update": 0.0, "mlp_update": 0.0}

    def np_phases() -> None:
        batch = batches[next(it) % len(batches)]
        t0 = time.perf_counter()
        pooled = model.lookup(batch)
        t1 = time.perf_counter()
        _, grads = model.forward_backward(batch, pooled)
        t2 = time.perf_counter()
        model.apply_rows(*model.embedding_update(batch, grads.bags))
        t3 = time.perf_counter()
        model.apply_mlp(grads)
        t4 = time.perf_counter()
        for key, dt in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            phases[key] += dt / steps

    torch_inputs = [_torch_inputs(b, spec.table_offsets) for b in batches]

    def torch_step() -> None:
        dense, rows_t, offs, labels = torch_inputs[next(it) % len(torch_inputs)]
        opt.zero_grad()
        loss_fn(net(dense, rows_t, offs, batch_size), labels).backward()
        opt.step()

    result = {"numpy_s": _median_time(np_step, steps), "torch_s": _median_time(torch_step, steps)}
    for _ in range(steps):
        np_phases()
    return result | phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="row cap per table")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3, help="timed steps (median)")
    parser.add_argument("--threads", type=int, default=int(THREADS), help="use --threads=N")
    parser.add_argument("--models", default="rm1,rm2,rm3,rm4")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads={args.threads} (torch + OpenBLAS), rows<={args.rows}, B={args.batch_size}")
    print(f"{'model':6} {'numpy ms':>9} {'torch ms':>9} {'ratio':>6}   numpy phases (ms)")
    for name in args.models.split(","):
        r = bench_model(name, args.rows, args.batch_size, args.steps)
        phases = " ".join(f"{k}={r[k] * 1e3:.0f}" for k in ("lookup", "fwd_bwd", "emb_update"))
        print(
            f"{name:6} {r['numpy_s'] * 1e3:9.1f} {r['torch_s'] * 1e3:9.1f} "
            f"{r['numpy_s'] / r['torch_s']:6.2f}   {phases} mlp_update={r['mlp_update'] * 1e3:.0f}"
        )
    gen = InputGenerator(get_model("rm2"), batch_size=args.batch_size)
    per = _median_time(lambda: gen.batch(0), 5)
    print(f"input generation, RM2 (80 tables x 80 lookups x {args.batch_size}): {per * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
