"""Pooled event consumption as a node subsystem (node/subsystem.py): the roles a node plays in it.

  consumer (PS)   `pools.consumer` set: node/pools/sender.py turns each event published here into one durable
                  publication per interested application (the broker's topic transform), takes the assignments
                  of the controller's leader and beats with its load.
  replica         this node is named in `pools.replicas`: it hosts a controller replica (node/pools/host.py),
                  which hears heartbeats on `_pools.hb.>` and, as the leader, publishes the assignments.

Records: nodes/<node>/pools.jsonl (kind `pool`); metrics: the `pools` section.
"""
from __future__ import annotations

from typing import Any

from node.broker.broker import Broker
from node.pools.config import PoolsConfig
from node.pools.host import ControllerHost
from node.pools.sender import PoolSender
from node.pools.service import PoolsService
from node.rpc import pools_pb2_grpc
from node.subsystem import Authorizer, Subsystem

class PoolsSubsystem(Subsystem):
    name = "pools"
    config = PoolsConfig

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.engine: Any = None
        self.sender: PoolSender | None = None
        self.host: ControllerHost | None = None   # on a replica: the controller and what it does

    def enabled(self) -> bool:
        return self.section.enabled

    def attach(self, engine: Any) -> None:
        self.engine = engine

    def _broker(self) -> Broker:
        broker = self.engine.hooks.subsystems.get("broker")
        if broker is None or broker.broker is None:
            raise RuntimeError("pools need the broker (broker.enabled)")
        return broker.broker

    async def start(self) -> None:
        """After the broker started (the registry's order): the roles this node plays."""
        sec: PoolsConfig = self.section
        broker = self._broker()
        if sec.consumer.name:
            types = {app: list(a.types) for app, a in sec.apps.items()}
            self.sender = PoolSender(self.cfg.name, sec.consumer.name, types, broker, self.engine.spool,
                                     self.engine.records)
            await self.sender.start(sec.consumer.types, sec.heartbeat)
        if sec.is_replica(self.cfg.name):
            self.host = ControllerHost(self.cfg.name, sec, sec.journal_path(self.cfg), broker, self.engine.records)
            await self.host.start()

    async def stop(self) -> None:
        if self.host is not None:
            await self.host.stop()
        if self.sender is not None:
            await self.sender.stop()

    def services(self, server: Any, authorizer: Authorizer) -> None:
        pools_pb2_grpc.add_PoolsServicer_to_server(
            PoolsService(self.cfg.name, lambda: None if self.host is None else self.host.controller, self._leader,
                         authorizer), server)

    def _leader(self) -> str:
        """The leader replica's node name ("" while there is none)."""
        if self.host is None:
            return ""
        leader = self.host.controller.leader()
        if not leader:
            return ""
        by_addr = {addr: name for name, addr in self.section.replicas.items()}
        return by_addr.get(str(leader), str(leader))

    def snapshot(self) -> dict | None:
        out: dict[str, Any] = {}
        if self.sender is not None:
            out["consumer"] = self.sender.snapshot()
        if self.host is not None:
            out["controller"] = self.host.snapshot()
        return out


SUBSYSTEM = PoolsSubsystem
