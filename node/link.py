"""Neighbour sessions: one long-lived bidirectional Link stream per adjacent pair.

Who dials: the node whose name sorts first dials, the other accepts — so each
pair has exactly one session and no tie-break is needed. The dialer sends OPEN
(its name, the name it believes it is calling, version, session id, hold time,
capabilities); the acceptor checks that the caller is a configured neighbour,
that the OPEN names this node, that the caller is the side that dials and that
it speaks the same major version of the base frames, and answers with its own
OPEN; the dialer checks that answer names the expected neighbour. Optional
features are capabilities: a session uses those both OPENs list ("runs", and
one per registered frame handler). A mismatch ends that one stream with a
clear gRPC status; other sessions go on.

Frame kinds beyond the base ones are dispatched to handlers that subsystems
register with `LinkManager.register` (probes, link-state adverts, interest,
rates); a subsystem sends its own frames with `Peer.send_control`. Every batch
carries control frames (acks, refusals, credits, subsystem frames) before data.

After OPEN both directions carry FrameBatch messages with many frames each:
fragments (each with a per-session sequence number; consecutive fragments of one
message go as one Run frame with the header once when the peer's OPEN says it
understands runs, still one sequence number and one ack per fragment), ACKs (sequence numbers
the receiver has stored DURABLY), REFUSEs and KEEPALIVEs. The sender keeps a
window of unacknowledged frames; when a session ends they go back to the front
of the queue and are sent again on the next session (the receiver drops the
duplicates by message id and byte range). Silence longer than the hold time
ends a session; the dialer reconnects with exponential backoff with jitter (node/backoff.py).
Before its first session it dials every backoff_min for a hold time: the neighbour is still starting.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
from typing import Any, Awaitable, Callable

import grpc
from google.protobuf.message import DecodeError

from node import credits
from node.backoff import Backoff
from node.codec import frames_from_pieces, piece_from_frame, pieces_from_run
from node.config import NodeConfig
from node.errors import clip
from node.mta import Engine
from node.peer import Peer
from node.rpc import link_pb2, link_pb2_grpc
from node.piece import Piece
from node.refusal import Refusal
from node.subsystem import LinkCredentials

log = logging.getLogger("node.link")

VERSION = 1            # major version of the base frames; optional features are capabilities
BASE_CAPABILITIES = ("runs",)
BASE_KINDS = ("open", "keepalive", "fragment", "run", "ack", "refuse", "credit", "extension")
_KIND = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
GRPC_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
# A dial gets a connection of its own: from gRPC's process-wide pool it could be handed one that is still
# waiting out gRPC's own reconnect backoff (1 s and more) after a refused dial, and fail again without trying
# while the neighbour already listens. The dialler below has its own backoff.
DIAL_OPTIONS = GRPC_OPTIONS + [("grpc.use_local_subchannel_pool", 1)]
STORE_PARALLEL = 4     # batches of a session being stored at once (bounds memory, keeps the spool busy)
REFUSE_MAX = 1 << 17   # refusals waiting to be sent on one session: a peer that floods bad frames is reset
STORE_FAILED = "store failed, try later"
STORE_RETRY = 1.0      # seconds a sender waits before offering frames a failed store refused


def _answers_max(cfg: NodeConfig) -> int:
    """Answers (acks, refusals) the writer has not taken yet above which the reader reads no more until it has:
    a neighbour that floods frames but never reads our answers is held back by HTTP/2 flow control and then
    reset, instead of growing our lists and gRPC's send buffer. A real neighbour never has more unanswered
    frames than its window (batch.window_frames), so it never waits here with the same config."""
    return max(4096, 2 * cfg.batch.window_frames)


# A subsystem's handler for one frame kind: called with the neighbour and the frame, on the session's reader.
FrameHandler = Callable[[Peer, link_pb2.Frame], None]


async def _wait(event: asyncio.Event, timeout: float) -> None:
    """Until `event` is set or `timeout` seconds passed, whichever is first (a timer, not wait_for's task)."""
    timer = asyncio.get_running_loop().call_later(timeout, event.set)
    try:
        await event.wait()
    finally:
        timer.cancel()


class SessionError(Exception):
    """The session set-up or the stream failed in a way worth one log line."""


def _open_batch(me: str, peer: str, session_id: int, hold: float, capabilities: list[str]) -> link_pb2.FrameBatch:
    return link_pb2.FrameBatch(frames=[link_pb2.Frame(open=link_pb2.Open(
        node=me, peer=peer, version=VERSION, session_id=session_id, hold_time=hold, capabilities=capabilities))])


class LinkSession:
    """One live stream with one neighbour: a reader, a writer, the window of unacknowledged frames."""

    def __init__(self, peer: Peer, engine: Engine, cfg: NodeConfig,
                 write: Callable[[Any], Awaitable[None]], read: Callable[[], Awaitable[Any]],
                 abort: Callable[[], Any] | None = None, capabilities: frozenset[str] = frozenset(),
                 handlers: dict[str, FrameHandler] | None = None) -> None:
        self.peer = peer
        self.capabilities = capabilities     # what both ends' OPENs list
        self.runs = "runs" in capabilities
        self.handlers = handlers or {}
        self._abort = abort            # ends the gRPC call, so no read or write can stay blocked on a dead peer
        self.engine = engine
        self.cfg = cfg
        self._write = write
        self._read = read
        self.inflight: dict[int, Piece] = {}
        self.seq = 0
        self.ack_seqs: list[int] = []
        self.refuses: list[link_pb2.Refuse] = []
        self._reading_since: float | None = None   # loop time the reader began waiting for the next batch
        self._stores: set[asyncio.Task] = set()
        self._answered = asyncio.Event()      # set when the writer takes the pending acks and refusals
        self._task: asyncio.Task | None = None
        self._ended = False            # set once, in run()'s cleanup: from then on nothing is taken from the queue
        self.acked_bytes = 0
        self._rate = 0.0                      # acked bytes per second, smoothed
        self._rate_mark = (0.0, 0)            # (time, acked_bytes) of the last rate sample

    def batch_limit(self) -> int:
        """Bytes for the next gRPC message: about target_delay seconds of the link's acked rate."""
        b = self.cfg.batch
        now = asyncio.get_running_loop().time()
        t0, n0 = self._rate_mark
        if now - t0 >= 0.1:
            if self.acked_bytes > n0 and t0 > 0:   # only sample while data flows, so idle time does not count
                sample = (self.acked_bytes - n0) / (now - t0)
                self._rate = sample if self._rate == 0 else 0.5 * self._rate + 0.5 * sample
            self._rate_mark = (now, self.acked_bytes)
        return int(min(b.max_bytes, max(b.min_bytes, self._rate * b.target_delay)))

    async def run(self) -> None:
        peer, st = self.peer, self.peer.stats
        peer.session = self
        peer.capabilities = self.capabilities
        st.up = True
        try:
            self.engine.session_up(peer.name)
        except BaseException:
            # a subsystem failed at session-up: this session never ran, the neighbour is not up
            peer.session, peer.capabilities, st.up = None, frozenset(), False
            with contextlib.suppress(Exception):
                self.engine.session_down(peer.name)
            raise
        self._task = asyncio.current_task()
        reader = asyncio.ensure_future(self._reader())
        writer = asyncio.ensure_future(self._writer())
        hold = asyncio.ensure_future(self._hold())
        try:
            done, _pending = await asyncio.wait({reader, writer, hold}, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if not t.cancelled() and t.exception() is not None:
                    raise t.exception()
        finally:
            if self._abort is not None:
                self._abort()
            for t in (reader, writer, hold, *self._stores):
                t.cancel()
            # Hand the unacknowledged pieces back BEFORE the first await: this finally may itself be
            # cancelled (a new session replacing this one), and pieces left in `inflight` would sit in the
            # spool outside every queue until a restart. The cancelled reader processes no more acks.
            # The writer may outlive its cancellation (grpc.aio can finish a write it was cancelled in):
            # `_ended` stops it from taking pieces that nothing would ever requeue.
            self._ended = True
            pieces = [self.inflight[s] for s in sorted(self.inflight)]
            self.inflight.clear()
            down = peer.session is self
            if down:
                st.up = False
                st.inflight = 0
                peer.session = None
                peer.capabilities = frozenset()
            self.engine.requeue(peer.name, pieces)
            if down:
                self.engine.session_down(peer.name)      # after the requeue: a re-route moves those too
            # never wait forever on a task stuck in a gRPC call (flow control towards a dead peer)
            await asyncio.wait({reader, writer, *self._stores}, timeout=2.0)

    def close(self) -> None:
        """End this session for good (shutdown, or replaced by a newer one); on the dialling side this also
        ends the dialling."""
        if self._task is not None:
            self._task.cancel()

    def hang_up(self) -> None:
        """End the stream but not the dialling: the dialler comes back with a new session after its backoff."""
        if self._abort is not None:
            self._abort()
        else:
            self.close()

    def control_frames(self) -> list[link_pb2.Frame]:
        """Everything for the next batch that is not data: acks, refusals, credits, subsystem frames."""
        frames: list[link_pb2.Frame] = []
        if self.ack_seqs:
            frames.append(link_pb2.Frame(ack=link_pb2.Ack(seqs=self.ack_seqs)))
            self.ack_seqs = []
        frames.extend(link_pb2.Frame(refuse=r) for r in self.refuses)
        self.refuses = []
        self._answered.set()
        frames.extend(credits.frames(self.engine.policy, self.peer))
        frames.extend(self.peer.take_control())
        return frames

    async def _writer(self) -> None:
        b = self.cfg.batch
        peer = self.peer
        wake, st = peer.wake, peer.stats
        loop = asyncio.get_running_loop()
        keepalive = self.cfg.session.keepalive
        last_write = loop.time()
        while not self._ended:
            frames = self.control_frames()       # control before data, in every batch
            room = b.window_frames - len(self.inflight)
            if room > 0:
                pieces = await self.engine.take_loaded(peer.name, min(room, b.max_frames), self.batch_limit())
                if pieces:
                    first = self.seq + 1
                    self.inflight.update(zip(range(first, first + len(pieces)), pieces))
                    self.seq += len(pieces)
                    frames.extend(frames_from_pieces(pieces, first, self.runs))
            if frames:
                st.inflight = len(self.inflight)
                await self._write(link_pb2.FrameBatch(frames=frames))
                last_write = loop.time()
                continue
            wake.clear()
            if (self.ack_seqs or self.refuses or peer.outbox or self.engine.policy.has_credits(peer.name)
                    or (room > 0 and peer.queue.has_ready())):
                continue
            # The keepalive is due `keepalive` seconds after the last write, however often the writer is woken
            # with nothing to send (every batch the reader takes wakes it): a peer that only RECEIVES frames
            # that need no answer (publications, adverts) would otherwise never hear from us and time us out.
            left = keepalive - (loop.time() - last_write)
            if left > 0:
                await _wait(wake, left)
                continue
            await self._write(link_pb2.FrameBatch(frames=[link_pb2.Frame(keepalive=link_pb2.Keepalive(
                ts=loop.time()))]))
            last_write = loop.time()

    async def _reader(self) -> None:
        sem = asyncio.Semaphore(STORE_PARALLEL)
        peer = self.peer
        name, wake, st = peer.name, peer.wake, peer.stats
        accept = self.engine.hooks.accept         # subsystems' message kinds a neighbour may pass on
        loop = asyncio.get_running_loop()
        while True:
            # awaited directly (no task and wait per read: they cost more CPU than the frames); `_hold` ends the
            # session when this read waits longer than the hold time
            self._reading_since = loop.time()
            try:
                batch = await self._read()
            except DecodeError:
                raise SessionError(f"{name} sent a message that is not a Link frame batch") from None
            finally:
                self._reading_since = None
            if batch is grpc.aio.EOF:
                raise SessionError(f"{name} closed the session")
            frags: list[tuple[int, Piece]] = []
            refused: list[tuple[int, str]] = []
            for fr in batch.frames:
                kind = fr.WhichOneof("kind")
                if kind == "fragment":
                    p = piece_from_frame(fr.fragment, self.cfg, accept)
                    if isinstance(p, Refusal):
                        refused.append((fr.fragment.seq, p.reason))
                    else:
                        frags.append((fr.fragment.seq, p))
                elif kind == "run":
                    for seq, p in pieces_from_run(fr.run, self.cfg, accept):
                        if isinstance(p, Refusal):
                            refused.append((seq, p.reason))
                        else:
                            frags.append((seq, p))
                elif kind == "ack":
                    acked = [self.inflight.pop(s) for s in fr.ack.seqs if s in self.inflight]
                    self.acked_bytes += sum(len(p.data) for p in acked)
                    self.engine.acked(name, acked)
                elif kind == "refuse":
                    p = self.inflight.pop(fr.refuse.seq, None)
                    if p is not None:
                        self.engine.refused(name, p, fr.refuse.reason, fr.refuse.retry_after)
                elif kind == "credit":
                    credits.received(peer, fr.credit)
                elif kind == "keepalive":
                    pass
                elif kind == "open":
                    raise SessionError(f"{name} sent a second OPEN on an open session")
                elif kind in self.handlers:
                    self.handlers[kind](peer, fr)
                elif kind == "extension" and fr.extension.kind in self.handlers:
                    self.handlers[fr.extension.kind](peer, fr)
                else:
                    log.warning("ignoring a frame of kind %s from %s (no handler)", kind or "(empty)", name)
            if refused:        # one log line per batch, however many frames it refuses
                log.warning("refusing %d frame(s) from %s: %s", len(refused), name, refused[0][1])
                if len(self.refuses) + len(refused) > REFUSE_MAX:
                    raise SessionError(f"{name} sent more bad frames than can be answered ({REFUSE_MAX})")
                self.refuses.extend(link_pb2.Refuse(seq=seq, reason=r) for seq, r in refused)
                st.refused_in += len(refused)
            st.inflight = len(self.inflight)
            if frags:
                await sem.acquire()
                t = asyncio.ensure_future(self._store(frags, sem))
                self._stores.add(t)
                t.add_done_callback(self._stores.discard)
            wake.set()
            if len(self.refuses) + len(self.ack_seqs) >= _answers_max(self.cfg):
                await self._until_answered()

    async def _hold(self) -> None:
        """Raise SessionError once the reader has waited the hold time for a batch (silence, or a dead peer);
        time the reader spends on what it read (a slow store) does not count."""
        hold = self.cfg.session.hold_time
        loop = asyncio.get_running_loop()
        while True:
            since = self._reading_since
            left = hold if since is None else since + hold - loop.time()
            if left <= 0:
                raise SessionError(f"no frame from {self.peer.name} for {hold:g} s (hold time)")
            await asyncio.sleep(left)

    async def _until_answered(self) -> None:
        """Read nothing more until the writer has taken the pending answers; end the session if it cannot
        within the hold time (its writes are blocked: the neighbour does not read what we send)."""
        self._answered.clear()
        self.peer.wake.set()
        hold = self.cfg.session.hold_time
        try:
            await asyncio.wait_for(self._answered.wait(), hold)
        except asyncio.TimeoutError:
            raise SessionError(f"{self.peer.name} does not read this node's answers ({len(self.refuses)} refusals "
                               f"and {len(self.ack_seqs)} acks waiting for {hold:g} s)") from None

    async def _store(self, frags: list[tuple[int, Piece]], sem: asyncio.Semaphore) -> None:
        try:
            try:
                results = await self.engine.receive(self.peer.name, [p for _s, p in frags])
            except Exception as exc:      # the spool failed (disk full, I/O error): nothing of it was acked
                log.error("cannot store %d frames from %s now (%s): refused for now, the sender offers them "
                          "again", len(frags), self.peer.name, exc)
                results = [Refusal(STORE_FAILED, STORE_RETRY)] * len(frags)
            for (seq, _p), reason in zip(frags, results):
                if reason is None:
                    self.ack_seqs.append(seq)
                elif reason.for_now:      # not now: the sender keeps it and offers it again
                    self.refuses.append(link_pb2.Refuse(seq=seq, reason=reason.reason, retry_after=reason.retry_after))
                else:
                    self.refuses.append(link_pb2.Refuse(seq=seq, reason=reason.reason))
            self.peer.wake.set()
        finally:
            sem.release()


class LinkManager:
    """Dials the neighbours this node is responsible for and accepts the others."""

    def __init__(self, cfg: NodeConfig, engine: Engine, credentials: LinkCredentials | None = None) -> None:
        self.cfg = cfg
        self.engine = engine
        self.tls = credentials         # None: plaintext sessions, the OPEN's names are taken on trust
        self.sessions: dict[str, LinkSession] = {}
        self.handlers: dict[str, FrameHandler] = {}
        self._dialers: list[asyncio.Task] = []

    def register(self, kind: str, handler: FrameHandler) -> None:
        """Have frames of `kind` (a field name of Frame's oneof) handed to `handler`; announced in OPEN."""
        if kind not in link_pb2.Frame.DESCRIPTOR.fields_by_name:
            raise ValueError(f"Frame has no kind {kind!r}")
        if kind in self.handlers or kind in BASE_KINDS:
            raise ValueError(f"frame kind {kind!r} is handled already")
        self.handlers[kind] = handler

    def register_extension(self, kind: str, handler: FrameHandler) -> None:
        """Have Extension frames of `kind` (a subsystem without a proto message of its own) handed to
        `handler`; announced in OPEN like a frame kind, so it must not be a name of Frame's oneof."""
        if not _KIND.match(kind):
            raise ValueError(f"extension kind {kind!r} is not a lower-case name")
        if kind in self.handlers or kind in link_pb2.Frame.DESCRIPTOR.fields_by_name:
            raise ValueError(f"frame kind {kind!r} is handled already or is a kind of Frame")
        self.handlers[kind] = handler

    def capabilities(self) -> list[str]:
        return [*BASE_CAPABILITIES, *sorted(self.handlers)]

    def _session(self, name: str, write, read, abort, theirs) -> LinkSession:
        agreed = frozenset(self.capabilities()) & frozenset(theirs)
        return LinkSession(self.engine.peers[name], self.engine, self.cfg, write, read, abort, agreed, self.handlers)

    def dials(self, peer: str) -> bool:
        return self.cfg.name < peer

    def start(self) -> None:
        for peer in sorted(self.cfg.neighbours):
            if self.dials(peer):
                self._dialers.append(asyncio.ensure_future(self._dial_loop(peer)))

    async def stop(self) -> None:
        for t in self._dialers:
            t.cancel()
        for s in list(self.sessions.values()):
            s.close()
        await asyncio.gather(*self._dialers, return_exceptions=True)

    async def _dial_loop(self, peer: str) -> None:
        s = self.cfg.session
        backoff = Backoff(s.backoff_min, s.backoff_max)
        # Until the first session is up the neighbour is most likely still starting (a network's daemons start
        # together): for a hold time it is dialled again every backoff_min, so the session comes up right after
        # the neighbour listens instead of up to a doubled wait later. Then the doubling backoff takes over.
        starting = Backoff(s.backoff_min, s.backoff_min)
        began = asyncio.get_running_loop().time()
        addr = self.cfg.neighbours[peer]
        st = self.engine.peers[peer].stats
        first = True
        while True:
            if self.tls is not None:
                channel = self.tls.dial(addr, peer, DIAL_OPTIONS)
            else:
                channel = grpc.aio.insecure_channel(addr, options=DIAL_OPTIONS)
            established = False
            try:
                call = link_pb2_grpc.LinkStub(channel).Session()
                sid = secrets.randbits(63)
                await call.write(_open_batch(self.cfg.name, peer, sid, s.hold_time, self.capabilities()))
                reply = await asyncio.wait_for(call.read(), s.hold_time)
                if reply is grpc.aio.EOF or not reply.frames or reply.frames[0].WhichOneof("kind") != "open":
                    raise SessionError(f"{peer} at {addr} did not answer OPEN")
                o = reply.frames[0].open
                if o.node != peer or o.peer != self.cfg.name:
                    raise SessionError(f"the node at {addr} says it is {o.node!r} (talking to {o.peer!r}), "
                                       f"expected {peer!r}: refusing the session")
                established = True
                if not first:
                    st.reconnects += 1
                first = False
                backoff.reset()
                log.info("session with %s up (dialled %s)", peer, addr)
                session = self._session(peer, call.write, call.read, call.cancel, o.capabilities)
                self.sessions[peer] = session
                await session.run()
            except asyncio.CancelledError:
                await channel.close(grace=None)
                raise
            except grpc.aio.AioRpcError as exc:
                log.log(logging.INFO if not established else logging.WARNING,
                        "session with %s: %s %s", peer, exc.code().name, exc.details())
            except (SessionError, asyncio.TimeoutError, OSError) as exc:
                log.warning("session with %s: %s", peer, exc or type(exc).__name__)
            except asyncio.InvalidStateError:    # grpc.aio: a write raced with the peer ending the call
                log.warning("session with %s: the stream ended", peer)
            except Exception:   # whatever else breaks one session must not end the dialling for good
                log.exception("session with %s failed unexpectedly", peer)
            finally:
                if self.sessions.get(peer) is not None and established:
                    self.sessions.pop(peer, None)
            await channel.close(grace=None)
            early = first and asyncio.get_running_loop().time() - began < s.hold_time
            await asyncio.sleep(starting.wait() if early else backoff.wait())

    async def accept(self, context: grpc.aio.ServicerContext) -> None:
        """Server side of Session: check OPEN, answer it, run the session."""
        try:
            first = await asyncio.wait_for(context.read(), self.cfg.session.hold_time)
        except asyncio.TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no OPEN within the hold time")
            return
        except DecodeError:
            log.warning("refused a session from %s: its first message is not a Link frame batch", context.peer())
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message is not a Link frame batch")
            return
        if first is grpc.aio.EOF:
            return
        if not first.frames or first.frames[0].WhichOneof("kind") != "open":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first frame of a Link session must be OPEN")
        o = first.frames[0].open
        me = self.cfg.name
        if o.node not in self.cfg.neighbours:
            log.warning("refused a session from %s (%s): not a neighbour", clip(repr(o.node)), context.peer())
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, clip(f"{o.node!r} is not a neighbour of {me}"))
        if o.peer != me:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, clip(f"this is node {me!r}, not {o.peer!r}"))
        if not o.node < me:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"{me} dials {o.node} (the name that sorts first dials), not the other way round")
        if o.version != VERSION:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"Link version {o.version} unsupported (want {VERSION})")
        if self.tls is not None:
            # The handshake proved the caller holds a certificate of the run's CA; it must also be THIS
            # neighbour's, or any node could pose as another (and evict its live session below).
            names = self.tls.names(context)
            if o.node not in names:
                log.warning("refused a session from %s claiming to be %s: its certificate names %s", context.peer(),
                            clip(repr(o.node)), ", ".join(sorted(names)) or "nobody")
                await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                    clip(f"the certificate does not name {o.node!r}"))
        await context.write(_open_batch(me, o.node, o.session_id, self.cfg.session.hold_time, self.capabilities()))
        st = self.engine.peers[o.node].stats
        old = self.sessions.get(o.node)
        if old is not None:
            log.info("a new session from %s replaces the old one", o.node)
            old.close()
            st.reconnects += 1
        elif st.frags_in or st.frags_out:
            st.reconnects += 1
        session = self._session(o.node, context.write, context.read, None, o.capabilities)
        self.sessions[o.node] = session
        log.info("session with %s up (accepted)", o.node)
        try:
            await session.run()
        except (SessionError, asyncio.CancelledError) as exc:
            log.info("session with %s ended: %s", o.node, exc or "replaced")
        except Exception as exc:  # a broken stream: log and end this one only
            log.warning("session with %s failed: %r", o.node, exc)
        finally:
            if self.sessions.get(o.node) is session:
                del self.sessions[o.node]


class LinkService(link_pb2_grpc.LinkServicer):
    def __init__(self, manager: LinkManager) -> None:
        self.manager = manager

    async def Session(self, request_iterator, context):  # noqa: N802 (gRPC name)
        await self.manager.accept(context)
