"""Binary-classification metrics for click prediction, vectorized."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from workloads.inputs import Batch

_CLIP = 1e-7


def log_loss(labels: np.ndarray, probs: np.ndarray) -> float:
    """Mean binary cross-entropy, probabilities clipped to [1e-7, 1 - 1e-7]."""
    p = np.clip(np.asarray(probs, dtype=np.float64), _CLIP, 1 - _CLIP)
    y = np.asarray(labels, dtype=np.float64)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))


def accuracy(labels: np.ndarray, probs: np.ndarray, threshold: float = 0.5) -> float:
    return float(np.mean((np.asarray(probs) > threshold) == (np.asarray(labels) > 0.5)))


def auc(labels: np.ndarray, probs: np.ndarray) -> float:
    """ROC AUC by the rank-sum (Mann-Whitney) formula; tied scores share their mean rank.
    NaN when only one class is present."""
    y = np.asarray(labels) > 0.5
    n_pos = int(y.sum())
    n_neg = y.shape[0] - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, inverse, counts = np.unique(np.asarray(probs), return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    mean_rank = ends - (counts - 1) / 2.0  # 1-based mean rank of each distinct score
    rank_sum = mean_rank[inverse][y].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def evaluate(model, batches: Iterable[Batch]) -> dict[str, float]:
    """Loss, accuracy and AUC of model.predict over all batches pooled together."""
    labels, probs = [], []
    for batch in batches:
        labels.append(batch.labels)
        probs.append(model.predict(batch))
    y, p = np.concatenate(labels), np.concatenate(probs)
    return {"log_loss": log_loss(y, p), "accuracy": accuracy(y, p), "auc": auc(y, p)}
