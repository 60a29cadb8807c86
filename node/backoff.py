"""Exponential reconnect backoff with jitter, for everything that dials again after a lost connection
(the node's link dialler, the testbed's subscriber clients, `testbed sub --durable`).

The wait doubles from `low` up to `high` and each wait is drawn from [(1 - jitter) * w, w]: clients that lost
the same node at the same moment (it restarted) spread their retries instead of dialling it in lockstep, and
no wait is longer than the un-jittered one, so a bound derived from `high` still holds.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

JITTER = 0.5       # the share of each wait that is random


@dataclass
class Backoff:
    low: float
    high: float
    jitter: float = JITTER
    rng: random.Random = field(default_factory=random.Random)
    _next: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        if not 0 < self.low <= self.high:
            raise ValueError(f"backoff needs 0 < low <= high, got {self.low} and {self.high}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"backoff jitter is a fraction from 0 to 1, got {self.jitter}")
        self._next = self.low

    def reset(self) -> None:
        """After a success: the next failure waits `low` again."""
        self._next = self.low

    def wait(self) -> float:
        """The seconds to wait before the next attempt; the one after waits up to twice as long."""
        ceiling = self._next
        self._next = min(self.high, 2 * self._next)
        return ceiling * (1.0 - self.jitter * self.rng.random())
