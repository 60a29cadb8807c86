"""Rate control at the admission policy seam: the client's bounded queue and the root's "not now".

`RatePolicy` wraps the node's own policy (pass-through or resource management)
and adds, by role:

  client  the queue towards the root holds at most `queue_limit` bytes of what this node stores and has not
          yet seen acknowledged by its next hop (copy-until-ack: an unacknowledged copy still counts). A
          submission that does not fit is refused with the reason "overflow" (the experiment's measure);
          nothing accepted is ever dropped. The link towards the root is a PacedQueue (node/rate/pacer.py).
  root    while the consumer's mailbox (the root queue) holds `queue_limit` bytes or more, a piece for this
          node is refused "not now": its sender keeps it and offers it again after `retry` seconds.

Everything else is the inner policy's.
"""
from __future__ import annotations

import time
from typing import Callable

from node.config import NodeConfig
from node.policy import AdmissionPolicy, PolicyLayer
from node.rate.bucket import TokenBucket
from node.rate.pacer import PacedQueue
from node.rate.weights import decile
from node.piece import Piece
from node.refusal import Refusal
from node.transfer_queue import TransferQueue

OVERFLOW = "overflow"          # the refusal reason of a full client queue (reason_group in the summary)
ROOT_FULL = "root queue full"  # the root's "not now"


class RatePolicy(PolicyLayer):
    """The admission policy of a rate-controlled node: its role's bounds, then the inner policy."""

    def __init__(self, cfg: NodeConfig, inner: AdmissionPolicy) -> None:
        super().__init__(inner)
        self.me = cfg.name
        self.rc = cfg.rate
        self.role = cfg.rate.role
        self.fair = cfg.rate.rate_bps / len(cfg.rate.clients)     # R/N, bits/s
        # client: the pieces it holds for forwarding, key -> bytes (a dict, so a piece counted off twice by
        # two paths, e.g. dropped then forwarded, is not subtracted twice)
        self._held: dict[tuple[str, str, int], int] = {}
        self.queued = 0
        self.overflowed = 0
        self.sent_bytes = 0          # client: bytes its next hops acknowledged
        self.weight = 0
        self.on_weight: Callable[[int], None] | None = None     # told when the decile changes (control.py)
        self.bucket = TokenBucket(rate=self.fair / 8, depth=float(cfg.rate.burst), tokens=float(cfg.rate.burst))
        self.pacer: PacedQueue | None = None
        # root: the consumer's mailbox, msg_id -> bytes (filled at start and by the delivery hook)
        self.mailbox: dict[str, int] = {}
        self.root_bytes = 0
        self.deferred = 0
        # the root queue's time integral (byte-seconds) since the last sample: an instantaneous sample taken every
        # T/2 aliases against the consumer's removal period (both 1 model second in the paper), the mean does not
        self._clock: Callable[[], float] = time.monotonic
        self._area = 0.0
        self._since = self._clock()
        self._changed = self._since

    # -- the role's own parts --------------------------------------------------------------
    def pace(self, peer: str, q: TransferQueue, wake: Callable[[], None]) -> TransferQueue:
        """A client's queue towards its root, paced by the token bucket (the link scheduler layer); others as
        they are."""
        if self.role == "client" and peer == self.rc.root:
            self.pacer = PacedQueue(q, self.bucket, wake)
            return self.pacer        # type: ignore[return-value]  (it is a TransferQueue by delegation)
        return q

    def admit_submission(self, pieces: list[Piece], fragments: int, internal: bool) -> str | None:
        if self.role != "client":
            return self.inner.admit_submission(pieces, fragments, internal)
        outgoing = [p for p in pieces if p.dst != self.me]
        size = sum(p.size for p in outgoing)
        if size and self.queued + size > self.rc.queue_limit:       # our bound first: nothing to undo
            self.overflowed += 1
            return (f"{OVERFLOW}: the queue for {self.rc.root} holds {self.queued} of {self.rc.queue_limit} "
                    f"bytes, no room for {size} more")
        reason = self.inner.admit_submission(pieces, fragments, internal)
        if reason is None:
            for p in outgoing:
                self._hold(p)
        return reason

    def admit(self, peer: str, p: Piece) -> Refusal | None:
        if (self.role == "root" and p.dst == self.me and self.rc.consumer in p.users
                and self.root_bytes >= self.rc.queue_limit):
            self.deferred += 1
            return Refusal(f"{ROOT_FULL}: {self.root_bytes} of {self.rc.queue_limit} bytes", self.rc.retry)
        return self.inner.admit(peer, p)

    def stored(self, peer: str, p: Piece, fresh: bool) -> None:
        self.inner.stored(peer, p, fresh)
        if fresh and self.role == "client" and p.dst != self.me:
            self._hold(p)

    def forwarded(self, p: Piece) -> None:
        self.inner.forwarded(p)
        if self._release(p):
            self.sent_bytes += p.size

    def dropped(self, p: Piece) -> None:
        self.inner.dropped(p)
        self._release(p)

    def recover(self, p: Piece) -> None:
        self.inner.recover(p)
        if self.role == "client" and p.dst != self.me:
            self._hold(p)

    def release_mail(self, msg_id: str) -> None:
        self.inner.release_mail(msg_id)
        if msg_id in self.mailbox:
            self._set_root_bytes(self.root_bytes - self.mailbox.pop(msg_id))

    def delivered(self, msg_id: str, users: list[str], size: int) -> None:
        """Root: a message reached the mailboxes (the delivery hook, through control.py)."""
        if self.role == "root" and self.rc.consumer in users and msg_id not in self.mailbox:
            self.mailbox[msg_id] = size
            self._set_root_bytes(self.root_bytes + size)

    def count_mailbox(self, sizes: dict[str, int]) -> None:
        """Root: what the consumer's mailbox holds at start-up (msg_id -> bytes)."""
        self.mailbox.update(sizes)
        self._set_root_bytes(sum(self.mailbox.values()))

    def _set_root_bytes(self, n: int) -> None:
        now = self._clock()
        self._area += self.root_bytes * (now - self._changed)
        self._changed = now
        self.root_bytes = n

    def root_mean(self) -> float:
        """Root: the queue's time average since the last call (the sample of rates.jsonl)."""
        now = self._clock()
        area = self._area + self.root_bytes * (now - self._changed)
        mean = area / (now - self._since) if now > self._since else float(self.root_bytes)
        self._area, self._since, self._changed = 0.0, now, now
        return mean

    def _hold(self, p: Piece) -> None:
        if p.key not in self._held:
            n = p.size
            self._held[p.key] = n
            self.queued += n
            self._reweigh()

    def _release(self, p: Piece) -> bool:
        n = self._held.pop(p.key, None)
        if n is None:
            return False
        self.queued -= n
        self._reweigh()
        return True

    def _reweigh(self) -> None:
        w = decile(self.queued, self.rc.queue_limit)
        if w != self.weight:
            self.weight = w
            if self.on_weight is not None:
                self.on_weight(w)
