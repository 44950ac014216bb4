"""Energy accounting over a component tree."""

import pytest

from components.compute.gpu import Gpu
from components.energy import EnergyReport
from components.interconnect.cxl import CxlLink, CxlSwitch
from components.sim.params import Power
from components.sim.simobject import SimObject
from components.sim.units import TICKS_PER_SECOND


class Box(SimObject):
    static_power = Power("4W", "a test component", source="test")


def test_static_power_times_time():
    report = EnergyReport.build(Box(), 3 * TICKS_PER_SECOND)
    assert report.total == pytest.approx(12.0)
    assert report.as_dict()["components"]["box"]["static"] == pytest.approx(12.0)


def test_gpu_active_idle_split():
    gpu = Gpu()
    gpu.busyTicks.set(TICKS_PER_SECOND // 4)
    report = EnergyReport.build(gpu, TICKS_PER_SECOND)
    assert report.total == pytest.approx(350 * 0.25 + 25 * 0.75)


def test_tree_sums_static_and_dynamic_per_path():
    root = SimObject()
    root.switch = CxlSwitch()
    root.link = CxlLink()
    root.plain = SimObject()  # declares no energy: not reported
    root.link.record(1000 * 64, "down")
    report = EnergyReport.build(root, TICKS_PER_SECOND // 1000).as_dict()
    assert set(report["components"]) == {"simobject.switch", "simobject.link"}
    dynamic = 1000 * 68 * 8 * 5e-12
    assert report["components"]["simobject.link"]["dynamic"] == pytest.approx(dynamic)
    assert report["components"]["simobject.switch"]["static"] == pytest.approx(10 * 1e-3)
    assert report["total"] == pytest.approx(dynamic + 10e-3)
    assert report["total"] == pytest.approx(report["static"] + report["dynamic"])


def test_negative_time_rejected():
    with pytest.raises(ValueError):
        EnergyReport.build(Box(), -1)
