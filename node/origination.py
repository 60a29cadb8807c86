"""The originating side of the engine: a user's submission, a report, a subsystem's messages, made durable.

A message this node originates is cut into pieces, each copy's next hop asked once (node/routing/), the
admission policy asked, and everything stored in one transaction before the submitter hears "accepted"
(fragmenting mode stores a large message in chunks, the first travelling while the rest are written). A
refusal records a submission line with the reason; nothing of a refused message stays behind.
"""
from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from node.piece import Piece, split
from node.policy import Admitted
from node.refusal import Refusal
from node.resource_manager import CONGESTED
from node.spool import MAIL_KINDS, Op, Spool
from node.states import PieceState as S
from node.submission import submission_problem

log = logging.getLogger("node.mta")

# Fragmenting mode: a submission of more than SUBMIT_EARLY_MIN queued pieces is stored in chunks of
# SUBMIT_CHUNK pieces, each forwardable once durable, so the first fragments travel while the rest are written.
SUBMIT_CHUNK = 256
SUBMIT_EARLY_MIN = 2 * SUBMIT_CHUNK


@dataclass
class NewMessage:
    """A message this node originates: a user's submission, a report or a subsystem's
    message (`kind`: its message kind)."""
    originator: str
    recipients: list[tuple[str, str]]        # (node, user)
    payload: bytes
    priority: int
    lifetime: float
    kind: str = ""
    msg_id: str | None = None
    orphan_ok: bool = False                  # no route now: keep it as an orphan instead of refusing it
    # one piece whatever the fragment size (up to limits.max_frame_bytes; not under resource management): a
    # subsystem's small message whose own header pushes it just past a fragment (a broker's copy of a 1 kB
    # publication) is not cut in two at every hop
    one_piece: bool = False


@dataclass
class Prepared:
    """A message this node originates, cut into pieces, routed and admitted, not stored yet."""
    m: NewMessage
    msg_id: str
    dsts: list[str]
    now: float
    prio: int
    frags: int
    pieces: list[Piece]
    origin: Op
    undo: Callable[[], None] | None = None     # the admission policy's, when `origin` is not stored


@dataclass
class Together:
    """Messages prepared together (Origination.prepare_together), not stored yet: `op` stores them inside some
    transaction; after it, exactly one of `accepted` (it committed) or `cancel` (it did not) is called."""
    origination: "Origination"
    preps: list[Prepared]
    op: Op

    def accepted(self) -> None:
        for prep in self.preps:
            self.origination._accepted(prep, prep.pieces)

    def cancel(self) -> None:
        """Nothing of them was stored: give back what admitting them charged. Nothing is queued yet, and the spool
        is left alone (a stored copy of the same id, from an earlier arrival, must stay)."""
        for prep in self.preps:
            for p in prep.pieces:
                self.origination.e.policy.dropped(p)
            if prep.undo is not None:
                prep.undo()


