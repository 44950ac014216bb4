"""How a run is driven, as gem5's stdlib ``simulate``: options, configuration of a board,
preflight, the batch loop, failure injection and recovery, crash checking, sweeps, and
the Python API (``simulate.simulator.Simulator``). Kept import-light: entry points import
``simulate.startup`` before numpy so that an early Ctrl-C is quiet."""
