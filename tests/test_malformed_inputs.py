"""Malformed inputs of every class, drawn by hypothesis: topology files, trace files and
sweep specs. Each input is either refused with the input's own error (one line at the
CLI) or accepted as something that satisfies the format's rules, checked here
independently of the code under test; never another exception, never a hang."""

from __future__ import annotations

import gzip
import os
import re
import string
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from components.interconnect import topology as topology_module
from components.interconnect.topology import load_topology, topology_from_dict
from components.sim.params import ConfigError
from simulate.run.options import UsageError
from simulate.sweeps.spec import load_sweep
from workloads.models import ModelSpec, get_model
from workloads.traces import CRITEO_FIELDS, CriteoTrace, TraceError, open_trace

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")  # docs/topologies.md's switch names

# ----- topologies ------------------------------------------------------------------------
VALID = {
    "cxl": "3.0",
    "switches": {"root": {"ports": 16}, "leaf": {"parent": "root", "ports": 16}},
    "host": "root",
    "gpus": {"root": 2},
    "cxl_mems": {"leaf": 2},
}
names = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["class", "config", "path", "children", "a.b", "a b", "", "a\nb", "gpu0",
                     "shard1", "host_link", "_x", "é", "x" * 70, "root", "leaf"]),
    st.integers(-3, 3), st.booleans(), st.none(), st.floats(allow_nan=False),
)  # fmt: skip
values = st.one_of(names, st.lists(names, max_size=2), st.integers(-(10**9), 10**9))


@st.composite
def mutated_topologies(draw) -> dict:
    """The valid tree with a few of its keys, names and values replaced."""
    data = yaml.safe_load(yaml.safe_dump(VALID))
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.sampled_from(["rename", "parent", "ports", "count", "top", "attach"]))
        switches = data["switches"] if isinstance(data["switches"], dict) else {}
        if where == "rename" and switches:  # every reference to it renamed too
            old, new = draw(st.sampled_from(sorted(switches, key=repr))), draw(names)
            switches[new] = switches.pop(old)
            for settings in switches.values():
                if isinstance(settings, dict) and settings.get("parent") == old:
                    settings["parent"] = new
            for key in ("gpus", "cxl_mems", "hosts"):
                if isinstance(data.get(key), dict) and old in data[key]:
                    data[key][new] = data[key].pop(old)
            if data.get("host") == old:
                data["host"] = new
        elif where == "parent":
            switches["leaf"] = {"parent": draw(values)}
        elif where == "ports":
            switches["root"] = {"ports": draw(values)}
        elif where == "count":
            data[draw(st.sampled_from(["gpus", "cxl_mems", "hosts"]))] = {"root": draw(values)}
        elif where == "top":
            data[draw(st.sampled_from(["cxl", "host", "switches", "nics"]))] = draw(values)
        else:
            data["cxl_mems"] = {draw(names): draw(st.integers(0, 3))}
    return data


def assert_a_valid_tree(topology) -> None:
    """What docs/topologies.md promises of every accepted topology."""
    switches = {s.name: s for s in topology.switches}
    assert all(NAME.fullmatch(name) for name in switches)
    assert set(topology.attach.values()) <= set(switches)
    assert sum(s.parent is None for s in switches.values()) == 1
    for name in switches:  # every chain reaches the root, within the levels allowed
        seen = 0
        while name is not None:
            name, seen = switches[name].parent, seen + 1
            assert seen <= topology_module.MAX_LEVELS
    assert 1 <= topology.gpus and 1 <= topology.mems
    assert topology.gpus + topology.mems <= topology_module.MAX_ENDPOINTS


@SETTINGS
@given(mutated_topologies())
def test_a_mutated_topology_is_a_valid_tree_or_one_config_error(data):
    try:
        topology = topology_from_dict(data)
    except ConfigError as error:
        assert "\n" not in str(error).strip() or "\\n" in repr(str(error))
        return
    assert_a_valid_tree(topology)


