"""A network's hosts placed on several machines: which engine each host's container goes to, and the agents
that run the machines' wire emulator halves (used by testbed/network.py when the scenario has a `placement`).

Built so far for machines that share the controller's kernel (the engines of
tests/integration/docker/multi/, each in a network namespace of its own): the
management network, addresses, routes and sysctls are still made by the
controller, which needs the host containers' namespaces in its own kernel (a
partition of placed hosts is made by their machines' agents, testbed/network.py).
An agent on another kernel is refused in one sentence, before any link exists,
rather than giving a network that half works.
"""
from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

from node.errors import UserError
from node.records import TEST_CLOCK_OFFSET_ENV
from testbed import registry
from testbed.agent.controller import Agent, split_shaper
from testbed.clockoffset import ClockError, Estimate
from testbed.clockservice import measure
from testbed.docker_engine import Engine
from testbed.placement import PlacementError, graph_of, place
from testbed.shaping.split import SplitWireShaper
from testbed.topology.model import Topology

log = logging.getLogger(__name__)

BOOT_ID = "/proc/sys/kernel/random/boot_id"
# Tests only: "m2=0.5[,m3=-0.2]" makes machine m2 behave as if its clock ran 0.5 s ahead of the controller's: its
# clock service answers with that offset and its node daemons stamp their records with it (node/records.py).
# Machines that share the controller's kernel share its clock; a test needs a known offset on one of them.
TEST_MACHINE_OFFSET_ENV = "WANBED_TEST_MACHINE_CLOCK_OFFSET"


def host_machines(topology: Topology, spec: Any) -> dict[str, str]:
    """host -> machine of a PlacementSpec (testbed/scenario/sections/placement.py): the explicit mapping, or the
    automatic one (every host counted as a daemon's: the network does not know which hosts run one)."""
    graph = graph_of(topology, topology.node_names())
    try:
        return place(graph, spec.cores(), dict(spec.hosts) if spec.strategy == "explicit" else None)
    except PlacementError as exc:
        raise UserError(str(exc)) from None


def host_engines(machines: dict[str, str], spec: Any) -> dict[str, Engine]:
    """host -> the Engine of its machine."""
    engines = {m.name: Engine(m.name, m.engine) for m in spec.machines}
    return {host: engines[m] for host, m in machines.items()}


def _boot_id() -> str:
    with open(BOOT_ID) as f:
        return f.read().strip()


def start_agents(run_id: str, spec: Any, image: str, used: set[str], agents: dict[str, Agent],
                 agent_class: type[Agent] = Agent) -> None:
    """Start the agent of every machine in `used` into `agents` (each recorded before it starts, so the caller
    removes whatever started, also when one fails); refuse a machine on another kernel than the controller's."""
    mine = _boot_id()
    for m in spec.machines:
        if m.name not in used:
            continue
        agent = agent_class(run_id, m.name, Engine(m.name, m.engine), image)
        agents[m.name] = agent
        hello = agent.start()
        if hello.get("boot_id") != mine:
            raise UserError(f"machine {m.name} runs another kernel than this controller: a network over separate "
                            f"machines also needs the management network and the host plumbing done by the "
                            f"agents, which are not built yet (docs/multi-machine.md).")


def placed_shaper(run_id: str, workdir: Path, spec: Any, agents: dict[str, Agent], hosts: dict[str, Any],
                  machines: dict[str, str]) -> SplitWireShaper:
    """The wire shaper over the machines: each agent names its hosts' namespaces (by their containers' init pids)
    so that its half can move TAPs into them, then starts its half."""
    for name, agent in agents.items():
        ops = [{"op": "attach", "netns": h.netns, "pid": h.init_pid()} for host, h in hosts.items()
               if machines[host] == name]
        if ops:
            agent.request(ops)
    addresses = {m: a for m, a in spec.addresses().items() if m in agents}
    placement = {hosts[h].netns: m for h, m in machines.items()}
    return split_shaper(run_id, workdir, agents, addresses, placement)


def injected_offsets(spec: Any, env: dict[str, str] | None = None) -> dict[str, float]:
    """machine -> the test-only clock offset of TEST_MACHINE_OFFSET_ENV (empty when unset); one UserError
    naming the variable when it is malformed or names a machine the placement does not have."""
    text = (os.environ if env is None else env).get(TEST_MACHINE_OFFSET_ENV, "").strip()
    if not text:
        return {}
    names = {m.name for m in spec.machines}
    out: dict[str, float] = {}
    for item in text.split(","):
        name, sep, value = (x.strip() for x in item.partition("="))
        try:
            offset = float(value) if sep else math.nan
        except ValueError:
            offset = math.nan
        if name not in names or not math.isfinite(offset):
            raise UserError(f"{TEST_MACHINE_OFFSET_ENV} must be MACHINE=SECONDS[,...] naming machines of the "
                            f"placement ({', '.join(sorted(names))}), got {item.strip()!r}.")
        out[name] = offset
    return out


def daemon_env(machine: str, offsets: dict[str, float]) -> dict[str, str]:
    """The environment a node daemon on `machine` gets: the test-only clock offset of its machine, if any."""
    return {TEST_CLOCK_OFFSET_ENV: repr(offsets[machine])} if machine in offsets else {}


def start_clocks(run_id: str, spec: Any, agents: dict[str, Agent],
                 offsets: dict[str, float]) -> dict[str, tuple[str, int]]:
    """Each agent starts its machine's clock service on the machine's address (the controller must reach it
    there over UDP); machine -> (address, port)."""
    addresses = spec.addresses()
    out: dict[str, tuple[str, int]] = {}
    for name, agent in agents.items():
        answer = agent.request([{"op": "clock_start", "tag": registry.prefix(run_id), "host": addresses[name],
                                 "offset": offsets.get(name, 0.0)}])[0]
        out[name] = (addresses[name], int(answer["port"]))
    return out


def measure_clocks(services: dict[str, tuple[str, int]]) -> dict[str, Estimate]:
    """machine -> its clock estimate now (testbed/clockservice.py measure); UserError naming a machine that
    answered no probe."""
    out: dict[str, Estimate] = {}
    for name, address in services.items():
        try:
            out[name] = measure(address, machine=name)
        except ClockError as exc:
            raise UserError(str(exc)) from None
        except OSError as exc:          # no route to the address, say
            raise UserError(f"machine {name}'s clock service at {address[0]}:{address[1]} cannot be reached "
                            f"({exc}).") from None
    return out
