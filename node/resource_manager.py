"""Brachman's resource management wired into one node: who may store what, and when.

The bookkeeping classes live in node/resources/; this module decides with them
for the engine, piece by piece:

- Buffer classes by hop count (deadlock prevention, thesis 4.2 / 6.2.1): a
  piece that has made h hops may only take a buffer of class h here; class 0
  is the input pool for submissions ("congested, try later" when full;
  single-fragment messages may use at most half of it). Units: one fragment
  (fragmenting) or one whole message (non-fragmenting: units of the largest
  message). With `class_buffers` every transit class starts with that many
  buffers, and a non-fragmenting message takes one per fragment of its size,
  queued first-come first-served per class (the thesis' comparator, 6.2.3).
  A hop that has no room answers "not now" (a Refuse frame with
  `retry_after`): the sender keeps its copy and offers it again later, so
  nothing accepted is ever lost. `buffer_classes: false` puts everything in
  one shared pool, which lets store-and-forward deadlock happen.
- Message streams (5.2, 6.2.2): a message of 3 or more fragments (fragmenting
  mode) holds `stream_allocation` buffers of its class at each hop, opened by
  its first fragment; the hop grants credits upstream only for free slots, so a
  stalled recipient throttles the stream back to the source.
- Recipient space (5.5): single-fragment messages are stored optimistically in
  the single-fragment part of the recipient pool; larger ones reserve the whole
  message on their first fragment (FCFS queue, expiry); 2-fragment messages
  pick optimistic or preallocation with the hybrid chooser. Space returns by a
  removal process (synthetic mail reading) or real mailbox deletes.
- RBSAD (6.2.1): the next-to-last MTA holds a message for the recipient with
  probability p for Normal(mean) seconds; in fragmenting mode only the stream's
  first fragment (the request) waits and the rest follow on credits, in
  non-fragmenting mode the whole stored message waits, first in line.

A piece's charge (`Piece.charge`) says what it holds here:
  ("u", cls, single)  one buffer of class cls (fragmenting pieces, extra stream pieces)
  ("s",)              a slot of its message stream's allocation
  ("m", new)          part of a whole-message charge (non-fragmenting, or a message at its source)
  ("r", new)          recipient space (at the destination)
`new` marks that this very piece created the charge, so a duplicate undoes it.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import math
import time
import zlib
from dataclasses import dataclass
from typing import Callable

from node.config import NodeConfig
from node.resources import (
    BufferPool,
    BufferPoolConfig,
    HybridChooser,
    HybridConfig,
    RbsadConfig,
    RbsadDelay,
    RecipientPool,
    RecipientPoolConfig,
    RemovalProcess,
    ReservationState,
)
from node.piece import Piece
from node.refusal import Refusal
from node.transfer_queue import TransferQueue

log = logging.getLogger("node.resources")

RETRY_AFTER = 0.05      # seconds a refused sender waits first; it doubles per refusal of the same piece
RETRY_CAP = 1.0         # longest wait between offers of one piece
STREAM_MIN_FRAGMENTS = 3
ROOM = ("", "")         # the stream key of a ROOM signal: "space was freed here, offer refused pieces again"
CONGESTED = "congested, try later"


@dataclass
class HopStream:
    """A message stream as seen by this hop (thesis 6.2.2)."""
    upstream: str
    cls: int | None          # None at the recipient MTA (its fragments go to recipient space)
    allocation: int
    fragments: int
    held: int = 0            # slots holding a fragment not yet acked downstream
    granted: int = 0         # credits sent upstream and not yet used
    received: int = 0
    forwarded: int = 0
    last: float = 0.0


@dataclass
class MessageCharge:
    """A whole message's buffers (non-fragmenting), freed when all its bytes are acked downstream."""
    cls: int
    single: bool
    bytes_left: int
    units: int = 1


def network_size(cfg: NodeConfig) -> int:
    """Nodes this node knows of (NodeConfig.known_nodes; bounds the longest route)."""
    return len(cfg.known_nodes)


