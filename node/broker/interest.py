"""Interest: which node wants which topic patterns, known at every node.

Every node floods a record of its own subscriptions (name, pattern, durable)
with an origin and a sequence number, exactly like a link-state advert
(node/routing/dynamic.py): a node keeps the record with the highest sequence
number per origin and passes a newer one on to its other neighbours; a new
session gets every record the node holds. A record is the origin's whole
state, not a delta, so withdrawing a subscription is just a newer record
without it — nothing is left behind on a ring. The sequence number is kept in
the spool (a restarted node counts on from it). An origin re-sends its record
every `refresh` seconds; a record older than `max_age` is dropped.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable

from node.broker.topics import matches, pattern_problem
from node.names import is_node_name, is_user_name
from node.peer import Peer
from node.rpc import link_pb2
from node.spool import Spool

log = logging.getLogger("node.broker")

SEQ_KEY = "interest.seq"
CAPABILITY = "interest"           # the frame kind, announced in OPEN by the link layer
MAX_SUBSCRIPTIONS = 4096          # in one record
SEQ_LIMIT = 1 << 63               # sequence numbers at or above are refused: counting on must stay in a uint64


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

    def to_frame(self, now: float) -> link_pb2.Frame:
        return link_pb2.Frame(interest=link_pb2.Interest(
            origin=self.origin, seq=self.seq, age=max(0.0, now - self.born),
            subscriptions=[link_pb2.InterestEntry(name=s.name, pattern=s.pattern, durable=s.durable)
                           for s in self.subs]))


def record_from_frame(f: link_pb2.Interest, now: float) -> InterestRecord | str:
    """The record in an Interest frame, or why it is malformed."""
    if not is_node_name(f.origin):
        return f"interest origin {f.origin!r} is not a node name"
    if not (math.isfinite(f.age) and f.age >= 0):
        return f"interest record of {f.origin} has a bad age"
    if f.seq >= SEQ_LIMIT:        # a node that counted on from it could not write its next record (uint64)
        return f"interest record of {f.origin} has a sequence number out of range ({f.seq})"
    if len(f.subscriptions) > MAX_SUBSCRIPTIONS:
        return f"interest record of {f.origin} lists {len(f.subscriptions)} subscriptions"
    subs = []
    for e in f.subscriptions:
        if not is_user_name(e.name):
            return f"interest record of {f.origin} has a bad subscription name {e.name!r}"
        why = pattern_problem(e.pattern)
        if why:
            return f"interest record of {f.origin}: {why}"
        subs.append(Sub(e.name, e.pattern, e.durable))
    return InterestRecord(f.origin, f.seq, now - f.age, tuple(sorted(subs, key=lambda s: s.name)))


class InterestTable:
    """The newest record per origin, flooded over the Link sessions; `matching(topic)` is what a publisher asks."""

    def __init__(self, me: str, spool: Spool, refresh: float, max_age: float) -> None:
        self.me = me
        self.spool = spool
        self.refresh = refresh
        self.max_age = max_age
        self.records: dict[str, InterestRecord] = {}
        self.peers: dict[str, Peer] = {}
        self.up: set[str] = set()
        self.seq = 0
        self.own: tuple[Sub, ...] = ()
        self.changes = 0
        self._last_origination = 0.0
        self._bad = 0
        self._watchers: list[Callable[[], None]] = []

    def attach(self, peers: dict[str, Peer]) -> None:
        self.peers = peers

    async def start(self, own: list[Sub]) -> None:
        stored = await self.spool.run(Spool.op_get_setting(SEQ_KEY))
        self.seq = int(stored) if stored and stored.isdigit() else 0
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
        self.seq += 1
        now = time.monotonic()
        self._last_origination = now
        rec = InterestRecord(self.me, self.seq, now, self.own)
        self.records[self.me] = rec
        self.changes += 1
        self.spool.run(Spool.op_set_setting(SEQ_KEY, str(self.seq))).add_done_callback(_retrieve)
        self._flood(rec, skip=None)

    def _flood(self, rec: InterestRecord, skip: str | None) -> None:
        now = time.monotonic()
        for name, p in self.peers.items():
            if name != skip and name in self.up and CAPABILITY in p.capabilities:
                p.send_control(rec.to_frame(now))

    def session(self, peer: str, up: bool) -> None:
        """A new session gets every record we hold; a closed one gets none until it is back."""
        if not up:
            self.up.discard(peer)
            return
        self.up.add(peer)
        p = self.peers.get(peer)
        if p is not None and CAPABILITY in p.capabilities:
            now = time.monotonic()
            for rec in self.records.values():
                p.send_control(rec.to_frame(now))

    # -- records from neighbours ---------------------------------------------------------------------
    def on_frame(self, peer: Peer, frame: link_pb2.Frame) -> None:
        now = time.monotonic()
        rec = record_from_frame(frame.interest, now)
        if isinstance(rec, str):
            self._bad += 1
            if self._bad <= 3 or self._bad % 1000 == 0:
                log.warning("%s: ignored an interest record from %s (%d so far): %s", self.me, peer.name,
                            self._bad, rec)
            return
        if rec.origin == self.me:
            # our own record back again (see node/routing/dynamic.py): a higher number is ours from before a
            # restart whose last number the spool had not kept yet; count past it
            if rec.seq > self.seq or (rec.seq == self.seq and rec.subs != self.own):
                self.seq = rec.seq
                self._originate()
            return
        held = self.records.get(rec.origin)
        if held is None or rec.seq > held.seq:
            self.records[rec.origin] = rec
            self.changes += 1
            self._flood(rec, skip=peer.name)
            for w in self._watchers:
                w()
        elif rec.seq < held.seq and peer.name in self.up:     # the neighbour is behind: give it the newer one
            peer.send_control(held.to_frame(now))

    def watch(self, changed: Callable[[], None]) -> None:
        self._watchers.append(changed)

    # -- questions -----------------------------------------------------------------------------------
    def matching(self, topic: str) -> dict[str, list[Sub]]:
        """Per node, its subscriptions whose pattern matches `topic` (this node's own included)."""
        out: dict[str, list[Sub]] = {}
        for origin, rec in self.records.items():
            hits = [s for s in rec.subs if matches(s.pattern, topic)]
            if hits:
                out[origin] = hits
        return out

    def housekeeping(self) -> None:
        """Drop records nobody refreshed within max_age; re-send our own every `refresh` seconds."""
        now = time.monotonic()
        for origin in [o for o, r in self.records.items() if o != self.me and now - r.born > self.max_age]:
            del self.records[origin]
            self.changes += 1
        if now - self._last_origination > self.refresh:
            self._originate()

    def snapshot(self) -> dict:
        return {"seq": self.seq, "records": len(self.records), "changes": self.changes,
                "remote_subscriptions": sum(len(r.subs) for o, r in self.records.items() if o != self.me)}


def _retrieve(f: asyncio.Future) -> None:
    if not f.cancelled() and f.exception() is not None:
        log.error("cannot store the interest sequence number: %r", f.exception())
