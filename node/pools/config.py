"""The `pools:` section of a node config (node/pools/): this node's roles in pooled event consumption.

    pools:
      enabled: true
      replicas: {r1: "10.0.0.1:7100", r2: "10.0.0.2:7100", r3: "10.0.0.3:7100"}   # Raft addresses, 3 or 5
      password: "..."               # the replicas' shared Raft secret (mandatory on a replica)
      journal: ""                   # Raft log and vote; default <spool's directory>/pools.journal
      consumer: {name: c1, types: [t1, t2]}     # this node is a consumer (PS): its name and the event types it produces
      apps: {A: {algorithm: round_robin, move_share: 0.5, types: [t1], instances: {i1: n3, i2: n4}}}
      heartbeat: 0.5                # seconds between heartbeats (wall clock)
      crash_timeout: 2.0            # seconds without a heartbeat before an instance counts as crashed

A node is a replica when its name is a key of `replicas`: it hosts the controller and talks Raft on its own
address there to the others. The testbed gives each replica its loopback data address with the port
`raft_port_offset` above its data port (`raft_address`), so cuts and partitions of the emulated network reach
Raft too. `apps` are the definitions the controller's leader enters at start (every replica has the same).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.errors import ConfigError
from node.names import is_node_name
from node.pools.assign import ALGORITHMS, NAME_MAX, is_pool_name

REPLICA_COUNTS = (3, 5)
RAFT_PORT_OFFSET = 100            # a replica's Raft port: its data port plus this (testbed default)
PASSWORD_MIN = 16                 # characters: pysyncobj unpickles what it receives, the secret is all that guards it
# app, instance, consumer and event type names become topic tokens (node/pools/assign.py is_pool_name)
POOL_NAME_RULE = f"1-{NAME_MAX} letters, digits, '_' or '-'"
_RAFT_ADDR = re.compile(r"^([A-Za-z0-9_.-]+):(\d{1,5})$")


def raft_address(data_listen: str, offset: int = RAFT_PORT_OFFSET) -> str:
    """A replica's Raft address from its (loopback) data address: same host, port + offset."""
    host, _, port = data_listen.rpartition(":")
    return f"{host}:{int(port) + offset}"


@dataclass
class ConsumerConfig:
    """This node as a consumer (PS): the name it registers under and the event types it produces."""
    name: str = ""                 # "" = this node is no consumer
    types: list[str] = field(default_factory=list)


@dataclass
class AppConfig:
    """One application pool: how its connections are assigned, which event types it needs, its instances."""
    algorithm: str = "round_robin"
    move_share: float = 0.5        # load_aware: the share of the heaviest connections a change moves, in (0, 1]
    types: list[str] = field(default_factory=list)
    instances: dict[str, str] = field(default_factory=dict)   # instance -> the node its client runs at


@dataclass
class PoolsConfig:
    """Pooled event consumption (node/pools/); off unless `enabled`."""
    enabled: bool = False
    replicas: dict[str, str] = field(default_factory=dict)    # replica node -> its Raft "host:port"
    password: str = ""
    journal: str = ""
    consumer: ConsumerConfig = field(default_factory=ConsumerConfig)
    apps: dict[str, AppConfig] = field(default_factory=dict, metadata={
        "map_of": AppConfig, "error": "must be a mapping of application -> {algorithm, move_share, types, "
                                      "instances}."})
    heartbeat: float = 0.5
    crash_timeout: float = 2.0

    def is_replica(self, node: str) -> bool:
        return node in self.replicas

    def journal_path(self, node: Any) -> Path:
        """Where the Raft log and vote are kept (`node`: the core NodeConfig): a relative path is in the
        directory of the node's spool."""
        base = node.spool_path.parent
        if not self.journal:
            return base / "pools.journal"
        p = Path(self.journal)
        return p if p.is_absolute() else base / p

    def validate(self, node: Any) -> None:
        """`node`: the core NodeConfig (its name)."""
        if not self.enabled:
            return
        broker = node.sections.get("broker")
        if broker is not None and not broker.enabled:
            raise ConfigError("pools need the broker: pools.enabled with broker.enabled false.")
        if self.heartbeat <= 0 or self.crash_timeout <= self.heartbeat:
            raise ConfigError("pools.heartbeat must be positive and pools.crash_timeout longer than it.")
        if len(self.replicas) not in REPLICA_COUNTS:
            raise ConfigError(f"pools.replicas must name 3 or 5 controller replicas (got {len(self.replicas)}).")
        seen: dict[str, str] = {}
        for name, addr in self.replicas.items():
            if not is_node_name(name):
                raise ConfigError(f"pools.replicas: {name!r} is not a valid node name.")
            m = _RAFT_ADDR.match(addr) if isinstance(addr, str) else None
            if not m or not 0 < int(m.group(2)) < 65536:
                raise ConfigError(f"pools.replicas.{name} must be the replica's Raft \"host:port\", got {addr!r}.")
            if addr in seen:
                raise ConfigError(f"pools.replicas: {seen[addr]} and {name} have the same Raft address {addr}.")
            seen[addr] = name
        if self.is_replica(node.name) and len(self.password) < PASSWORD_MIN:
            raise ConfigError(f"pools.password: a controller replica needs the replicas' Raft secret, at least "
                              f"{PASSWORD_MIN} characters (Raft peers unpickle what they receive).")
        c = self.consumer
        if c.name or c.types:
            if not is_pool_name(c.name):
                raise ConfigError(f"pools.consumer.name {c.name!r} is not a valid name ({POOL_NAME_RULE}).")
            if not c.types:
                raise ConfigError("pools.consumer.types: a consumer needs the event types it produces.")
            _names("pools.consumer.types", c.types, "event type")
        for app, a in self.apps.items():
            where = f"pools.apps.{app}"
            if not is_pool_name(app):
                raise ConfigError(f"pools.apps: {app!r} is not a valid application name ({POOL_NAME_RULE}).")
            if a.algorithm not in ALGORITHMS:
                raise ConfigError(f"{where}.algorithm {a.algorithm!r} is not one of {', '.join(ALGORITHMS)}.")
            if not 0.0 < a.move_share <= 1.0:
                raise ConfigError(f"{where}.move_share must be in (0, 1], got {a.move_share:g}.")
            if not a.types:
                raise ConfigError(f"{where}.types: an application needs at least one event type.")
            _names(f"{where}.types", a.types, "event type")
            for inst, host in a.instances.items():
                if not is_pool_name(inst):
                    raise ConfigError(f"{where}.instances: {inst!r} is not a valid instance name "
                                      f"({POOL_NAME_RULE}).")
                if not is_node_name(host):
                    raise ConfigError(f"{where}.instances.{inst}: {host!r} is not a valid node name.")


def _names(where: str, names: list[str], what: str) -> None:
    for n in names:
        if not is_pool_name(n):
            raise ConfigError(f"{where}: {n!r} is not a valid {what} ({POOL_NAME_RULE}).")
        if n.startswith("_"):      # `_fence` and the like travel on the same topics as the events
            raise ConfigError(f"{where}: {n!r}: an {what} must not start with '_' (kept for control messages).")
    if len(set(names)) != len(names):
        raise ConfigError(f"{where} names an {what} twice.")
