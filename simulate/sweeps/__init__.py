"""Grids of runs: specs, run ids, crash-safe outdirs, executors, collection."""
