"""Pooled event consumption as a node subsystem (node/subsystem.py): the roles a node plays in it.

  consumer (PS)   `pools.consumer` set: node/pools/sender.py turns each event published here into one durable
                  publication per interested application (the broker's topic transform); the assignments of the
                  controller's leader arrive on `_pools.assign.<consumer>`, through this node's own durable
                  subscription (node/pools/listen.py, the one way the pools read from the broker).
  replica         this node is named in `pools.replicas`: it hosts a controller replica (node/pools/host.py),
                  which hears heartbeats on `_pools.hb.>` and, as the leader, publishes the assignments.

Records: nodes/<node>/pools.jsonl (kind `pool`); metrics: the `pools` section.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from node.broker.broker import Broker
from node.pools import messages
from node.pools.config import PoolsConfig
from node.pools.host import ASSIGN_TOPIC, HB_TOPIC, ControllerHost
from node.pools.listen import Listener
from node.pools.messages import Assignment
from node.pools.sender import PoolSender
from node.pools.service import PoolsService
from node.rpc import pools_pb2_grpc, pubsub_pb2
from node.subsystem import Authorizer, Subsystem

log = logging.getLogger("node.pools")



def assign_subscription(consumer: str) -> str:
    """The name of a consumer node's own durable subscription to its assignments."""
    return f"pools.assign.{consumer}"


class PoolsSubsystem(Subsystem):
    name = "pools"
    config = PoolsConfig

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.engine: Any = None
        self.sender: PoolSender | None = None
        self.host: ControllerHost | None = None   # on a replica: the controller and what it does
        self.listeners: list[Listener] = []
        self._tasks: list[asyncio.Task] = []
        self.bad = 0                          # malformed or unauthorised control publications refused

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
            await self.sender.start()
            self.listeners.append(Listener(broker, assign_subscription(sec.consumer.name),
                                           f"{ASSIGN_TOPIC}.{sec.consumer.name}", True, self._on_assignment))
            self._tasks.append(asyncio.ensure_future(self._beat(broker)))
        for listener in self.listeners:
            await listener.start()
        if sec.is_replica(self.cfg.name):
            self.host = ControllerHost(self.cfg.name, sec, sec.journal_path(self.cfg), broker, self.engine.records)
            await self.host.start()

    async def _beat(self, broker: Broker) -> None:
        """The consumer's heartbeat: it registers the consumer at the leader and carries its load."""
        sec: PoolsConfig = self.section
        while True:
            await asyncio.sleep(sec.heartbeat)
            try:
                load = self.sender.load(sec.heartbeat)
                body = {"role": "consumer", "name": sec.consumer.name, "node": self.cfg.name,
                        "types": list(sec.consumer.types), "state": "active", "load": load}
                reply = await broker.publish(f"{HB_TOPIC}.{sec.consumer.name}", json.dumps(body).encode(), None,
                                             1, 0.0, "", "")
                if load and any(load.values()):
                    self.engine.records.write("pool", event="load", consumer=sec.consumer.name, load=load,
                                              sent=reply.accepted)
            except Exception:
                log.exception("%s: pools: heartbeat failed", self.cfg.name)

    async def stop(self) -> None:
        if self.host is not None:
            await self.host.stop()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for listener in self.listeners:
            await listener.stop()
        if self.sender is not None:
            await self.sender.stop()

    async def _on_assignment(self, d: pubsub_pb2.Delivery) -> None:
        a = parse_assignment(d, self.section.consumer.name)
        if isinstance(a, str):
            self.bad += 1
            self.engine.records.write("pool", event="refused", consumer=self.section.consumer.name, reason=a,
                                      pub_id=d.pub_id)
            log.warning("%s: pools: assignment %s refused: %s", self.cfg.name, d.pub_id, a)
            return
        await self.sender.offer(a)

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
        out: dict[str, Any] = {"bad": self.bad}
        if self.sender is not None:
            out["consumer"] = self.sender.snapshot()
        if self.host is not None:
            out["controller"] = self.host.snapshot()
        return out


def parse_assignment(d: pubsub_pb2.Delivery, consumer: str) -> Assignment | str:
    """An assignment delivery's content, or why it is refused: only a node or the admin (publisher "") may send
    one, for this consumer (node/pools/messages.py parses the body)."""
    if d.publisher:
        return f"an assignment from user {d.publisher!r}: only the controller (a node) sends them"
    if d.topic != f"{ASSIGN_TOPIC}.{consumer}":
        return f"an assignment on {d.topic!r} is not for consumer {consumer}"
    try:
        return messages.parse_assignment(d.payload)
    except messages.BadMessage as exc:
        return str(exc)


SUBSYSTEM = PoolsSubsystem