@SETTINGS
@given(st.binary(max_size=200), st.integers(0, 400))
def test_bytes_spliced_into_a_topology_file_are_refused_or_read_strictly(tmp_path, junk, at):
    """Any bytes at any place (other encodings, NULs, flow brackets, duplicate keys):
    a tree that satisfies the rules, or ConfigError naming the file."""
    text = yaml.safe_dump(VALID).encode()
    path = tmp_path / "t.yaml"
    path.write_bytes(text[:at] + junk + text[at:])
    try:
        topology = load_topology(path)
    except ConfigError as error:
        assert str(error).startswith(f"topology {path}")
        return
    assert_a_valid_tree(topology)
    raw = path.read_bytes()
    raw.decode("utf-8")  # accepted files are UTF-8 text, NUL-free
    assert b"\x00" not in raw


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("switches:\n  root: {}\n  root: {ports: 4}\n", "duplicate key 'root'"),
        ("a: " + "[" * 3000 + "]" * 3000 + "\n", "nested more than 64 levels"),
        ("".join(" " * i + f"k{i}:\n" for i in range(200)), "nested more than 64 levels"),
        ("switches:\n  s0: {ports: 4}\n" + "".join(
            f"  s{i}: {{parent: s{i - 1}, ports: 4}}\n" for i in range(1, 3000)),
         "3000 switches, more than 256"),
        ("switches:\n  s0: {ports: 4}\n" + "".join(
            f"  s{i}: {{parent: s{i - 1}, ports: 4}}\n" for i in range(1, 40))
         + "host: s0\ngpus: {s39: 1}\ncxl_mems: {s39: 1}\n", "more than 16"),
        ("switches:\n  root: {ports: 4}\ngpus: {root: 100000000}\n", "more than 1024 in all"),
    ],
    ids=["duplicate", "deep-flow", "deep-block", "3000-chain", "40-levels", "1e8-gpus"],
)  # fmt: skip
def test_what_would_hang_or_recurse_is_refused_at_once(tmp_path, text, needle):
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load_topology(path)


@pytest.mark.parametrize("kind", ["fifo", "utf16", "latin1"])
def test_a_topology_that_is_not_a_utf8_regular_file_is_refused_before_reading(tmp_path, kind):
    path = tmp_path / "t.yaml"
    if kind == "fifo":
        os.mkfifo(path)  # opened for reading, it would block until a writer came
        needle = "not a regular file (a FIFO)"
    elif kind == "utf16":
        path.write_bytes(yaml.safe_dump(VALID).encode("utf-16"))
        needle = "line 1, column 1: not UTF-8 text (byte 0xff) (UTF-16? save it as UTF-8)"
    else:
        path.write_bytes(b"switches:\n  s\xe9: {}\n")
        needle = "line 2, column 4: not UTF-8 text"
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_topology(path)


# ----- traces ------------------------------------------------------------------------------
TABLES, ROWS = 3, 50
SPEC = ModelSpec("t3", 8, 13, TABLES, ROWS, 1, (13, 8), (1,), "random", "test", "test")
KAGGLE = get_model("dlrm_kaggle").capped(ROWS)  # 26 tables, among them of 3, 4 and 10 rows


@SETTINGS
@given(
    st.lists(st.integers(-3, 4), min_size=TABLES * 8, max_size=TABLES * 8),
    st.integers(0, 2**32 - 1),
    st.integers(-2, 2),
)
def test_fbgemm_arrays_with_any_lengths_give_consistent_bags_or_a_trace_error(
    tmp_path, lengths, seed, skew
):
    """Lengths (negative ones too) with offsets that follow them, or are off by ``skew``
    somewhere: every batch read has non-negative bags that match the lengths and rows
    inside their tables, or the reader raises TraceError."""
    rng = np.random.default_rng(seed)
    lengths = np.array(lengths, dtype=np.int64).reshape(TABLES, 8)
    offsets = np.concatenate([[0], np.cumsum(lengths.ravel())])
    offsets[rng.integers(1, offsets.size)] += skew
    indices = rng.integers(-1 if seed % 7 == 0 else 0, ROWS, size=max(int(offsets.max()), 1))
    path = tmp_path / "t.npz"
    np.savez(path, indices=indices, offsets=offsets, lengths=lengths)
    try:
        reader = open_trace(str(path), SPEC, 4)
        batches = [reader.batch(k) for k in range(2)]
    except TraceError as error:
        assert str(error).startswith(f"--trace {path}")
        return
    for k, batch in enumerate(batches):
        for table, (rows, bounds) in enumerate(zip(batch.indices, batch.offsets, strict=True)):
            steps = np.diff(bounds)
            assert (steps >= 0).all()
            assert np.array_equal(steps, lengths[table, 4 * k : 4 * k + 4])
            assert rows.size == 0 or (0 <= rows.min() and rows.max() < ROWS)


