"""The broker: publications travel from broker to broker towards the nodes that want them.

Interest (node/broker/interest.py) tells every node which nodes subscribe to
which patterns. A publisher's node finds the subscriptions that match the
topic; their nodes are the publication's *targets*. It groups the targets by
its next hop towards each (the node's routes: node/routing/) and sends one
copy per next hop, carrying the targets that lie beyond it; the next broker
delivers to its own subscribers when it is a target and groups the rest by
its own next hops. So a publication crosses each link once until the paths
split, whatever the topology, and stops where nobody wants it.

Two paths, chosen per target by the publisher:
- durable: a target with a durable subscription. The copy is an ordinary
  message of kind "pub" addressed to the next broker, so the engine stores it,
  fragments it, keeps it until the next hop acknowledged it and retries it
  across link cuts and restarts. The next broker, in the transaction that
  stores the copy (its message kind's receive hook, `received`), queues it for
  its local durable subscriptions, stores the copies for its next hops and
  remembers the (publication, target) pairs: one commit per hop (a copy in
  several pieces: in the transaction of the batch that completes it, which
  also reassembles it). A copy that hook leaves alone (a duplicate target,
  not storable now, pieces the engine reassembles itself) goes the longer way: from the spool's inbox (`delivered`), in a second
  transaction that also takes it out of the inbox.
- live: a target with non-durable subscriptions only. The copy is a Link frame
  (`publication`), never stored: at most once, like NATS core.

Duplicates and loops: a node remembers every (publication, target) pair it
handled for the publication's lifetime (durable: in the spool; live: a
bounded memory) and a target it handled already is dropped from a later copy,
unless that copy came back round a routing loop (more broker hops than
before), which must go on; a publication passes at most `max_hops` brokers.

Topic transforms (`Broker.transform`): the one seam through which another subsystem makes more of what is
published here. A transform registered for a topic prefix sees each publication published at this node on a
topic with that prefix before it is stored and may add publications of its own (a topic and key each, the rest
the original's) and a spool change of its own; the original, the added ones and that change are stored in ONE
transaction (the engine's `originate_together`), so all of it is durable or none of it (node/pools/sender.py
turns an event into one publication per application that wants it, with its sequence numbers).
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import AsyncContextManager, Protocol

from google.protobuf.message import DecodeError

from node.broker import store
from node.broker.kinds import PUB_KIND, PUB_PREFIX
from node.broker.interest import CAPABILITY as INTEREST, MAX_SUBSCRIPTIONS, InterestTable, Sub
from node.broker.subscriptions import DurableSubscription, LiveSubscription, Stream, delivery
from node.broker.topics import is_control, matches, pattern_problem, topic_problem
from node.config import NodeConfig
from node.hooks import Received
from node.mta import Engine
from node.names import is_message_id, is_node_name, is_user_name
from node.peer import Peer
from node.records import Records
from node.origination import NewMessage
from node.routing import CopyHeader
from node.rpc import link_pb2, pubsub_pb2
from node.piece import Piece
from node.spool import Op, Spool

log = logging.getLogger("node.broker")

LIVE = "publication"             # the Link frame kind of the live path (announced in OPEN)
KEY_MAX = 256
BATCH = 256                      # inbox copies handled per round
RETRY = 1.0                      # seconds before a copy this node could not store now is tried again
EXPIRY_EVERY = 5.0               # seconds between sweeps of expired queue rows and memory


class BrokerError(Exception):
    """A client request the broker refuses: `code` is the gRPC status name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class TransformRefused(Exception):
    """Raised by a transform's own spool change (`Derived.also`) inside the transaction: the publication is
    refused with this reason and nothing of it is stored."""


@dataclass
class Derived:
    """What a topic transform adds to one publication published here: `publications` (topic, key) are stored
    with it (the payload, priority, lifetime and publisher are the original's) and `also` in the same
    transaction. The broker fills `pub_ids` (theirs, in order) and sets `stored` once that is durable."""
    publications: list[tuple[str, str]] = field(default_factory=list)
    also: Op | None = None
    pub_ids: list[str] = field(default_factory=list)
    stored: bool = False


class TopicTransform(Protocol):
    def derive(self, pub: link_pb2.Publication) -> AsyncContextManager[Derived | str | None]:
        """Held while the broker stores `pub`: what to add (a Derived), a reason to refuse it (str), or None for
        nothing; on leaving, `stored` says whether it was stored."""
        ...


@dataclass
class _Handling:
    """One publication to store here: its broker hops and the targets this node is responsible for."""
    pub: link_pb2.Publication
    hops: int
    targets: set[str]
    route: dict[str, str | None]
    live: set[str] = field(default_factory=set)


