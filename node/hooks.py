"""What the engine calls into the subsystems, collected once when it is built (node/subsystem.py has the hooks).

One object instead of a registration point per kind of hook: the engine reads its tables on the hot path
(a delivery, an arriving fragment of a subsystem's kind, a session change, a metrics record) and nothing
else of a subsystem.
"""
from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Callable

from node.piece import Piece
from node.spool import MAIL_KINDS, Op, Spool
from node.states import PieceState

log = logging.getLogger("node.hooks")

Consumer = Callable[[Piece, bytes], None]             # (header piece of the delivered copy, its payload)


@dataclass(frozen=True)
class Received:
    """What a subsystem does with a whole copy of its kind arriving here, planned before the engine's receive
    transaction and run inside it: `op` runs in that transaction when the copy is new here (it must take the
    copy's inbox row away); then `done(True)` once it committed, or `done(False)` when it did not run or did
    not commit (a duplicate, the op raised, the transaction failed): the copy then stays in the inbox and goes
    to `consume`, as without this hook."""
    op: Op
    done: Callable[[bool], None]


Receiver = Callable[[Piece, bytes], "Received | None"]    # None: leave this copy to the inbox path


@dataclass(frozen=True)
class MessageKind:
    """A kind of message a subsystem sends between nodes (Piece.kind). The engine stores, forwards and retries
    it like mail; at its destination it goes into the spool's inbox and is handed to `consume`, which takes the
    inbox row away in its own transaction (after a crash it reads the inbox). `accept` is the codec's rule for a
    fragment of this kind from a neighbour: (msg_id, originator) -> may a neighbour pass it on. `on_receive`
    (optional) saves that second transaction: its spool changes join the transaction that stores the copy (Received),
    for a copy in one piece and for one in several when a batch of pieces completes it (the engine reassembles
    it into the inbox in that transaction first), so a hop costs one commit."""
    kind: str
    accept: Callable[[str, str], bool]
    consume: Consumer
    on_receive: Receiver | None = None


@dataclass
class EngineHooks:
    consumers: dict[str, Consumer] = field(default_factory=dict)          # message kind -> its consumer
    on_receive: dict[str, Receiver] = field(default_factory=dict)         # message kind -> its receive hook
    accept: dict[str, Callable[[str, str], bool]] = field(default_factory=dict)   # message kind -> codec rule
    on_delivery: list[Callable[[Piece, int], None]] = field(default_factory=list)  # a mail copy delivered here
    on_session: list[Callable[[str, bool], None]] = field(default_factory=list)    # a Link session up / down
    snapshots: dict[str, Callable[[], dict | None]] = field(default_factory=dict)  # metrics record sections
    # the subsystems taken so far, by name: one that builds on another (pools on the broker) finds it here
    subsystems: dict[str, Any] = field(default_factory=dict)

    def add(self, sub: Any) -> None:
        """Take the hooks of one subsystem (a node.subsystem.Subsystem) that it has its own of."""
        self.subsystems[sub.name] = sub
        for mk in sub.message_kinds():
            if mk.kind in MAIL_KINDS or mk.kind in self.consumers:
                raise ValueError(f"{sub.name}: message kind {mk.kind!r} is taken already")
            self.consumers[mk.kind] = mk.consume
            self.accept[mk.kind] = mk.accept
            if mk.on_receive is not None:
                self.on_receive[mk.kind] = mk.on_receive
        if sub.overrides("on_delivery"):
            self.on_delivery.append(sub.on_delivery)
        if sub.overrides("on_session"):
            self.on_session.append(sub.on_session)
        if sub.overrides("snapshot"):
            self.snapshots[sub.name] = sub.snapshot

    async def plan_received(self, keep: list[Piece], me: str, deliver_ts: float, partial: dict[tuple[str, str], Any],
                            spool: Any) -> dict[int, Received]:
        """Per index into `keep` (pieces arriving in one receive transaction): what the subsystem of a whole
        copy of its kind plans to do with it inside that transaction. A copy in several pieces counts as whole
        when this batch completes it (`partial`: the engine's reassembly table, what earlier transactions
        stored); its planned op then also reassembles it, so the last piece's arrival costs one commit too."""
        out: dict[int, Received] = {}
        parts: dict[tuple[str, str], list[int]] = {}
        for i, p in enumerate(keep):
            hook = self.on_receive.get(p.kind)
            if hook is None:
                continue
            if p.state == PieceState.WHOLE:
                r = _ask(hook, p, p.data, me)
                if r is not None:
                    out[i] = r
            elif p.state == PieceState.PART:
                parts.setdefault(p.mkey, []).append(i)
        for mkey, idx in parts.items():
            pieces = [keep[i] for i in idx]
            pend = partial.get(mkey)
            got = await _completed(pieces, pend, spool)
            if got is None:
                continue
            payload, at = got
            meta = max(pieces + ([pend.meta] if pend is not None and pend.meta is not None else []),
                       key=lambda x: x.hops)
            r = _ask(self.on_receive[meta.kind], meta, payload, me)
            if r is not None:        # the op goes with a piece the transaction stores as new
                out[idx[at]] = Received(_reassembling(meta, payload, deliver_ts, r.op), r.done)
        return out

    def snapshot(self) -> dict:
        """Every subsystem's section of a metrics record that has one now."""
        out = {}
        for name, snap in self.snapshots.items():
            got = snap()
            if got is not None:
                out[name] = got
        return out