def criteo_line(rng) -> str:
    dense = [str(int(x)) for x in rng.integers(0, 100, size=13)]
    cats = [f"{int(x):08x}" for x in rng.integers(0, 2**32, size=26)]
    return "\t".join([str(int(rng.integers(0, 2))), *dense, *cats])


def strict_parse(line: bytes) -> tuple[int, list[int], list[int]] | None:
    """An independent reading of one Criteo line: ASCII decimal label and counts, ASCII
    hex categories, empty as 0; None when the line is not one."""
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        return None
    fields = text.rstrip("\r\n").split("\t")
    if len(fields) != CRITEO_FIELDS or "\x00" in text:
        return None
    ints, cats = fields[:14], fields[14:]
    if not all(re.fullmatch(r"-?[0-9]+|", f) for f in ints):
        return None
    if not all(re.fullmatch(r"[0-9A-Fa-f]*", f) for f in cats):
        return None
    label = int(ints[0] or 0)
    if label not in (0, 1):
        return None
    rows = KAGGLE.rows_per_table
    return (
        label,
        [int(f or 0) for f in ints[1:]],
        [int(f or "0", 16) % r for f, r in zip(cats, rows, strict=True)],
    )


junk = st.one_of(
    st.sampled_from(["\x00", "٣", "３", "_", " ", "é", "\t", "zz", "-", "1_0", "\ufeff"]),
    st.text(max_size=3),
)


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.integers(0, 7), st.integers(0, 120), junk,
       st.sampled_from(["utf-8", "latin-1", "utf-16"]), st.booleans())  # fmt: skip
def test_criteo_lines_with_any_characters_are_parsed_strictly_or_refused(
    tmp_path, seed, line_no, at, piece, encoding, gz
):
    rng = np.random.default_rng(seed)
    lines = [criteo_line(rng) for _ in range(8)]
    line = lines[line_no]
    lines[line_no] = line[:at] + piece + line[at:]
    try:
        data = ("\n".join(lines) + "\n").encode(encoding)
    except UnicodeEncodeError:
        assume(False)
    path = tmp_path / ("t.tsv.gz" if gz else "t.tsv")
    path.write_bytes(gzip.compress(data) if gz else data)
    expected = [strict_parse(raw) for raw in data.splitlines()]
    try:
        batch = CriteoTrace(str(path), KAGGLE, 8).batch(0)
    except TraceError as error:
        assert str(error).startswith(f"--trace {path}")
        assert "\n" not in str(error)
        assert None in expected or len(expected) != 8
        return
    assert None not in expected and len(expected) == 8  # nothing malformed was accepted
    labels = [row[0] for row in expected]
    assert batch.labels.tolist() == labels
    dense = np.log(np.maximum(np.array([row[1] for row in expected]), 0) + 1).astype(np.float32)
    assert np.allclose(batch.dense, dense)
    for table in range(26):
        assert batch.indices[table].tolist() == [row[2][table] for row in expected]


@pytest.mark.parametrize("kind", ["fifo", "truncated-gz", "corrupt-gz", "long-line"])
def test_damaged_trace_files_are_one_trace_error(tmp_path, kind):
    rng = np.random.default_rng(1)
    data = ("\n".join(criteo_line(rng) for _ in range(40)) + "\n").encode()
    path = tmp_path / ("t.tsv.gz" if "gz" in kind else "t.tsv")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "truncated-gz":
        path.write_bytes(gzip.compress(data)[:-40])
    elif kind == "corrupt-gz":
        path.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage")
    else:
        path.write_bytes(b"1" * (1 << 20))
    with pytest.raises(TraceError, match=f"--trace {re.escape(str(path))}: "):
        reader = CriteoTrace(str(path), KAGGLE, 8)
        for k in range(6):  # a truncated .gz is found where its end is read
            reader.batch(k)


