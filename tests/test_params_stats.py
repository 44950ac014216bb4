"""Typed parameters, the SimObject tree, --set paths and the gem5 stats format."""

import re

import pytest

from components.sim.params import Bandwidth, ConfigError, Enum, Int, Latency, MemorySize
from components.sim.simobject import SimObject
from components.sim.stats import format_rows


class Leaf(SimObject):
    read_latency = Latency("305ns", "idle read", source="test")
    bandwidth = Bandwidth("6.6GB/s", "per module", source="test")
    capacity = MemorySize("16KiB", "buffer", source="test")
    channels = Int(4, "controllers", source="test", low=1)
    domain = Enum("adr", "persistence domain", source="test", choices=("adr", "eadr", "gpf"))

    def __init__(self, **kw):
        super().__init__(**kw)
        self.reads = self.scalar("bytesRead", "bytes read", "Byte")


class Root(SimObject):
    def __init__(self):
        super().__init__()
        self.mem = Leaf()


def make_board():
    root = Root()
    root.rename("board")
    return root


def test_paths_follow_the_tree_as_it_changes():
    """Paths are kept between asks (a run asks thousands of times a batch), and still
    change with any rename or attachment above."""
    board = make_board()
    leaf = board.mem
    assert leaf.path == "board.mem" and leaf.path == "board.mem"
    board.rename("system")
    assert leaf.path == "system.mem"
    outer = Root()
    outer.rename("cluster")
    outer.node = board
    assert leaf.path == "cluster.node.mem" and board.path == "cluster.node"
    board.mem = Leaf()  # a new child in its place; the old one keeps its own parent
    assert board.mem.path == "cluster.node.mem"


def test_defaults_are_canonical():
    leaf = Leaf()
    assert leaf.read_latency == 305_000
    assert leaf.bandwidth == 6.6e9
    assert leaf.capacity == 16384
    assert leaf.channels == 4


def test_set_by_path_and_config():
    board = make_board()
    board.set_by_path("board.mem.read_latency", "400ns")
    assert board.mem.read_latency == 400_000
    config = board.config()
    assert config["mem"]["params"]["read_latency"] == {
        "value": 400_000,
        "given": "400ns",
        "unit": "tick",
        "source": "test",
    }


def test_unknown_path_suggests_close_matches():
    board = make_board()
    with pytest.raises(ConfigError, match="did you mean board.mem.read_latency"):
        board.set_by_path("board.mem.read_latncy", "1ns")


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("read_latency", "-3ns", "negative"),
        ("bandwidth", "fast", "malformed"),
        ("channels", "0", ">= 1"),
        ("channels", "2.5", "integer"),
        ("domain", "x", "adr"),
    ],
)
def test_bad_values_name_component_parameter_and_value(key, value, needle):
    board = make_board()
    with pytest.raises(ConfigError) as err:
        board.set_by_path(f"board.mem.{key}", value)
    message = str(err.value)
    assert f"board.mem.{key}" in message and repr(value) in message and needle in message


def test_unknown_constructor_parameter():
    with pytest.raises(ConfigError, match="unknown parameter 'read_latncy'"):
        Leaf(read_latncy="1ns")


def test_stats_text_matches_gem5_format():
    board = make_board()
    board.mem.reads += 4096
    text = format_rows(
        [("simSeconds", 0.001, "Number of seconds simulated", "Second")] + board.stat_rows()
    )
    lines = text.splitlines()
    assert "---------- Begin Simulation Statistics ----------" in lines
    assert "---------- End Simulation Statistics   ----------" in lines
    gem5_row = re.compile(r"^(\S+)\s+(\S+)\s+# (.*) \((\S+)\)$")
    rows = [gem5_row.match(line) for line in lines if line and not line.startswith("-")]
    assert all(rows)
    parsed = {m.group(1): (m.group(2), m.group(4)) for m in rows}
    assert parsed["board.mem.bytesRead"] == ("4096", "Byte")
    assert parsed["simSeconds"] == ("0.001000", "Second")
