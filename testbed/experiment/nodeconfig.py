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
With the `dynamic` routing policy every config also gets a `routing:` section
(mode dynamic, every MTA node's name, the scenario's routing settings) and keeps
the `shortest` table as its start-up fallback; the static policies add none.
Every config is validated by the node's own loader before any daemon starts,
so a bad setting is one clear error naming the node, not a dead daemon; before
anything is built, the runner's check names the scenario key and line that set
it (`setting_at_fault`). node.yaml is written 0600: it may hold a control_token.
The Link service listens on the host's data-plane addresses only (its loopback
and one per link), never on the management network. With the scenario's
`security:` on, `add_security` makes the run's secrets (testbed/secrets.py) and
gives every config its `security:` section.
"""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import yaml


from node import registry
from node.client import Access
from node.routing.config import ProbeLinkConfig
from node.errors import UserError
from testbed import secrets
from testbed.experiment import holdtime
from testbed.network import Network
from testbed.scenario.spec import RoutingSpec, Scenario
from testbed.subsystems import SUBSYSTEMS
from testbed.topology import overlay, routing
from testbed.topology.model import Topology

DATA_PORT = 7000
MGMT_PORT = 7001
CONTAINER_WORKDIR = "/work"     # where the docker runtime mounts a host's nodes/<name> directory
# Keys the testbed decides; a scenario setting them would break the run's wiring.
RESERVED = ("name", "data_listen", "data_listen_also", "mgmt_listen", "neighbours", "routes", "records_dir", "spool",
            "security")


def routing_policy(scenario: Scenario) -> str:
    """The policy of the nodes' static next-hop tables: the `routing:` policy, with `auto` chosen by
    topology, and `shortest` for `dynamic` (the table a dynamic node falls back on at start-up, for the
    destinations it has no link-state path to yet)."""
    policy = str(getattr(scenario.routing, "policy", scenario.routing))     # a policy name or a RoutingSpec
    if policy == "dynamic":
        return "shortest"
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


def _hostport(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def data_listens(network: Network, node: str) -> list[str]:
    """Where the node's Link service listens: each of its data-plane addresses (loopback first), so the data port
    is not open on the management network."""
    return [_hostport(a, DATA_PORT) for a in network.addresses(node)] or [f"0.0.0.0:{DATA_PORT}"]


def neighbour_address(network: Network, node: str, peer: str) -> str:
    """Where `node` dials its MTA neighbour `peer`: the shared link's address next door, else peer's loopback."""
    if peer in network.topology.neighbours(node):
        return f"{network.link_address(peer, node)}:{DATA_PORT}"
    return f"{network.data_address(peer)}:{DATA_PORT}"


def node_configs(scenario: Scenario, network: Network, rep_dir: Path) -> dict[str, dict]:
    """One validated node config mapping per daemon host (node/config.py keys). `scenario` is in wall units."""
    mta = overlay.mta_topology(network.topology, scenario.nodes)
    table = routing.next_hops(mta, routing_policy(scenario), scenario.seed)
    dynamic = dynamic_routing(scenario, network.topology, mta)
    sessions = holdtime.session_settings(scenario, network.topology, mta.node_names())
    wirings: dict[str, dict[str, Any]] = {}
    for name in mta.node_names():
        neighbours = {peer: neighbour_address(network, name, peer) for peer in mta.neighbours(name)}
        # A neighbour dials this host on its shared link's address or on its loopback: it listens on those.
        listens = data_listens(network, name)
        wiring: dict[str, Any] = {
            "name": name,
            "data_listen": listens[0],
            "data_listen_also": listens[1:],
            "mgmt_listen": f"{network.mgmt_address(name)}:{MGMT_PORT}",
            "neighbours": neighbours,
            "routes": {dst: hop for dst, hop in table.get(name, {}).items() if dst != name},
            "records_dir": records_dir(scenario, rep_dir, name),
        }
        if name in dynamic:
            wiring["routing"] = dynamic[name]
        if name in sessions:       # slow links: a whole batch must cross within the hold time
            wiring["session"] = sessions[name]
        for sub in SUBSYSTEMS:           # each subsystem's own config sections (testbed/subsystems/)
            wiring.update(sub.node_config(scenario, name))
        wirings[name] = wiring
    for sub in SUBSYSTEMS:               # what a subsystem needs of other nodes' wiring (their addresses)
        sub.wire(scenario, wirings, rep_dir)
    return {name: merged_config(scenario, name, wiring) for name, wiring in wirings.items()}


def dynamic_routing(scenario: Scenario, topology: Topology, mta: Topology) -> dict[str, dict[str, Any]]:
    """MTA host -> its config's `routing:` section when the policy is `dynamic` (else empty).

    mode and the node list, then the scenario's settings that differ from the node's defaults
    (node/config.py), and each `monitor.links` entry (a topology link) as `monitor.links.<neighbour>`
    at both ends. `scenario` is in wall units.
    """
    spec = scenario.routing if isinstance(scenario.routing, RoutingSpec) else RoutingSpec(str(scenario.routing))
    if spec.policy != "dynamic":
        return {}
    base: dict[str, Any] = {"mode": "dynamic", "nodes": mta.node_names()}
    defaults = RoutingSpec()
    for key in ("hysteresis", "refresh", "max_age"):
        if getattr(spec, key) != getattr(defaults, key):
            base[key] = getattr(spec, key)
    for key in ("monitor", "cost", "damping"):
        changed = _changed(getattr(spec, key), getattr(defaults, key))
        if changed:
            base[key] = changed
    out = {name: copy.deepcopy(base) for name in mta.node_names()}
    for link, probe in spec.monitor.links.items():
        settings = _changed(probe, ProbeLinkConfig())
        ends = _link_ends(topology, link)
        for a, b in (ends, ends[::-1]):
            if b not in mta.neighbours(a):
                raise UserError(f"routing.monitor.links.{link}: {a} and {b} are not MTA neighbours (a host without "
                                f"a daemon, or mta_neighbours, between them), so no probes run on that link.")
            out[a].setdefault("monitor", {}).setdefault("links", {})[b] = dict(settings)
    return out


def _changed(value: Any, default: Any) -> dict[str, Any]:
    """The fields of a settings dataclass that differ from `default` (nested `links` left out)."""
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)
            if f.name != "links" and getattr(value, f.name) != getattr(default, f.name)}


def _link_ends(topology: Topology, name: str) -> tuple[str, str]:
    for link in topology.links:
        if link.name == name:
            return link.a, link.b
    raise UserError(f"routing.monitor.links.{name}: the topology has no link {name}.")


def merged_config(scenario: Scenario, name: str, wiring: dict[str, Any]) -> dict[str, Any]:
    """The testbed's wiring for one node with the scenario's settings laid over it, validated by the node.

    Mappings are merged key by key at every depth (`nodes.n1.routing: {rules: [...]}` keeps the testbed's
    routing mode, nodes and monitor settings); any other value replaces the testbed's.
    """
    settings = copy.deepcopy(overlay.without_testbed_keys(scenario.nodes.settings_for(name)))
    clash = [k for k in RESERVED if k in settings]
    if clash:
        raise UserError(f"nodes.{name}.{clash[0]} is set by the testbed and cannot be given in a scenario.")
    cfg = copy.deepcopy(wiring)
    _lay_over(cfg, settings)
    try:
        registry.config_from_dict(copy.deepcopy(cfg))
    except UserError as exc:
        raise UserError(f"node settings for {name} are invalid: {exc}") from None
    return cfg


def setting_at_fault(scenario: Scenario, name: str, wiring: dict[str, Any]) -> tuple[tuple[str, ...], str] | None:
    """The scenario key (("nodes", "all" or `name`, ...)) whose setting makes node `name`'s config invalid, and
    why; None when the config is valid, or invalid without any scenario setting (the testbed's own wiring).

    The node's loader names no scenario keys, so the culprit is found by trying: the scenario's settings are
    laid over the wiring one value at a time, and the first that brings the node's own error is the one.
    Only called once a config has failed: it validates once per value given."""
    per_node = scenario.nodes.per_node.get(name, {})
    settings = overlay.without_testbed_keys(scenario.nodes.settings_for(name))
    leaves = [(("nodes", name if key in per_node else "all", key, *below), value)
              for key, top in settings.items() for below, value in _leaves(top)]
    for path, _ in leaves:
        if path[2] in RESERVED:
            return path, "set by the testbed; a scenario cannot give it"
    error = _config_error(_laid_over(wiring, settings))
    if error is None:
        return None
    cfg = copy.deepcopy(wiring)
    for path, value in leaves:
        _put(cfg, path[2:], value)
        if _config_error(cfg) == error:
            return path, error
    return None


def _leaves(value: Any) -> list[tuple[tuple[str, ...], Any]]:
    """(key path below `value`, leaf) for every value that is not a non-empty mapping."""
    if not isinstance(value, dict) or not value:
        return [((), value)]
    return [((str(k), *below), leaf) for k, v in value.items() for below, leaf in _leaves(v)]


def _put(cfg: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """One leaf laid over `cfg` as `_lay_over` would lay the mapping holding it."""
    for key in path[:-1]:
        if not isinstance(cfg.get(key), dict):
            cfg[key] = {}
        cfg = cfg[key]
    if not (isinstance(value, dict) and isinstance(cfg.get(path[-1]), dict)):
        cfg[path[-1]] = copy.deepcopy(value)


def _laid_over(wiring: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    cfg = copy.deepcopy(wiring)
    _lay_over(cfg, copy.deepcopy(settings))
    return cfg


def _config_error(cfg: dict[str, Any]) -> str | None:
    try:
        registry.config_from_dict(copy.deepcopy(cfg))
    except UserError as exc:
        return str(exc)
    return None


def _lay_over(base: dict[str, Any], over: dict[str, Any]) -> None:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _lay_over(base[key], value)
        else:
            base[key] = value


def node_users(scenario: Scenario, configs: dict[str, dict]) -> dict[str, list[str]]:
    """The users with a mailbox at each daemon node, who get a token each: the config's `local_users`, the
    workload's recipient users (at every node: any may be a recipient), its originators (at every node: the
    driver sends as them with their own token) and those a subsystem needs there."""
    workload_users = {g.recipients.user for g in scenario.workload.generators if g.recipients.user}
    workload_users |= {g.originator for g in scenario.workload.generators if g.originator}
    out: dict[str, list[str]] = {}
    for name, cfg in configs.items():
        users = set(cfg.get("local_users") or []) | workload_users
        for sub in SUBSYSTEMS:
            users |= sub.users(cfg)
        out[name] = sorted(users)
    return out


def add_security(scenario: Scenario, configs: dict[str, dict], rep_dir: Path) -> secrets.RunSecrets:
    """Make the run's secrets for the scenario's `security:` and put every node's `security:` section in its
    config; returns them (the testbed's clients take the admin token from it)."""
    sec = scenario.security
    run = secrets.make(rep_dir, node_users(scenario, configs), sec.tls, sec.auth)
    for name, cfg in configs.items():
        section = run.node_section(name)
        if section:
            cfg["security"] = section
    return run


def client_tokens(configs: dict[str, dict], run: secrets.RunSecrets) -> dict[str, Access]:
    """node -> what the testbed's own clients (health check, drain, workload driver, subscribers) carry there:
    the node's admin token, else its own control_token (so a scenario setting one still runs), and with tls
    the run's CA and the node's name to check its certificate against."""
    out: dict[str, Access] = {}
    for n, cfg in configs.items():
        access = run.access(n)
        out[n] = dataclasses.replace(access, token=access.token or str(cfg.get("control_token") or ""))
    return out


def mgmt_target(network: Network, node: str) -> str:
    """Where the testbed reaches a node's Submit/Control services from the root namespace."""
    return f"{network.mgmt_address(node)}:{MGMT_PORT}"


def write_configs(configs: dict[str, dict], rep_dir: Path) -> dict[str, Path]:
    """nodes/<name>/node.yaml for every node; returns the paths on this machine.

    Each is 0600 and owned like its directory (root's; a docker host's belongs to the image's user), because a
    config may hold a scenario's `control_token`: only the node's own daemon reads it."""
    paths: dict[str, Path] = {}
    for name, cfg in configs.items():
        d = rep_dir / "nodes" / name
        d.mkdir(parents=True, exist_ok=True)
        p = d / "node.yaml"
        secrets.write_private(p, yaml.safe_dump(cfg, sort_keys=False).encode(), owner_of=d)
        paths[name] = p
    return paths
