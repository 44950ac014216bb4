"""facebookresearch/dlrm's training step (dlrm_s_pytorch.py) in torch, dense part only:
the reference that tests/test_opgraph_kernels.py counts kernels against and that
scripts/profile_gpu.py times on a GPU. The pooled embedding vectors are given (the
bags run on the CXL-MEM); their gradients are slices of the interaction's, which the
step computes whole. torch is imported only when a step is built."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workloads.models import ModelSpec


def _mlp(nn, widths: tuple[int, ...], sigmoid_last: bool):
    """dlrm's create_mlp: Linear then ReLU per layer, Sigmoid after the top's last."""
    layers = []
    for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        last = i == len(widths) - 2
        layers += [nn.Linear(n_in, n_out), nn.Sigmoid() if sigmoid_last and last else nn.ReLU()]
    return nn.Sequential(*layers)


@dataclass
class ReferenceStep:
    """One model's modules, optimizer and static inputs on one device."""

    torch: Any
    bottom: Any
    top: Any
    optimizer: Any
    dense: Any
    pooled: list
    target: Any
    pairs: tuple[Any, Any]

    def interaction_top_loss(self, x):
        """dlrm's interact_features (dot, without self-interaction), top MLP, MSE loss.
        dlrm builds the pair indices every call; here they are built once (a host-to-
        device copy cannot be captured in a CUDA graph)."""
        torch = self.torch
        b, d = x.shape
        t = torch.cat([x, *self.pooled], dim=1).view((b, -1, d))
        z = torch.bmm(t, torch.transpose(t, 1, 2))
        li, lj = self.pairs
        r = torch.cat([x, z[:, li, lj]], dim=1)
        return torch.nn.MSELoss(reduction="mean")(self.top(r), self.target)

    def step(self) -> None:
        """Forward, backward and the SGD update."""
        self.optimizer.zero_grad(set_to_none=True)
        self.interaction_top_loss(self.bottom(self.dense)).backward()
        self.optimizer.step()

    def segments(self) -> dict[str, Callable[[], None]]:
        """Nested prefixes of the step whose time differences are the op groups
        (scripts/profile_gpu.py): the bottom MLP's forward; the whole forward; the
        forward with the backward down to the bottom MLP's output; the whole step."""
        torch = self.torch

        def bottom() -> None:
            with torch.no_grad():
                self.bottom(self.dense)

        def forward() -> None:
            with torch.no_grad():
                self.interaction_top_loss(self.bottom(self.dense))

        def top_backward() -> None:
            self.optimizer.zero_grad(set_to_none=True)
            with torch.no_grad():
                x = self.bottom(self.dense)
            self.interaction_top_loss(x.requires_grad_()).backward()

        return {"bottom": bottom, "forward": forward, "top_backward": top_backward,
                "step": self.step}  # fmt: skip


def build_step(spec: ModelSpec, batch_size: int, device: str = "cpu", seed: int = 0):
    """The reference step of ``spec`` over ``batch_size`` samples on ``device``."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    bottom = _mlp(nn, spec.bottom_mlp, False).to(device)
    top = _mlp(nn, spec.top_widths, True).to(device)
    optimizer = torch.optim.SGD([*bottom.parameters(), *top.parameters()], lr=0.01, foreach=True)
    d, f = spec.embedding_dim, spec.interaction_features
    li = torch.tensor([i for i in range(f) for j in range(i)], device=device)
    lj = torch.tensor([j for i in range(f) for j in range(i)], device=device)
    return ReferenceStep(
        torch=torch,
        bottom=bottom,
        top=top,
        optimizer=optimizer,
        dense=torch.randn(batch_size, spec.dense_features, device=device),
        pooled=[torch.randn(batch_size, d, device=device) for _ in range(spec.num_tables)],
        target=torch.rand(batch_size, 1, device=device),
        pairs=(li, lj),
    )
