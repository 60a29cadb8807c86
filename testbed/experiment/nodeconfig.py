"""Node daemon configs for one run: what `python -m node --config` reads in every host.

Listen addresses come from the network's address plan. Only hosts that run a
daemon get a config (`nodes.<host>.daemon: false` makes a host a plain IP
router). MTA neighbours and routing tables come from the MTA overlay
(testbed.topology.overlay: the topology with daemon-less hosts contracted, or
the scenario's `mta_neighbours`) through testbed.topology.routing. A neighbour
next door is dialled on its address on the shared link (so a link that goes
down really cuts the session); one further away on its loopback address, which
the kernel routes of the address plan reach from every host. The scenario's
`nodes.all` / per-node settings are laid over the top, without the testbed's
own keys (`daemon`, `mta_neighbours`).
Every config is validated by the node's own loader before any daemon starts,
so a bad setting is one clear error naming the node, not a dead daemon.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from node import config as node_config
from node.errors import UserError
from testbed.network import Network
from testbed.scenario.spec import Scenario
from testbed.topology import overlay, routing

DATA_PORT = 7000
MGMT_PORT = 7001
CONTAINER_WORKDIR = "/work"     # where the docker runtime mounts a host's nodes/<name> directory
# Keys the testbed decides; a scenario setting them would break the run's wiring.
RESERVED = ("name", "data_listen", "mgmt_listen", "neighbours", "routes", "records_dir", "spool")


def routing_policy(scenario: Scenario) -> str:
    """The routing policy for the scenario: its `routing:` key, with `auto` chosen by topology."""
    policy = str(getattr(scenario.routing, "policy", scenario.routing))     # a policy name or a RoutingSpec
    if policy != "auto":
        return policy
    return "delay" if scenario.topology.generator == "intercontinental6" else "shortest"


def records_dir(scenario: Scenario, rep_dir: Path, node: str) -> str:
    """The node's records directory as the daemon sees it (inside a container: the mounted workdir)."""
    if scenario.runtime == "docker":
        return CONTAINER_WORKDIR
    return str((rep_dir / "nodes" / node).resolve())


def daemon_hosts(scenario: Scenario, network: Network) -> list[str]:
    """The hosts of the network that run a node daemon, in topology order."""
    return overlay.daemon_hosts(scenario.nodes, network.topology.node_names())


def neighbour_address(network: Network, node: str, peer: str) -> str:
    """Where `node` dials its MTA neighbour `peer`: the shared link's address next door, else peer's loopback."""
    if peer in network.topology.neighbours(node):
        return f"{network.link_address(peer, node)}:{DATA_PORT}"
    return f"{network.data_address(peer)}:{DATA_PORT}"


def node_configs(scenario: Scenario, network: Network, rep_dir: Path) -> dict[str, dict]:
    """One validated node config mapping per daemon host (node/config.py keys). `scenario` is in wall units."""
    mta = overlay.mta_topology(network.topology, scenario.nodes)
    table = routing.next_hops(mta, routing_policy(scenario), scenario.seed)
    out: dict[str, dict] = {}
    for name in mta.node_names():
        neighbours = {peer: neighbour_address(network, name, peer) for peer in mta.neighbours(name)}
        wiring: dict[str, Any] = {
            "name": name,
            # Any address: a neighbour dials this host on its shared link's address or on its loopback.
            "data_listen": f"0.0.0.0:{DATA_PORT}",
            "mgmt_listen": f"{network.mgmt_address(name)}:{MGMT_PORT}",
            "neighbours": neighbours,
            "routes": {dst: hop for dst, hop in table.get(name, {}).items() if dst != name},
            "records_dir": records_dir(scenario, rep_dir, name),
        }
        out[name] = merged_config(scenario, name, wiring)
    return out


def merged_config(scenario: Scenario, name: str, wiring: dict[str, Any]) -> dict[str, Any]:
    """The testbed's wiring for one node with the scenario's settings laid over it, validated by the node."""
    settings = copy.deepcopy(overlay.without_testbed_keys(scenario.nodes.settings_for(name)))
    clash = [k for k in RESERVED if k in settings]
    if clash:
        raise UserError(f"nodes.{name}.{clash[0]} is set by the testbed and cannot be given in a scenario.")
    cfg = copy.deepcopy(wiring)
    for key, value in settings.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key].update(value)
        else:
            cfg[key] = value
    try:
        node_config.from_dict(copy.deepcopy(cfg))
    except UserError as exc:
        raise UserError(f"node settings for {name} are invalid: {exc}") from None
    return cfg


def mgmt_target(network: Network, node: str) -> str:
    """Where the testbed reaches a node's Submit/Control services from the root namespace."""
    return f"{network.mgmt_address(node)}:{MGMT_PORT}"


def write_configs(configs: dict[str, dict], rep_dir: Path) -> dict[str, Path]:
    """nodes/<name>/node.yaml for every node; returns the paths on this machine."""
    paths: dict[str, Path] = {}
    for name, cfg in configs.items():
        d = rep_dir / "nodes" / name
        d.mkdir(parents=True, exist_ok=True)
        p = d / "node.yaml"
        p.write_text(yaml.safe_dump(cfg, sort_keys=False))
        paths[name] = p
    return paths
