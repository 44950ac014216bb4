"""Parameter sweeps over training runs: spec parsing, run ids, crash-safe outdirs,
executors (local pool, SLURM through submitit) and result collection.

scripts/sweep.py and scripts/collect.py are thin command lines over this package.
"""
