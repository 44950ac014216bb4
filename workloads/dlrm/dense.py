"""Dense parts of DLRM (dlrm_s_pytorch.py semantics): MLPs and the dot interaction."""

from __future__ import annotations

import numpy as np

Layer = tuple[np.ndarray, np.ndarray]  # (W (out, in), b (out,)) like torch.nn.Linear


def init_mlp(widths: tuple[int, ...], rng: np.random.Generator) -> list[Layer]:
    """dlrm's create_mlp init: W ~ N(0, sqrt(2/(in+out))), b ~ N(0, sqrt(1/out))."""
    layers = []
    for n_in, n_out in zip(widths[:-1], widths[1:], strict=True):
        w = rng.normal(0.0, np.sqrt(2.0 / (n_in + n_out)), size=(n_out, n_in))
        b = rng.normal(0.0, np.sqrt(1.0 / n_out), size=n_out)
        layers.append((w.astype(np.float32), b.astype(np.float32)))
    return layers


def mlp_forward(
    layers: list[Layer], x: np.ndarray, sigmoid_last: bool
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Output and every layer's input; ReLU after each layer, sigmoid after the last one
    when sigmoid_last (dlrm's sigmoid_top), else ReLU there too (sigmoid_bot = -1)."""
    inputs = []
    for i, (w, b) in enumerate(layers):
        inputs.append(x)
        z = x @ w.T
        z += b
        if sigmoid_last and i == len(layers) - 1:
            x = sigmoid(z)
        else:
            x = np.maximum(z, 0.0, out=z)
    return x, inputs


def mlp_backward(
    layers: list[Layer],
    inputs: list[np.ndarray],
    grad_z_last: np.ndarray,
    need_input_grad: bool,
) -> tuple[list[Layer], np.ndarray | None]:
    """Parameter grads from the gradient at the last layer's pre-activation. A layer's
    ReLU mask is its output > 0, i.e. the next layer's input > 0."""
    grads: list[Layer] = []
    gz = grad_z_last
    grad_in = None
    for i in range(len(layers) - 1, -1, -1):
        w, _ = layers[i]
        grads.append((gz.T @ inputs[i], gz.sum(axis=0)))
        if i == 0 and not need_input_grad:
            break
        grad_in = gz @ w
        if i > 0:
            gz = grad_in * (inputs[i] > 0)
    return grads[::-1], grad_in


def interaction_pairs(features: int) -> tuple[np.ndarray, np.ndarray]:
    """dlrm's strict lower triangle: li, lj for i in range(F) for j in range(i)."""
    return np.tril_indices(features, k=-1)


def interact(x: np.ndarray, pooled: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-MLP input [x, flattened pairwise dots] and the (B, F, d) feature stack."""
    feats = np.concatenate([x[:, None, :], pooled.transpose(1, 0, 2)], axis=1)
    z = np.matmul(feats, feats.transpose(0, 2, 1))
    li, lj = interaction_pairs(feats.shape[1])
    return np.concatenate([x, z[:, li, lj]], axis=1), feats


def interact_backward(grad_r: np.ndarray, feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gradients of x (B, d) and of the pooled bags (T, B, d) from the top input's grad."""
    b, f, d = feats.shape
    li, lj = interaction_pairs(f)
    gz = np.zeros((b, f, f), dtype=feats.dtype)
    gz[:, li, lj] = grad_r[:, d:]
    gfeats = np.matmul(gz + gz.transpose(0, 2, 1), feats)
    return grad_r[:, :d] + gfeats[:, 0, :], gfeats[:, 1:, :].transpose(1, 0, 2)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Logistic function without overflow: exp of a non-positive number only."""
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(z.dtype)
