"""The message transfer engine: submission, hop-by-hop forwarding, reassembly, reports.

Two engines behind one interface (`make_engine`):
  FragmentingEngine     the originator cuts a message into F-byte fragments; a
                        transit hop forwards each fragment as soon as it is
                        durably stored (pipelining); the recipient reassembles,
                        aborting a partial message after `reassembly_timeout`
                        seconds without a new fragment.
  NonFragmentingEngine  a message crosses a link as wire chunks, but a transit
                        hop forwards nothing until the WHOLE message is stored
                        there (today's e-mail). The only difference between the
                        engines is `transit_state` and `fragments_for`.

Resource management (issue 6) is on when the config has a `resources:` section:
`Engine.res` (node/resource_manager.py) then decides for every submission and
every arriving piece (buffer classes, streams, recipient space; "not now"
refusals are retried by the sender), and every link's queue is a
`TransferQueue` (node/transfer_queue.py: prioritised round robin, stream
credits, retry and RBSAD timers) instead of the plain FIFO `Scheduler`.
Other seams: `Admission.admit` (asked for every arriving fragment), `Router`
(the route lookup; dynamic routing replaces it) and `Engine.take` (the one
place frames leave for a link).
"""
from __future__ import annotations

import asyncio
import collections
import json
import logging
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterable, Protocol

from node.config import NodeConfig
from node.names import is_node_name, is_user_name
from node.records import Records
from node.resource_manager import RETRY_CAP, ResourceManager
from node.rpc import link_pb2
from node.spool import Piece, Spool
from node.transfer_queue import TransferQueue

log = logging.getLogger("node.mta")

MAX_LIFETIME = 10 * 365 * 86400.0
# Fragmenting mode: a submission of more than SUBMIT_EARLY_MIN queued pieces is stored in chunks of
# SUBMIT_CHUNK pieces, each forwardable once durable, so the first fragments travel while the rest are written.
SUBMIT_CHUNK = 256
SUBMIT_EARLY_MIN = 2 * SUBMIT_CHUNK
MAX_RUN = 65536            # fragments in one Run frame a receiver accepts (a sender puts at most max_frames)


class Router(Protocol):
    def next_hop(self, dst: str) -> str | None: ...
    def set_routes(self, routes: dict[str, str]) -> None: ...


class StaticRouter:
    """Next hop from a fixed table; a neighbour is always reachable directly."""

    def __init__(self, neighbours: Iterable[str], routes: dict[str, str]) -> None:
        self.neighbours = set(neighbours)
        self.routes = dict(routes)

    def next_hop(self, dst: str) -> str | None:
        hop = self.routes.get(dst)
        if hop in self.neighbours:
            return hop
        return dst if dst in self.neighbours else None

    def set_routes(self, routes: dict[str, str]) -> None:
        self.routes = {d: h for d, h in routes.items() if h in self.neighbours}


class Admission:
    """Accepts every fragment; issue 6's structured buffer pool overrides `admit`."""

    def admit(self, piece: Piece, hops: int) -> str | None:
        return None          # a reason string refuses the fragment

    def release(self, piece: Piece) -> None:
        pass


class Scheduler:
    """The outgoing queue of one link: FIFO within a priority, higher priority first."""

    def __init__(self) -> None:
        self._q: dict[int, collections.deque[Piece]] = {}
        self._prios: list[int] = []          # priorities present, highest first
        self.bytes = 0
        self._msgs: collections.Counter = collections.Counter()

    def __len__(self) -> int:
        return sum(len(d) for d in self._q.values())

    @property
    def messages(self) -> int:
        return len(self._msgs)

    def push(self, p: Piece, front: bool = False) -> None:
        d = self._q.get(p.prio)
        if d is None:
            d = self._q[p.prio] = collections.deque()
            self._prios = sorted(self._q, reverse=True)
        (d.appendleft if front else d.append)(p)
        self.bytes += len(p.data)
        self._msgs[p.mkey] += 1

    def pop(self) -> Piece | None:
        for prio in self._prios:
            d = self._q[prio]
            if d:
                p = d.popleft()
                self._account_out(p)
                return p
        return None

    def _account_out(self, p: Piece) -> None:
        self.bytes -= len(p.data)
        self._msgs[p.mkey] -= 1
        if self._msgs[p.mkey] <= 0:
            del self._msgs[p.mkey]

    def has_ready(self) -> bool:
        return len(self) > 0

    def remove_if(self, pred) -> list[Piece]:
        out: list[Piece] = []
        for prio, d in self._q.items():
            keep = collections.deque()
            for p in d:
                (out if pred(p) else keep).append(p)
            self._q[prio] = keep
        for p in out:
            self._account_out(p)
        return out


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


