"""Interest: which node wants which topic patterns, known at every node.

Every node floods a record of its own subscriptions (name, pattern, durable)
by the same rules as a link-state advert (node/flood.py): the newest record
per origin, a newer one passed on, a new session given every record. A record
is the origin's whole state, not a delta, so withdrawing a subscription is just
a newer record without it — nothing is left behind on a ring. An origin
re-sends its record every `refresh` seconds; a record older than `max_age` is
dropped.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable

from node.broker.topics import matches, pattern_problem
from node.flood import SEQ_LIMIT, FloodTable, Malformed, RecordStore
from node.names import is_node_name, is_user_name
from node.peer import Peer
from node.rpc import link_pb2
from node.spool import Spool

log = logging.getLogger("node.broker")

SEQ_KEY = "interest.seq"
CAPABILITY = "interest"           # the frame kind, announced in OPEN by the link layer
MAX_SUBSCRIPTIONS = 4096          # in one record
MATCH_CACHE = 4096                # topics whose matching subscriptions are remembered (any topic may be published)


@dataclass(frozen=True)
class Sub:
    """One subscription as the network knows it."""
    name: str
    pattern: str
    durable: bool


@dataclass
class InterestRecord:
    origin: str
    seq: int
    born: float                                  # monotonic time the origin made it
    subs: tuple[Sub, ...] = field(default_factory=tuple)

    def same_state(self, other: "InterestRecord") -> bool:
        return self.subs == other.subs

    def to_frame(self, now: float) -> link_pb2.Frame:
        return link_pb2.Frame(interest=link_pb2.Interest(
            origin=self.origin, seq=self.seq, age=max(0.0, now - self.born),
            subscriptions=[link_pb2.InterestEntry(name=s.name, pattern=s.pattern, durable=s.durable)
                           for s in self.subs]))


def record_from_frame(frame: link_pb2.Frame, now: float) -> InterestRecord | Malformed:
    """The record in an Interest frame, or why it is malformed."""
    f = frame.interest
    if not is_node_name(f.origin):
        return Malformed(f"interest origin {f.origin!r} is not a node name")
    if not (math.isfinite(f.age) and f.age >= 0):
        return Malformed(f"interest record of {f.origin} has a bad age")
    if f.seq >= SEQ_LIMIT:        # a node that counted on from it could not write its next record (uint64)
        return Malformed(f"interest record of {f.origin} has a sequence number out of range ({f.seq})")
    if len(f.subscriptions) > MAX_SUBSCRIPTIONS:
        return Malformed(f"interest record of {f.origin} lists {len(f.subscriptions)} subscriptions")
    subs = []
    for e in f.subscriptions:
        if not is_user_name(e.name):
            return Malformed(f"interest record of {f.origin} has a bad subscription name {e.name!r}")
        why = pattern_problem(e.pattern)
        if why:
            return Malformed(f"interest record of {f.origin}: {why}")
        subs.append(Sub(e.name, e.pattern, e.durable))
    return InterestRecord(f.origin, f.seq, now - f.age, tuple(sorted(subs, key=lambda s: s.name)))


class InterestTable:
    """The newest record per origin, flooded over the Link sessions; `matching(topic)` is what a publisher asks."""

    def __init__(self, me: str, spool: Spool, refresh: float, max_age: float) -> None:
        self.me = me
        self.own: tuple[Sub, ...] = ()
        self.changes = 0
        self.flood: FloodTable[InterestRecord] = FloodTable(
            me, spool, CAPABILITY, SEQ_KEY, "interest record", RecordStore(max_age), refresh, record_from_frame,
            lambda seq, now: InterestRecord(me, seq, now, self.own))
        self.records = self.flood.records
        self._watchers: list[Callable[[], None]] = []
        # topic -> matching(topic), valid while `changes` (every change of a record counts there) stays as it was
        self._matches: dict[str, dict[str, list[Sub]]] = {}
        self._matches_at = 0

    @property
    def seq(self) -> int:
        return self.flood.seq

    def attach(self, peers: dict[str, Peer]) -> None:
        self.flood.attach(peers)

    async def start(self, own: list[Sub]) -> None:
        await self.flood.load_seq()      # a restarted node counts on from its last number
        self.set_own(own, force=True)

    # -- this node's subscriptions ----------------------------------------------------------------
    def set_own(self, subs: list[Sub], force: bool = False) -> None:
        """This node's subscriptions changed: a new record, flooded."""
        own = tuple(sorted(subs, key=lambda s: s.name))
        if own == self.own and not force:
            return
        self.own = own
        self._originate()

    def _originate(self) -> None:
        self.flood.originate()
        self.changes += 1

    def session(self, peer: str, up: bool) -> None:
        """A new session gets every record we hold; a closed one gets none until it is back."""
        self.flood.session(peer, up)
        if up:
            self.flood.send_table(peer)

    # -- records from neighbours ---------------------------------------------------------------------
    def on_frame(self, peer: Peer, frame: link_pb2.Frame) -> None:
        seq = self.flood.seq
        if self.flood.receive(peer, frame) is not None:
            self.changes += 1
            for w in self._watchers:
                w()
        elif self.flood.seq != seq:          # ours from before a restart came back: counted past it
            self.changes += 1

    def watch(self, changed: Callable[[], None]) -> None:
        self._watchers.append(changed)

    # -- questions -----------------------------------------------------------------------------------
    def matching(self, topic: str) -> dict[str, list[Sub]]:
        """Per node, its subscriptions whose pattern matches `topic` (this node's own included). Remembered per
        topic until the table changes: a publisher's node asks it for every publication. The lists are shared
        with later callers: do not change them."""
        if self._matches_at != self.changes:
            self._matches.clear()
            self._matches_at = self.changes
        hit = self._matches.get(topic)
        if hit is None:
            hit = {}
            for origin, rec in self.records.items():
                subs = [s for s in rec.subs if matches(s.pattern, topic)]
                if subs:
                    hit[origin] = subs
            if len(self._matches) >= MATCH_CACHE:
                self._matches.clear()
            self._matches[topic] = hit
        return dict(hit)

    def housekeeping(self) -> None:
        """Drop records nobody refreshed within max_age; re-send our own every `refresh` seconds."""
        now = time.monotonic()
        self.changes += len(self.flood.expire(now))
        if self.flood.refresh_due(now):
            self._originate()

    def snapshot(self) -> dict:
        return {"seq": self.seq, "records": len(self.records), "changes": self.changes,
                "remote_subscriptions": sum(len(r.subs) for o, r in self.records.items() if o != self.me)}
