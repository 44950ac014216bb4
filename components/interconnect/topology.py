"""The shape of a disaggregated CXL system: a tree of switches with hosts and devices.

A topology names its switches (each with a parent, none for the root) and says under
which switch the host and every GPU and CXL-MEM sit. The board builds one link per
attachment and one uplink per non-root switch from it, and routes every transfer up
to the two endpoints' lowest common switch and down again (peer-to-peer between
devices, as CXL switches forward device-to-device traffic without the host). CXL 2.0
allows one switch level; a tree needs CXL 3.x (multi-level switching, CXL 3.0 spec
§7.7). Everything is checked here, before any work: a bad file or an impossible tree
is one error naming the problem.
"""

from __future__ import annotations

import keyword
import os
import re
from dataclasses import dataclass, field

from components.interconnect.cxl import CxlPath
from components.sim import input_files
from components.sim.params import ConfigError

CXL_VERSIONS = ("2.0", "3.0")
DEFAULT_SWITCH_PORTS = 16
"""Downstream x16 ports of one switch: XConn XC50256 (CXL 2.0, 256 lanes = 16 x16)."""
MAX_ENDPOINTS = 1024  # GPUs plus CXL-MEMs: far beyond any switch tree built today
MAX_HOSTS = 64  # a pool's jobs: each is a host loop of its own
MAX_SWITCHES = 256
"""Switches in one tree: 1,024 endpoints need 64 switches of 16 ports; four times that
leaves room for sparse trees, and keeps a file of thousands from being checked at all."""
MAX_LEVELS = 16
"""Switch levels from an endpoint to the root: a transfer crosses every one twice, and
CXL 3.x fabrics are built a few levels deep (its port-based routing spans 4,096 ports)."""
MAX_PORTS = 4096  # CXL 3.x port-based routing's 12-bit port IDs (CXL 3.0 spec §7.7.2)
MAX_TOPOLOGY_BYTES = 1 << 20
"""A topology of MAX_SWITCHES switches is ~10 KB; a file larger than 1 MiB is not one."""
SWITCH_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
"""A switch is a board attribute and a stats path component (``board.<name>.bytesForwarded``):
a letter, then letters, digits or underscores, at most 64 in all."""
RESERVED_NAME = re.compile(r"(host|host_link|gpu|cxl_gpu|nvlink|job|shard|mem)\d*")
"""Names the board gives its own children (``gpu0``, ``shard1``, ...) and endpoints."""


@dataclass(frozen=True)
class SwitchSpec:
    name: str
    parent: str | None
    ports: int = DEFAULT_SWITCH_PORTS


