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

import os
from dataclasses import dataclass, field

from components.interconnect.cxl import CxlPath
from components.sim.params import ConfigError

CXL_VERSIONS = ("2.0", "3.0")
DEFAULT_SWITCH_PORTS = 16
"""Downstream x16 ports of one switch: XConn XC50256 (CXL 2.0, 256 lanes = 16 x16)."""
MAX_ENDPOINTS = 1024  # GPUs plus CXL-MEMs: far beyond any switch tree built today


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
        return next(s for s in self.switches if s.name == name)

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
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise ConfigError(f"topology: switch {duplicate!r} declared twice")
        for s in self.switches:
            if s.parent is not None and s.parent not in names:
                raise ConfigError(f"topology: switch {s.name!r} has unknown parent {s.parent!r}")
            if s.ports < 1:
                raise ConfigError(f"topology: switch {s.name!r} has {s.ports} ports")
        roots = [s.name for s in self.switches if s.parent is None]
        for s in self.switches:
            seen, name = [], s.name
            while name is not None:
                if name in seen:
                    raise ConfigError(
                        f"topology: switches {' -> '.join([*seen, name])} form a cycle"
                    )
                seen.append(name)
                name = self.switch(name).parent
        if len(roots) != 1:
            raise ConfigError(f"topology: {len(roots)} root switches {roots}; a tree has one")
        for endpoint, name in self.attach.items():
            if name not in names:
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
        for s in self.switches:
            children = sum(n == s.name for n in self.attach.values())
            children += sum(o.parent == s.name for o in self.switches)
            if children > s.ports:
                raise ConfigError(
                    f"topology: switch {s.name!r} has {children} children but {s.ports} ports"
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


def host_name(index: int) -> str:
    """The first host is ``host``; a pool's others ``host1``, ``host2``, ..."""
    return "host" if index == 0 else f"host{index}"


def load_topology(path: str | os.PathLike) -> TopologySpec:
    """A topology from a YAML file (docs/topologies.md shows the format)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as error:
        raise ConfigError(f"topology {os.fspath(path)}: {error.strerror}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"topology {os.fspath(path)}: not valid YAML{where}") from None
    return topology_from_dict(data, os.fspath(path))


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
    for name, settings in raw_switches.items():
        settings = settings or {}
        if not isinstance(settings, dict) or set(settings) - {"parent", "ports"}:
            raise ConfigError(f"{where}: switch {name!r} takes only 'parent' and 'ports'")
        ports = settings.get("ports", DEFAULT_SWITCH_PORTS)
        if type(ports) is not int:
            raise ConfigError(f"{where}: switch {name!r}: ports must be an integer, got {ports!r}")
        switches.append(SwitchSpec(str(name), settings.get("parent"), ports))
    if "host" in data and "hosts" in data:
        raise ConfigError(f"{where}: give 'host' (one) or 'hosts' (a pool's), not both")
    attach = {} if "hosts" in data else {"host": str(data.get("host", switches[0].name))}
    for key, kind in (("hosts", "host"), ("gpus", "gpu"), ("cxl_mems", "mem")):
        if key not in data:
            continue
        counts = data.get(key) or {}
        if not isinstance(counts, dict):
            raise ConfigError(f"{where}: '{key}' must map switch names to device counts")
        index = 0
        for switch, count in counts.items():
            if type(count) is not int or count < 0:
                raise ConfigError(f"{where}: {key} under {switch!r}: bad count {count!r}")
            for _ in range(count):
                name = host_name(index) if kind == "host" else f"{kind}{index}"
                attach[name] = str(switch)
                index += 1
    topology = TopologySpec(tuple(switches), attach, str(data.get("cxl", "3.0")))
    topology.check()
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
