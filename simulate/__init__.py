"""How a run is driven, as gem5's stdlib ``simulate``: the entry (``simulator.py``: the
Python API, the CLI, the dispatch of a run) above three rooms: ``run/`` (options to
outputs), ``failures/`` (what a power failure does), ``sweeps/`` (grids of runs). Kept
import-light: entry points import ``simulate.run.startup`` before numpy so that an early
Ctrl-C is quiet."""