@dataclass
class Pending:
    """A message copy being collected at this hop (recipient reassembly or non-fragmenting transit)."""
    total: int
    got: int = 0
    last: float = field(default_factory=time.monotonic)
    pieces: list[Piece] = field(default_factory=list)    # held transit pieces (non-fragmenting)
    meta: Piece | None = None


def _check_header(f: link_pb2.Fragment, cfg: NodeConfig) -> str | None:
    """Validate the fields a fragment shares with the rest of its message copy; a string is the reason to refuse."""
    lim = cfg.limits
    if not f.msg_id or len(f.msg_id) > 200:
        return "fragment without a valid msg_id"
    if f.total_size > lim.max_message_size:
        return f"message size {f.total_size} exceeds the limit {lim.max_message_size}"
    if not f.recipients or len(f.recipients) > lim.max_recipients:
        return "fragment must name between 1 and max_recipients recipients"
    dsts = {r.node for r in f.recipients}
    if len(dsts) != 1 or not is_node_name(next(iter(dsts))):
        return "a fragment's recipients must all be at one valid node"
    if f.hops < 1 or f.hops > lim.max_hops:
        return f"hop count {f.hops} outside 1..{lim.max_hops} (routing loop?)"
    if not is_node_name(f.src):
        return "fragment without a valid source node"
    return None


def _check_range(off: int, n: int, total: int, cfg: NodeConfig) -> str | None:
    if n > cfg.limits.max_frame_bytes:
        return f"fragment of {n} bytes exceeds the frame limit {cfg.limits.max_frame_bytes}"
    if off + n > total or (n == 0 and total > 0):
        return f"byte range {off}+{n} does not fit a message of {total} bytes"
    return None


def piece_from_frame(f: link_pb2.Fragment, cfg: NodeConfig) -> Piece | str:
    """Validate a Fragment frame from a neighbour; a string is the reason to refuse it."""
    reason = _check_header(f, cfg) or _check_range(f.offset, len(f.data), f.total_size, cfg)
    if reason:
        return reason
    return Piece(f.msg_id, f.recipients[0].node, f.offset, f.total_size, f.hops, f.src, f.originator,
                 [r.user for r in f.recipients], f.priority, f.submit_ts, f.expires_ts, f.kind,
                 f.fragments or 1, bytes(f.data))


def pieces_from_run(run: link_pb2.Run, cfg: NodeConfig) -> list[tuple[int, Piece | str]]:
    """(seq, piece or reason to refuse it) for every fragment of a Run frame; the header is checked once."""
    h = run.head
    data = run.data
    reason = _check_header(h, cfg)
    if reason is None and len(data) > MAX_RUN:
        reason = f"a run of {len(data)} fragments exceeds the limit of {MAX_RUN}"
    if reason:
        return [(h.seq + i, reason) for i in range(len(data))]
    # shared by all pieces of the run: nothing mutates these per piece
    dst = h.recipients[0].node
    users = [r.user for r in h.recipients]
    msg_id, total, hops, src, originator = h.msg_id, h.total_size, h.hops, h.src, h.originator
    prio, submit_ts, expires_ts, kind, frags = h.priority, h.submit_ts, h.expires_ts, h.kind, h.fragments or 1
    out: list[tuple[int, Piece | str]] = []
    seq, off = h.seq, h.offset
    limit = cfg.limits.max_frame_bytes
    for d in data:
        n = len(d)
        if n > limit or off + n > total or (n == 0 and total > 0):
            out.append((seq, _check_range(off, n, total, cfg) or "bad byte range"))
        else:
            out.append((seq, Piece(msg_id, dst, off, total, hops, src, originator, users, prio, submit_ts,
                                   expires_ts, kind, frags, d)))
        seq += 1
        off += n
    return out


def frame_from_piece(p: Piece, seq: int) -> link_pb2.Frame:
    return link_pb2.Frame(fragment=_header(p, seq, p.data))


def _header(p: Piece, seq: int, data: bytes = b"") -> link_pb2.Fragment:
    return link_pb2.Fragment(
        msg_id=p.msg_id, offset=p.off, total_size=p.total, hops=p.hops + 1, data=data, src=p.src,
        recipients=[{"node": p.dst, "user": u} for u in p.users], priority=p.prio, submit_ts=p.submit_ts,
        expires_ts=p.expires_ts, seq=seq, kind=p.kind, originator=p.originator, fragments=p.fragments)


