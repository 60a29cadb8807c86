"""A machine's clock against the controller's, from NTP-style exchanges (pure).

On several machines a record's `ts` comes from the clock of the machine that
wrote it, so a latency measured across machines carries the clocks' offset.
The controller sends a probe at t0 (its clock), the machine stamps its arrival
t1 and its answer t2 (the machine's clock), the answer arrives at t3 (the
controller's clock). With d the one-way delays:

    offset = ((t1 - t0) + (t2 - t3)) / 2      machine clock minus controller clock
    rtt    = (t3 - t0) - (t2 - t1)            the time on the wire, both ways

The offset is exact when the two ways took equally long; any asymmetry moves it
by half the difference, which is at most half the round trip. So the exchange
with the smallest round trip is the one kept (its queues were emptiest), and
half its round trip is the uncertainty: the true offset lies within
offset +- rtt / 2 whatever the asymmetry. Exchanges at the start and at the end
of a run give the drift (the offset's change per second).

A run is flagged when the uncertainty exceeds 10% of the smallest configured
one-way delay: a correction that uncertain would move latencies by more than a
tenth of the shortest delay the scenario emulates (a configured delay of 0 flags
any uncertainty at all).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from node.clockmodel import FLAG_SHARE, ClockModel     # the model a run's machines.json holds, read by both sides


class ClockError(ValueError):
    """Exchanges that cannot give an estimate; the message is one sentence."""


@dataclass(frozen=True)
class Exchange:
    t0: float     # controller: probe sent
    t1: float     # machine: probe received
    t2: float     # machine: answer sent
    t3: float     # controller: answer received

    @property
    def rtt(self) -> float:
        return (self.t3 - self.t0) - (self.t2 - self.t1)

    @property
    def offset(self) -> float:
        return ((self.t1 - self.t0) + (self.t2 - self.t3)) / 2.0


@dataclass(frozen=True)
class Estimate:
    offset: float         # machine clock minus controller clock, s
    uncertainty: float    # the true offset lies within offset +- uncertainty, s
    at: float             # when, on the controller's clock (the kept exchange's midpoint)
    rtt: float            # the kept exchange's round trip, s
    samples: int          # exchanges considered


def _valid(x: Exchange) -> bool:
    values = (x.t0, x.t1, x.t2, x.t3)
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values) \
        and x.t3 >= x.t0 and x.t2 >= x.t1 and x.rtt >= 0.0


def estimate(exchanges: Iterable[Exchange]) -> Estimate:
    """The offset from the exchange with the smallest round trip."""
    items = list(exchanges)
    if not items:
        raise ClockError("no clock exchanges to estimate an offset from.")
    bad = [i for i, x in enumerate(items) if not _valid(x)]
    if bad:
        raise ClockError(f"clock exchange {bad[0]} is not possible (an answer before its probe, a round trip "
                         f"below zero or a timestamp that is not a number).")
    best = min(items, key=lambda x: (x.rtt, x.t0))
    return Estimate(offset=best.offset, uncertainty=best.rtt / 2.0, at=(best.t0 + best.t3) / 2.0, rtt=best.rtt,
                    samples=len(items))


def clock_model(start: Estimate, end: Estimate) -> ClockModel:
    """Offset and drift from an estimate at the start of a run and one at its end."""
    span = end.at - start.at
    if not span > 0.0:
        raise ClockError(f"the end estimate ({end.at:.3f}) must come after the start estimate ({start.at:.3f}).")
    return ClockModel(offset=start.offset, drift=(end.offset - start.offset) / span, at=start.at,
                      uncertainty=max(start.uncertainty, end.uncertainty))


def flag_limit(one_way_delays: Iterable[float]) -> float:
    """The largest uncertainty a run may have: 10% of the smallest configured one-way delay."""
    delays = [float(d) for d in one_way_delays]
    if not delays:
        raise ClockError("no configured one-way delay to judge the clock uncertainty against.")
    if any(not math.isfinite(d) or d < 0.0 for d in delays):
        raise ClockError("a configured one-way delay is negative or not a number.")
    return FLAG_SHARE * min(delays)


def flagged(uncertainty: float, one_way_delays: Iterable[float]) -> bool:
    """True when the uncertainty exceeds 10% of the smallest configured one-way delay (equal is not flagged)."""
    return uncertainty > flag_limit(one_way_delays)
