"""The scenario's sections, in the order a resolved scenario file lists them.

A new top-level key is one new module here exporting a `Section` (see base.py;
its value's dataclass lives in that module too) and one line in SECTIONS: the
loader walks this registry, and the Scenario (testbed/scenario/spec.py) gets
the section's attribute, with its `default`, from it; neither needs a change.
"""
from __future__ import annotations

from testbed.scenario.sections import (accounting, capture, faults, gateway, general, hosts, links, nodes, placement,
                                       pools, quick, rate_control, routing, security, subscriptions, sweep, sysctls,
                                       topology, workload)
from testbed.scenario.sections.base import Section, read_order

_FILE_SECTIONS: tuple[Section, ...] = (
    general.NAME, general.SEED, general.DURATION, general.TIME_SCALE,
    topology.TOPOLOGY, links.LINK_DEFAULTS, links.LINKS,
    general.RUNTIME, placement.PLACEMENT, routing.ROUTING, general.SHAPER,
    capture.CAPTURE, sysctls.SYSCTLS, hosts.HOSTS, nodes.NODES, security.SECURITY,
    subscriptions.SUBSCRIPTIONS, rate_control.RATE_CONTROL, gateway.GATEWAY, pools.POOLS,
    workload.WORKLOAD, faults.FAULTS, accounting.MAX_LATE, sweep.SWEEP,
)
SCENARIO_KEYS: tuple[str, ...] = tuple(s.key for s in _FILE_SECTIONS) + ("quick",)
SECTIONS: tuple[Section, ...] = _FILE_SECTIONS + (quick.section(SCENARIO_KEYS),)

__all__ = ["SCENARIO_KEYS", "SECTIONS", "Section", "read_order"]
