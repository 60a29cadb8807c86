"""The `placement` section: one network over several machines (docs/multi-machine.md).

    placement:
      machines:                       # at least two, each with its own Docker engine
        - {name: m1, engine: unix:///var/run/docker.sock, cores: 2, address: 10.0.0.1}
        - {name: m2, engine: tcp://10.0.0.2:2376, cores: 8}
      strategy: auto                  # default: a minimum cut weighted by link rate, balanced by load and
                                      # cores (testbed/placement.py); or {host: machine} naming every host

`address` is where the machine's half of the wire emulator opens the tunnels of
the links across machines (the other machines must reach it); it defaults to
the host of a tcp:// or ssh:// engine. A placement needs `runtime: docker` and
the wire shaper (`shaper: wire` or `auto`, which then takes wire). Captured
links are written by the agents and collected into the run directory after the
rep (testbed/agent/controller.py).
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from testbed.scenario.checks import MISSING, Check, KeyPath, names_text, show
from testbed.scenario.sections.base import Scenario, Section
from testbed.topology.model import Topology

KEYS = ("machines", "strategy")
MACHINE_KEYS = ("name", "engine", "cores", "address")
REQUIRED_KEYS = ("name", "engine", "cores")
AUTO = "auto"
ENGINE_SCHEMES = ("unix://", "tcp://", "ssh://")
MACHINE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
MACHINE_NAME_RULE = "letters, digits, '_.-', at most 32 characters, starting with a letter or digit"
MAX_CORES = 4096


@dataclass
class MachineSpec:
    name: str
    engine: str         # the machine's Docker engine: unix://PATH, tcp://HOST:PORT or ssh://[USER@]HOST
    cores: int
    address: str = ""   # where its wire emulator half's tunnels bind and are reached (IPv4 or IPv6 literal)


@dataclass
class PlacementSpec:
    machines: list[MachineSpec] = field(default_factory=list)     # empty: everything on this machine
    strategy: str = AUTO                                          # "auto" or "explicit"
    hosts: dict[str, str] = field(default_factory=dict)           # explicit: host -> machine

    @property
    def enabled(self) -> bool:
        return bool(self.machines)

    def addresses(self) -> dict[str, str]:
        """machine -> its tunnel address, in the file's order."""
        return {m.name: m.address for m in self.machines}

    def cores(self) -> dict[str, int]:
        """machine -> cores, in the file's order (testbed/placement.py's `machines`)."""
        return {m.name: m.cores for m in self.machines}


def _machine(c: Check, path: KeyPath, raw: Any) -> MachineSpec:
    m = c.mapping(path, raw, MACHINE_KEYS)
    if not isinstance(raw, dict):
        c.fail(path, f"expected a machine {{name:, engine:, cores:}}, got {show(raw)}")
    for need in REQUIRED_KEYS:
        if need not in m:
            c.fail(path + (need,), "missing: a machine needs 'name', 'engine' and 'cores'")
    name = c.text(path + ("name",), m["name"])
    if not MACHINE_NAME.fullmatch(name):
        c.fail(path + ("name",), f"{show(name)} is not a valid machine name ({MACHINE_NAME_RULE})")
    engine = c.text(path + ("engine",), m["engine"])
    if not engine.startswith(ENGINE_SCHEMES) or len(engine) <= len(engine.split("://", 1)[0]) + 3 \
            or any(ch.isspace() for ch in engine):
        c.fail(path + ("engine",), f"expected a Docker engine address like unix:///var/run/docker.sock, "
                                   f"tcp://10.0.0.2:2376 or ssh://user@host, got {show(engine)}")
    cores = c.integer(path + ("cores",), m["cores"], low=1, high=MAX_CORES)
    if "address" in m:
        address = c.text(path + ("address",), m["address"])
    elif engine.startswith(("tcp://", "ssh://")):
        address = urlsplit(engine).hostname or ""
    else:
        c.fail(path + ("address",), "missing: a machine whose engine is a unix:// socket needs the address its "
                                    "links across machines use")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        c.fail(path + ("address",), f"expected an IP address such as 10.0.0.2, got {show(address)}")
    return MachineSpec(name, engine, cores, address)


def _read(c: Check, raw: Any, s: Scenario) -> None:
    out = PlacementSpec()
    if raw is MISSING or raw is None:
        s.placement = out
        return
    p: KeyPath = ("placement",)
    m = c.mapping(p, raw, KEYS)
    if "machines" not in m:
        c.fail(p + ("machines",), "missing: a placement needs 'machines' (name, engine and cores of each)")
    mp = p + ("machines",)
    seen: dict[str, int] = {}
    engines: dict[str, int] = {}
    for i, item in enumerate(c.sequence(mp, m["machines"])):
        machine = _machine(c, mp + (i,), item)
        if machine.name in seen:
            c.fail(mp + (i, "name"), f"machine {machine.name} is named twice (also machines[{seen[machine.name]}])")
        if machine.engine in engines:
            c.fail(mp + (i, "engine"), f"machines[{engines[machine.engine]}] has the same engine: each machine "
                                       f"needs its own")
        seen[machine.name] = i
        engines[machine.engine] = i
        out.machines.append(machine)
    if len(out.machines) < 2:
        c.fail(mp, f"expected at least two machines, got {len(out.machines)} (one machine needs no placement)")
    sp = p + ("strategy",)
    strategy = m.get("strategy", AUTO)
    if isinstance(strategy, dict):
        if not strategy:
            c.fail(sp, "an explicit placement names every host: {host: machine, ...}")
        out.strategy = "explicit"
        for host, machine in strategy.items():
            machine = c.text(sp + (host,), machine)
            if machine not in seen:
                c.fail(sp + (host,), f"unknown machine {show(machine)} (machines: {names_text(list(seen))})")
            out.hosts[host] = machine
    elif strategy != AUTO:
        c.fail(sp, f"expected {AUTO} or a mapping {{host: machine}}, got {show(strategy)}")
    s.placement = out


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    spec: PlacementSpec = s.placement
    if not spec.enabled:
        return
    p: KeyPath = ("placement",)
    names = topo.node_names()
    known = set(names)
    for host in spec.hosts:
        if host not in known:
            c.fail(p + ("strategy", host), f"unknown host {show(host)} (hosts: {names_text(names)})")
    if spec.strategy == "explicit":
        missing = [n for n in names if n not in spec.hosts]
        if missing:
            c.fail(p + ("strategy",), f"{len(missing)} host(s) left unplaced: {names_text(missing)} (an explicit "
                                      f"placement names every host, or use strategy: {AUTO})")
    if s.runtime != "docker":
        c.fail(p, f"a network over several machines needs runtime: docker (each host a container of its "
                  f"machine's engine), not {s.runtime}")
    if s.shaper == "netem":
        c.fail(p, "a network over several machines needs the wire shaper (links across machines are split "
                  "wire links): use shaper: wire or auto")
    # capture: checked by the capture section, which is checked after this one


def _plain(s: Scenario) -> Any:
    spec: PlacementSpec = s.placement
    if not spec.enabled:
        return None
    return {"machines": [{"name": m.name, "engine": m.engine, "cores": m.cores, "address": m.address}
                         for m in spec.machines],
            "strategy": dict(spec.hosts) if spec.strategy == "explicit" else AUTO}


PLACEMENT = Section("placement", read=_read, check=_check, plain=_plain, default=PlacementSpec)
