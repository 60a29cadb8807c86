"""EMG's gateway policies as a node subsystem: an admission layer (incoming THROUGHPUT, users), paced outgoing
connectors, the policy manager's loop, its records, metrics section and management service."""
from __future__ import annotations

from typing import Any, Callable

from node.gateway.admission import GatewayPolicy
from node.gateway.config import GatewayConfig
from node.gateway.connectors import MessagePacedQueue
from node.gateway.manager import Manager
from node.gateway.records import GatewayRecords
from node.gateway.users import op_load
from node.gateway.service import add_service
from node.subsystem import Authorizer, Subsystem


class GatewaySubsystem(Subsystem):
    name = "gateway"
    config = GatewayConfig

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.policy: GatewayPolicy | None = None
        self.paced: dict[str, MessagePacedQueue] = {}
        self.manager: Manager | None = None
        self.engine: Any = None

    def enabled(self) -> bool:
        return bool(self.section.enabled)

    def wrap_policy(self, policy: Any) -> GatewayPolicy:
        self.policy = GatewayPolicy(self.section, self.cfg.name, policy)
        return self.policy

    def wrap_queue(self, peer: str, queue: Any, wake: Callable[[], None]) -> Any:
        out = self.section.outgoing.get(peer)
        if out is None or out.rate <= 0:
            return queue
        self.paced[peer] = MessagePacedQueue(queue, out.rate, wake)
        return self.paced[peer]

    def attach(self, engine: Any) -> None:
        self.engine = engine
        assert self.policy is not None
        self.policy.next_hop = engine.router.next_hop
        self.policy.wake = lambda peer: engine.peers[peer].wake.set()
        if hasattr(engine.router, "permits"):       # the node's router skips a member a user may not use
            engine.router.permits = self.policy.permits
        self.manager = Manager(self.section, engine, self.policy, GatewayRecords(engine.records))

    def snapshot(self) -> dict | None:
        m, pol = self.manager, self.policy
        if m is None or pol is None:
            return None
        queues = m.queues()
        router = self.engine.router
        off = getattr(router, "deactivated", set())
        outgoing = {c: {"queue": queues[c], "deactivated": c in off, "threshold": m.policy.states[c].threshold,
                        "phi": m.phi.get(c, 0.0),
                        "rate": (self.section.outgoing[c].rate if c in self.section.outgoing else 0.0),
                        "sent": self.paced[c].sent if c in self.paced else self.engine.peers[c].stats.frags_out}
                    for c in m.connectors}
        incoming = {}
        for n, x in pol.incoming.items():
            incoming[n] = x.snapshot("deferred" if self.section.incoming[n].neighbour else "throttled")
        return {"gamma": m.policy.gamma, "maxrate": m.policy.maxrate, "threshold": m.policy.threshold,
                "phi_out": m.phi_out, "outgoing": outgoing, "incoming": incoming,
                "users": {u: {"credits": pol.users.credits_left(u)} for u in self.section.users},
                "refused": dict(pol.refused), "dropped": m.dropped, "offered_again": pol.rooms}

    def services(self, server: Any, authorizer: Authorizer) -> None:
        add_service(server, self, authorizer)

    async def start(self) -> None:
        assert self.policy is not None and self.manager is not None
        self.policy.users.load(await self.engine.spool.run(op_load()))    # before any submission
        await self.manager.start()

    async def stop(self) -> None:
        if self.manager is not None:
            await self.manager.stop()


SUBSYSTEM = GatewaySubsystem