@dataclass(frozen=True)
class TopologySpec:
    """Switches and where every endpoint attaches (``host``, ``gpu{g}``, ``mem{m}``)."""

    switches: tuple[SwitchSpec, ...]
    attach: dict[str, str] = field(default_factory=dict)
    cxl: str = "3.0"

    @classmethod
    def single_switch(cls, gpus: int, mems: int, hosts: int = 1) -> TopologySpec:
        """Every device and the hosts under one switch (CXL 2.0 suffices)."""
        if gpus + mems > MAX_ENDPOINTS or hosts > MAX_HOSTS:  # before a name is made for each
            raise ConfigError(
                f"topology: {gpus} GPUs, {mems} CXL-MEMs and {hosts} hosts: at most "
                f"{MAX_ENDPOINTS} devices and {MAX_HOSTS} hosts"
            )
        attach = {host_name(h): "switch0" for h in range(hosts)}
        attach |= {f"gpu{g}": "switch0" for g in range(gpus)}
        attach |= {f"mem{m}": "switch0" for m in range(mems)}
        ports = max(DEFAULT_SWITCH_PORTS, gpus + mems + hosts)
        topology = cls((SwitchSpec("switch0", None, ports),), attach, "2.0")
        topology.check()
        return topology

    @property
    def gpus(self) -> int:
        return sum(name.startswith("gpu") for name in self.attach)

    @property
    def mems(self) -> int:
        return sum(name.startswith("mem") for name in self.attach)

    @property
    def hosts(self) -> int:
        return sum(name.startswith("host") for name in self.attach)

    def switch(self, name: str) -> SwitchSpec:
        by_name = self.__dict__.get("_by_name")
        if by_name is None:  # frozen: cached by hand, on first use
            by_name = {s.name: s for s in self.switches}
            object.__setattr__(self, "_by_name", by_name)
        return by_name[name]

    def chain(self, endpoint: str) -> list[str]:
        """Switches from the endpoint's own up to the root."""
        names, name = [], self.attach[endpoint]
        while name is not None:
            names.append(name)
            name = self.switch(name).parent
        return names

    def route(self, source: str, target: str) -> tuple[list[str], list[str]]:
        """Switches crossed going up from ``source`` (through the common one) and those
        crossed coming down to ``target``; the common switch is in the first list."""
        up, down = self.chain(source), self.chain(target)
        common = next(name for name in up if name in down)
        return up[: up.index(common) + 1], down[: down.index(common)][::-1]

    def levels(self) -> int:
        return max(len(self.chain(endpoint)) for endpoint in self.attach)

    def check(self) -> None:
        """Refuse trees no CXL fabric builds, in one line each."""
        names = [s.name for s in self.switches]
        if not names:
            raise ConfigError("topology: no switches")
        if len(names) > MAX_SWITCHES:
            raise ConfigError(f"topology: {len(names)} switches, more than {MAX_SWITCHES}")
        for name in names:
            check_switch_name(name)
        known: set[str] = set()
        for name in names:
            if name in known:
                raise ConfigError(f"topology: switch {name!r} declared twice")
            known.add(name)
        for s in self.switches:
            if s.parent is not None and s.parent not in known:
                raise ConfigError(f"topology: switch {s.name!r} has unknown parent {s.parent!r}")
            if not 1 <= s.ports <= MAX_PORTS:
                raise ConfigError(
                    f"topology: switch {s.name!r} has {s.ports} ports (1..{MAX_PORTS})"
                )
        roots = [s.name for s in self.switches if s.parent is None]
        depth: dict[str, int] = {}
        for s in self.switches:
            seen, name = [], s.name
            while name is not None and name not in depth:
                if name in seen:
                    raise ConfigError(
                        f"topology: switches {' -> '.join([*seen, name])} form a cycle"
                    )
                seen.append(name)
                name = self.switch(name).parent
            below = 0 if name is None else depth[name]
            for level, name in enumerate(reversed(seen), start=below + 1):
                depth[name] = level
                if level > MAX_LEVELS:
                    raise ConfigError(
                        f"topology: switch {name!r} is {level} levels below the root, "
                        f"more than {MAX_LEVELS}"
                    )
        if len(roots) != 1:
            raise ConfigError(f"topology: {len(roots)} root switches {roots}; a tree has one")
        for endpoint, name in self.attach.items():
            if name not in known:
                raise ConfigError(f"topology: {endpoint} attaches to unknown switch {name!r}")
        hosts = {name for name in self.attach if name.startswith("host")}
        if hosts != {host_name(h) for h in range(len(hosts))} or not hosts:
            raise ConfigError(f"topology: hosts must be host, host1, ..., got {sorted(hosts)}")
        self._check_endpoints("gpu", self.gpus)
        self._check_endpoints("mem", self.mems)
        if self.gpus + self.mems > MAX_ENDPOINTS:
            raise ConfigError(
                f"topology: {self.gpus + self.mems} devices, more than {MAX_ENDPOINTS}"
            )
        children = dict.fromkeys(known, 0)
        for name in self.attach.values():
            children[name] += 1
        for s in self.switches:
            if s.parent is not None:
                children[s.parent] += 1
        for s in self.switches:
            if children[s.name] > s.ports:
                raise ConfigError(
                    f"topology: switch {s.name!r} has {children[s.name]} children but "
                    f"{s.ports} ports"
                )
        if self.cxl not in CXL_VERSIONS:
            raise ConfigError(f"topology: cxl {self.cxl!r}: one of {', '.join(CXL_VERSIONS)}")
        if self.levels() > 1 and self.cxl == "2.0":
            raise ConfigError(
                f"topology: {self.levels()} switch levels need CXL 3.x multi-level switching; "
                "CXL 2.0 allows one (set cxl: 3.0)"
            )

    def _check_endpoints(self, kind: str, count: int) -> None:
        """Devices are numbered 0..count-1, at least one of each kind."""
        if count == 0:
            label = "GPUs" if kind == "gpu" else "CXL-MEMs"
            raise ConfigError(f"topology: no {label}")
        expected = {f"{kind}{i}" for i in range(count)}
        given = {name for name in self.attach if name.startswith(kind)}
        if given != expected:
            raise ConfigError(
                f"topology: {kind} devices must be numbered {kind}0..{kind}{count - 1}, "
                f"got {', '.join(sorted(given))}"
            )


def check_switch_name(name: object) -> None:
    """A switch name is a board attribute and a stats path component: SWITCH_NAME's
    grammar, and none of the names the board or Python already give a meaning."""
    if not isinstance(name, str) or not SWITCH_NAME.fullmatch(name):
        raise ConfigError(
            f"topology: switch name {name!r}: a letter, then letters, digits or underscores "
            "(at most 64)"
        )
    if keyword.iskeyword(name) or RESERVED_NAME.fullmatch(name) or name in BOARD_ATTRIBUTES:
        raise ConfigError(f"topology: switch name {name!r} is taken by the board; rename it")


BOARD_ATTRIBUTES = frozenset(
    (
        "board children config path name parent system topology fabric jobs gpus cxl_gpus "
        "engine scheduler spec placement layout stats params cxl_mem cxl_switch host "
        "host_link gpu cxl_gpu nmp dram pmem ssd uplink"
    ).split()
)
"""Attributes a board or a SimObject has besides its switches (checked again when the
board is built, against the board's own attributes)."""


