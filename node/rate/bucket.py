"""The token bucket a client paces its forwarding with.

Tokens are payload bytes, refilled at `rate` bytes/s up to `depth`. A piece may
go when the bucket is positive and then spends its whole size, so the balance
may dip below zero by at most one piece: over any long stretch the bytes sent
are rate x time (plus one depth), whatever the piece sizes, with no piece ever
split or held back for being bigger than the depth.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class TokenBucket:
    rate: float           # bytes per second (0: nothing may go)
    depth: float          # bytes: the largest burst after an idle period
    tokens: float = 0.0
    stamp: float = 0.0    # monotonic time of the last refill

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(self.depth, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = max(self.stamp, now)

    def ready(self, now: float) -> bool:
        self.refill(now)
        return self.tokens > 0

    def spend(self, n: int) -> None:
        self.tokens -= n

    def wait(self, now: float) -> float:
        """Seconds until the bucket is positive again (inf at rate 0)."""
        self.refill(now)
        if self.tokens > 0:
            return 0.0
        if self.rate <= 0:
            return math.inf
        return (-self.tokens) / self.rate + 1e-6

    def set_rate(self, rate: float, now: float) -> None:
        """New rate from now on (what accrued so far accrued at the old one)."""
        self.refill(now)
        self.rate = max(0.0, rate)
