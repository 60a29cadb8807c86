"""The link scheduler seam for rate control: the queue towards the root, paced by a token bucket.

It wraps the link's ordinary transfer queue (node/transfer_queue.py) and only
decides *when* the next piece may go; which piece goes is still the inner
queue's choice. When the bucket is empty the writer is told nothing is ready and
a timer wakes it once tokens have accrued, so a paced link costs nothing while
it waits.
"""
from __future__ import annotations

import asyncio
import math
import time
from typing import Any, Callable

from node.rate.bucket import TokenBucket
from node.piece import Piece
from node.transfer_queue import TransferQueue


class PacedQueue:
    """A TransferQueue whose pops a token bucket paces; everything else is the inner queue's."""

    def __init__(self, inner: TransferQueue, bucket: TokenBucket, wake: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.inner = inner
        self.bucket = bucket
        self._wake = wake
        self._clock = clock
        self._timer: asyncio.TimerHandle | None = None
        self.sent_bytes = 0        # bytes popped (handed to the link), retransmissions included

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> Any:     # push, remove_if, bytes, credit, ...: the inner queue's
        return getattr(self.inner, name)

    def pop(self) -> Piece | None:
        now = self._clock()
        if not self.bucket.ready(now):
            self._arm(now)
            return None
        p = self.inner.pop()
        if p is not None:
            self.bucket.spend(p.size)
            self.sent_bytes += p.size
        return p

    def has_ready(self) -> bool:
        if not self.inner.has_ready():
            return False
        now = self._clock()
        if self.bucket.ready(now):
            return True
        self._arm(now)
        return False

    def set_rate(self, rate_bytes: float) -> None:
        """A new rate: re-time the wake-up (a faster rate may make a piece ready sooner)."""
        self.bucket.set_rate(rate_bytes, self._clock())
        self._disarm()
        self._wake()

    def _arm(self, now: float) -> None:
        if self._timer is not None:
            return
        wait = self.bucket.wait(now)
        if math.isinf(wait):
            return          # rate 0: only a new rate wakes the writer
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return          # no loop (a unit test driving the queue by hand): the caller polls
        self._timer = loop.call_later(wait, self._fire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        self._wake()