@dataclass
class Counters:
    published: int = 0
    refused: int = 0
    copies_in: int = 0             # durable copies taken from the inbox
    copies_out: int = 0            # durable copies stored for a next hop
    copies_out_bytes: int = 0      # their bytes: publication, header and targets (what the links carry, less framing)
    live_in: int = 0
    live_out: int = 0
    live_out_bytes: int = 0
    # non-durable frames on control topics ('_...', a subsystem's heartbeats and the like), apart from the
    # live_* counters: they never stop, so the testbed's drain must not read them as traffic still moving
    control_in: int = 0
    control_out: int = 0
    control_out_bytes: int = 0
    control_local: int = 0
    live_dropped: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    duplicates: int = 0            # targets dropped because they were handled here already
    expired: int = 0
    hop_limit: int = 0
    bad: int = 0
    local: int = 0                 # publications handed to local subscriptions (per subscription)

    def snapshot(self) -> dict:
        return {"published": self.published, "refused": self.refused, "copies_in": self.copies_in,
                "copies_out": self.copies_out, "copies_out_bytes": self.copies_out_bytes, "live_in": self.live_in,
                "live_out": self.live_out, "live_out_bytes": self.live_out_bytes,
                "control_in": self.control_in, "control_out": self.control_out,
                "control_out_bytes": self.control_out_bytes, "control_local": self.control_local,
                "live_dropped": dict(self.live_dropped), "duplicates": self.duplicates, "expired": self.expired,
                "hop_limit": self.hop_limit, "bad": self.bad, "local": self.local}


@dataclass
class Plan:
    """What handling one publication here stores (`op`, in the caller's transaction) and then does."""
    local: bool                       # this node is a target
    queue_for: list[str]              # local durable subscriptions that get a queue row
    messages: list[NewMessage]        # the copies for the next hops
    op: Op


