"""The broker as a node subsystem: its message kind, frames, metrics section and PubSub service."""
from __future__ import annotations

from typing import Any

from node.broker.broker import Broker
from node.broker.config import BrokerConfig
from node.broker.kinds import PUB_KIND, PUB_PREFIX
from node.broker.service import PubSubService
from node.hooks import MessageKind
from node.rpc import pubsub_pb2_grpc
from node.subsystem import Authorizer, FrameHandler, Subsystem


def _is_publication_copy(msg_id: str, originator: str) -> bool:
    """A neighbour may pass on a stored publication copy a broker made (its id says so)."""
    return msg_id.startswith(PUB_PREFIX)


class BrokerSubsystem(Subsystem):
    name = "broker"
    config = BrokerConfig

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.broker: Broker | None = None

    def enabled(self) -> bool:
        return self.section.enabled

    def attach(self, engine: Any) -> None:
        self.broker = Broker(self.cfg, engine, engine.records)

    def frame_handlers(self) -> dict[str, FrameHandler]:
        return self.broker.frame_handlers()

    def message_kinds(self) -> list[MessageKind]:
        return [MessageKind(PUB_KIND, _is_publication_copy, self.broker.delivered, self.broker.received)]

    def on_session(self, peer: str, up: bool) -> None:
        self.broker.interest.session(peer, up)

    def snapshot(self) -> dict | None:
        return self.broker.snapshot()

    def services(self, server: Any, authorizer: Authorizer) -> None:
        pubsub_pb2_grpc.add_PubSubServicer_to_server(PubSubService(self.broker, authorizer), server)

    async def start(self) -> None:
        await self.broker.start()      # after recovery: it reads what the inbox holds

    async def stop(self) -> None:
        await self.broker.stop()       # ends the subscribers' streams


SUBSYSTEM = BrokerSubsystem
