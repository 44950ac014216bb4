"""The numpy DLRM against an independent PyTorch DLRM written here (dlrm_s_pytorch style):
same initial weights and batches (with duplicate indices inside bags), losses and every
parameter must agree after each step, for SGD and row-wise Adagrad."""

import numpy as np
import pytest
import torch
from torch import nn

from workloads.dlrm import DLRM
from workloads.inputs import InputGenerator
from workloads.models import ModelSpec

SPEC = ModelSpec(
    "tiny", 4, 3, 3, (7, 11, 5), 4, (3, 8, 4), (6, 1), "random", "test model", "this test"
)
RTOL, ATOL = 1e-5, 1e-6
EPS = 1e-10


class TorchDLRM(nn.Module):
    def __init__(self, model: DLRM) -> None:
        super().__init__()
        offsets = model.spec.table_offsets
        self.embs = nn.ModuleList()
        for off, n in zip(offsets, model.spec.rows_per_table, strict=True):
            emb = nn.EmbeddingBag(n, model.spec.embedding_dim, mode="sum", sparse=True)
            emb.weight.data = torch.tensor(model.table[off : off + n])
            self.embs.append(emb)
        self.bot = nn.ModuleList(self._linear(w, b) for w, b in model.bottom)
        self.top = nn.ModuleList(self._linear(w, b) for w, b in model.top)

    @staticmethod
    def _linear(w: np.ndarray, b: np.ndarray) -> nn.Linear:
        layer = nn.Linear(w.shape[1], w.shape[0])
        layer.weight.data = torch.tensor(w)
        layer.bias.data = torch.tensor(b)
        return layer

    def forward(self, batch) -> torch.Tensor:
        x = torch.tensor(batch.dense)
        for layer in self.bot:
            x = torch.relu(layer(x))
        ly = [
            emb(torch.tensor(idx), torch.tensor(off[:-1]))
            for emb, idx, off in zip(self.embs, batch.indices, batch.offsets, strict=True)
        ]
        t = torch.cat([x, *ly], dim=1).view(x.shape[0], -1, x.shape[1])
        z = torch.bmm(t, t.transpose(1, 2))
        f = t.shape[1]
        li = [i for i in range(f) for j in range(i)]
        lj = [j for i in range(f) for j in range(i)]
        r = torch.cat([x, z[:, li, lj]], dim=1)
        for i, layer in enumerate(self.top):
            r = layer(r)
            r = torch.sigmoid(r) if i == len(self.top) - 1 else torch.relu(r)
        return r[:, 0]


def _torch_step(net, batch, opt, optimizer, lr, row_acc) -> float:
    opt.zero_grad()
    for emb in net.embs:
        emb.weight.grad = None
    loss = nn.BCELoss()(net(batch), torch.tensor(batch.labels))
    loss.backward()
    opt.step()
    with torch.no_grad():
        for emb, acc in zip(net.embs, row_acc, strict=True):
            g = emb.weight.grad.coalesce()
            idx, vals = g.indices()[0], g.values()
            if optimizer == "sgd":
                emb.weight.index_add_(0, idx, vals * -lr)
            else:  # dlrm optim/rwsadagrad.py
                acc.index_add_(0, idx, vals.pow(2).mean(dim=1))
                std = acc.index_select(0, idx).sqrt().add_(EPS)
                emb.weight.index_add_(0, idx, vals * (-lr / std).unsqueeze(1))
    return loss.item()


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_numpy_dlrm_matches_torch(optimizer):
    torch.set_num_threads(1)
    lr = 0.05
    model = DLRM(SPEC, lr=lr, optimizer=optimizer, seed=3)
    net = TorchDLRM(model)
    dense_params = [p for m in (*net.bot, *net.top) for p in m.parameters()]
    opt = (
        torch.optim.SGD(dense_params, lr=lr)
        if optimizer == "sgd"
        else torch.optim.Adagrad(dense_params, lr=lr, eps=EPS)
    )
    row_acc = [torch.zeros(n) for n in SPEC.rows_per_table]
    gen = InputGenerator(SPEC, batch_size=8, fixed_pooling=False, seed=5)
    saw_duplicate = False
    for batch in gen.batches(6):
        for idx, off in zip(batch.indices, batch.offsets, strict=True):
            bags = np.split(idx, off[1:-1])
            saw_duplicate |= any(len(np.unique(b)) < len(b) for b in bags)
        loss_np = model.train_step(batch)
        loss_t = _torch_step(net, batch, opt, optimizer, lr, row_acc)
        np.testing.assert_allclose(loss_np, loss_t, rtol=RTOL, atol=ATOL)
        for off, n, emb in zip(SPEC.table_offsets, SPEC.rows_per_table, net.embs, strict=True):
            np.testing.assert_allclose(
                model.table[off : off + n], emb.weight.detach().numpy(), rtol=RTOL, atol=ATOL
            )
        for (w, b), layer in zip(model.mlp_layers, [*net.bot, *net.top], strict=True):
            np.testing.assert_allclose(w, layer.weight.detach().numpy(), rtol=RTOL, atol=ATOL)
            np.testing.assert_allclose(b, layer.bias.detach().numpy(), rtol=RTOL, atol=ATOL)
    assert saw_duplicate, "the batches must exercise duplicate indices inside a bag"
    assert model.table.dtype == np.float32 and model.mlp_flat().dtype == np.float32
