"""Compute models: GPU, host CPU, near-memory processing (NMP) logic."""
