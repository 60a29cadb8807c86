"""The `hosts` section: load put on the node hosts beside the daemons.

    hosts:
      busy: 2      # processes spinning on the CPU in every host that runs a node daemon (default 0)

A measurement under CPU load (Gunduz 2006 ties its short-interval breakdown to loaded brokers): the
spinners start with the daemons, in each host's namespace, and are ended by their pids at the teardown
(testbed/experiment/busy.py). The host monitor counts them, so such a run is expected to be flagged
saturated.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from testbed.scenario.checks import Check
from testbed.scenario.sections.base import Scenario, Section

HOSTS_KEYS = ("busy",)
MAX_BUSY = 64           # per host: a sanity bound (a 2-core machine is saturated by 1)


@dataclass
class HostsSpec:
    busy: int = 0


def _read(c: Check, raw: Any, s: Scenario) -> None:
    m = c.mapping(("hosts",), raw, HOSTS_KEYS)
    spec = HostsSpec()
    if "busy" in m:
        spec.busy = c.integer(("hosts", "busy"), m["busy"], 0, MAX_BUSY)
    s.hosts = spec


HOSTS = Section("hosts", read=_read, plain=lambda s: {"busy": s.hosts.busy}, default=HostsSpec)