def frames_from_pieces(pieces: list[Piece], first_seq: int, runs: bool = True) -> list[link_pb2.Frame]:
    """Frames for pieces numbered first_seq, first_seq + 1, ...: each stretch of consecutive byte ranges of
    one message copy becomes one Run frame (header once) when the peer understands runs."""
    out: list[link_pb2.Frame] = []
    n = len(pieces)
    i = 0
    while i < n:
        p = pieces[i]
        j = i + 1
        if runs:
            end = p.off + len(p.data)
            while j < n:
                q = pieces[j]
                if q.off != end or q.msg_id != p.msg_id or q.dst != p.dst or q.hops != p.hops or not q.data:
                    break
                end += len(q.data)
                j += 1
        if j - i == 1 or not p.data:
            out.append(frame_from_piece(p, first_seq + i))
            j = i + 1
        else:
            out.append(link_pb2.Frame(run=link_pb2.Run(head=_header(p, first_seq + i),
                                                       data=[q.data for q in pieces[i:j]])))
        i = j
    return out


def split(size: int, chunk: int) -> list[tuple[int, int]]:
    """(offset, length) of the pieces of a message; an empty message is one empty piece."""
    if size == 0:
        return [(0, 0)]
    return [(o, min(chunk, size - o)) for o in range(0, size, chunk)]