class ResourceManager:
    """The resource-managing implementation of the engine's admission policy (node/policy.py)."""

    managed = True

    def __init__(self, cfg: NodeConfig, wake: Callable[[str], None]) -> None:
        r = cfg.resources
        self.cfg = cfg
        self.me = cfg.name
        self.fragmenting = cfg.mode == "fragmenting"
        self._wake = wake
        self.classes = max(2, network_size(cfg))      # hops 0..N-1: a simple route in N nodes has <= N-1 hops
        # the thesis' comparator counts a message's bytes in fragment-sized buffers when classes are sized
        # per class (so that each holds the largest message); otherwise one unit holds any message
        self.byte_units = not self.fragmenting and r.class_buffers > 0
        self.waiting: dict[str, tuple[int, int, float]] = {}  # FCFS waiter -> (class, units, last offered)
        self.granted: dict[str, tuple[int, int, float]] = {}  # waiter -> (class, units, granted at)
        if r.buffer_classes:
            transit = self.classes - 1
            if r.class_buffers > 0:
                per_class, free = r.class_buffers, 0
            else:
                per_class = max(r.class_min, r.transit_buffers // transit)
                free = max(0, r.transit_buffers - per_class * transit)
            pool_cfg = BufferPoolConfig(
                num_classes=self.classes, fragment_bytes=cfg.fragment_size, input_buffers=r.input_pool,
                class_initial=per_class, class_minimum=min(r.class_min, per_class),
                free_pool=free, readjust_every=r.adjust_every,
                dynamic_adjustment=self.fragmenting)   # the comparator's classes are fixed (6.2.3)
        else:
            # one pool for everything, as big as input + transit together
            pool_cfg = BufferPoolConfig(num_classes=1, fragment_bytes=cfg.fragment_size,
                                        input_buffers=r.input_pool + r.transit_buffers, class_initial=0,
                                        class_minimum=0, classes_enabled=False, dynamic_adjustment=False)
        self.pool = BufferPool(pool_cfg)
        seed = zlib.crc32(cfg.name.encode())
        self.recipient = RecipientPool(RecipientPoolConfig(
            size=max(2, r.recipient_pool), single_share=min(0.99, max(0.01, r.recipient_single_share)),
            reservation_timeout=r.reservation_timeout,
            user_hard_quota=r.user_hard_quota or None, user_soft_limit=r.user_soft_limit or None))
        self.hybrid = HybridChooser(HybridConfig(small_max_fragments=2, window=r.hybrid_window), seed=seed)
        self.rbsad = RbsadDelay(RbsadConfig(mean=r.rbsad, probability=r.rbsad_probability), seed=seed)
        self.removal = RemovalProcess(r.removal_interval, seed=seed) if r.removal_interval > 0 else None
        self.streams: dict[tuple[str, str], HopStream] = {}
        self.charges: dict[tuple[str, str], MessageCharge] = {}
        self.gates: dict[tuple[str, str], list[float]] = {}   # message -> [RBSAD gate opens at (0 = no wait), last asked]
        self.out_credits: dict[str, dict[tuple[str, str], int]] = collections.defaultdict(dict)
        self.refusals: collections.Counter[str] = collections.Counter()
        self.refused_peers: set[str] = set()
        self.rooms_signalled = 0
        self.removed_fragments = 0

    def make_queue(self, peer: str, wake: Callable[[], None]) -> TransferQueue:
        """Messages share the link by prioritised round robin (non-fragmenting: one FIFO per destination)."""
        share = self.stream_share if self.cfg.resources.stream_quantum != 1 else None
        return TransferQueue(wake, fifo_per_destination=not self.fragmenting, is_stream=self.is_stream,
                             gate=lambda p: self.gate(p) if p.dst == peer else 0.0,   # next-to-last MTA: RBSAD
                             share=share)

    def stream_share(self, p: Piece) -> int:
        """Fragments a message is served per round on its link: `stream_quantum` for a stream, or half the
        stream's allocation with 0 (the thesis' streams sent half their allocation at a time); 1 otherwise."""
        if not self.is_stream(p):
            return 1
        q = self.cfg.resources.stream_quantum
        return q if q > 0 else max(1, min(p.fragments, self.cfg.resources.stream_allocation) // 2)

    def has_credits(self, peer: str) -> bool:
        return bool(self.out_credits.get(peer))

    async def run_background(self) -> None:
        """Synthetic mail readers (thesis 6.2.1): every Normal(mean) seconds, free a message's worth of space."""
        if self.removal is None:
            return
        for gap, fragments in self.removal_events():
            await asyncio.sleep(gap)
            self.remove(fragments)

    # -- classification -----------------------------------------------------------------
    def is_stream(self, p: Piece) -> bool:
        return self.fragmenting and p.fragments >= STREAM_MIN_FRAGMENTS

    def units(self, total: int) -> int:
        """Buffers a non-fragmenting message of `total` bytes takes in a class."""
        return max(1, math.ceil(total / self.cfg.fragment_size)) if self.byte_units else 1

    def _cls(self, hops: int) -> int:
        if not self.pool.config.classes_enabled:
            return 0
        return min(max(hops, 0), self.classes - 1)

    def _refuse(self, why: str, detail: str, peer: str | None = None) -> Refusal:
        self.refusals[why] += 1
        if peer is not None:
            self.refused_peers.add(peer)      # told "not now": tell it when there is room again
        return Refusal(f"{why}: {detail}", RETRY_AFTER)

    def _room(self) -> None:
        """Space was freed here: every neighbour refused for lack of space since the last time gets a ROOM
        signal (a Credit frame without msg_id) and offers its refused pieces again now, instead of waiting
        out its retry timer (which stays as the fallback)."""
        if not self.refused_peers:
            return
        for peer in self.refused_peers:
            self.out_credits[peer][ROOM] = 1
            self._wake(peer)
        self.rooms_signalled += len(self.refused_peers)
        self.refused_peers.clear()

    # -- submissions (class 0) ------------------------------------------------------------
    def admit_submission(self, pieces: list[Piece], fragments: int, internal: bool) -> str | None:
        """Charge the input pool for the copies that leave this node; a reason refuses the submission.

        Single-fragment messages (by size, also in the non-fragmenting mode) may use at most half of it."""
        copies: dict[tuple[str, str], list[Piece]] = collections.defaultdict(list)
        for p in pieces:
            if p.state != "part":
                copies[p.mkey].append(p)
        if not copies:
            return None
        size = next(iter(copies.values()))[0].total
        single = math.ceil(size / self.cfg.fragment_size) <= 1
        need = min(fragments if self.fragmenting else self.units(size), self.cfg.resources.input_pool)
        taken: list[int] = []
        for _mkey in copies:
            if internal:            # a non-delivery report must never be refused for lack of buffers
                self.pool.force_acquire(0, need, single_fragment=single)
            elif not self.pool.try_acquire(0, need, single_fragment=single):
                for n in taken:
                    self.pool.release(0, n, single_fragment=single, count_throughput=False)
                self.refusals["congested"] += 1
                return f"{CONGESTED} (input buffers of {self.me} are full)"
            taken.append(need)
        for mkey, ps in copies.items():
            if self.fragmenting:
                for p in ps[:need]:
                    p.charge = ("u", 0, single)
            else:
                self.charges[mkey] = MessageCharge(0, single, ps[0].total, need)
                for p in ps:
                    p.charge = ("m", False)
        return None

    # -- arrivals ---------------------------------------------------------------------------
    def admit(self, peer: str, p: Piece) -> Refusal | None:
        """None: store it; else why it is refused (for now, or for good)."""
        if p.dst == self.me:
            return self._admit_recipient(peer, p)
        cls = self._cls(p.hops)
        if not self.fragmenting:
            if p.mkey in self.charges:
                p.charge = ("m", False)
                return None
            return self._admit_message(peer, p, cls)
        if self.is_stream(p):
            st = self.streams.get(p.mkey)
            if st is None:
                alloc = min(p.fragments, self.cfg.resources.stream_allocation)
                if self.pool.config.classes_enabled:
                    # never ask a class for more than its whole limit: readjustment only grows a class that is
                    # full, so a stream wanting 4 of a class cut to 2 (and empty) would be refused for ever
                    alloc = max(1, min(alloc, self.pool.limit(cls)))
                if not self.pool.try_acquire(cls, alloc):
                    return self._refuse("stream_refused", f"class {cls} at {self.me} cannot hold a stream of {alloc}",
                                        peer)
                st = self.streams[p.mkey] = HopStream(peer, cls, alloc, p.fragments)
            st.upstream = peer
            st.last = time.monotonic()
            if st.held < st.allocation:
                st.held += 1
                p.charge = ("s",)
                return None
            # beyond the stream's allocation (a probe, or a credit restored after a reconnect): not now, so a
            # stream never holds more than its allocation here
            return self._refuse("stream_full", f"stream of {p.msg_id} holds its allocation of {st.allocation} at {self.me}")
        if self.pool.try_acquire(cls, 1):
            p.charge = ("u", cls, False)
            return None
        return self._refuse("class_full", f"no buffer of class {cls} free at {self.me}", peer)

    def _admit_message(self, peer: str, p: Piece, cls: int) -> Refusal | None:
        """A non-fragmenting message's first piece here: its whole size in class `cls`, first come first served."""
        units = self.units(p.total)
        if not self.byte_units:
            if self.pool.try_acquire(cls, 1):
                self.charges[p.mkey] = MessageCharge(cls, False, p.total)
                p.charge = ("m", True)
                return None
            return self._refuse("class_full", f"no buffer of class {cls} free at {self.me}", peer)
        classes = self.pool.config.classes_enabled
        room = self.pool.limit(cls) if classes else self.pool.shared_capacity
        if units > room:
            self.refusals["class_never_fits"] += 1     # the comparator's pools are fixed: it never will
            where = f"buffer class {cls}" if classes else "the shared buffer pool"
            return Refusal(f"a message of {units} fragments can never fit {where} of {self.me} "
                           f"({room} buffers; resources.class_buffers)")
        key = f"{p.msg_id}|{p.dst}"
        now = time.monotonic()
        got = self.granted.pop(key, None)
        if got is None and self.pool.try_acquire(cls, units, waiter=key):
            got = (cls, units, now)
        if got is None:
            self.waiting[key] = (cls, units, now)
            return self._refuse("class_full", f"{units} buffers of class {cls} not free at {self.me} (FCFS)", peer)
        self.waiting.pop(key, None)
        self.charges[p.mkey] = MessageCharge(got[0], False, p.total, got[1])
        p.charge = ("m", True)
        return None

    def link_full(self, hop: str) -> str | None:
        """Never: the buffer classes bound what is stored here, and so every queue."""
        return None

    def _admit_recipient(self, peer: str, p: Piece) -> Refusal | None:
        key = p.msg_id
        now = time.monotonic()
        if self.recipient.is_granted(key):
            p.charge = ("r", False)
            self._use(key, now)
        else:
            units = p.fragments if self.fragmenting else max(1, math.ceil(p.total / self.cfg.fragment_size))
            if units == 1 or (units <= 2 and self.hybrid.choose(p.src, self.me, units) == "optimistic"):
                ok = self.recipient.try_store(key, units, now, p.users)
                if units > 1:
                    self.hybrid.record(p.src, self.me, ok)
                if not ok:
                    return self._refuse("recipient_full", f"no recipient space at {self.me} yet", peer)
            else:
                state = self.recipient.reserve(key, units, now, p.users)
                if state is ReservationState.REFUSED:
                    self.refusals["recipient_never_fits"] += 1
                    return Refusal(f"a message of {units} fragments can never fit the recipient pool of "
                                   f"{self.me} ({self.cfg.resources.recipient_pool} fragments)")
                if state is ReservationState.QUEUED:
                    return self._refuse("recipient_wait", f"reservation at {self.me} is queued (FCFS)", peer)
                self._use(key, now)
            p.charge = ("r", True)
        if self.is_stream(p):
            st = self.streams.get(p.mkey)
            if st is None:
                st = self.streams[p.mkey] = HopStream(peer, None, min(p.fragments, self.cfg.resources.stream_allocation),
                                                      p.fragments)
            st.upstream = peer
            st.last = now
        return None

    def _use(self, key: str, now: float) -> None:
        try:
            self.recipient.use(key, now)
        except KeyError:
            pass

    def stored(self, peer: str, p: Piece, fresh: bool) -> None:
        """The spool stored `p` (fresh) or already had it (a duplicate): settle its charge and grant credits."""
        if not fresh:
            self._undo(p)
            return
        st = self.streams.get(p.mkey)
        if st is not None and self.is_stream(p):
            st.received += 1
            if st.granted > 0:
                st.granted -= 1
            if st.cls is None and st.received >= st.fragments:
                del self.streams[p.mkey]        # the recipient MTA has the whole message: stream done
            else:
                self._top_up(p.mkey, st)

    def _undo(self, p: Piece) -> None:
        c, p.charge = p.charge, None
        if c is None:
            return
        if c[0] == "u":
            self._release(c[1], 1, c[2], count=False)
        elif c[0] == "s":
            st = self.streams.get(p.mkey)
            if st is not None and st.held > 0:
                st.held -= 1
        elif c[0] == "m" and c[1]:
            mc = self.charges.pop(p.mkey, None)
            if mc is not None:
                self._release(mc.cls, mc.units, mc.single, count=False)
        elif c[0] == "r" and c[1]:
            self.release_mail(p.msg_id)

    def _top_up(self, mkey: tuple[str, str], st: HopStream) -> None:
        free = st.allocation - st.held - st.granted
        left = st.fragments - st.received - st.granted
        n = min(free, left)
        if n > 0:
            st.granted += n
            credits = self.out_credits[st.upstream]
            credits[mkey] = credits.get(mkey, 0) + n
            self._wake(st.upstream)

    def session_up(self, peer: str) -> None:
        """A new session with `peer`: credits in flight on the old one may be lost, so grant afresh."""
        self.out_credits.pop(peer, None)
        for mkey, st in self.streams.items():
            if st.upstream == peer:
                st.granted = 0
                self._top_up(mkey, st)

    def take_credits(self, peer: str) -> list[tuple[tuple[str, str], int]]:
        credits = self.out_credits.pop(peer, None)
        return list(credits.items()) if credits else []

    # -- departures -------------------------------------------------------------------------
    def forwarded(self, p: Piece) -> None:
        """The next hop durably acked `p`: free what it held here."""
        c, p.charge = p.charge, None
        if c is None:
            return
        if c[0] == "u":
            self._release(c[1], 1, c[2], count=True)
        elif c[0] == "s":
            st = self.streams.get(p.mkey)
            if st is None:
                return
            st.held = max(0, st.held - 1)
            st.forwarded += 1
            st.last = time.monotonic()
            if st.cls is not None:
                self.pool.note_forwarded(st.cls)        # the class's throughput (expression 5.1)
            if st.forwarded >= st.fragments:
                self._close(p.mkey)
            else:
                self._top_up(p.mkey, st)
        elif c[0] == "m":
            mc = self.charges.get(p.mkey)
            if mc is None:
                return
            mc.bytes_left -= p.size
            if mc.bytes_left <= 0:
                del self.charges[p.mkey]
                self._release(mc.cls, mc.units, mc.single, count=True)

    def dropped(self, p: Piece) -> None:
        """`p` will never be forwarded from here (expired, aborted, orphaned): free what it held."""
        c = p.charge
        if c is not None and c[0] == "m":
            p.charge = None
            mc = self.charges.pop(p.mkey, None)
            if mc is not None:
                self._release(mc.cls, mc.units, mc.single, count=False)
            return
        if c is not None and c[0] == "r":
            p.charge = None
            return
        self.forwarded(p)

    def _close(self, mkey: tuple[str, str]) -> None:
        st = self.streams.pop(mkey, None)
        if st is not None and st.cls is not None:
            self._release(st.cls, st.allocation, False, count=False)

    def _release(self, cls: int, n: int, single: bool, count: bool) -> None:
        try:
            granted = self.pool.release(cls, n, single_fragment=single, count_throughput=count)
        except ValueError as exc:        # accounting drift must never take the node down
            log.error("buffer release mismatch: %s", exc)
            granted = []
        now = time.monotonic()
        for key in granted:     # the pool took them on the waiter's behalf; its next offer claims them
            wcls, units, _ = self.waiting.pop(key)
            self.granted[key] = (wcls, units, now)
        self._room()

    # -- recipient space ------------------------------------------------------------------------
    def release_mail(self, msg_id: str) -> None:
        """A message left the mailbox (read and deleted, or its reassembly was aborted)."""
        try:
            self.recipient.release_message(msg_id, time.monotonic())
        except KeyError:
            return
        self._room()

    def removal_events(self):
        """(gap seconds, fragments) of the synthetic mail readers, or None when only real reads free space."""
        if self.removal is None:
            return None
        last = 0.0
        for t, size in self.removal.events():
            yield t - last, size
            last = t

    def remove(self, fragments: int) -> None:
        partition = "single" if fragments == 1 else "multi"
        before = self.recipient.used(partition)
        self.recipient.drain(fragments, time.monotonic(), partition)
        freed = before - self.recipient.used(partition)
        self.removed_fragments += freed
        if freed:
            self._room()

    # -- RBSAD -------------------------------------------------------------------------------------
    def gate(self, p: Piece) -> float:
        """When a piece for the recipient MTA may leave this (next-to-last) MTA: monotonic time, 0 = now."""
        if self.cfg.resources.rbsad <= 0 or p.kind == "ndr":
            return 0.0
        # One draw per message, kept while any of its pieces still passes: a "no wait" must be remembered
        # as well as a wait, or the next fragment (or a retry) draws again and a long message is almost
        # sure to be held somewhere in the middle of its stream (the thesis: probability 0.1 per message).
        now = time.monotonic()
        gate = self.gates.get(p.mkey)
        if gate is None:
            wait = self.rbsad.sample()
            gate = self.gates[p.mkey] = [now + wait if wait > 0 else 0.0, now]
            if wait > 0:
                log.debug("RBSAD: %s waits %.2f s before %s", p.msg_id, wait, p.dst)
        gate[1] = now
        return gate[0]

    # -- housekeeping ------------------------------------------------------------------------------
    def sweep(self, idle: float, stream_idle: float) -> None:
        """Expire reservations; close streams that hold nothing here and saw no fragment for `stream_idle` s
        (their last fragments passed before a restart, or the message expired upstream): a fragment that
        still comes later simply opens the stream again."""
        now = time.monotonic()
        expired, _granted = self.recipient.expire(now)
        if expired:
            self._room()
        for mkey, st in list(self.streams.items()):
            if st.held == 0 and now - st.last > stream_idle:
                log.info("stream %s/%s idle for %.0f s: closed", mkey[0], mkey[1], now - st.last)
                self._close(mkey)
        for mkey, (at, used) in list(self.gates.items()):
            if used < now - idle and at < now:          # the message left long ago
                del self.gates[mkey]
        # a sender offers a refused message again within RETRY_CAP; one that stopped (it crashed, or the
        # message expired there) must not hold the head of a class's FCFS queue, nor buffers granted to it
        for key, (_cls, _n, last) in list(self.waiting.items()):
            if now - last > idle:
                self.pool.cancel_wait(key)
                del self.waiting[key]
        for key, (cls, n, at) in list(self.granted.items()):
            if now - at > idle:
                del self.granted[key]
                self._release(cls, n, False, count=False)

    def recover(self, p: Piece) -> None:
        """Count a piece loaded from the spool after a restart (whatever the limits: it is already stored)."""
        if p.dst == self.me:
            units = p.fragments if self.fragmenting else max(1, math.ceil(p.total / self.cfg.fragment_size))
            self.recipient.force_store(p.msg_id, units, time.monotonic(), p.users)
            p.charge = ("r", False)
            return
        cls = self._cls(p.hops)
        if self.fragmenting:
            self.pool.force_acquire(cls, 1)
            p.charge = ("u", cls, False)
        else:
            if p.mkey not in self.charges:
                units = self.units(p.total)
                self.pool.force_acquire(cls, units)
                self.charges[p.mkey] = MessageCharge(cls, False, p.total, units)
            p.charge = ("m", False)

    def snapshot(self) -> dict:
        pool = self.pool.snapshot()
        rec = self.recipient.snapshot()
        by_peer: collections.Counter = collections.Counter()
        for st in self.streams.values():
            by_peer[st.upstream] += 1
        return {
            "buffers": {"classes_enabled": pool["classes_enabled"], "usage": pool["usage"], "limits": pool["limits"],
                        "free_pool": pool["free_pool"], "single_fragment_input_usage": pool["single_fragment_input_usage"],
                        "readjustments": pool["readjustments"], "refusals": pool["refusals"]},
            "streams": {"active": len(self.streams), "by_upstream": dict(sorted(by_peer.items())),
                        "allocated_buffers": sum(s.allocation for s in self.streams.values() if s.cls is not None),
                        "held_fragments": sum(s.held for s in self.streams.values())},
            "recipient": {"capacity": rec["capacity"], "used": rec["used"], "reserved": rec["reserved"],
                          "reservation_queue_length": rec["reservation_queue_length"],
                          "reservation_queue_fragments": rec["reservation_queue_fragments"],
                          "granted": rec["granted"], "queued": rec["queued"], "expired": rec["expired"],
                          "optimistic_ok": rec["optimistic_ok"], "optimistic_refused": rec["optimistic_refused"],
                          "removed_fragments": self.removed_fragments},
            "rbsad": self.rbsad.snapshot(),
            "refusals": dict(sorted(self.refusals.items())),
            "fcfs": {"waiting": len(self.waiting), "granted": len(self.granted)},
            "room_signals": self.rooms_signalled,
        }
