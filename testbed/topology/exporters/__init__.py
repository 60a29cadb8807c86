"""A scenario's network written for other emulators (`testbed export --to mininet|kathara`).

Each exporter takes the loaded scenario's built topology (links in wall units,
time_scale applied, exactly as `testbed run` and `up` build them), its address
plan and the hosts without node daemons, and refuses with one `ExportRefused` line
naming the link when the target cannot express something.
"""
from __future__ import annotations

from dataclasses import dataclass

from node.errors import UserError
from testbed.topology.model import AddressPlan, Topology


class ExportRefused(UserError):
    """The target format cannot express a part of the network (one line naming it)."""


@dataclass
class Network:
    """What an exporter writes: the topology, its addresses and routes, and which hosts are switches/hubs."""

    name: str
    topology: Topology
    plan: AddressPlan
    daemonless: set[str]


def from_scenario(scenario: object) -> Network:
    """The scenario's network with its links in wall units (time_scale applied), as `run` and `up` build it."""
    from testbed.experiment import timescale
    from testbed.topology import addressing, overlay
    topo = timescale.wall_topology(scenario)      # type: ignore[arg-type]
    spec = scenario.topology          # type: ignore[attr-defined]
    plan = addressing.plan(topo, spec.data_pool, spec.loopback_pool, spec.mgmt_pool)
    names = topo.node_names()
    daemons = set(overlay.daemon_hosts(scenario.nodes, names))   # type: ignore[attr-defined]
    return Network(topo.name, topo, plan, {n for n in names if n not in daemons})
