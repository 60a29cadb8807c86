"""Routing as a node subsystem: it gives the engine its router (rules, then a static or link-state table)."""
from __future__ import annotations

from typing import Any

from node.routing.config import RoutingConfig
from node.routing.router import NodeRouter
from node.subsystem import FrameHandler, Subsystem


class RoutingSubsystem(Subsystem):
    name = "routing"
    config = RoutingConfig

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.node_router: NodeRouter | None = None

    def router(self, spool: Any, records: Any) -> NodeRouter:
        self.node_router = NodeRouter(self.cfg, spool, records)
        return self.node_router

    def frame_handlers(self) -> dict[str, FrameHandler]:
        return self.node_router.frame_handlers() if self.node_router is not None else {}

    def snapshot(self) -> dict | None:
        return self.node_router.snapshot() if self.node_router is not None else None

    async def start(self) -> None:
        if self.node_router is not None:
            await self.node_router.start()     # binds the link monitor's UDP socket: before any session

    async def stop(self) -> None:
        if self.node_router is not None:
            await self.node_router.stop()      # first: closing the sessions is not a routing event


SUBSYSTEM = RoutingSubsystem
