"""Reliable flooding: every node's newest record of its own state, known at every node.

Link-state adverts (node/routing/dynamic.py) and the broker's interest records (node/broker/interest.py) are
flooded the same way, and so is any later subsystem's state:

- a record carries its origin, a sequence number and its age; it is the origin's whole state, not a delta,
  so a withdrawal is just a newer record;
- a node keeps the record with the highest sequence number per origin and passes a newer one on to every
  neighbour with a session up, except the one it came from;
- a neighbour that sends an older record than the one held is behind: it gets the newer one back;
- this node's own record coming back with the same number and state is an echo (a neighbour heard it first
  by another path) and is dropped; a higher number, or the same number with another state, was this node's
  before a restart whose last number the spool had not kept yet: it counts past it and floods a new one;
- the sequence number is kept in the spool, so a restarted node counts on from it;
- a session that comes up is sent the whole table;
- a record nobody refreshed within `max_age` is dropped (never this node's own); the origin re-floods its
  own every `refresh` seconds.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Generic, NamedTuple, Protocol, TypeVar

from node.rpc import link_pb2
from node.spool import Spool

log = logging.getLogger("node.flood")

SEQ_LIMIT = 1 << 63       # sequence numbers at or above are refused: counting on must stay in a uint64


class Malformed(NamedTuple):
    """Why a flooded frame was not taken."""
    reason: str


class Record(Protocol):
    origin: str
    seq: int
    born: float           # monotonic time the origin made it (receipt time minus its age)

    def same_state(self, other: Any) -> bool: ...
    def to_frame(self, now: float) -> link_pb2.Frame: ...


R = TypeVar("R", bound=Record)


class RecordStore(Generic[R]):
    """The newest record per origin."""

    def __init__(self, max_age: float) -> None:
        self.max_age = max_age
        self.records: dict[str, R] = {}

    def offer(self, rec: R) -> int:
        """Take `rec` if it is newer than what we hold. Returns 1 (taken), 0 (same number), -1 (ours is newer)."""
        held = self.records.get(rec.origin)
        if held is None or rec.seq > held.seq:
            self.records[rec.origin] = rec
            return 1
        return 0 if rec.seq == held.seq else -1

    def expire(self, now: float, keep: str) -> list[str]:
        """Drop records older than max_age (their origin stopped refreshing: gone); never `keep`'s own."""
        old = [o for o, r in self.records.items() if o != keep and now - r.born > self.max_age]
        for o in old:
            del self.records[o]
        return old


class FloodTable(Generic[R]):
    """The newest record per origin of one kind, flooded over the Link sessions of the frame kind `kind`."""

    def __init__(self, me: str, spool: Spool, kind: str, seq_key: str, what: str, store: RecordStore[R],
                 refresh: float, decode: Callable[[Any, float], R | Malformed],
                 make_own: Callable[[int, float], R]) -> None:
        """`decode(frame, now)`: the record in a frame of `kind`; `make_own(seq, now)`: this node's record now."""
        self.me = me
        self.spool = spool
        self.kind = kind
        self.seq_key = seq_key
        self.what = what                      # "link-state advert", "interest record": for the log
        self.store = store
        self.records = store.records          # origin -> newest record
        self.refresh = refresh
        self.decode = decode
        self.make_own = make_own
        self.peers: dict[str, Any] = {}       # node.peer.Peer by name
        self.up: set[str] = set()
        self.seq = 0
        self.bad = 0
        self.last_origination = 0.0

    def attach(self, peers: dict[str, Any]) -> None:
        self.peers = peers

    async def load_seq(self) -> None:
        stored = await self.spool.run(Spool.op_get_setting(self.seq_key))
        self.seq = int(stored) if stored and stored.isdigit() else 0

    # -- this node's record ---------------------------------------------------------------------------
    def originate(self) -> R:
        """A new record of this node's state, kept and flooded to every neighbour."""
        self.seq += 1
        now = time.monotonic()
        self.last_origination = now
        own = self.make_own(self.seq, now)
        self.store.offer(own)
        self.spool.run(Spool.op_set_setting(self.seq_key, str(self.seq))).add_done_callback(self._stored)
        self.flood(own, skip=None)
        return own

    def flood(self, rec: R, skip: str | None) -> None:
        now = time.monotonic()
        for name, p in self.peers.items():
            if name != skip and name in self.up and self.kind in p.capabilities:
                p.send_control(rec.to_frame(now))

    # -- sessions -------------------------------------------------------------------------------------
    def session(self, peer: str, up: bool) -> None:
        if up:
            self.up.add(peer)
        else:
            self.up.discard(peer)

    def send_table(self, peer: str, own_too: bool = True) -> None:
        """Every record held to a neighbour whose session just came up (not our own when it was just
        flooded to it)."""
        p = self.peers.get(peer)
        if p is None or self.kind not in p.capabilities:
            return
        now = time.monotonic()
        for rec in self.records.values():
            if own_too or rec.origin != self.me:
                p.send_control(rec.to_frame(now))

    # -- records from neighbours ----------------------------------------------------------------------
    def receive(self, peer: Any, frame: Any) -> R | None:
        """Take a flooded frame from `peer`; the record when it is news (taken and passed on), else None."""
        now = time.monotonic()
        rec = self.decode(frame, now)
        if isinstance(rec, Malformed):
            self.bad += 1
            if self.bad <= 3 or self.bad % 1000 == 0:
                log.warning("%s: ignored a %s from %s (%d so far): %s", self.me, self.what, peer.name, self.bad,
                            rec.reason)
            return None
        if rec.origin == self.me:
            mine = self.records.get(self.me)
            if rec.seq > self.seq or (rec.seq == self.seq and (mine is None or not rec.same_state(mine))):
                self.seq = rec.seq
                self.originate()
            return None
        taken = self.store.offer(rec)
        if taken > 0:
            self.flood(rec, skip=peer.name)
            return rec
        if taken < 0 and peer.name in self.up:     # the neighbour is behind: give it the newer one
            peer.send_control(self.records[rec.origin].to_frame(now))
        return None

    # -- the clock ------------------------------------------------------------------------------------
    def expire(self, now: float) -> list[str]:
        """Drop the records nobody refreshed within max_age (never our own); their origins."""
        return self.store.expire(now, keep=self.me)

    def refresh_due(self, now: float) -> bool:
        return now - self.last_origination > self.refresh

    def _stored(self, f: asyncio.Future) -> None:
        if not f.cancelled() and f.exception() is not None:
            log.error("%s: cannot store the %s sequence number: %r", self.me, self.what, f.exception())
