"""The engine's admission policy seam: who may store what here, and how a link's queue is served.

The engine asks its policy at every decision about buffer space (a submission,
an arriving piece, a piece forwarded, dropped or recovered) and lets it build
each link's outgoing queue. Two implementations:

  PassThrough       the default: admits everything while the link it goes out on
                    holds less than limits.max_link_queue bytes, holds no accounts;
                    each link's queue is one FIFO per priority, priorities sharing
                    the link by stride (priority P served about P times as often as 1)
  ResourceManager   Brachman's resource management (node/resource_manager.py):
                    buffer classes, message streams with credits, recipient space,
                    RBSAD; the queue serves messages (or, non-fragmenting, one FIFO
                    per destination) by prioritised round robin

`make_policy` picks one from the node config (`resources:` present or not); subsystems wrap it
(node/subsystem.py `wrap_policy`, `wrap_queue`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from node.config import NodeConfig
from node.resource_manager import ResourceManager
from node.piece import Piece
from node.refusal import Refusal
from node.spool import Op
from node.transfer_queue import TransferQueue


@dataclass(frozen=True)
class Admitted:
    """A policy's yes to a submission that comes with a spool change of its own (a user's credit charged):
    `op` runs in the transaction that stores the submission's `origin` row, so both are durable or neither;
    `undo` is called when that transaction does not happen (refused later, the spool failed)."""
    op: Op
    undo: Callable[[], None]


class AdmissionPolicy(Protocol):
    managed: bool        # True when the policy keeps accounts (metrics then carry them)

    def make_queue(self, peer: str, wake: Callable[[], None]) -> TransferQueue: ...
    def is_stream(self, p: Piece) -> bool: ...
    def admit_submission(self, pieces: list[Piece], fragments: int,
                         internal: bool) -> "str | Admitted | None": ...   # str: refused, why
    def admit(self, peer: str, p: Piece) -> Refusal | None: ...
    def link_full(self, hop: str) -> str | None: ...
    def stored(self, peer: str, p: Piece, fresh: bool) -> None: ...
    def forwarded(self, p: Piece) -> None: ...
    def dropped(self, p: Piece) -> None: ...
    def recover(self, p: Piece) -> None: ...
    def release_mail(self, msg_id: str) -> None: ...
    def session_up(self, peer: str) -> None: ...
    def take_credits(self, peer: str) -> list[tuple[tuple[str, str], int]]: ...
    def has_credits(self, peer: str) -> bool: ...
    def sweep(self, idle: float, stream_idle: float) -> None: ...
    def snapshot(self) -> dict: ...
    async def run_background(self) -> None: ...


class PolicyLayer:
    """A subsystem's layer over the node's admission policy (`Subsystem.wrap_policy`): every method goes to the
    policy underneath unless the layer overrides it, so a layer writes only what it changes (rate control's
    RatePolicy, the gateway's GatewayPolicy)."""

    def __init__(self, inner: AdmissionPolicy) -> None:
        self.inner = inner
        self.managed = inner.managed

    def make_queue(self, peer: str, wake: Callable[[], None]) -> TransferQueue:
        return self.inner.make_queue(peer, wake)

    def is_stream(self, p: Piece) -> bool:
        return self.inner.is_stream(p)

    def admit_submission(self, pieces: list[Piece], fragments: int, internal: bool) -> "str | Admitted | None":
        return self.inner.admit_submission(pieces, fragments, internal)

    def admit(self, peer: str, p: Piece) -> Refusal | None:
        return self.inner.admit(peer, p)

    def link_full(self, hop: str) -> str | None:
        return self.inner.link_full(hop)

    def stored(self, peer: str, p: Piece, fresh: bool) -> None:
        self.inner.stored(peer, p, fresh)

    def forwarded(self, p: Piece) -> None:
        self.inner.forwarded(p)

    def dropped(self, p: Piece) -> None:
        self.inner.dropped(p)

    def recover(self, p: Piece) -> None:
        self.inner.recover(p)

    def release_mail(self, msg_id: str) -> None:
        self.inner.release_mail(msg_id)

    def session_up(self, peer: str) -> None:
        self.inner.session_up(peer)

    def take_credits(self, peer: str) -> list[tuple[tuple[str, str], int]]:
        return self.inner.take_credits(peer)

    def has_credits(self, peer: str) -> bool:
        return self.inner.has_credits(peer)

    def sweep(self, idle: float, stream_idle: float) -> None:
        self.inner.sweep(idle, stream_idle)

    def snapshot(self) -> dict:
        return self.inner.snapshot()

    async def run_background(self) -> None:
        await self.inner.run_background()


class PassThrough:
    """Admits everything and keeps no accounts, but a link's queue only up to a byte cap."""

    managed = False

    def __init__(self, max_link_queue: int = 256 << 20) -> None:
        self.max_link_queue = max_link_queue
        self.queues: dict[str, TransferQueue] = {}

    def make_queue(self, peer: str, wake: Callable[[], None]) -> TransferQueue:
        q = self.queues[peer] = TransferQueue(wake, fifo_per_destination=False, is_stream=None, key=_priority)
        return q

    def link_full(self, hop: str) -> str | None:
        """Why nothing more may be queued for `hop` now, or None. Without it a neighbour that is down (or slow)
        would make its queue, and this node's memory, grow with the spool."""
        q = self.queues.get(hop)
        if q is not None and q.bytes >= self.max_link_queue:
            return f"the queue for {hop} holds {q.bytes} bytes (limit {self.max_link_queue})"
        return None

    def is_stream(self, p: Piece) -> bool:
        return False

    def admit_submission(self, pieces: list[Piece], fragments: int, internal: bool) -> str | None:
        return None

    def admit(self, peer: str, p: Piece) -> Refusal | None:
        return None

    def stored(self, peer: str, p: Piece, fresh: bool) -> None:
        pass

    def forwarded(self, p: Piece) -> None:
        pass

    def dropped(self, p: Piece) -> None:
        pass

    def recover(self, p: Piece) -> None:
        pass

    def release_mail(self, msg_id: str) -> None:
        pass

    def session_up(self, peer: str) -> None:
        pass

    def take_credits(self, peer: str) -> list[tuple[tuple[str, str], int]]:
        return []

    def has_credits(self, peer: str) -> bool:
        return False

    def sweep(self, idle: float, stream_idle: float) -> None:
        pass

    def snapshot(self) -> dict:
        return {}

    async def run_background(self) -> None:
        return None


def _priority(p: Piece) -> int:
    return p.prio


def make_policy(cfg: NodeConfig, wake: Callable[[str], None]) -> AdmissionPolicy:
    """The node's own policy: resource management when the config has a `resources:` section. Subsystems lay
    their layers over it (node/subsystem.py `wrap_policy`, e.g. rate control's bounds)."""
    return ResourceManager(cfg, wake) if cfg.resources.enabled else PassThrough(cfg.limits.max_link_queue)


__all__ = ["Admitted", "PassThrough", "AdmissionPolicy", "make_policy"]