def _ask(hook: Receiver, p: Piece, payload: bytes, me: str) -> Received | None:
    try:
        return hook(p, payload)
    except Exception:          # a subsystem's bug must not refuse the copy: the inbox path still has it
        log.exception("%s: receive hook for %s failed", me, p.msg_id)
        return None


def _op_parts(msg_id: str, dst: str) -> Op:
    def op(c: sqlite3.Connection) -> list[tuple[int, bytes]]:
        return [(o, bytes(d)) for o, d in c.execute(
            f"SELECT off, data FROM frag WHERE msg_id=? AND dst=? AND state='{PieceState.PART}'", (msg_id, dst))]
    return op


async def _completed(pieces: list[Piece], pend: Any, spool: Any) -> tuple[bytes, int] | None:
    """(the whole payload, the position in `pieces` of its last new piece) if `pieces` (one batch's pieces of a
    copy) and what earlier transactions stored of it cover it exactly, else None. What was stored before is
    read (committed) only when the batch can complete the copy by the reassembly table's count. The planned
    op goes with a piece stored before neither in the spool nor earlier in the batch: a retransmission is a
    duplicate, and the op of a piece that is not new does not run."""
    total = pieces[0].total
    have: dict[int, bytes] = {}
    if pend is not None:
        if pend.got + sum(p.size for p in pieces) < total:
            return None
        try:
            have = dict(await spool.read(_op_parts(*pieces[0].mkey)))
        except Exception as exc:   # before the receive transaction: the engine's own reassembly still has it
            log.warning("reading the stored pieces of %s failed: %r", pieces[0].msg_id, exc)
            return None
    at = -1
    for j, p in enumerate(pieces):
        if p.off not in have:
            have[p.off] = bytes(p.data)
            at = j
    if at < 0:
        return None              # nothing new here: the copy was complete before (or is being completed)
    pos, chunks = 0, []
    for off in sorted(have):
        if off != pos:
            return None          # a gap or an overlap: the engine's own reassembly takes it
        chunks.append(have[off])
        pos += len(have[off])
    return (b"".join(chunks), at) if pos == total else None


class _NotWhole(Exception):
    pass


def _reassembling(m: Piece, payload: bytes, deliver_ts: float, then: Op) -> Op:
    """Reassemble a copy into the inbox as the engine's delivery does (Spool.op_deliver), then `then` (its
    subsystem's op, which takes the inbox row away). Raises when the spool's pieces do not make `payload`
    (done already, a piece refused or expired in this batch): with_received undoes it and the copy goes the
    engine's ordinary way."""
    meta = {"src": m.src, "fragments": m.fragments, "hops": m.hops, "submit_ts": m.submit_ts, "kind": m.kind,
            "expires_ts": m.expires_ts}
    deliver = Spool.op_deliver(m.msg_id, m.dst, m.users, meta, deliver_ts)

    def op(c: sqlite3.Connection) -> Any:
        if deliver(c) != payload:
            raise _NotWhole(f"{m.msg_id}: its stored pieces do not make the copy planned for")
        return then(c)
    return op


def received_done(r: Received, stored: bool, me: str) -> None:
    """Tell a subsystem how its planned op ended; its failure must not keep the engine from queueing the rest of
    the batch it stored."""
    try:
        r.done(stored)
    except Exception:
        log.exception("%s: a subsystem failed after its receive op (stored: %s)", me, stored)


def with_received(receive: Op, planned: dict[int, Received]) -> Op:
    """`receive` (Spool.op_receive) and then, for each new whole copy among its pieces, its subsystem's planned
    op, each under a savepoint of its own: one that raises is undone alone and leaves its copy in the inbox.
    The op returns (op_receive's result, the indices whose planned op ran)."""
    def op(c: sqlite3.Connection) -> tuple[list, set[int]]:
        fresh = receive(c)
        taken: set[int] = set()
        for i, r in planned.items():
            if fresh[i] is not True:
                continue
            c.execute("SAVEPOINT kind_op")
            try:
                r.op(c)
            except Exception as exc:       # e.g. targets handled already: the inbox path plans it again
                c.execute("ROLLBACK TO kind_op")
                c.execute("RELEASE kind_op")
                log.debug("a subsystem's op for a received copy was undone: %r", exc)
                continue
            c.execute("RELEASE kind_op")
            taken.add(i)
        return fresh, taken
    return op
