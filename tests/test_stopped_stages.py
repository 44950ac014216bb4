"""A stage its window stops (CXL's MLP-log slices, cut when the top MLP ends) books
the bytes, accesses and energy it served, not those it planned: PMEM's media bytes in
the controllers' stats then equal what the flow network served them, and the media
energy follows the served bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli import parse_stats

from components.memory.pmem import Pmem
from simulate.simulator import Simulator
from workloads.workload import DlrmWorkload

BATCHES = 3


@pytest.fixture(scope="module")
def stats(tmp_path_factory) -> dict[str, float]:
    outdir: Path = tmp_path_factory.mktemp("cxl")
    Simulator("cxl", DlrmWorkload("rm1"), BATCHES, outdir, progress=False).run()
    return {name: float(value) for name, value in parse_stats(outdir / "stats.txt").items()}


@pytest.mark.parametrize("ctrl", range(4))
def test_booked_media_bytes_are_the_bytes_the_network_served(stats, ctrl):
    """Booked when each stage was built, the slices' planned writes made these differ
    by ~166 kB per controller over 3 RM1 batches."""
    prefix = f"board.cxl_mem.pmem.ctrl{ctrl}"
    booked = stats[f"{prefix}.mediaBytesRead"] + stats[f"{prefix}.mediaBytesWritten"]
    assert abs(booked - stats[f"{prefix}.bytes"]) <= BATCHES  # one rounding per stop


def test_media_energy_follows_the_served_bytes(stats):
    pmem = Pmem()
    expected = sum(
        stats[f"board.cxl_mem.pmem.ctrl{c}.mediaBytesRead"] * pmem.read_energy
        + stats[f"board.cxl_mem.pmem.ctrl{c}.mediaBytesWritten"] * pmem.write_energy
        for c in range(4)
    )
    assert stats["board.cxl_mem.pmem.dynamicEnergy"] == pytest.approx(expected, rel=1e-5)