class Engine:
    """Everything between the services and the spool; one per node."""

    mode = "abstract"

    def __init__(self, cfg: NodeConfig, spool: Spool, records: Records, router: Router | None = None,
                 admission: Admission | None = None) -> None:
        self.cfg = cfg
        self.me = cfg.name
        self.spool = spool
        self.records = records
        self.router: Router = router or StaticRouter(cfg.neighbours, cfg.routes)
        self.admission = admission or Admission()
        self.stats: dict[str, NeighbourStats] = {n: NeighbourStats() for n in cfg.neighbours}
        self.wake: dict[str, asyncio.Event] = {n: asyncio.Event() for n in cfg.neighbours}
        # issue 6: with a `resources:` section the node manages buffers, streams and recipient space
        self.res: ResourceManager | None = ResourceManager(cfg, self._wake_peer) if cfg.resources.enabled else None
        self.queues: dict[str, Scheduler | TransferQueue] = {n: self._make_queue(n) for n in cfg.neighbours}
        self.deferred = 0          # refused pieces waiting for their retry timer (legacy queue only)
        self.partial: dict[tuple[str, str], Pending] = {}
        self.held: dict[tuple[str, str], Pending] = {}
        self.orphans: dict[tuple[str, str, int], Piece] = {}
        self.delivered = 0
        self.submitted = 0
        self.refused_submissions = 0
        self.expired = 0
        self.reports = 0
        self._bg: set[asyncio.Task] = set()

    def _make_queue(self, peer: str) -> Scheduler | TransferQueue:
        if self.res is None:
            return Scheduler()
        res = self.res
        return TransferQueue(self.wake[peer].set, fifo_per_destination=self.mode == "non-fragmenting",
                             is_stream=res.is_stream,
                             gate=lambda p: res.gate(p) if p.dst == peer else 0.0)   # next-to-last MTA: RBSAD

    def _wake_peer(self, peer: str) -> None:
        ev = self.wake.get(peer)
        if ev is not None:
            ev.set()

    # -- the mode-specific part ------------------------------------------
    def transit_state(self) -> str:
        raise NotImplementedError

    def fragments_for(self, size: int) -> int:
        raise NotImplementedError

    # -- start-up ------------------------------------------------------------
    async def recover(self) -> None:
        """Re-queue everything unacknowledged after a crash or restart."""
        dropped = await self.spool.run(Spool.op_drop_unaccepted(self.me))
        if dropped:
            log.warning("%s: dropped %d stored pieces of submissions a crash interrupted before they were "
                        "accepted (the submitter was not told they were accepted)", self.me, dropped)
        pieces = await self.spool.run(Spool.op_load_pieces())
        for p in pieces:
            if self.res is not None and p.state in ("queued", "held", "part"):
                self.res.recover(p)
            if p.state == "queued":
                self._enqueue(p)
            elif p.state == "held":
                self._collect(self.held, p)
            elif p.state == "part":
                self._collect(self.partial, p)
            elif p.state == "orphan":
                self.orphans[p.key] = p
        for mkey, pend in list(self.held.items()):
            if pend.got >= pend.total:
                await self._release_held(mkey)
        for mkey, pend in list(self.partial.items()):
            if pend.got >= pend.total:
                await self._deliver(mkey)
        log.info("recovered %d pieces (%d queued, %d partial messages, %d held, %d orphans)", len(pieces),
                 sum(len(q) for q in self.queues.values()), len(self.partial), len(self.held), len(self.orphans))

    # -- submission --------------------------------------------------------------
    def check_submission(self, recipients: list[tuple[str, str]], size: int, priority: int,
                         lifetime: float) -> str | None:
        lim = self.cfg.limits
        if not recipients:
            return "no recipients"
        if len(recipients) > lim.max_recipients:
            return f"{len(recipients)} recipients exceed the limit of {lim.max_recipients}"
        if size < 0 or size > lim.max_message_size:
            return f"message size {size} exceeds the limit of {lim.max_message_size} bytes"
        if priority < 0 or priority > lim.max_priority:
            return f"priority {priority} outside 0..{lim.max_priority}"
        if not (0 <= lifetime <= MAX_LIFETIME) or math.isnan(lifetime):
            return f"lifetime {lifetime} is not between 0 and {MAX_LIFETIME:.0f} seconds"
        for node, user in recipients:
            if not is_node_name(node):
                return f"invalid recipient node {node!r}"
            if user and not is_user_name(user):
                return f"invalid recipient user {user!r}"
            if node == self.me:
                if self.cfg.local_users and user not in self.cfg.local_users:
                    return f"unknown recipient {user}@{node}"
            elif self.router.next_hop(node) is None:
                return f"no route to {node}"
        return None

    async def submit(self, originator: str, recipients: list[tuple[str, str]], payload: bytes | None,
                     size: int | None, priority: int = 1, lifetime: float = 0.0, kind: str = "",
                     msg_id: str | None = None) -> tuple[bool, str, str]:
        """Accept a message (durably) or refuse it with a reason; returns (accepted, msg_id, reason)."""
        # shielded: once the spool write is queued, the in-memory side must follow even if the caller
        # (an RPC, a session) is cancelled, or a durable message would sit unqueued until a restart
        return await asyncio.shield(self._submit(originator, recipients, payload, size, priority, lifetime,
                                                 kind, msg_id))

    async def _submit(self, originator: str, recipients: list[tuple[str, str]], payload: bytes | None,
                      size: int | None, priority: int, lifetime: float, kind: str,
                      msg_id: str | None) -> tuple[bool, str, str]:
        n = len(payload) if payload is not None else int(size or 0)
        reason = self.check_submission(recipients, n, priority, lifetime)
        dsts = sorted({node for node, _u in recipients})
        if reason:
            self.refused_submissions += 1
            self.records.write("submission", msg_id="", src=self.me, dst=dsts, size=n, accepted=False,
                               reason=reason, originator=originator)
            return False, "", reason
        msg_id = msg_id or f"{self.me}-{uuid.uuid4().hex[:16]}"
        if payload is None:
            seed = (msg_id + " ").encode()
            payload = (seed * (n // len(seed) + 1))[:n]
        now = time.time()
        expires = now + (lifetime or self.cfg.default_lifetime)
        prio = priority or 1
        frags = self.fragments_for(n)
        pieces: list[Piece] = []
        for dst in dsts:
            users = sorted({u for node, u in recipients if node == dst})
            state = "part" if dst == self.me else "queued"
            for off, ln in split(n, self.cfg.chunk_size):
                pieces.append(Piece(msg_id, dst, off, n, 0, self.me, originator, users, prio, now, expires,
                                    kind, frags, payload[off:off + ln], state))
        if self.res is not None:
            reason = self.res.admit_submission(pieces, frags, internal=kind == "ndr")
            if reason:
                self.refused_submissions += 1
                self.records.write("submission", msg_id="", src=self.me, dst=dsts if len(dsts) > 1 else dsts[0],
                                   size=n, accepted=False, reason=reason, originator=originator)
                return False, "", reason
        origin = Spool.op_origin(msg_id, originator, dsts, n, prio, now, expires)
        early = await self._store_early(pieces)
        if early:
            pieces = pieces[early:]
        insert = Spool.op_insert(pieces)

        def op(c) -> None:
            origin(c)
            insert(c)
        await self.spool.run(op)         # acknowledged only once durable
        self.submitted += 1
        self.records.write("submission", ts=now, msg_id=msg_id, src=self.me, dst=dsts if len(dsts) > 1 else dsts[0],
                           size=n, accepted=True, reason="", originator=originator, priority=prio,
                           fragments=frags, kind=kind)
        for p in pieces:
            if p.state == "part":
                self._collect(self.partial, p)
            else:
                self._enqueue(p)
        for dst in dsts:
            if dst == self.me:
                self._spawn(self._deliver((msg_id, dst)))
        return True, msg_id, ""

    async def _store_early(self, pieces: list[Piece]) -> int:
        """Pipelining from the originator (fragmenting mode, large messages): store all but the last chunk of
        the queued pieces chunk by chunk and queue each chunk for its next hop once it is durable. Returns how
        many leading pieces were handled. The message is accepted (origin row, reply) only with the last chunk;
        recover() drops the pieces of a submission that a crash cut short, before anything is sent again."""
        if self.mode != "fragmenting":
            return 0      # non-fragmenting: the whole message is stored before it moves, here as at every hop
        early = 0
        while early < len(pieces) and pieces[early].state == "queued":
            early += 1
        if early <= SUBMIT_EARLY_MIN:
            return 0
        early -= SUBMIT_CHUNK      # the last chunk goes with the origin row
        for i in range(0, early, SUBMIT_CHUNK):
            chunk = pieces[i:min(i + SUBMIT_CHUNK, early)]
            await self.spool.run(Spool.op_insert(chunk))
            for p in chunk:
                self._enqueue(p)
        return early

    # -- arrivals from neighbours ------------------------------------------------
    async def receive(self, peer: str, pieces: list[Piece]) -> list[str | tuple[str, float] | None]:
        """Store pieces from `peer` durably; per piece None (ack it), the reason to refuse it, or
        (reason, retry_after) to refuse it for now (no buffer yet: the sender keeps it and retries)."""
        return await asyncio.shield(self._receive(peer, pieces))   # see submit: never half-done

    async def _receive(self, peer: str, pieces: list[Piece]) -> list[str | tuple[str, float] | None]:
        st = self.stats[peer]
        result: list[str | tuple[str, float] | None] = [None] * len(pieces)
        keep: list[Piece] = []
        res, admit, me = self.res, self.admission.admit, self.me
        transit = self.transit_state()
        routed: dict[str, bool] = {}         # per destination, once per batch: a batch is mostly one message
        for i, p in enumerate(pieces):
            if res is not None:
                verdict = res.admit(peer, p)
                if verdict is not None:
                    result[i] = verdict if verdict[1] > 0 else verdict[0]
                    st.deferred_in += verdict[1] > 0
                    continue
            reason = admit(p, p.hops)
            if reason:
                result[i] = reason
                continue
            dst = p.dst
            if dst == me:
                p.state = "whole" if p.off == 0 and len(p.data) == p.total else "part"
            else:
                ok = routed.get(dst)
                if ok is None:
                    ok = routed[dst] = self.router.next_hop(dst) is not None
                p.state = transit if ok else "orphan"
            keep.append(p)
        st.refused_in += sum(1 for r in result if isinstance(r, str))     # not the "not now" ones
        if not keep:
            return result
        deliver_ts = time.time()
        fresh = await self.spool.run(Spool.op_receive(keep, deliver_ts))
        now = time.monotonic()
        st.frags_in += len(keep)
        st.bytes_in += sum(len(p.data) for p in keep)
        for p, new in zip(keep, fresh):
            if res is not None:
                res.stored(peer, p, bool(new))
            if not new:
                st.duplicates_in += 1
                continue
            if p.state == "whole":
                self._delivered(p, p.total, deliver_ts)
            elif p.state == "part":
                pend = self._collect(self.partial, p)
                pend.last = now
                if pend.got >= pend.total:
                    self._spawn(self._deliver(p.mkey))
            elif p.state == "held":
                pend = self._collect(self.held, p)
                if pend.got >= pend.total:
                    self._spawn(self._release_held(p.mkey))
            elif p.state == "orphan":
                if self.res is not None:
                    self.res.dropped(p)       # an orphan waits for a route, not for a buffer
                self.orphans[p.key] = p
                self._spawn(self._report(p, f"no route from {self.me} to {p.dst}", event="orphan"))
            else:
                self._enqueue(p)
        return result

    def _collect(self, table: dict[tuple[str, str], Pending], p: Piece) -> Pending:
        pend = table.get(p.mkey)
        if pend is None:
            pend = table[p.mkey] = Pending(total=p.total, meta=p)
        pend.got += len(p.data)
        if table is self.held:
            pend.pieces.append(p)
        if p.hops > pend.meta.hops:
            pend.meta = p
        return pend

    async def _release_held(self, mkey: tuple[str, str]) -> None:
        pend = self.held.get(mkey)
        if pend is None:
            return
        await self.spool.run(Spool.op_set_state(mkey[0], mkey[1], "queued"))
        if self.held.pop(mkey, None) is None:
            return
        for p in sorted(pend.pieces, key=lambda x: x.off):
            p.state = "queued"
            self._enqueue(p)

    async def _deliver(self, mkey: tuple[str, str]) -> None:
        pend = self.partial.get(mkey)
        if pend is None or pend.meta is None:
            return
        m = pend.meta
        now = time.time()
        meta = {"src": m.src, "fragments": m.fragments, "hops": m.hops, "submit_ts": m.submit_ts, "kind": m.kind}
        size = await self.spool.run(Spool.op_deliver(mkey[0], mkey[1], m.users, meta, now))
        self.partial.pop(mkey, None)
        if size is not None:
            self._delivered(m, size, now)

    def _delivered(self, m: Piece, size: int, now: float) -> None:
        if m.kind == "ndr":
            self.records.write("report", ts=now, event="ndr_delivered", msg_id=m.msg_id, dst=m.dst,
                               reason="non-delivery report reached the originator", src=m.src)
            return
        self.delivered += 1
        self.records.write("delivery", ts=now, msg_id=m.msg_id, src=m.src, dst=self.me, size=size,
                           fragments=m.fragments, mode=self.mode, submit_ts=m.submit_ts, deliver_ts=now,
                           hops=m.hops, users=m.users, priority=m.prio, delay=now - m.submit_ts)

    def _enqueue(self, p: Piece) -> None:
        hop = self.router.next_hop(p.dst)
        if hop is None:
            p.state = "orphan"
            self.orphans[p.key] = p
            self._spawn(self.spool.run(Spool.op_set_state(p.msg_id, p.dst, "orphan", p.off)))
            self._spawn(self._report(p, f"no route from {self.me} to {p.dst}", event="orphan"))
            return
        self.queues[hop].push(p)
        self.wake[hop].set()

    # -- the link side -------------------------------------------------------------
    def take(self, peer: str, max_frames: int, max_bytes: int) -> list[Piece]:
        """Up to max_frames pieces (about max_bytes) for `peer`; expired ones become reports instead."""
        q = self.queues[peer]
        out: list[Piece] = []
        nbytes = 0
        now = time.time()
        while len(out) < max_frames and nbytes < max_bytes:
            p = q.pop()
            if p is None:
                break
            if p.expires_ts and p.expires_ts < now:
                if self.res is not None:
                    self.res.dropped(p)
                self._spawn(self._expire(p))
                continue
            out.append(p)
            nbytes += len(p.data)
        return out

    def acked(self, peer: str, pieces: list[Piece]) -> None:
        """The next hop stored these durably: drop our copies."""
        if not pieces:
            return
        st = self.stats[peer]
        for p in pieces:
            st.frags_out += 1
            st.bytes_out += len(p.data)
            self.admission.release(p)
            if self.res is not None:
                self.res.forwarded(p)
        self._spawn(self.spool.run(Spool.op_delete_pieces(pieces)))

    def refused(self, peer: str, p: Piece, reason: str, retry_after: float = 0.0) -> None:
        """The next hop will not take this piece: for now (retry_after > 0: offer it again later), or ever
        (keep it as an orphan and report)."""
        if retry_after > 0:
            self.stats[peer].deferred_out += 1
            p.retries += 1
            delay = min(RETRY_CAP, retry_after * 2 ** min(p.retries - 1, 10))
            q = self.queues[peer]
            if isinstance(q, TransferQueue):
                if self.res is not None and self.res.is_stream(p) and not reason.startswith("stream_full"):
                    q.credit(p.mkey, 1)          # the refused fragment did not use its slot (an over-credit did)
                p.not_before = time.monotonic() + delay
                q.push(p, front=True)
            else:
                self.deferred += 1
                asyncio.get_running_loop().call_later(delay, self._retry, peer, p)
            return
        if self.res is not None:
            self.res.dropped(p)
        self.stats[peer].refused_out += 1
        log.warning("%s refused %s/%s@%d: %s", peer, p.msg_id, p.dst, p.off, reason)
        p.state = "orphan"
        self.orphans[p.key] = p
        self._spawn(self.spool.run(Spool.op_set_state(p.msg_id, p.dst, "orphan", p.off)))
        self._spawn(self._report(p, f"{peer} refused it: {reason}", event="orphan"))

    def _retry(self, peer: str, p: Piece) -> None:
        self.deferred -= 1
        self.queues[peer].push(p, front=True)
        self.wake[peer].set()

    def requeue(self, peer: str, pieces: list[Piece]) -> None:
        """A session ended with these unacknowledged: send them again first."""
        q = self.queues[peer]
        for p in reversed(pieces):
            if isinstance(q, TransferQueue) and self.res is not None and self.res.is_stream(p):
                q.credit(p.mkey, 1)       # its credit was spent on a send that may never have arrived
            q.push(p, front=True)
        self.stats[peer].retransmissions += len(pieces)
        if pieces:
            self.wake[peer].set()

    # -- message-stream credits (issue 6) ------------------------------------------------------
    def credit_frames(self, peer: str) -> list[link_pb2.Frame]:
        """Credits this node owes `peer` for its streams, as frames for the next batch."""
        if self.res is None:
            return []
        out = [link_pb2.Frame(credit=link_pb2.Credit(msg_id=m, dst=d, credits=n))
               for (m, d), n in self.res.take_credits(peer)]
        self.stats[peer].credits_out += len(out)
        return out

    def has_credits(self, peer: str) -> bool:
        return self.res is not None and bool(self.res.out_credits.get(peer))

    def credited(self, peer: str, msg_id: str, dst: str, n: int) -> None:
        q = self.queues.get(peer)
        if isinstance(q, TransferQueue) and not msg_id:
            q.retry_now()                 # ROOM: the peer freed space, offer what it refused again now
            return
        if isinstance(q, TransferQueue) and n > 0:
            self.stats[peer].credits_in += 1
            q.credit((msg_id, dst), min(n, 1 << 16))

    def session_up(self, peer: str) -> None:
        if self.res is not None:
            self.res.session_up(peer)
        q = self.queues.get(peer)
        if isinstance(q, TransferQueue):
            q.session_up()

    def mail_removed(self, msg_ids: list[str]) -> None:
        """Messages were deleted from a mailbox: their recipient space is free again."""
        if self.res is not None:
            for m in msg_ids:
                self.res.release_mail(m)

    def set_routes(self, routes: dict[str, str]) -> int:
        self.router.set_routes(routes)
        # orphans that now have a route get another chance
        for key, p in list(self.orphans.items()):
            if p.dst != self.me and self.router.next_hop(p.dst) is not None:
                del self.orphans[key]
                p.state = "queued"
                self._spawn(self.spool.run(Spool.op_set_state(p.msg_id, p.dst, "queued", p.off)))
                self._enqueue(p)
        return len(routes)

    # -- expiry, reassembly timeouts, reports -----------------------------------------
    async def _expire(self, p: Piece) -> None:
        self.expired += 1
        await self.spool.run(Spool.op_drop(p.msg_id, p.dst))
        for q in self.queues.values():
            for x in q.remove_if(lambda x: x.mkey == p.mkey):
                if self.res is not None:
                    self.res.dropped(x)
        await self._report(p, f"lifetime expired at {self.me}")

    async def sweep(self) -> None:
        """Periodic: expire queued/held/partial copies, abort stalled reassemblies, prune the seen table."""
        now = time.time()
        mono = time.monotonic()
        if self.res is not None:
            self.res.sweep(idle=max(self.cfg.reassembly_timeout, self.cfg.resources.reservation_timeout),
                           stream_idle=max(5.0, 2 * self.cfg.session.hold_time))
            for q in self.queues.values():
                if isinstance(q, TransferQueue):
                    q.probe(after=max(2.0, 2 * self.cfg.session.hold_time))   # only for a credit that got lost
                    q.prune(idle=120.0)
        for q in self.queues.values():
            expired = q.remove_if(lambda p: bool(p.expires_ts) and p.expires_ts < now)
            seen: set = set()
            for p in expired:
                if self.res is not None:
                    self.res.dropped(p)
                if p.mkey not in seen:
                    seen.add(p.mkey)
                    await self._expire(p)
        for table, what in ((self.held, "transit"), (self.partial, "reassembly")):
            for mkey, pend in list(table.items()):
                m = pend.meta
                reason = None
                if m.expires_ts and m.expires_ts < now:
                    reason = f"lifetime expired at {self.me} during {what}"
                elif table is self.partial and mono - pend.last > self.cfg.reassembly_timeout:
                    reason = f"reassembly at {self.me} timed out after {self.cfg.reassembly_timeout:g} s without a fragment"
                if reason:
                    table.pop(mkey, None)
                    if self.res is not None:
                        for x in pend.pieces:
                            self.res.dropped(x)
                        if table is self.partial:
                            self.res.release_mail(mkey[0])
                    await self.spool.run(Spool.op_abort(mkey[0], mkey[1], "aborted"))
                    self.expired += 1
                    await self._report(m, reason)

    async def prune(self) -> None:
        await self.spool.run(Spool.op_prune_seen(time.time() - 60.0))

    async def _report(self, p: Piece, reason: str, event: str = "ndr_made") -> None:
        """Tell the originator (once per message copy per node); never report on a report."""
        self.records.write("report", event=event, msg_id=p.msg_id, dst=p.dst, reason=reason, src=p.src,
                           originator=p.originator)
        log.warning("message %s for %s not delivered: %s", p.msg_id, p.dst, reason)
        if p.kind == "ndr" or not p.src:
            return
        if not await self.spool.run(Spool.op_ndr_once(p.msg_id, p.dst)):
            return
        self.reports += 1
        body = json.dumps({"msg_id": p.msg_id, "dst": p.dst, "reason": reason, "at": self.me}).encode()
        ok, _mid, why = await self.submit("mailer-daemon", [(p.src, p.originator)], body, None, priority=p.prio,
                                          lifetime=self.cfg.default_lifetime, kind="ndr",
                                          msg_id=f"ndr.{p.msg_id}.{p.dst}")
        if not ok:
            log.error("cannot send a non-delivery report for %s to %s: %s", p.msg_id, p.src, why)

    # -- metrics -----------------------------------------------------------------------
    def snapshot(self) -> dict:
        neighbours = {}
        spool_bytes = 0
        spool_frags = 0
        msgs: set = set()
        for n, q in self.queues.items():
            st = self.stats[n]
            neighbours[n] = {"queue_messages": q.messages, "queue_fragments": len(q), "queue_bytes": q.bytes,
                             "inflight": st.inflight, "frags_out": st.frags_out, "bytes_out": st.bytes_out,
                             "frags_in": st.frags_in, "bytes_in": st.bytes_in, "duplicates_in": st.duplicates_in,
                             "retransmissions": st.retransmissions, "reconnects": st.reconnects,
                             "refused_in": st.refused_in, "refused_out": st.refused_out, "up": st.up}
            if self.res is not None:
                neighbours[n].update(deferred_in=st.deferred_in, deferred_out=st.deferred_out,
                                     credits_in=st.credits_in, credits_out=st.credits_out)
                if isinstance(q, TransferQueue):
                    neighbours[n]["scheduler"] = q.snapshot()
            spool_bytes += q.bytes
            spool_frags += len(q) + st.inflight
            msgs.update(q._msgs)
        for table in (self.partial, self.held):
            spool_bytes += sum(p.got for p in table.values())
            msgs.update(table)
        return {"spool_messages": len(msgs), "spool_bytes": spool_bytes, "spool_fragments": spool_frags,
                "neighbours": neighbours, "delivered": self.delivered, "submitted": self.submitted,
                "refused_submissions": self.refused_submissions, "partial_messages": len(self.partial),
                "held_messages": len(self.held), "orphans": len(self.orphans), "expired": self.expired,
                "reports": self.reports, "mode": self.mode, "spool_commits": self.spool.commits,
                "spool_ops": self.spool.ops,
                **({"resources": self.res.snapshot()} if self.res is not None else {})}

    def outstanding(self) -> int:
        """Pieces this node still has to hand on (queued or in flight)."""
        return (sum(len(q) + self.stats[n].inflight for n, q in self.queues.items()) + len(self.held)
                + self.deferred)

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
        """Wait for background spool work (used at shutdown)."""
        while self._bg:
            await asyncio.gather(*list(self._bg), return_exceptions=True)


class FragmentingEngine(Engine):
    mode = "fragmenting"

    def transit_state(self) -> str:
        return "queued"          # forward each fragment as soon as it is stored

    def fragments_for(self, size: int) -> int:
        return max(1, math.ceil(size / self.cfg.fragment_size))


class NonFragmentingEngine(Engine):
    mode = "non-fragmenting"

    def transit_state(self) -> str:
        return "held"            # forward only once the whole message is stored here

    def fragments_for(self, size: int) -> int:
        return 1


def make_engine(cfg: NodeConfig, spool: Spool, records: Records, **kw) -> Engine:
    cls = FragmentingEngine if cfg.mode == "fragmenting" else NonFragmentingEngine
    return cls(cfg, spool, records, **kw)
