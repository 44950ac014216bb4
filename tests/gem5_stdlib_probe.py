"""Runs a config under gem5.opt and records, for test_gem5_stdlib.py, what drove it: the
board each stdlib ``Simulator.run`` was given, and whether every ``m5.simulate`` call
came from inside one. Usage (under gem5): gem5_stdlib_probe.py OUT.json CONFIG ARGS..."""

from __future__ import annotations

import json
import runpy
import sys

import m5
from gem5.components.boards.abstract_board import AbstractBoard
from gem5.components.cachehierarchies.abstract_cache_hierarchy import AbstractCacheHierarchy
from gem5.components.memory.memory import ChanneledMemory
from gem5.components.processors.abstract_generator import AbstractGenerator
from gem5.simulate.simulator import Simulator

out, config = sys.argv[1], sys.argv[2]
runs: list[dict] = []
calls = {"inside": 0, "outside": 0}
depth = [0]
real_run, real_simulate = Simulator.run, m5.simulate


def run(self, *args, **kwargs):
    board = self._board
    runs.append(
        {
            "board": type(board).__name__,
            "is_stdlib_board": isinstance(board, AbstractBoard),
            "memory_is_channeled": isinstance(board.get_memory(), ChanneledMemory),
            "processor_is_generator": isinstance(board.get_processor(), AbstractGenerator),
            "fabric_is_cache_hierarchy": isinstance(
                board.get_cache_hierarchy(), AbstractCacheHierarchy
            ),
        }
    )
    depth[0] += 1
    try:
        return real_run(self, *args, **kwargs)
    finally:
        depth[0] -= 1


def simulate(*args, **kwargs):
    calls["inside" if depth[0] else "outside"] += 1
    return real_simulate(*args, **kwargs)


Simulator.run = run
m5.simulate = simulate
sys.argv = [config, *sys.argv[3:]]
try:
    runpy.run_path(config, run_name="__m5_main__")
except SystemExit as stop:
    if stop.code:
        raise
with open(out, "w") as handle:
    json.dump({"runs": runs, "simulate_calls": calls}, handle)
