"""The gateway's connectors: a token bucket of messages per incoming connector, a message-paced outgoing queue.

Incoming (EMG's THROUGHPUT): a neighbour over its rate hears "not now" with the time to its next token (the
sender keeps the copy); a local user over its rate is refused `throttled`. Outgoing (Kannel's smsc
`throughput`): the link towards the connector sends at most `rate` messages per second, never refusing any;
a message counts once, at its piece at offset 0.
"""
from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any, Callable

from node.piece import Piece
from node.transfer_queue import TransferQueue


@dataclass
class MessageBucket:
    """Whole messages per second: a message may go when a whole token has accrued (node/rate/bucket.py's bytes
    may go on any positive balance, which would let a second message through right after the first), up to
    `depth` tokens after an idle stretch."""
    rate: float
    depth: float
    tokens: float
    stamp: float

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(self.depth, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now

    def ready(self, now: float) -> bool:
        self.refill(now)
        return self.tokens >= 1.0 - 1e-9

    def spend(self) -> None:
        self.tokens -= 1.0

    def wait(self, now: float) -> float:
        """Seconds until a whole token (inf at rate 0)."""
        self.refill(now)
        if self.tokens >= 1.0 - 1e-9:
            return 0.0
        return math.inf if self.rate <= 0 else (1.0 - self.tokens) / self.rate + 1e-6

    def set_rate(self, rate: float, now: float) -> None:
        """From now on (what accrued so far accrued at the old rate); the depth follows: one second's worth."""
        self.refill(now)
        self.rate = max(0.0, rate)
        self.depth = max(1.0, rate)
        self.tokens = min(self.tokens, self.depth)


def message_bucket(rate: float | None, now: float) -> MessageBucket | None:
    """A bucket of `rate` messages per second holding up to one second's worth (at least one message); None:
    unlimited."""
    if rate is None:
        return None
    depth = max(1.0, rate)
    return MessageBucket(rate=rate, depth=depth, tokens=depth, stamp=now)


class Incoming:
    """One incoming connector: its THROUGHPUT (None: unlimited) as a bucket, and what it let through."""

    def __init__(self, name: str, throughput: float | None, now: float) -> None:
        self.name = name
        self.configured = throughput          # the original THROUGHPUT (restored below the lower threshold)
        self.throughput = throughput          # in force now
        self.bucket = message_bucket(throughput, now)
        self.accepted = 0                     # messages let through
        self.refused = 0                      # "not now" (neighbour) or `throttled` (user)

    def ready(self, now: float) -> bool:
        return self.bucket is None or self.bucket.ready(now)

    def take(self) -> None:
        self.accepted += 1
        if self.bucket is not None:
            self.bucket.spend()

    def retry_after(self, now: float, cap: float) -> float:
        """Seconds until the next token, at most `cap` (rate 0 would be never: then `cap`), never 0."""
        wait = self.bucket.wait(now) if self.bucket is not None else 0.0
        return max(1e-3, min(wait, cap)) if not math.isinf(wait) else cap

    def set_throughput(self, rate: float | None, now: float) -> None:
        raised = rate is None or (self.throughput is not None and rate > self.throughput)
        self.throughput = rate
        if rate is None:
            self.bucket = None
        elif self.bucket is None:
            self.bucket = message_bucket(rate, now)
        else:
            self.bucket.set_rate(rate, now)
            if raised:
                # A raised THROUGHPUT lets its first message in at once: nothing accrued at the old rate (0 when
                # throttled to MAXRATE(1)), so without it the neighbours owed a ROOM would hear it one tick late.
                self.bucket.tokens = max(self.bucket.tokens, 1.0)

    def snapshot(self, refused_key: str) -> dict:
        return {"throughput": self.throughput, "accepted": self.accepted, refused_key: self.refused}


class MessagePacedQueue:
    """A TransferQueue whose pops a bucket of messages per second paces; everything else is the inner queue's.
    A piece at offset 0 waits for a whole token and spends it; the rest of that message follows unpaced."""

    def __init__(self, inner: TransferQueue, rate: float, wake: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.inner = inner
        self._clock = clock
        self.bucket = MessageBucket(rate=rate, depth=1.0, tokens=1.0, stamp=clock())
        self._wake = wake
        self._timer: asyncio.TimerHandle | None = None
        self.sent = 0               # messages handed to the link (retransmissions included)
        # the message whose first piece went last and the bytes of it still to go: they follow without a token
        self._open: tuple[tuple[str, str], int] | None = None

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> Any:     # push, remove_if, messages, bytes, credit...: the inner queue's
        return getattr(self.inner, name)

    def pop(self) -> Piece | None:
        now = self._clock()
        ready = self.bucket.ready(now)
        if not ready and self._open is None:
            self._arm(now)
            return None
        p = self.inner.pop()
        if p is None:
            return None
        if p.off == 0:
            if not ready:                  # a new message, and no token for it: it waits at the front
                self.inner.push(p, front=True)
                self._open = None
                self._arm(now)
                return None
            self.bucket.spend()
            self.sent += 1
            self._open = (p.mkey, p.total - p.size) if p.size < p.total else None
        elif self._open is not None and self._open[0] == p.mkey:
            left = self._open[1] - p.size
            self._open = (p.mkey, left) if left > 0 else None
        return p

    def has_ready(self) -> bool:
        if not self.inner.has_ready():
            return False
        now = self._clock()
        if self._open is not None or self.bucket.ready(now):
            return True
        self._arm(now)
        return False

    def _arm(self, now: float) -> None:
        if self._timer is not None:
            return
        wait = self.bucket.wait(now)
        if math.isinf(wait):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return          # no loop (a unit test driving the queue by hand): the caller polls
        self._timer = loop.call_later(wait, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._wake()
