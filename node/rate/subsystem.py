"""MQ rate control as a node subsystem: an admission layer, a paced queue towards the root, rate frames."""
from __future__ import annotations

from typing import Any, Callable

from node.piece import Piece
from node.rate.admission import RatePolicy
from node.rate.config import RateConfig
from node.rate.control import KIND, RateControl
from node.subsystem import FrameHandler, Subsystem


class RateSubsystem(Subsystem):
    name = KIND
    config = RateConfig

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.policy: RatePolicy | None = None
        self.control: RateControl | None = None

    def enabled(self) -> bool:
        return bool(self.section.role)

    def wrap_policy(self, policy: Any) -> RatePolicy:
        self.policy = RatePolicy(self.cfg, policy)
        return self.policy

    def wrap_queue(self, peer: str, queue: Any, wake: Callable[[], None]) -> Any:
        return self.policy.pace(peer, queue, wake)

    def attach(self, engine: Any) -> None:
        self.control = RateControl(self.cfg, engine, engine.records)

    def frame_handlers(self) -> dict[str, FrameHandler]:
        return self.control.frame_handlers()

    def on_delivery(self, piece: Piece, size: int) -> None:
        if self.section.role == "root":      # the root's queue is its consumer's mailbox
            self.control.delivered(piece, size)

    def on_session(self, peer: str, up: bool) -> None:
        self.control.session(peer, up)

    def snapshot(self) -> dict | None:
        return self.control.snapshot()

    async def start(self) -> None:
        await self.control.start()     # after recovery: the root counts the mailbox, the client its queue

    async def stop(self) -> None:
        await self.control.stop()


SUBSYSTEM = RateSubsystem
