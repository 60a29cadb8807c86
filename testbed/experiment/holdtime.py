"""The session hold time a node needs when its links are slow.

A Link session ends when no whole gRPC message arrives for `session.hold_time` seconds (node/link.py,
5 s by default). A message takes size x 8 / rate seconds on the wire, and nothing else arrives while
it crosses. On a slow emulated link a whole non-fragmenting message can take longer than the hold time
(100 kB at 40 kbit/s: 20 s). The receiver then ends the session in the middle of the transfer, the sender
sends the message again from the start, and it never arrives: the network livelocks while every daemon
looks healthy. This was seen on the 20-MTA ring of Brachman's Fig. 6.4 at time_scale 0.1.

The testbed knows each link's rate and the workload's largest message, so it gives every node a hold
time that covers the slowest of its links. A `session:` the scenario sets for a node wins (it is laid
over the testbed's wiring).
"""
from __future__ import annotations

import math
from typing import Any

from node.config import BatchConfig, SessionConfig
from testbed.experiment.workload import THESIS_SIZE_MIX
from testbed.scenario.spec import Scenario
from testbed.topology.model import Topology

# hold = SAFETY x the slowest link's time for the largest gRPC message + one keepalive interval: a frame
# may queue behind another one as large, and the first keepalive after it follows within `keepalive`
SAFETY = 3.0


def largest_message(scenario: Scenario) -> int | None:
    """The largest message the workload submits, in bytes; None when a generator draws from a file."""
    largest = 0
    for g in scenario.workload.generators:
        if g.size.dist == "fixed":
            largest = max(largest, int(g.size.bytes))
        elif g.size.dist == "thesis":
            largest = max(largest, max(high for _, _, high in THESIS_SIZE_MIX) * int(g.size.fragment_size))
        else:
            return None     # empirical: the file is the workload's to read; set session.hold_time by hand
    return largest


def largest_piece(scenario: Scenario, nodes: list[str]) -> int | None:
    """The largest piece any node sends: a fragment, or a whole message where a node does not fragment."""
    biggest = 0
    for name in nodes:
        settings = scenario.nodes.settings_for(name)
        if settings.get("mode", "fragmenting") == "non-fragmenting":
            whole = largest_message(scenario)
            if whole is None:
                return None
            biggest = max(biggest, whole)
        else:
            biggest = max(biggest, int(settings.get("fragment_size", 1000)))
    return biggest


def slowest_rate(topology: Topology, name: str) -> float | None:
    """Bits per second of the slowest direction of any link at `name`; None when none is rate-limited."""
    rates = [d.rate for link in topology.links if name in (link.a, link.b)
             for d in (link.a_to_b, link.b_to_a) if d.rate]
    return min(rates) if rates else None


def hold_time(scenario: Scenario, topology: Topology, name: str, piece: int | None) -> float | None:
    """The hold time `name` needs on its slowest link (wall seconds), or None when the default covers it
    (or when the largest piece is unknown)."""
    rate = slowest_rate(topology, name)
    if rate is None or piece is None:
        return None
    # a batch is filled up to min_bytes on a slow link and may end with one more whole piece
    frame_bits = (BatchConfig().min_bytes + piece) * 8
    session = SessionConfig()
    needed = SAFETY * frame_bits / rate + session.keepalive
    return math.ceil(needed) if needed > session.hold_time else None


def session_settings(scenario: Scenario, topology: Topology, nodes: list[str]) -> dict[str, dict[str, Any]]:
    """node -> its `session:` wiring, for the nodes whose slow links need a longer hold time."""
    piece = largest_piece(scenario, nodes)
    out: dict[str, dict[str, Any]] = {}
    for name in nodes:
        hold = hold_time(scenario, topology, name, piece)
        if hold is not None:
            out[name] = {"hold_time": float(hold)}
    return out
