import numpy as np

from workloads.metrics import accuracy, auc, log_loss


def test_auc_matches_pairwise_count_with_ties():
    rng = np.random.default_rng(0)
    y = rng.random(300) < 0.3
    p = np.round(rng.random(300) + 0.3 * y, 1)  # coarse scores: many ties
    pos, neg = p[y], p[~y]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    assert abs(auc(y, p) - wins / (pos.size * neg.size)) < 1e-12


def test_loss_and_accuracy():
    y = np.array([1, 0, 1, 0])
    p = np.array([0.9, 0.2, 0.4, 0.6])
    assert accuracy(y, p) == 0.5
    expected = -np.mean(np.log([0.9, 0.8, 0.4, 0.4]))
    assert abs(log_loss(y, p) - expected) < 1e-12
    assert auc(y, p) == 0.75
    assert np.isnan(auc(np.ones(3), p[:3]))