class Origination:
    """One per engine (`Engine.origination`); the engine's submit, originate and originate_together."""

    def __init__(self, engine: Any) -> None:
        self.e = engine      # node.mta.Engine: its queues, policy, router, spool and records

    async def submit(self, originator: str, recipients: list[tuple[str, str]], payload: bytes | None,
                     size: int | None, priority: int = 1, lifetime: float = 0.0) -> tuple[bool, str, str]:
        """Accept a user's message (durably) or refuse it with a reason; returns (accepted, msg_id, reason)."""
        n = len(payload) if payload is not None else int(size or 0)
        reason = submission_problem(self.e.cfg, recipients, n, priority, lifetime) or self._too_much(recipients, n)
        if reason:
            return self._refuse_submission(originator, recipients, n, reason)
        msg_id = f"{self.e.me}-{uuid.uuid4().hex[:16]}"
        if payload is None:
            seed = (msg_id + " ").encode()
            payload = (seed * (n // len(seed) + 1))[:n]
        return await self.originate(NewMessage(originator, recipients, payload, priority, lifetime, msg_id=msg_id))

    def _too_much(self, recipients: list[tuple[str, str]], n: int) -> str | None:
        """Why storing a message of `n` bytes for `recipients` would take too much of this node, or None: each
        recipient node's copy is stored apart (and may be held for as long as its lifetime)."""
        nodes = len({node for node, _u in recipients})
        cap = self.e.cfg.limits.max_submission_bytes
        if n * nodes > cap:
            return (f"a message of {n} bytes to {nodes} nodes would store {n * nodes} bytes here "
                    f"(limit {cap}, limits.max_submission_bytes)")
        return None

    def _refuse_submission(self, originator: str, recipients: list[tuple[str, str]], n: int,
                           reason: str) -> tuple[bool, str, str]:
        self.e.refused_submissions += 1
        dsts = sorted({node for node, _u in recipients})
        self.e.records.write("submission", msg_id="", src=self.e.me, dst=dsts if len(dsts) != 1 else dsts[0], size=n,
                           accepted=False, reason=reason, originator=originator)
        return False, "", reason

    async def originate(self, m: NewMessage) -> tuple[bool, str, str]:
        """Store a message this node originates and queue it: a user's submission or a report."""
        # shielded: once the spool write is queued, the in-memory side must follow even if the caller
        # (an RPC, a session) is cancelled, or a durable message would sit unqueued until a restart
        return await asyncio.shield(self._originate(m))

    def _prepare(self, m: NewMessage) -> "Prepared | Refusal":
        """The pieces of a message this node originates, routed and admitted; or why it is refused."""
        n = len(m.payload)
        msg_id = m.msg_id or f"{self.e.me}-{uuid.uuid4().hex[:16]}"
        dsts = sorted({node for node, _u in m.recipients})
        now = time.time()
        expires = now + (m.lifetime or self.e.cfg.default_lifetime)
        # the submission time the message carries is this machine's clock: a test-only offset of the records
        # (node/records.py) shifts it as it shifts the node's own record times; expiry stays on the real clock
        stamp = now + self.e.records.clock_offset
        prio = m.priority or 1
        pieces: list[Piece] = []
        # not under resource management: its buffers hold one fragment_size each
        if m.one_piece and n <= self.e.cfg.limits.max_frame_bytes and not self.e.policy.managed:
            frags, chunks = 1, [(0, m.payload)]
        else:
            frags = self.e.fragments_for(n)
            # the pieces' bytes are cut once and shared by every recipient node's copy (bytes never change): a
            # message to 64 nodes holds its payload once in memory, not 64 times
            chunks = [(off, m.payload[off:off + ln] if ln != n else m.payload)
                      for off, ln in split(n, self.e.cfg.chunk_size)]
        for dst in dsts:
            users = sorted({u for node, u in m.recipients if node == dst})
            state = S.PART if dst == self.e.me else S.QUEUED
            for off, data in chunks:
                pieces.append(Piece(msg_id, dst, off, n, 0, self.e.me, m.originator, users, prio, stamp, expires,
                                    m.kind, frags, data, state))
        hops: dict[str, str | None] = {}           # asked once per copy (the router seam's contract)
        for p in pieces:
            if p.state == S.QUEUED and p.dst not in hops:
                hops[p.dst] = self.e.router.next_hop(p)
        unroutable = sorted(d for d, h in hops.items() if h is None)
        if unroutable and not m.orphan_ok:
            return Refusal(f"no route to {unroutable[0]}")
        if unroutable:          # its copies for these would be orphans (node/orphans.py)
            full = self.e.orphans.full(sum(p.size for p in pieces if p.dst in unroutable))
            if full:
                return Refusal(f"{CONGESTED} ({full} at {self.e.me})")
        if not m.kind:          # user mail only: a report or a subsystem's message is never refused for room
            for h in sorted({h for h in hops.values() if h is not None}):
                full = self.e.policy.link_full(h)
                if full:
                    return Refusal(f"{CONGESTED} ({full} at {self.e.me})")
        verdict = self.e.policy.admit_submission(pieces, frags, internal=m.kind != "")
        if isinstance(verdict, str) and verdict:
            return Refusal(verdict)
        origin = Spool.op_origin(msg_id, m.originator, dsts, n, prio, stamp, expires)
        if not isinstance(verdict, Admitted):
            return Prepared(m, msg_id, dsts, now, prio, frags, pieces, origin)

        def charged(c) -> None:        # the policy's own change rides in the origin transaction
            origin(c)
            verdict.op(c)
        return Prepared(m, msg_id, dsts, now, prio, frags, pieces, charged, verdict.undo)

    async def _originate(self, m: NewMessage) -> tuple[bool, str, str]:
        n = len(m.payload)
        prep = self._prepare(m)
        if isinstance(prep, Refusal):
            return self._refuse_submission(m.originator, m.recipients, n, prep.reason)
        pieces, msg_id = prep.pieces, prep.msg_id
        every = pieces
        try:
            early = await self._store_early(pieces)
            pieces = pieces[early:]
            insert = Spool.op_insert(pieces)

            def op(c) -> None:
                prep.origin(c)
                insert(c)
            await self.e.spool.run(op)         # acknowledged only once durable
        except Exception as exc:             # disk full, I/O error: refuse it and keep nothing of it
            self._abandon(msg_id, every)
            if prep.undo is not None:
                prep.undo()
            log.error("cannot store submission %s: %s", msg_id, exc)
            return self._refuse_submission(m.originator, m.recipients, n,
                                           f"{CONGESTED}: this node cannot store it now ({exc})")
        self._accepted(prep, pieces)
        return True, msg_id, ""

    async def originate_together(self, messages: list[NewMessage], also: Op) -> str | None:
        """Store several messages this node originates, and `also` (a subsystem's own spool change), in ONE
        transaction: all of it is durable, or none of it (a broker forwarding one publication to several next
        hops while taking it out of its inbox). None when done, else why nothing was stored."""
        return await asyncio.shield(self._originate_together(messages, also))

    async def _originate_together(self, messages: list[NewMessage], also: Op) -> str | None:
        together = self.prepare_together(messages, also)
        if isinstance(together, str):
            return together
        try:
            await self.e.spool.run(together.op)
        except Exception as exc:
            for prep in together.preps:
                self._abandon(prep.msg_id, prep.pieces)
                if prep.undo is not None:
                    prep.undo()
            if not isinstance(exc, (sqlite3.Error, OSError)):
                raise                         # the subsystem's own objection (its `also` raised): its to handle
            log.error("cannot store %d messages of this node now: %s", len(together.preps), exc)
            return f"{CONGESTED}: this node cannot store it now ({exc})"
        together.accepted()
        return None

    def prepare_together(self, messages: list[NewMessage], also: Op) -> "Together | str":
        """Several messages this node originates cut, routed and admitted, and one operation that stores them
        and `also` in the caller's transaction (Together); or why they are refused (nothing charged)."""
        preps: list[Prepared] = []
        for m in messages:
            prep = self._prepare(m)
            if isinstance(prep, Refusal):
                for done in preps:
                    for p in done.pieces:
                        self.e.policy.dropped(p)
                    if done.undo is not None:
                        done.undo()
                return prep.reason
            preps.append(prep)
        inserts = [Spool.op_insert(prep.pieces) for prep in preps]

        def op(c) -> None:
            for prep, insert in zip(preps, inserts):
                prep.origin(c)
                insert(c)
            also(c)
        return Together(self, preps, op)

    def _accepted(self, prep: "Prepared", pieces: list[Piece]) -> None:
        """A durable message of this node: queue it before anything else can fail, then record it."""
        m, msg_id = prep.m, prep.msg_id
        self.e.submitted += m.kind in MAIL_KINDS
        for p in pieces:
            if p.state == S.PART:
                self.e._collect(self.e.partial, p)
            else:
                self.e._enqueue(p)
        if self.e.me in prep.dsts:
            self.e._spawn(self.e._deliver((msg_id, self.e.me)))
        if m.kind in MAIL_KINDS:          # a subsystem's own kinds are in its own records
            dsts = prep.dsts
            self.e.records.write("submission", ts=prep.now, msg_id=msg_id, src=self.e.me,
                               dst=dsts if len(dsts) > 1 else dsts[0], size=len(m.payload), accepted=True,
                               reason="", originator=m.originator, priority=prep.prio, fragments=prep.frags,
                               kind=m.kind)

    def _abandon(self, msg_id: str, pieces: list[Piece]) -> None:
        """A submission that could not be stored whole: out of the queues, its charges and early chunks gone
        (if the spool cannot delete them now, recover() drops them: they have no origin row)."""
        for peer in self.e.peers.values():
            peer.queue.remove_if(lambda x: x.msg_id == msg_id)
        for p in pieces:
            self.e.policy.dropped(p)
        for dst in sorted({p.dst for p in pieces}):
            self.e._spawn(self.e.spool.run(Spool.op_drop(msg_id, dst)))

    async def _store_early(self, pieces: list[Piece]) -> int:
        """Pipelining from the originator (fragmenting mode, large messages): store all but the last chunk of
        the queued pieces chunk by chunk and queue each chunk for its next hop once it is durable. Returns how
        many leading pieces were handled. The message is accepted (origin row, reply) only with the last chunk;
        recover() drops the pieces of a submission that a crash cut short, before anything is sent again."""
        if self.e.mode != "fragmenting":
            return 0      # non-fragmenting: the whole message is stored before it moves, here as at every hop
        early = 0
        while early < len(pieces) and pieces[early].state == S.QUEUED:
            early += 1
        if early <= SUBMIT_EARLY_MIN:
            return 0
        early -= SUBMIT_CHUNK      # the last chunk goes with the origin row
        for i in range(0, early, SUBMIT_CHUNK):
            chunk = pieces[i:min(i + SUBMIT_CHUNK, early)]
            await self.e.spool.run(Spool.op_insert(chunk))
            for p in chunk:
                self.e._enqueue(p)
        return early