# ----- sweep specs ----------------------------------------------------------------------
spec_values = st.one_of(
    st.integers(-5, 10**9), st.booleans(), st.none(), st.floats(allow_nan=True),
    st.text(alphabet=string.printable + "٣３é\x00", max_size=8),
    st.lists(st.integers(0, 3), max_size=2),
)  # fmt: skip
spec_keys = st.sampled_from(
    ["batches", "batch_size", "gpus", "cxl_mems", "seed", "checkpoint", "sharding", "model",
     "pool_jobs", "mtbf", "zipf", "topology", "set", "nonsense"]
)  # fmt: skip


@SETTINGS
@given(
    st.dictionaries(spec_keys, spec_values, max_size=3),
    st.dictionaries(spec_keys, st.lists(spec_values, min_size=1, max_size=3), max_size=2),
)
def test_a_spec_of_any_values_is_runs_or_one_spec_error(tmp_path, fixed, axes):
    """Parsed without building boards: every run a spec yields has options the CLI
    would accept; anything else is a UsageError (SpecError) naming the spec's field."""
    path = tmp_path / "s.yaml"
    doc = {"outroot": str(tmp_path / "out"), "fixed": {"model": "rmc1", **fixed}, "axes": axes}
    try:
        path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    except yaml.YAMLError:
        assume(False)
    try:
        sweep = load_sweep(path, check=False)
    except UsageError as error:
        assert "\n" not in str(error)
        return
    for run in sweep.runs:
        options = run.options
        assert options.batches >= 1 and (options.batch_size is None or options.batch_size >= 1)
        assert 1 <= options.gpus and 1 <= options.cxl_mems
        assert options.gpus * options.pool_jobs + options.cxl_mems <= 1024
    assert not (tmp_path / "out").exists()


BOARD_AXES = {
    "gpus": ({"gpus": [1, 2]}, {"system": "pmem"}, "several devices are modelled for"),
    "cxl_mems": ({"cxl_mems": [1, 2]}, {"system": "dram"}, "several devices are modelled for"),
    "checkpoint": ({"checkpoint": ["paper", "cpr"]}, {}, "is the host.s checkpoint"),
    "batch_size": ({"batch_size": [64, 1]}, {"gpus": 2}, "each GPU needs at least one"),
    "topology": (
        {"topology": [None, "configs/topologies/two_level_4x4.yaml"]},
        {"set": {"board.uplink_ports": 2}},  # only the tree's board has no such parameter
        "unknown parameter path",
    ),
}


@pytest.mark.parametrize("axis", sorted(BOARD_AXES))
def test_a_sweep_validates_every_distinct_board_before_running(tmp_path, axis):
    """Runs that differ in one of these alone build different boards: the second, bad
    one is refused with the spec before anything is written."""
    axes, fixed, needle = BOARD_AXES[axis]
    root = Path(__file__).resolve().parents[1]
    axes = {k: [str(root / v) if isinstance(v, str) and v.endswith(".yaml") else v for v in vs]
            for k, vs in axes.items()}  # fmt: skip
    path = tmp_path / "s.yaml"
    fixed = {"model": "rmc1", "batches": 1, **fixed}
    if axis == "topology":  # the single switch has the path, the tree has not
        fixed["set"] = {"board.switch0.port_latency": "100ns"}
    path.write_text(yaml.safe_dump({"outroot": str(tmp_path / "out"), "fixed": fixed,
                                    "axes": axes}))  # fmt: skip
    if axis in ("gpus", "cxl_mems"):
        needle = "several devices are modelled for"
    if axis == "topology":
        needle = "unknown parameter path"
    with pytest.raises(UsageError, match=needle):
        load_sweep(path)
    assert not (tmp_path / "out").exists()
