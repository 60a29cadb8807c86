"""The message transfer engine: admission, store, forward, deliver.

FragmentingEngine cuts a message into F-byte fragments at the originator; a
transit hop forwards each fragment once it is durably stored (pipelining) and
the recipient reassembles (a partial message is aborted after
`reassembly_timeout` s without a fragment). NonFragmentingEngine forwards
nothing from a transit hop until the WHOLE message is stored there (e-mail);
the engines differ only in `transit_state` and `fragments_for`.

Around it: the originating side (node/origination.py: submissions, reports and
subsystems' messages made durable), the clock (node/expiry.py), the router
(asked once per message copy, node/routing/cache.py), the admission policy
(node/policy.py, which also builds each link's queue, node/transfer_queue.py),
the peers handed to link sessions (node/peer.py), the copies kept without a next hop (node/orphans.py)
and reports (node/reports.py).
Pieces and their states: node/piece.py, node/states.py.

Subsystems plug in at one seam (node/subsystem.py, listed in node/registry.py):
at construction one may give the router and each may lay a layer over the
admission policy and the link queues; after that the engine calls them only
through its hooks object (node/hooks.py): deliveries of their message kinds
(a whole copy's own spool changes may join the transaction that receives it),
mail deliveries, session changes and their sections of the metrics record.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from node.config import NodeConfig
from node import expiry, giveup, recovery
from node.hooks import EngineHooks, received_done, with_received
from node.metrics import engine_snapshot
from node.origination import NewMessage, Origination, Together
from node.orphans import Orphans
from node.payloads import PayloadReader
from node.peer import Peer
from node.piece import Piece
from node.policy import AdmissionPolicy, make_policy
from node.records import Records
from node.refusal import Refusal
from node.reports import ORPHAN, REPORT_KIND, Reporter
from node.resource_manager import CONGESTED, RETRY_CAP
from node.routing import Router, StaticRouter
from node.routing.cache import CopyRoutes
from node.spool import MAIL_KINDS, Op, Spool
from node.states import PieceState as S

log = logging.getLogger("node.mta")

ROUTE_MEMORY = 600.0       # seconds a copy's next hop is remembered after its last piece passed
ACKED_DELETE_WITHIN = 0.5  # seconds at most before acknowledged pieces' rows are deleted (Spool.defer)
QUEUE_FULL_RETRY = 0.25    # seconds a sender refused for a full link queue here waits first (it doubles, to 1 s)


@dataclass
class Pending:
    """A message copy being collected at this hop (recipient reassembly or non-fragmenting transit)."""
    total: int
    got: int = 0
    last: float = field(default_factory=time.monotonic)
    pieces: list[Piece] = field(default_factory=list)    # held transit pieces (non-fragmenting)
    meta: Piece | None = None


class Engine:
    """Everything between the services and the spool; one per node."""

    mode = "abstract"

    def __init__(self, cfg: NodeConfig, spool: Spool, records: Records, router: Router | None = None,
                 policy: AdmissionPolicy | None = None, subsystems: Sequence[Any] = ()) -> None:
        """`subsystems`: the node's enabled node.subsystem.Subsystem instances; one of them may give the router
        (else `router`, else the config's static table), each may lay its layer over the admission policy and
        the link queues, and each is attached once the engine exists."""
        self.cfg = cfg
        self.me = cfg.name
        self.spool = spool
        self.records = records
        given = [r for r in (s.router(spool, records) for s in subsystems) if r is not None]
        if len(given) > 1:
            raise ValueError("more than one subsystem gives the engine its router")
        self.router: Router = router or (given[0] if given else StaticRouter(cfg.neighbours, cfg.routes))
        self.routes = CopyRoutes(self.router)
        self.router.watch(self._routes_changed)
        self.policy: AdmissionPolicy = policy or make_policy(cfg, self._wake_peer)
        for s in subsystems:
            self.policy = s.wrap_policy(self.policy)
        self.peers: dict[str, Peer] = {}
        for n in cfg.neighbours:
            wake = asyncio.Event()
            q = self.policy.make_queue(n, wake.set)
            for s in subsystems:
                q = s.wrap_queue(n, q, wake.set)
            self.peers[n] = Peer(n, q, wake)
        self.router.attach(self.peers)
        self.local_users = frozenset(cfg.local_users)     # empty: any user has a mailbox here
        self.origination = Origination(self)
        self.reporter = Reporter(self.me, spool, records, cfg.default_lifetime, self.originate, log)
        self.partial: dict[tuple[str, str], Pending] = {}
        self.held: dict[tuple[str, str], Pending] = {}
        # copies without a next hop, their bytes in the spool (node/orphans.py); a body keyword rule needs the
        # first bytes of every copy
        self.orphans = Orphans(cfg.limits.max_orphan_bytes, getattr(self.router, "reads_body", False))
        # bytes of pieces recovered without them, read when a link sends them (a few batches read ahead)
        self.payloads = PayloadReader(spool, 8 * cfg.batch.max_bytes)
        self.delivered = 0
        self.submitted = 0
        self.refused_submissions = 0
        self.expired = 0
        self.giving_up: set[tuple[str, str]] = set()      # copies whose give_up transaction is under way
        self._bg: set[asyncio.Task] = set()
        # everything the engine calls into the subsystems (node/hooks.py): deliveries of their message kinds,
        # mail deliveries, session changes, metrics sections
        self.hooks = EngineHooks()
        for s in subsystems:
            s.attach(self)
            self.hooks.add(s)

    def _wake_peer(self, peer: str) -> None:
        p = self.peers.get(peer)
        if p is not None:
            p.wake.set()

    # -- the mode-specific part ------------------------------------------
    def transit_state(self) -> S:
        raise NotImplementedError

    def fragments_for(self, size: int) -> int:
        raise NotImplementedError

    # -- start-up ------------------------------------------------------------
    async def recover(self) -> None:
        """Re-queue everything unacknowledged after a crash or restart (node/recovery.py)."""
        await recovery.recover(self)

    # -- origination (node/origination.py) ---------------------------------------------
    async def submit(self, originator: str, recipients: list[tuple[str, str]], payload: bytes | None,
                     size: int | None, priority: int = 1, lifetime: float = 0.0) -> tuple[bool, str, str]:
        """Accept a user's message (durably) or refuse it with a reason; returns (accepted, msg_id, reason)."""
        return await self.origination.submit(originator, recipients, payload, size, priority, lifetime)

    async def originate(self, m: NewMessage) -> tuple[bool, str, str]:
        """Store a message this node originates and queue it: a user's submission or a report."""
        return await self.origination.originate(m)

    async def originate_together(self, messages: list[NewMessage], also: Op) -> str | None:
        """Several messages this node originates and `also` (a subsystem's own spool change) in ONE
        transaction: None when all is durable, else why nothing was stored."""
        return await self.origination.originate_together(messages, also)

    def prepare_together(self, messages: list[NewMessage], also: Op) -> "Together | str":
        """`originate_together` without storing: the caller runs the returned operation in a transaction of its
        own (a subsystem's receive hook: node/hooks.py Received), or why the messages are refused."""
        return self.origination.prepare_together(messages, also)

    # -- arrivals from neighbours ------------------------------------------------
    async def receive(self, peer: str, pieces: list[Piece]) -> list[Refusal | None]:
        """Store pieces from `peer` durably; per piece None (ack it) or why it is refused, for good or for now
        (no buffer yet: the sender keeps it and retries)."""
        return await asyncio.shield(self._receive(peer, pieces))   # see originate: never half-done

    async def _receive(self, peer: str, pieces: list[Piece]) -> list[Refusal | None]:
        st = self.peers[peer].stats
        result: list[Refusal | None] = [None] * len(pieces)
        keep: list[Piece] = []
        admit, me, hop, preview = self.policy.admit, self.me, self.routes.hop, self.routes.preview
        local_users = self.local_users
        transit = self.transit_state()
        consumers = self.hooks.consumers
        link_full = self.policy.link_full
        orphan_bytes = 0        # this batch's pieces that will be orphans
        for i, p in enumerate(pieces):
            if p.dst != me:
                h = preview(p)      # the copy's turn in a round robin is taken below, once it is admitted
                if h is not None:
                    full = link_full(h)
                    why = f"queue_full: {full} at {me}" if full else None
                else:
                    full = self.orphans.full(orphan_bytes + p.size)
                    why = f"{CONGESTED}: {full} at {me}" if full else None
                if why:            # not now: the sender keeps it and offers it again once there is room
                    result[i] = Refusal(why, QUEUE_FULL_RETRY)
                    st.deferred_in += 1
                    continue
            if p.dst == me and p.kind not in MAIL_KINDS and p.kind not in consumers:
                result[i] = Refusal(f"{me} takes no messages of kind {p.kind!r}")
                continue
            if local_users and p.dst == me and p.kind in MAIL_KINDS and not local_users.issuperset(p.users):
                result[i] = Refusal(f"no such user at {me}: {sorted(set(p.users) - local_users)[0]!r}")
                continue
            verdict = admit(peer, p)
            if verdict is not None:
                result[i] = verdict
                st.deferred_in += verdict.for_now
                continue
            if p.dst == me:
                p.state = S.WHOLE if p.off == 0 and p.size == p.total else S.PART
            elif hop(p) is not None:
                p.state = transit
            else:
                p.state = S.ORPHAN
                orphan_bytes += p.size
            keep.append(p)
        st.refused_in += sum(1 for r in result if r is not None and not r.for_now)     # not the "not now" ones
        if not keep:
            return result
        deliver_ts = time.time()
        # a whole copy of a subsystem's kind (or one this batch completes): its spool changes join this transaction
        planned = (await self.hooks.plan_received(keep, self.me, deliver_ts, self.partial, self.spool)
                   if self.hooks.on_receive else {})
        op = Spool.op_receive(keep, deliver_ts)
        try:
            if planned:
                fresh, taken = await self.spool.run(with_received(op, planned))
            else:
                fresh, taken = await self.spool.run(op), set()
        except Exception:
            for p in keep:
                self.policy.stored(peer, p, False)    # nothing was stored: undo the charges, as for duplicates
            for r in planned.values():
                received_done(r, False, self.me)
            raise
        for i, r in planned.items():
            if i not in taken:
                received_done(r, False, self.me)    # a duplicate, or its op failed: a new copy is in the inbox for `consume`
        whole = {keep[i].mkey for i in taken if keep[i].state == S.PART}    # reassembled in that commit too
        now = time.monotonic()
        st.frags_in += len(keep)
        st.bytes_in += sum(p.size for p in keep)
        where = {id(p): i for i, p in enumerate(pieces)}
        for i, (p, new) in enumerate(zip(keep, fresh)):
            self.policy.stored(peer, p, new is True)
            if isinstance(new, str):          # its byte range or total contradicts what is stored: never
                result[where[id(p)]] = Refusal(new)
                st.refused_in += 1
                continue
            if not new:
                st.duplicates_in += 1
                continue
            if p.state == S.WHOLE:
                if i in taken:
                    received_done(planned[i], True, self.me)     # its subsystem handled it in the same commit
                else:
                    self._delivered(p, p.total, deliver_ts, p.data)
            elif p.state == S.PART and p.mkey in whole:
                self.partial.pop(p.mkey, None)
                if i in taken:
                    received_done(planned[i], True, self.me)
            elif p.state == S.PART:
                pend = self._collect(self.partial, p)
                pend.last = now
                if pend.got >= pend.total:
                    self._spawn(self._deliver(p.mkey))
            elif p.state == S.HELD:
                pend = self._collect(self.held, p)
                if pend.got >= pend.total:
                    self._spawn(self._release_held(p.mkey))
            elif p.state == S.ORPHAN:
                self.policy.dropped(p)       # an orphan waits for a route, not for a buffer
                self.orphans.add(p)
                self._spawn(self.reporter.report(p, f"no route from {self.me} to {p.dst}", event=ORPHAN))
            else:
                self._enqueue(p)
        return result

    def _collect(self, table: dict[tuple[str, str], Pending], p: Piece) -> Pending:
        pend = table.get(p.mkey)
        if pend is None:
            pend = table[p.mkey] = Pending(total=p.total, meta=p)
        pend.got += p.size
        if table is self.held:
            pend.pieces.append(p)
        if p.hops > pend.meta.hops:
            pend.meta = p
        return pend

    async def _release_held(self, mkey: tuple[str, str]) -> None:
        pend = self.held.get(mkey)
        if pend is None:
            return
        await self.spool.run(Spool.op_set_state(mkey[0], mkey[1], S.QUEUED))
        if self.held.pop(mkey, None) is None:
            return
        for p in sorted(pend.pieces, key=lambda x: x.off):
            p.state = S.QUEUED
            self._enqueue(p)

    async def _deliver(self, mkey: tuple[str, str]) -> None:
        pend = self.partial.get(mkey)
        if pend is None or pend.meta is None:
            return
        m = pend.meta
        now = time.time()
        meta = {"src": m.src, "fragments": m.fragments, "hops": m.hops, "submit_ts": m.submit_ts, "kind": m.kind,
                "expires_ts": m.expires_ts}
        payload = await self.spool.run(Spool.op_deliver(mkey[0], mkey[1], m.users, meta, now))
        self.partial.pop(mkey, None)
        if payload is not None:
            self._delivered(m, len(payload), now, payload)

    def _delivered(self, m: Piece, size: int, now: float, payload: bytes) -> None:
        consumer = self.hooks.consumers.get(m.kind)
        if consumer is not None:
            consumer(m, payload)            # durable in the inbox: the consumer cannot lose it
            return
        if m.kind == REPORT_KIND:
            self.reporter.delivered(m, now)
            return
        self.delivered += 1
        self.records.write("delivery", ts=now, msg_id=m.msg_id, src=m.src, dst=self.me, size=size,
                           fragments=m.fragments, mode=self.mode, submit_ts=m.submit_ts, deliver_ts=now,
                           hops=m.hops, users=m.users, priority=m.prio, delay=now - m.submit_ts)
        for hook in self.hooks.on_delivery:     # after the delivery is durable: a hook cannot lose it
            hook(m, size)

    def _enqueue(self, p: Piece, front: bool = False) -> None:
        hop = self.routes.hop(p)
        if hop is None:
            self._orphan(p, f"no route from {self.me} to {p.dst}")
            return
        peer = self.peers[hop]
        peer.queue.push(p, front)
        peer.wake.set()

    def _orphan(self, p: Piece, reason: str) -> None:
        """Keep `p` until a route or rule change gives it another chance (or its lifetime ends), and record it."""
        p.state = S.ORPHAN
        self.orphans.add(p)
        self._spawn(self.spool.run(Spool.op_set_state(p.msg_id, p.dst, S.ORPHAN, p.off)))
        self._spawn(self.reporter.report(p, reason, event=ORPHAN))

    # -- the link side -------------------------------------------------------------
    def take(self, peer: str, max_frames: int, max_bytes: int) -> list[Piece]:
        """Up to max_frames pieces (about max_bytes) for `peer`; expired ones become reports instead."""
        q = self.peers[peer].queue
        out: list[Piece] = []
        nbytes = 0
        now = time.time()
        while len(out) < max_frames and nbytes < max_bytes:
            p = q.pop()
            if p is None:
                break
            if p.expires_ts and p.expires_ts < now:
                self.policy.dropped(p)
                self._spawn(self._expire(p))
                continue
            out.append(p)
            nbytes += p.size
        return out

    async def take_loaded(self, peer: str, max_frames: int, max_bytes: int) -> list[Piece]:
        """`take`, with the bytes of pieces recovered without them read from the spool (node/payloads.py: one
        batch read, the rest of a copy read ahead); a piece whose row is gone (expired, aborted meanwhile) is
        left out. The bytes live as long as the piece: until the next hop acknowledges it."""
        pieces = self.take(peer, max_frames, max_bytes)
        lazy = [p for p in pieces if p.data is None]
        if not lazy:
            return pieces
        try:
            stored = await self.payloads.fill(peer, lazy)
        except asyncio.CancelledError:
            self._put_back(peer, pieces)       # the session ended meanwhile: nothing taken may go missing
            raise
        except Exception as exc:               # the spool cannot be read now: keep them queued, try again later
            self._put_back(peer, pieces)
            log.error("cannot read %d stored pieces for %s now: %s", len(lazy), peer, exc)
            await asyncio.sleep(1.0)
            return []
        out = []
        for p in pieces:
            if p.data is None:
                p.data = stored.get(p.key)
                if p.data is None:
                    self.policy.dropped(p)
                    continue
            out.append(p)
        return out

    def _put_back(self, peer: str, pieces: list[Piece]) -> None:
        """Pieces `take` handed out that were not sent: back to the front, in order (to the copy's next hop now:
        the session may have ended and routes changed meanwhile)."""
        q = self.peers[peer].queue
        for p in reversed(pieces):
            if self.policy.is_stream(p):
                q.credit(p.mkey, 1)           # take spent its credit
            if self.routes.hop(p) == peer:
                q.push(p, front=True)
            else:
                self._enqueue(p, front=True)
        if pieces:
            self.peers[peer].wake.set()

    def acked(self, peer: str, pieces: list[Piece]) -> None:
        """The next hop stored these durably: drop our copies."""
        if not pieces:
            return
        st = self.peers[peer].stats
        for p in pieces:
            st.frags_out += 1
            st.bytes_out += p.size
            self.policy.forwarded(p)
        # deferred: the deletion rides in the next transaction (no fsync of its own per hop); should a crash lose
        # it, the pieces are sent again and the next hop drops them as duplicates, as after any crash
        self.spool.defer(Spool.op_delete_pieces(pieces), ACKED_DELETE_WITHIN)

    def refused(self, peer: str, p: Piece, reason: str, retry_after: float = 0.0) -> None:
        """The next hop will not take this piece: for now (retry_after > 0: offer it again later), or ever
        (keep it as an orphan and report)."""
        st = self.peers[peer].stats
        if retry_after > 0:
            st.deferred_out += 1
            p.retries += 1
            q = self.peers[peer].queue
            if self.policy.is_stream(p) and not reason.startswith("stream_full"):
                q.credit(p.mkey, 1)          # the refused fragment did not use its slot (an over-credit did)
            p.not_before = time.monotonic() + min(RETRY_CAP, retry_after * 2 ** min(p.retries - 1, 10))
            q.push(p, front=True)
            return
        st.refused_out += 1
        log.warning("%s refused %s/%s@%d: %s", peer, p.msg_id, p.dst, p.off, reason)
        if p.expires_ts and p.expires_ts < time.time():
            # its lifetime ended on the way (a neighbour refuses such a piece): no hop would take it now;
            # this node still holds the copy, so it reports it (once per copy)
            self.policy.dropped(p)
            self._spawn(self._expire(p))
            return
        self.router.refused(peer)             # a fail-over rule may now name another neighbour
        hop = self.routes.hop(p)
        if hop is not None and hop != peer:
            self.peers[hop].queue.push(p)     # keeps its buffer here, like a copy moved by a route change
            self.peers[hop].wake.set()
            return
        self.policy.dropped(p)
        self._orphan(p, f"{peer} refused it: {reason}")

    def requeue(self, peer: str, pieces: list[Piece]) -> None:
        """A session ended with these unacknowledged: send them again first (to the copy's next hop now)."""
        q = self.peers[peer].queue
        for p in reversed(pieces):
            if self.policy.is_stream(p):
                q.credit(p.mkey, 1)       # its credit was spent on a send that may never have arrived
            if self.routes.hop(p) == peer:
                q.push(p, front=True)
            else:
                self._enqueue(p, front=True)      # routes changed meanwhile
        self.peers[peer].stats.retransmissions += len(pieces)
        if pieces:
            self.peers[peer].wake.set()

    def session_up(self, peer: str) -> None:
        self.policy.session_up(peer)
        self.peers[peer].queue.session_up()
        self.router.session_changed(peer, True)
        for watch in self.hooks.on_session:
            watch(peer, True)

    def session_down(self, peer: str) -> None:
        """The session to `peer` ended (its unacknowledged pieces are requeued separately)."""
        self.router.session_changed(peer, False)
        for watch in self.hooks.on_session:
            watch(peer, False)

    # -- routes -------------------------------------------------------------------------
    def set_routes(self, routes: dict[str, str]) -> int:
        return self.router.set_routes(routes)      # the router calls _routes_changed

    def _routes_changed(self) -> None:
        """Ask the router again for every queued copy (moving it when its next hop changed) and every orphan."""
        moved, freed = self.routes.reroute(self.peers, self.orphans, self.me)
        for p in moved:
            self._enqueue(p)
        for p in freed:
            p.state = S.QUEUED
            self._spawn(self.spool.run(Spool.op_set_state(p.msg_id, p.dst, S.QUEUED, p.off)))
            self._enqueue(p)

    # -- expiry, reassembly timeouts -----------------------------------------------------
    async def _expire(self, p: Piece) -> None:
        await expiry.expire(self, p)

    async def give_up(self, p: Piece, reason: str, in_flight_too: bool = False) -> bool:
        """Stop trying to deliver the copy `p` is a piece of: delete it and store its non-delivery report in ONE
        spool transaction (node/giveup.py). True when given up; False when left as it was."""
        return await giveup.give_up(self, p, reason, in_flight_too)

    async def sweep(self) -> None:
        """Periodic: expire queued/held/partial copies, abort stalled reassemblies, let stalled streams probe."""
        await expiry.sweep(self)

    async def prune(self) -> None:
        self.routes.prune(ROUTE_MEMORY)
        await self.spool.run(Spool.op_prune(time.time() - 60.0))

    # -- metrics -----------------------------------------------------------------------
    def snapshot(self) -> dict:
        return engine_snapshot(self)

    def outstanding(self) -> int:
        """Pieces this node still has to hand on (queued or in flight)."""
        return sum(len(p.queue) + p.stats.inflight for p in self.peers.values()) + len(self.held)

    # -- housekeeping ---------------------------------------------------------------------
    def _spawn(self, coro) -> None:
        t = asyncio.ensure_future(coro)
        self._bg.add(t)
        t.add_done_callback(self._bg_done)

    def _bg_done(self, t: asyncio.Task) -> None:
        self._bg.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.error("background task failed: %r", t.exception())

    async def settle(self) -> None:
        """Wait for background spool work, deferred changes included (used at shutdown)."""
        while self._bg:
            await asyncio.gather(*list(self._bg), return_exceptions=True)
        await self.spool.flush()


class FragmentingEngine(Engine):
    mode = "fragmenting"

    def transit_state(self) -> S:
        return S.QUEUED          # forward each fragment as soon as it is stored

    def fragments_for(self, size: int) -> int:
        return max(1, math.ceil(size / self.cfg.fragment_size))


class NonFragmentingEngine(Engine):
    mode = "non-fragmenting"

    def transit_state(self) -> S:
        return S.HELD            # forward only once the whole message is stored here

    def fragments_for(self, size: int) -> int:
        return 1


def make_engine(cfg: NodeConfig, spool: Spool, records: Records, **kw) -> Engine:
    cls = FragmentingEngine if cfg.mode == "fragmenting" else NonFragmentingEngine
    return cls(cfg, spool, records, **kw)
