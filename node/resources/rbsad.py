"""Recipient buffer space allocation delay (RBSAD) emulation (Brachman 1989, 6.2.1).

Extra congestion at recipient MTAs: when the next-to-last MTA forwards to the
recipient MTA, with probability ``probability`` (0.1 in the thesis) the
forwarding waits a delay drawn from Normal(mean_rbsad, stddev), truncated at
0.  Requests for recipient space are FCFS, so while the delay runs no other
transfer needing recipient space is accepted there; the caller enforces that.

In the fragmenting mode only the reservation request (a control message) is
delayed -- the grant and stream fragments use preallocated space.  In the
non-fragmenting mode the whole message waits.  The thesis gives only the mean
(50 .. 1600 simulated seconds); the spread default (mean / 4) is our choice.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from node.errors import UserError


@dataclass(frozen=True)
class RbsadConfig:
    mean: float = 100.0  # model seconds; 0 turns the delay off ("RBSAD 0")
    probability: float = 0.1
    stddev: float | None = None  # None = mean / 4

    def validate(self) -> None:
        if self.mean < 0 or not 0.0 <= self.probability <= 1.0:
            raise UserError("RBSAD mean must be >= 0 and probability within [0, 1].")
        if self.stddev is not None and self.stddev < 0:
            raise UserError("RBSAD stddev must be >= 0.")


class RbsadDelay:
    """Seeded source of RBSAD waits."""

    def __init__(self, config: RbsadConfig | None = None, seed: int = 0) -> None:
        self.config = config or RbsadConfig()
        self.config.validate()
        self._rng = random.Random(seed)
        self.draws = 0
        self.delayed = 0
        self.total_delay = 0.0

    def sample(self) -> float:
        """Wait (model seconds) before forwarding to the recipient MTA, or 0."""
        self.draws += 1
        if self.config.mean == 0 or self._rng.random() >= self.config.probability:
            return 0.0
        sd = self.config.mean / 4 if self.config.stddev is None else self.config.stddev
        wait = max(0.0, self._rng.gauss(self.config.mean, sd))
        self.delayed += 1
        self.total_delay += wait
        return wait

    def snapshot(self) -> dict[str, object]:
        return {"draws": self.draws, "delayed": self.delayed, "total_delay": self.total_delay}
