from workloads.dlrm import DLRM
from workloads.inputs import InputGenerator
from workloads.metrics import evaluate
from workloads.models import ModelSpec

SPEC = ModelSpec("small", 8, 13, 4, 200, 4, (13, 32, 8), (32, 1), "random", "", "")


def test_training_learns_the_planted_teacher():
    """300 SGD steps (lr 0.1, B=128) on held-out batches: AUC 0.43 -> 0.877 measured
    (seed 0); Adagrad lr 0.05 reaches 0.896. Runs in about 0.3 s."""
    gen = InputGenerator(SPEC, batch_size=128, seed=0)
    model = DLRM(SPEC, lr=0.1, optimizer="sgd", seed=0)
    held_out = list(gen.batches(20, start=100_000))
    before = evaluate(model, held_out)
    losses = [model.train_step(b) for b in gen.batches(300)]
    after = evaluate(model, held_out)
    assert before["auc"] < 0.6
    assert after["auc"] > 0.85
    assert after["log_loss"] < before["log_loss"]
    assert sum(losses[-50:]) < sum(losses[:50])
