"""Everything the node keeps about one neighbour, in one object.

The engine owns one `Peer` per configured neighbour and hands it to the link
session that currently carries that neighbour's traffic: the session reads the
outgoing queue, sets the wake event and counts into the stats, without reaching
into the engine's tables. Subsystems that talk to a neighbour (probes,
link-state adverts, interest, rates) put their control frames in `outbox`;
every batch sends control frames before data.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from node.rpc import link_pb2
from node.transfer_queue import TransferQueue


@dataclass
class NeighbourStats:
    frags_out: int = 0
    bytes_out: int = 0
    frags_in: int = 0
    bytes_in: int = 0
    duplicates_in: int = 0
    retransmissions: int = 0
    reconnects: int = 0
    refused_in: int = 0
    refused_out: int = 0
    deferred_in: int = 0       # "not now" refusals sent (no buffer / recipient space yet; the sender retries)
    deferred_out: int = 0      # "not now" refusals received
    credits_in: int = 0
    credits_out: int = 0
    inflight: int = 0
    up: bool = False

    def snapshot(self, managed: bool) -> dict:
        out = {"inflight": self.inflight, "frags_out": self.frags_out, "bytes_out": self.bytes_out,
               "frags_in": self.frags_in, "bytes_in": self.bytes_in, "duplicates_in": self.duplicates_in,
               "retransmissions": self.retransmissions, "reconnects": self.reconnects,
               "refused_in": self.refused_in, "refused_out": self.refused_out, "up": self.up}
        if managed:          # the resource-management counters only mean something with it on
            out.update(deferred_in=self.deferred_in, deferred_out=self.deferred_out,
                       credits_in=self.credits_in, credits_out=self.credits_out)
        elif self.deferred_in or self.deferred_out:     # without it: a full link queue (limits.max_link_queue)
            out.update(deferred_in=self.deferred_in, deferred_out=self.deferred_out)
        return out


@dataclass
class Peer:
    """One neighbour: its outgoing queue, the event that wakes its session's writer, its counters."""
    name: str
    queue: TransferQueue
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    stats: NeighbourStats = field(default_factory=NeighbourStats)
    outbox: list[link_pb2.Frame] = field(default_factory=list)    # control frames for the next batch
    session: object | None = None            # the link session carrying this neighbour now, if any
    capabilities: frozenset[str] = frozenset()   # what that session's two OPENs both listed

    def send_control(self, frame: link_pb2.Frame) -> None:
        """Queue a control frame for the next batch (dropped with the batch if the session ends first)."""
        self.outbox.append(frame)
        self.wake.set()

    def take_control(self) -> list[link_pb2.Frame]:
        out, self.outbox = self.outbox, []
        return out
