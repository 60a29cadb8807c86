"""The testbed side of the node's subsystems: one module each (base.py says what a module may hook into).

SUBSYSTEMS is the one list of them; the experiment (cell, driver, summary, node configs, time scale) and the
loss checker loop over it and name none. A new subsystem adds its module here and one line below.
"""
from __future__ import annotations

from testbed.subsystems import broker, gateway, pools, rate, routing
from testbed.subsystems.base import Clients, RunContext, Subsystem

SUBSYSTEMS: tuple[Subsystem, ...] = (
    broker.SUBSYSTEM,
    rate.SUBSYSTEM,
    gateway.SUBSYSTEM,
    pools.SUBSYSTEM,
    routing.SUBSYSTEM,
)


def copy_prefixes() -> tuple[str, ...]:
    """Message ids of stored copies a subsystem accounts itself (the loss checker leaves them out)."""
    return tuple(p for sub in SUBSYSTEMS for p in sub.copy_prefixes)


def driver_counters() -> tuple[str, ...]:
    """The workload driver's counters the subsystems add, in registry order."""
    return tuple(c for sub in SUBSYSTEMS for c in sub.counters)


__all__ = ["SUBSYSTEMS", "Clients", "RunContext", "Subsystem", "copy_prefixes", "driver_counters"]
