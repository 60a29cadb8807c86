"""A client's weight: the decile of its queue occupancy (the MQ-on-MPLS-VPN study, §4.2).

X*10% <= U < (X+1)*10%  ->  w = X, for X = 0..9; a full queue (U = 100%) would be 10 and is clamped to 9.
"""
from __future__ import annotations

MAX_WEIGHT = 9


def decile(used: int, capacity: int) -> int:
    """The weight of a queue holding `used` of `capacity` bytes (integer arithmetic: no float edge at 10%)."""
    if capacity <= 0:
        return MAX_WEIGHT
    return max(0, min(MAX_WEIGHT, (max(0, used) * 10) // capacity))