def host_name(index: int) -> str:
    """The first host is ``host``; a pool's others ``host1``, ``host2``, ..."""
    return "host" if index == 0 else f"host{index}"


def load_topology(path: str | os.PathLike) -> TopologySpec:
    """A topology from a YAML file (docs/topologies.md shows the format): a regular
    file of at most MAX_TOPOLOGY_BYTES, strict UTF-8 and strict YAML (no duplicate keys,
    bounded nesting and aliases)."""
    try:
        data = input_files.read_yaml(path, MAX_TOPOLOGY_BYTES)
    except input_files.InputFileError as error:
        raise ConfigError(f"topology {os.fspath(path)}: {error}") from None
    return topology_from_dict(data, f"topology {os.fspath(path)}")


def topology_from_dict(data, where: str = "topology") -> TopologySpec:
    """``{cxl, switches: {name: {parent, ports}}, host (or a pool's hosts: {switch:
    count}), gpus: {switch: count}, cxl_mems: {switch: count}}``: devices are numbered
    in the order their switches are listed; a pool's job j trains on GPUs
    [j G/H, (j+1) G/H)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level")
    unknown = set(data) - {"cxl", "switches", "host", "hosts", "gpus", "cxl_mems"}
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    switches = []
    raw_switches = data.get("switches")
    if not isinstance(raw_switches, dict) or not raw_switches:
        raise ConfigError(f"{where}: 'switches' must map switch names to their settings")
    if len(raw_switches) > MAX_SWITCHES:
        raise ConfigError(f"{where}: {len(raw_switches)} switches, more than {MAX_SWITCHES}")
    for name, settings in raw_switches.items():
        try:
            check_switch_name(name)
        except ConfigError as error:
            raise ConfigError(f"{where}: {str(error).removeprefix('topology: ')}") from None
        settings = settings or {}
        if not isinstance(settings, dict) or set(settings) - {"parent", "ports"}:
            raise ConfigError(f"{where}: switch {name!r} takes only 'parent' and 'ports'")
        ports = settings.get("ports", DEFAULT_SWITCH_PORTS)
        if type(ports) is not int:
            raise ConfigError(f"{where}: switch {name!r}: ports must be an integer, got {ports!r}")
        parent = settings.get("parent")
        if parent is not None and not isinstance(parent, str):
            raise ConfigError(f"{where}: switch {name!r}: parent must be a switch name")
        switches.append(SwitchSpec(name, parent, ports))
    if "host" in data and "hosts" in data:
        raise ConfigError(f"{where}: give 'host' (one) or 'hosts' (a pool's), not both")
    host = data.get("host", switches[0].name)
    if not isinstance(host, str):
        raise ConfigError(f"{where}: 'host' must name a switch, got {host!r}")
    attach = {} if "hosts" in data else {"host": host}
    for key, kind, most in (
        ("hosts", "host", MAX_HOSTS),
        ("gpus", "gpu", MAX_ENDPOINTS),
        ("cxl_mems", "mem", MAX_ENDPOINTS),
    ):
        if key not in data:
            continue
        counts = data.get(key) or {}
        if not isinstance(counts, dict):
            raise ConfigError(f"{where}: '{key}' must map switch names to device counts")
        index = 0
        for switch, count in counts.items():
            if type(count) is not int or count < 0:
                raise ConfigError(f"{where}: {key} under {switch!r}: bad count {count!r}")
            if not isinstance(switch, str):
                raise ConfigError(f"{where}: {key}: {switch!r} is not a switch name")
            if index + count > most:  # bounded before a name is made for each
                raise ConfigError(f"{where}: {key}: more than {most} in all")
            for _ in range(count):
                name = host_name(index) if kind == "host" else f"{kind}{index}"
                attach[name] = switch
                index += 1
    topology = TopologySpec(tuple(switches), attach, str(data.get("cxl", "3.0")))
    try:
        topology.check()
    except ConfigError as error:  # named as the file, as the errors above
        raise ConfigError(f"{where}: {str(error).removeprefix('topology: ')}") from None
    return topology


class Fabric:
    """The links and switches a topology builds, and the path between two endpoints:
    the source's link up, uplinks up to the common switch, uplinks down, the target's
    link down (the host's link runs the other way: ``down`` leaves the host)."""

    def __init__(self, topology: TopologySpec, links: dict, switches: dict) -> None:
        self.topology, self.links, self.switches = topology, links, switches

    def path(self, source: str, target: str) -> CxlPath:
        up, down = self.topology.route(source, target)
        leave = "down" if source.startswith("host") else "up"
        arrive = "up" if target.startswith("host") else "down"
        hops = [(self.links[source], leave)]
        hops += [(self.switches[name].uplink, "up") for name in up[:-1]]
        hops += [(self.switches[name].uplink, "down") for name in down]
        hops.append((self.links[target], arrive))
        return CxlPath(hops, [self.switches[name] for name in up + down])