class Broker:
    """One per node; the PubSub service (node/broker/service.py) calls its public methods."""

    def __init__(self, cfg: NodeConfig, engine: Engine, records: Records) -> None:
        self.cfg = cfg
        self.bc = cfg.broker
        self.me = cfg.name
        self.engine = engine
        self.spool = engine.spool
        self.records = records
        self.interest = InterestTable(self.me, self.spool, self.bc.refresh, self.bc.max_age)
        self.durable: dict[str, DurableSubscription] = {}
        self.live: dict[str, LiveSubscription] = {}
        self.counters = Counters()
        self.peers: dict[str, Peer] = engine.peers
        self.interest.attach(self.peers)
        self._inbox: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        # inbox copies not handled yet (queued, being handled, or waiting to be tried again): what the drain
        # and the metrics count, so a copy between the inbox and its onward copies is never invisible
        self._unhandled: set[str] = set()
        self._recent: OrderedDict[tuple[str, str], int] = OrderedDict()   # live path: (pub, target) -> hops
        self._tasks: list[asyncio.Task] = []
        self._bg: set[asyncio.Task] = set()
        self._started = False
        self._transforms: dict[str, TopicTransform] = {}      # topic prefix -> transform
        # target -> next hop while the router answers by destination alone, until it says routes changed: one
        # question per target, not one per publication and target
        self._hops: dict[str, str | None] = {}
        router = getattr(engine, "router", None)       # an engine reduced to its spool (unit tests) has none
        if router is not None:
            router.watch(self._hops.clear)

    def transform(self, prefix: str, transform: TopicTransform) -> None:
        """Register `transform` for publications published here on topics starting with `prefix`."""
        if any(prefix.startswith(p) or p.startswith(prefix) for p in self._transforms):
            raise ValueError(f"a topic transform for {prefix!r} overlaps one registered already")
        self._transforms[prefix] = transform

    def _transform_for(self, topic: str) -> TopicTransform | None:
        return next((t for p, t in self._transforms.items() if topic.startswith(p)), None)

    # -- wiring ---------------------------------------------------------------------------------------
    def frame_handlers(self) -> dict:
        return {INTEREST: self.interest.on_frame, LIVE: self._on_live}

    async def start(self) -> None:
        """After the engine recovered: the durable subscriptions, our interest record, what the inbox holds."""
        for name, pattern, backlog, owner in await self.spool.run(store.op_create()):
            self.durable[name] = DurableSubscription(name, pattern, backlog, owner)
        await self.interest.start(self._own())
        for msg_id, payload in await self.spool.run(Spool.op_inbox(PUB_KIND)):
            self._unhandled.add(msg_id)
            self._inbox.put_nowait((msg_id, payload))
        self._started = True
        self._tasks = [asyncio.ensure_future(self._inbox_worker()), asyncio.ensure_future(self._housekeeping())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sub in [*self.durable.values(), *self.live.values()]:
            if sub.stream is not None:
                sub.stream.end("the node is shutting down")
        while self._bg:
            await asyncio.gather(*list(self._bg), return_exceptions=True)

    def _own(self) -> list[Sub]:
        return [s.sub() for s in (*self.durable.values(), *self.live.values())]

    def _interest_changed(self) -> None:
        self.interest.set_own(self._own())

    # -- publishing ---------------------------------------------------------------------------------------
    async def publish(self, topic: str, payload: bytes | None, size: int | None, priority: int, lifetime: float,
                      key: str, publisher: str) -> pubsub_pb2.PublishReply:
        why = self._publish_problem(topic, payload, size, priority, lifetime, key, publisher)
        if why:
            self.counters.refused += 1
            return pubsub_pb2.PublishReply(accepted=False, reason=why)
        pub_id = f"{self.me}-{uuid.uuid4().hex[:16]}"
        n = len(payload) if payload is not None else int(size or 0)
        if payload is None:
            seed = (pub_id + " ").encode()
            payload = (seed * (n // len(seed) + 1))[:n]
        now = time.time()
        pub = link_pb2.Publication(pub_id=pub_id, origin=self.me, topic=topic, key=key, priority=priority or 1,
                                   publish_ts=now, expires_ts=now + (lifetime or self.cfg.default_lifetime),
                                   hops=0, payload=payload, publisher=publisher, size=n)
        transform = self._transform_for(topic)
        if transform is None:
            # shielded as below: a store the client's cancelled call queued still updates the backlog counts
            return await asyncio.shield(self._publish([pub], None))
        # shielded: once the transform numbered the publication, it must hear how the store ended, even when the
        # client's call is cancelled meanwhile (the store itself goes on regardless)
        return await asyncio.shield(self._publish_transformed(pub, transform))

    async def _publish_transformed(self, pub: link_pb2.Publication,
                                   transform: TopicTransform) -> pubsub_pb2.PublishReply:
        async with transform.derive(pub) as derived:
            if isinstance(derived, str):
                self.counters.refused += 1
                return pubsub_pb2.PublishReply(accepted=False, reason=derived)
            if derived is None:
                return await self._publish([pub], None)
            more = []
            for t, k in derived.publications:
                extra = link_pb2.Publication()
                extra.CopyFrom(pub)
                extra.pub_id, extra.topic, extra.key = f"{self.me}-{uuid.uuid4().hex[:16]}", t, k
                more.append(extra)
            derived.pub_ids = [p.pub_id for p in more]
            reply = await self._publish([pub, *more], derived.also)
            derived.stored = reply.accepted
            return reply

    async def _publish(self, pubs: list[link_pb2.Publication], also: Op | None) -> pubsub_pb2.PublishReply:
        """Store publications made here (the first the client's, the others a transform's) and `also`, in one
        transaction; then the live copies and the records. The reply is about the first."""
        items: list[_Handling] = []
        matches_of: list[dict[str, list[Sub]]] = []
        for pub in pubs:
            matched = self.interest.matching(pub.topic)
            route: dict[str, str | None] = {}       # target -> next hop: the router is asked once per target
            durable, live = self._split(pub, matched, big=pub.size > self._live_max(), route=route)
            items.append(_Handling(pub, 0, durable, route, live))
            matches_of.append(matched)
        if also is not None or any(it.targets for it in items):
            try:
                reason = await self._handle_all([it for it in items if it.targets], None, also)
            except TransformRefused as exc:
                reason = str(exc)
            if reason:
                self.counters.refused += 1
                return pubsub_pb2.PublishReply(accepted=False, reason=reason)
        for it in items:
            if it.live:
                self._live_forward(it.pub, 0, it.live, it.route)
        first = pubs[0]
        for pub, matched in zip(pubs, matches_of):
            self.counters.published += 1
            expected = sorted(f"{node}/{s.name}" for node, subs in matched.items() for s in subs)
            expected_durable = sorted(f"{node}/{s.name}" for node, subs in matched.items() for s in subs
                                      if s.durable)
            extra = {} if pub is first else {"derived_from": first.pub_id}
            self.records.write("publication", ts=pub.publish_ts, pub_id=pub.pub_id, topic=pub.topic, size=pub.size,
                               key=pub.key, priority=pub.priority, publisher=pub.publisher, expected=expected,
                               expected_durable=expected_durable, targets=sorted(matched), **extra)
            if pub is first:
                reply = pubsub_pb2.PublishReply(accepted=True, pub_id=pub.pub_id, expected=len(expected),
                                                expected_durable=len(expected_durable))
        return reply

    def _split(self, pub: link_pb2.Publication, matched: dict[str, list[Sub]], big: bool,
               route: dict[str, str | None]) -> tuple[set[str], set[str]]:
        """(durable targets, live targets). A next hop gets one copy: a stored one when any target beyond it has
        a durable subscription (the others ride along), a live frame otherwise; a publication too big for one
        frame always goes stored (the engine fragments it). Downstream a stored copy stays stored."""
        wants_durable = {node for node, subs in matched.items() if any(s.durable for s in subs)}
        durable: set[str] = set()
        live: set[str] = set()
        groups: dict[str | None, set[str]] = defaultdict(set)
        for t in matched:
            if t == self.me:
                (durable if t in wants_durable else live).add(t)
            else:
                groups[self._next_hop(pub, t, route)].add(t)
        for ts in groups.values():
            (durable if big or ts & wants_durable else live).update(ts)
        return durable, live

    def _publish_problem(self, topic: str, payload: bytes | None, size: int | None, priority: int,
                         lifetime: float, key: str, publisher: str) -> str | None:
        why = topic_problem(topic)
        if why:
            return why
        n = len(payload) if payload is not None else int(size or 0)
        lim = self.cfg.limits
        if n > lim.max_message_size:
            return f"publication of {n} bytes is over the limit of {lim.max_message_size}"
        if not 0 <= priority <= lim.max_priority:
            return f"priority {priority} is not between 0 and {lim.max_priority}"
        if not (math.isfinite(lifetime) and 0 <= lifetime <= 10 * 365 * 86400):
            return f"lifetime {lifetime} is not a number of seconds (0 = the node's default)"
        if len(key) > KEY_MAX or any(ch in key for ch in "\r\n\0"):
            return f"key is over {KEY_MAX} characters or has control characters"
        if publisher and not is_user_name(publisher):
            return f"invalid publisher {publisher!r}"
        return None

    def _live_max(self) -> int:
        return max(0, self.cfg.limits.max_frame_bytes - 4096)

    # -- the durable path ---------------------------------------------------------------------------
    def delivered(self, m: Piece, payload: bytes) -> None:
        """The engine's consumer for kind "pub": a copy for this broker is durable in the inbox."""
        if self._started:                  # before start() (engine recovery) the inbox is read whole at start
            self._unhandled.add(m.msg_id)
            self._inbox.put_nowait((m.msg_id, payload))

    async def _inbox_worker(self) -> None:
        while True:
            first = await self._inbox.get()
            batch = [first]
            while len(batch) < BATCH and not self._inbox.empty():
                batch.append(self._inbox.get_nowait())
            # one transaction per copy, all queued at once: the spool commits them together
            results = await asyncio.gather(*(self._take(msg_id, payload) for msg_id, payload in batch),
                                           return_exceptions=True)
            for (msg_id, payload), r in zip(batch, results):
                if isinstance(r, BaseException):
                    log.error("%s: handling publication copy %s failed: %r", self.me, msg_id, r)
                    r = "failed"
                if r:                      # not stored now: stays in the inbox, tried again later
                    self._later(msg_id, payload)
                else:
                    self._unhandled.discard(msg_id)

    def _later(self, msg_id: str, payload: bytes) -> None:
        asyncio.get_running_loop().call_later(RETRY, self._inbox.put_nowait, (msg_id, payload))

    async def _take(self, msg_id: str, payload: bytes) -> str | None:
        """Handle one copy from the inbox; None when done (including dropped for good), else why not now."""
        try:
            pub = link_pb2.Publication.FromString(payload)
        except DecodeError:
            pub = None
        why = _publication_problem(pub) if pub is not None else "not a Publication"
        if why:
            self.counters.bad += 1
            log.warning("%s: dropping publication copy %s: %s", self.me, msg_id, why)
            await self.spool.run(store.op_forget_inbox(msg_id))
            return None
        self.counters.copies_in += 1
        hops = pub.hops + 1
        if pub.expires_ts < time.time() or hops > self.bc.max_hops:
            if hops > self.bc.max_hops:
                self.counters.hop_limit += 1
                log.warning("%s: publication %s passed %d brokers (limit %d): dropped", self.me, pub.pub_id,
                            hops, self.bc.max_hops)
            else:
                self.counters.expired += 1
            await self.spool.run(store.op_forget_inbox(msg_id))
            return None
        return await self._handle(pub, hops, set(pub.targets), inbox_id=msg_id)

    def received(self, m: Piece, payload: bytes) -> Received | None:
        """The engine's receive hook for kind "pub": what handling this copy here stores, planned now to run in
        the transaction that stores the copy (one commit per hop). None leaves it to the inbox path
        (`delivered`), which also drops a bad, expired or looping copy and counts it."""
        if not self._started:
            return None
        pub = _parse(payload)
        if pub is None or pub.expires_ts < time.time() or pub.hops + 1 > self.bc.max_hops:
            return None
        hops = pub.hops + 1
        plan = self._plan(pub, hops, set(pub.targets), m.msg_id, {})
        together = self.engine.prepare_together(plan.messages, plan.op)
        if isinstance(together, str):
            return None                     # not storable now: the inbox path tries again later

        def done(stored: bool) -> None:
            if not stored:
                together.cancel()
                return
            together.accepted()
            self.counters.copies_in += 1
            self._handled(pub, hops, plan)
        return Received(together.op, done)

    def _plan(self, pub: link_pb2.Publication, hops: int, targets: set[str], inbox_id: str | None,
              route: dict[str, str | None]) -> "Plan":
        """`_handle`'s transaction for one copy from a neighbour, planned for the receive hook."""
        local = self.me in targets
        queue_for = [s.name for s in self.durable.values() if local and matches(s.pattern, pub.topic)]
        body = _stored(pub) if queue_for else b""
        messages = self._copies(pub, hops, targets - {self.me}, route)
        return Plan(local, queue_for, messages, store.op_handle(self.me, pub, hops, targets, queue_for, body,
                                                                inbox_id))

    def _handled(self, pub: link_pb2.Publication, hops: int, plan: "Plan") -> None:
        """After the receive hook's commit, as after `_handle`'s: counters, the local durable subscriptions
        woken, the live ones handed the publication."""
        self.counters.copies_out += len(plan.messages)
        self.counters.copies_out_bytes += sum(len(m.payload) for m in plan.messages)
        if plan.local:
            for name in plan.queue_for:
                sub = self.durable.get(name)
                if sub is not None:
                    sub.queued()
            self._to_live_subscribers(pub, hops)

    async def _handle(self, pub: link_pb2.Publication, hops: int, targets: set[str], inbox_id: str | None,
                      route: dict[str, str | None] | None = None) -> str | None:
        """Store what one publication does here (local durable queues, copies for next hops, the targets handled,
        the inbox row gone) in one transaction, then hand it to local live subscribers. None when done."""
        return await self._handle_all([_Handling(pub, hops, targets, {} if route is None else route)], inbox_id)

    async def _handle_all(self, items: list[_Handling], inbox_id: str | None, also: Op | None = None) -> str | None:
        """`_handle` for several publications and `also` (a transform's spool change) in ONE transaction."""
        while True:
            ops: list[Op] = [] if also is None else [also]
            messages: list[NewMessage] = []
            queued: list[tuple[_Handling, list[str]]] = []
            for i, it in enumerate(items):
                local = self.me in it.targets
                queue_for = [s.name for s in self.durable.values() if local and matches(s.pattern, it.pub.topic)]
                body = _stored(it.pub) if queue_for else b""
                messages += self._copies(it.pub, it.hops, it.targets - {self.me}, it.route)
                ops.append(store.op_handle(self.me, it.pub, it.hops, it.targets, queue_for, body,
                                           inbox_id if i == 0 else None))
                queued.append((it, queue_for))
            if not items and inbox_id is not None:
                ops.append(store.op_forget_inbox(inbox_id))
            op = ops[0] if len(ops) == 1 else _all_of(ops)
            try:
                reason = await self.engine.originate_together(messages, op)
            except store.AlreadySeen as seen:
                self.counters.duplicates += len(seen.targets)
                if len(items) != 1:       # only a copy from a neighbour can meet this: never several of them
                    return f"publication handled here already ({seen})"
                items[0].targets = items[0].targets - seen.targets
                continue
            if reason:
                return reason
            break
        self.counters.copies_out += len(messages)
        self.counters.copies_out_bytes += sum(len(m.payload) for m in messages)
        for it, queue_for in queued:
            if self.me in it.targets:
                for name in queue_for:
                    sub = self.durable.get(name)
                    if sub is not None:
                        sub.queued()
                self._to_live_subscribers(it.pub, it.hops)
        return None

    def _copies(self, pub: link_pb2.Publication, hops: int, remote: set[str],
                route: dict[str, str | None]) -> list[NewMessage]:
        """One stored copy per next hop, carrying the targets beyond it (a target with no route now: a copy
        addressed to it, kept by the engine as an orphan until a route appears)."""
        if not remote:
            return []
        groups: dict[str, list[str]] = defaultdict(list)
        for t in sorted(remote):
            hop = self._next_hop(pub, t, route)
            groups[hop if hop is not None else t].append(t)
        lifetime = max(0.001, pub.expires_ts - time.time())
        base = _without_routing(pub)          # encoded once; each copy appends its hops and targets
        prefix = f"{PUB_PREFIX}{pub.pub_id}.{self.me}.{hops}."
        # a publication whose payload fits one fragment travels as one piece (up to two fragments' bytes with
        # its header and targets): half the frames, acks and spool rows per hop, and no reassembly at the next
        chunk = self.cfg.chunk_size
        out = []
        for hop, ts in sorted(groups.items()):
            data = base + _routing(hops, ts)
            out.append(NewMessage(pub.publisher, [(hop, "")], data, pub.priority, lifetime, kind=PUB_KIND,
                                  msg_id=prefix + hop, orphan_ok=True,
                                  one_piece=len(pub.payload) <= chunk and len(data) <= 2 * chunk))
        return out

    def _next_hop(self, pub: link_pb2.Publication, target: str, route: dict[str, str | None]) -> str | None:
        """The next hop of the copy for `target`, asked of the router once per publication and target here
        (`route` keeps the answers of this handling)."""
        if target in route:
            return route[target]
        router = self.engine.router
        if getattr(router, "by_destination", False):
            if target in self._hops:
                hop = self._hops[target]
            else:
                hop = self._hops[target] = router.next_hop(self._header(pub, target))
        else:
            hop = router.next_hop(self._header(pub, target))
        route[target] = hop
        return hop

    def _header(self, pub: link_pb2.Publication, target: str) -> CopyHeader:
        return CopyHeader(msg_id=f"{PUB_PREFIX}{pub.pub_id}", dst=target, src=self.me, originator=pub.publisher,
                          prio=pub.priority, kind=PUB_KIND)

    # -- the live path ------------------------------------------------------------------------------
    def _on_live(self, peer: Peer, frame: link_pb2.Frame) -> None:
        pub = frame.publication
        why = _publication_problem(pub)
        if why:
            self.counters.bad += 1
            if self.counters.bad <= 3 or self.counters.bad % 1000 == 0:
                log.warning("%s: ignored a publication frame from %s: %s", self.me, peer.name, why)
            return
        if is_control(pub.topic):
            self.counters.control_in += 1
        else:
            self.counters.live_in += 1
        hops = pub.hops + 1
        if pub.expires_ts < time.time():
            self.counters.expired += 1
            return
        if hops > self.bc.max_hops:
            self.counters.hop_limit += 1
            return
        self._live_forward(pub, hops, set(pub.targets), {})

    def _live_forward(self, pub: link_pb2.Publication, hops: int, targets: set[str],
                      route: dict[str, str | None]) -> None:
        fresh = set()
        for t in targets:
            before = self._recent.get((pub.pub_id, t))
            if before is not None and (t == self.me or before >= hops):
                self.counters.duplicates += 1
                continue
            self._recent[(pub.pub_id, t)] = hops
            self._recent.move_to_end((pub.pub_id, t))
            fresh.add(t)
        while len(self._recent) > self.bc.live_memory:
            self._recent.popitem(last=False)
        if self.me in fresh:
            self._to_live_subscribers(pub, hops)
        groups: dict[str, list[str]] = defaultdict(list)
        for t in sorted(fresh - {self.me}):
            hop = self._next_hop(pub, t, route)
            groups[hop or ""].append(t)
        for hop, ts in groups.items():
            p = self.peers.get(hop)
            if p is None or p.session is None or LIVE not in p.capabilities:
                self.counters.live_dropped["no_session"] += len(ts)
                continue
            if len(p.outbox) >= self.bc.live_queue:
                self.counters.live_dropped["link_queue_full"] += len(ts)
                continue
            frame = link_pb2.Frame(publication=_onward(pub, hops, ts))
            p.send_control(frame)
            if is_control(pub.topic):
                self.counters.control_out += 1
                self.counters.control_out_bytes += frame.ByteSize()
            else:
                self.counters.live_out += 1
                self.counters.live_out_bytes += frame.ByteSize()

    def _to_live_subscribers(self, pub: link_pb2.Publication, hops: int) -> None:
        event = None
        for sub in self.live.values():
            if matches(sub.pattern, pub.topic):
                event = event or delivery(pub, hops)
                sub.offer(event)
                if is_control(pub.topic):
                    self.counters.control_local += 1
                else:
                    self.counters.local += 1

    # -- subscribers ----------------------------------------------------------------------------------
    async def subscribe(self, start: pubsub_pb2.SubscribeStart, user: str,
                        admin: bool) -> tuple[LiveSubscription | DurableSubscription, Stream]:
        """Create or attach to a subscription for the caller `user` (the admin: `admin`); a new one is theirs."""
        why = pattern_problem(start.pattern)
        if why:
            raise BrokerError("INVALID_ARGUMENT", why)
        name = start.name
        if name and not is_user_name(name):
            raise BrokerError("INVALID_ARGUMENT", f"invalid subscription name {name!r} (letters, digits, '_.-')")
        window = min(start.window or self.bc.window, 65536)
        if name not in self.durable and len(self.durable) + len(self.live) >= MAX_SUBSCRIPTIONS:
            # every node must be able to take this node's interest record whole
            raise BrokerError("RESOURCE_EXHAUSTED", f"{self.me} has {MAX_SUBSCRIPTIONS} subscriptions, the most one "
                                                    f"node may have")
        stream = Stream()
        if start.durable:
            if not name:
                raise BrokerError("INVALID_ARGUMENT", "a durable subscription needs a name")
            if name in self.live:
                raise BrokerError("ALREADY_EXISTS", f"{name!r} is a non-durable subscription at {self.me}")
            sub = self.durable.get(name)
            if sub is None:
                self._check_durable_quota(user, admin)
                queued = await self.spool.run(store.op_subscribe(name, start.pattern, time.time(), user))
                sub = self.durable.setdefault(name, DurableSubscription(name, start.pattern, queued, owner=user))
                self._interest_changed()
                log.info("%s: durable subscription %s on %s, owner %s", self.me, name, start.pattern,
                         user or "the admin")
            # checked before anything else about it: the owner's stream must go on, and its pattern stays private
            if not sub.may(user, admin):
                raise BrokerError("PERMISSION_DENIED", f"durable subscription {name!r} at {self.me} belongs to "
                                                       f"another user")
            if sub.pattern != start.pattern:
                raise BrokerError("FAILED_PRECONDITION", f"durable subscription {name!r} exists with pattern "
                                  f"{sub.pattern!r}; unsubscribe it first to change the pattern")
            sub.attach(stream, window)
            return sub, stream
        if not name:
            name = f"live-{uuid.uuid4().hex[:8]}"
        if name in self.live or name in self.durable:
            raise BrokerError("ALREADY_EXISTS", f"subscription {name!r} exists at {self.me}")
        sub = LiveSubscription(name, start.pattern, self.bc.live_buffer, stream, owner=user)
        self.live[name] = sub
        self._interest_changed()
        return sub, stream

    def _check_durable_quota(self, user: str, admin: bool) -> None:
        """A user token may own at most broker.max_durable_per_user durable subscriptions here (the admin is the
        operator: only the node's overall limit holds it)."""
        cap = self.bc.max_durable_per_user
        if admin or sum(1 for s in self.durable.values() if s.owner == user) < cap:
            return
        raise BrokerError("RESOURCE_EXHAUSTED", f"user {user!r} has {cap} durable subscriptions at {self.me}, the "
                                                f"most one user may have (broker.max_durable_per_user); "
                                                f"unsubscribe one first")

    def detach(self, sub: LiveSubscription | DurableSubscription, stream: Stream) -> None:
        """The client stream ended: a non-durable subscription goes, a durable one keeps collecting."""
        stream.end("closed")
        if isinstance(sub, DurableSubscription):
            sub.detach(stream)
        elif self.live.get(sub.name) is sub:
            del self.live[sub.name]
            self._interest_changed()

    async def events(self, sub: LiveSubscription | DurableSubscription, stream: Stream) -> list[pubsub_pb2.SubscribeEvent]:
        """The next events for the client (waits for some); [] once the stream has been ended."""
        while not stream.ended:
            stream.wake.clear()
            if isinstance(sub, LiveSubscription):
                out = sub.take()
            else:
                out = await self._durable_batch(sub, stream)
            if out:
                return out
            if not stream.ended:
                await stream.wake.wait()
        return []

    async def _durable_batch(self, sub: DurableSubscription, stream: Stream) -> list[pubsub_pb2.SubscribeEvent]:
        room = sub.window - len(sub.inflight)
        if room <= 0 or sub.stream is not stream or not sub.unread:
            return []
        # cleared before the read: a row queued while it runs sets it again (this read may not see that row)
        sub.unread = False
        limit = min(room, BATCH)
        # on the reader connection: a delivery waits for no commit of the writer (a queue row is committed before
        # its subscription is woken, so the reader sees it)
        try:
            rows = await self.spool.read(store.op_next(sub.name, sub.cursor, limit))
        except BaseException:
            sub.unread = True
            raise
        if sub.stream is not stream:
            return []
        if len(rows) >= limit:
            sub.unread = True             # stopped at its limit: more may wait
        out = []
        for seq, hops, body in rows:
            pub = link_pb2.Publication.FromString(body)
            sub.inflight[pub.pub_id] = seq
            out.append(delivery(pub, hops, redelivered=seq <= sub.max_sent))
            sub.cursor = max(sub.cursor, seq)
            sub.max_sent = max(sub.max_sent, seq)
        sub.delivered += len(out)
        return out

    async def ack(self, sub: LiveSubscription | DurableSubscription, stream: Stream, pub_ids: list[str]) -> None:
        """The client processed these: a durable subscription forgets them for good."""
        if not isinstance(sub, DurableSubscription) or sub.stream is not stream:
            return
        seqs = [s for s in (sub.inflight.pop(p, None) for p in pub_ids) if s is not None]
        if seqs:
            # shielded: the rows go once queued, so the count must follow even when the caller is cancelled (a
            # Subscribe call ending while its acks commit); it counts the rows really gone, not the acks (after a
            # takeover the old stream's ack may have removed a row the new stream was sent again)
            await asyncio.shield(self._forget(sub, seqs))

    async def _forget(self, sub: DurableSubscription, seqs: list[int]) -> None:
        removed = await self.spool.run(store.op_ack(sub.name, seqs))
        sub.backlog = max(0, sub.backlog - removed)
        sub.wake()

    async def unsubscribe(self, name: str, user: str, admin: bool) -> tuple[bool, int]:
        """Remove a subscription (durable: with what waits for it). (removed, publications discarded); only its
        owner or the admin may (BrokerError PERMISSION_DENIED, and nothing changes)."""
        found = self.live.get(name) or self.durable.get(name)
        if found is not None and not found.may(user, admin):
            raise BrokerError("PERMISSION_DENIED", f"subscription {name!r} at {self.me} belongs to another user")
        live = self.live.pop(name, None)
        if live is not None:
            live.stream.end(f"unsubscribed {name!r}")
            self._interest_changed()
            return True, 0
        sub = self.durable.pop(name, None)
        if sub is None:
            return False, 0
        if sub.stream is not None:
            sub.stream.end(f"unsubscribed {name!r}")
        self._interest_changed()
        discarded = await self.spool.run(store.op_unsubscribe(name))
        log.info("%s: durable subscription %s removed (%d publications discarded)", self.me, name, discarded)
        return True, discarded

    def subscriptions(self, remote: bool, user: str, admin: bool) -> list[pubsub_pb2.SubscriptionInfo]:
        """This node's subscriptions (and with `remote` those other nodes advertised): the admin sees them all, a
        user only its own (the advertised ones record no owner, so none of them)."""
        out = [pubsub_pb2.SubscriptionInfo(node=self.me, name=s.name, pattern=s.pattern, durable=True,
                                           connected=s.stream is not None, backlog=s.backlog, delivered=s.delivered,
                                           owner=s.owner)
               for s in self.durable.values() if s.may(user, admin)]
        out += [pubsub_pb2.SubscriptionInfo(node=self.me, name=s.name, pattern=s.pattern, durable=False,
                                            connected=True, backlog=len(s.buffer), delivered=s.delivered,
                                            dropped=s.dropped, owner=s.owner)
                for s in self.live.values() if s.may(user, admin)]
        if remote and admin:
            for origin, rec in sorted(self.interest.records.items()):
                if origin != self.me:
                    out += [pubsub_pb2.SubscriptionInfo(node=origin, name=s.name, pattern=s.pattern,
                                                        durable=s.durable) for s in rec.subs]
        return sorted(out, key=lambda i: (i.node, i.name))

    # -- housekeeping, metrics -------------------------------------------------------------------------
    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_EVERY)
            try:
                self.interest.housekeeping()
                dropped = await self.spool.run(store.op_expire(time.time()))
                for name, n in dropped.items():
                    sub = self.durable.get(name)
                    if sub is not None:
                        sub.backlog = max(0, sub.backlog - n)
                    self.counters.expired += n
                    log.warning("%s: %d publications for durable subscription %s expired unread", self.me, n, name)
            except Exception:
                log.exception("%s: broker housekeeping failed", self.me)

    def snapshot(self) -> dict:
        subs = {s.name: {"durable": True, "pattern": s.pattern, "connected": s.stream is not None,
                         "backlog": s.backlog, "delivered": s.delivered} for s in self.durable.values()}
        subs.update({s.name: {"durable": False, "pattern": s.pattern, "connected": True, "backlog": len(s.buffer),
                              "delivered": s.delivered, "dropped": s.dropped} for s in self.live.values()})
        return {**self.counters.snapshot(), "inbox": len(self._unhandled), "interest": self.interest.snapshot(),
                "subscriptions": subs}


def _all_of(ops: list[Op]) -> Op:
    def op(c) -> None:
        for one in ops:
            one(c)
    return op


def _onward(pub: link_pb2.Publication, hops: int, targets: list[str]) -> link_pb2.Publication:
    copy = link_pb2.Publication()
    copy.CopyFrom(pub)
    copy.hops = hops
    del copy.targets[:]
    copy.targets.extend(targets)
    return copy


def _without_routing(pub: link_pb2.Publication) -> bytes:
    """`pub` encoded without its hops and targets (fields 8 and 9), for `_routing` to complete."""
    if not pub.targets and not pub.hops:
        return pub.SerializeToString()
    copy = link_pb2.Publication()
    copy.CopyFrom(pub)
    copy.hops = 0
    del copy.targets[:]
    return copy.SerializeToString()


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _routing(hops: int, targets: list[str]) -> bytes:
    """Publication fields 8 (hops) and 9 (targets) encoded: appended to `_without_routing`'s bytes they make the
    copy `_onward` would (a protobuf parser merges fields wherever they appear), without copying the message."""
    out = [b"\x40" + _varint(hops)] if hops else []       # field 8, varint
    for t in targets:
        b = t.encode()
        out.append(b"\x4a" + _varint(len(b)) + b)          # field 9, length-delimited
    return b"".join(out)


def _stored(pub: link_pb2.Publication) -> bytes:
    """What a durable subscription's queue row keeps: the publication without its routing."""
    copy = link_pb2.Publication()
    copy.CopyFrom(pub)
    del copy.targets[:]
    return copy.SerializeToString()


def _parse(payload: bytes) -> link_pb2.Publication | None:
    """The publication a stored copy carries, or None when it is not a sound one."""
    try:
        pub = link_pb2.Publication.FromString(payload)
    except DecodeError:
        return None
    return None if _publication_problem(pub) else pub


def _publication_problem(pub: link_pb2.Publication) -> str | None:
    if len(pub.pub_id) > 64 or not is_message_id(pub.pub_id) or not is_node_name(pub.origin):
        return "bad publication id or origin"
    why = topic_problem(pub.topic)
    if why:
        return why
    if not pub.targets or len(pub.targets) > 4096 or not all(is_node_name(t) for t in pub.targets):
        return "bad targets"
    if not (math.isfinite(pub.publish_ts) and math.isfinite(pub.expires_ts)):
        return "bad timestamps"
    if len(pub.key) > KEY_MAX or (pub.publisher and not is_user_name(pub.publisher)):
        return "bad key or publisher"
    return None
