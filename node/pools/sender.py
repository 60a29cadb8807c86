"""The consumer instance (PS): a role of the node daemon at a consumer node.

An event is a publication made at this node on `ev.<type>.<source>`. The broker hands it to the sender (its topic
transform seam, node/broker/broker.py `Broker.transform`), which adds one durable publication per application
that wants the type, on `pool.<app>.<instance>.<consumer>.<type>` to the instance the assignment in force names,
with the key `<event id>:<seq>:<map version>`; `seq` counts this consumer's events per application. The event,
those publications and the new sequence numbers (node/pools/store.py) go into ONE spool transaction, so a crash
keeps all of them or none, and the numbers never skip or repeat. Events are numbered one at a time (a lock):
a number is taken only once its transaction is durable.

An assignment (app -> instance, from the controller's leader) is accepted only with a term at least the highest
seen and a newer map version (node/pools/messages.py AssignmentGuard decides), and an application moves to its
new instance only once this node's interest table holds a durable subscription for that instance's topic (else
the events would have nowhere to wait). The move happens between two events: the old instance gets everything
up to `seq` s, the new one the events after it. The fence that says so (node/pools/fence.py Fence: consumer,
app, s, old, new, version, term; old null for a first connection) is published durably to both instances on
`pool.<app>.<instance>.<consumer>._fence`, so it waits in their subscriptions beside the events (a `fence_sent`
line); it is kept in the spool until published, and published again after a crash cut that short (an
instance acts on a fence once). Once every application of an assignment is in force the consumer writes
`applied`. The new instance says when it released the events it held for a fence, non-durably on
`_pools.done.<consumer>`; the consumer writes `fence_done` with `pause_s`, the seconds since its `fence_sent`
(the handover's pause, plus that message's trip; none when this daemon did not send the fence).
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from node.broker.broker import Broker, Derived
from node.pools import messages, store
from node.pools.host import ASSIGN_TOPIC, HB_TOPIC
from node.pools.listen import Listener
from node.pools.fence import FenceDone
from node.pools.messages import Assignment, AssignmentGuard
from node.records import Records
from node.rpc import link_pb2, pubsub_pb2
from node.spool import Spool

log = logging.getLogger("node.pools")

EVENT_PREFIX = "ev."
FENCE_TYPE = "_fence"              # the last token of a fence's topic (event types never start with '_')
DONE_TOPIC = "_pools.done"         # + .<consumer>: non-durable, a new instance's FenceDone (a measurement)
FENCES_TIMED = 1024                # fences whose fence_sent time is kept for their fence_done (oldest dropped)
RETRY = 1.0                        # seconds before fences that could not be published are tried again
LOAD_ALPHA = 0.5                   # weight of the newest heartbeat period in the load EWMA


def pool_topic(app: str, instance: str, consumer: str, event_type: str) -> str:
    return f"pool.{app}.{instance}.{consumer}.{event_type}"


class PoolSender:
    """One per consumer node (node/pools/subsystem.py builds it when `pools.consumer` is set)."""

    def __init__(self, me: str, consumer: str, app_types: dict[str, list[str]], broker: Broker, spool: Spool,
                 records: Records) -> None:
        """`app_types`: application -> the event types it wants."""
        self.me = me
        self.consumer = consumer
        self.app_types = app_types
        self.broker = broker
        self.spool = spool
        self.records = records
        self.guard = AssignmentGuard()                  # the highest (term, version) accepted, kept in the spool
        self.seqs: dict[str, int] = {}
        self.term = 0                                   # highest term seen
        self.version = 0                                # newest map version accepted
        self.in_force: dict[str, tuple[str, int]] = {}  # app -> (instance, map version that put it there)
        self.wanted: Assignment | None = None
        self.unsent: list[dict] = []                    # fences of moves made, not yet published
        self.applied: tuple[int, int] = (0, 0)         # (term, version) of the last assignment wholly in force
        self.sent: dict[str, int] = {}                  # events sent per application since the start
        self.rates: dict[str, float] = {}               # events/s per application, EWMA over heartbeat periods
        self._counted: dict[str, int] = {}              # `sent` at the last load() call
        self.refused_events = 0
        self.bad = 0                                    # assignment publications refused as malformed or foreign
        self._lock = asyncio.Lock()
        self._switching: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()         # every task of ours, cancelled by stop()
        self.listener = Listener(broker, f"pools.assign.{consumer}", f"{ASSIGN_TOPIC}.{consumer}", True,
                                 self._on_assignment)
        # at most once: a lost FenceDone costs one pause sample, never an event
        self.done_listener = Listener(broker, f"pools.done.{consumer}", f"{DONE_TOPIC}.{consumer}", False,
                                      self._on_done)
        self._fence_sent: dict[tuple[str, int, str, int, int], tuple[float, str | None]] = {}
        self._done_refused = 0                          # FenceDone publications refused (few of them recorded)

    # -- start ----------------------------------------------------------------------------------------
    async def start(self, types: list[str], heartbeat: float) -> None:
        """After the broker started: the saved state, the transform, the assignments' subscription, the
        heartbeat (`types`: the event types this consumer produces, `heartbeat`: seconds between beats)."""
        saved: store.Saved = await self.spool.run(store.op_create(self.consumer))
        self.seqs = dict(saved.seqs)
        self.term, self.version = saved.term, saved.version
        self.in_force = {a: (i, int(v)) for a, (i, v) in saved.in_force.items()}
        self.unsent = list(saved.unsent)
        if saved.wanted:
            self.guard.term, self.guard.version = saved.term, saved.version
            self.wanted = Assignment(**saved.wanted)
            if self._in_force_now(self.wanted):
                self.applied = (self.wanted.term, self.wanted.version)
        self.broker.interest.watch(self._interest_changed)
        self.broker.transform(EVENT_PREFIX, self)
        self._interest_changed()
        if self.unsent:                      # a crash came between a move and its fences
            self._spawn(self._publish_fences())
        await self.listener.start()
        await self.done_listener.start()
        self._spawn(self._beat(list(types), heartbeat))

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.listener.stop()
        await self.done_listener.stop()

    def _spawn(self, coro: Any) -> asyncio.Task:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    async def _beat(self, types: list[str], period: float) -> None:
        """The heartbeat, non-durable on `_pools.hb.<consumer>`: it registers this consumer at the leader and
        carries its load (a `load` line while any is above 0)."""
        while True:
            await asyncio.sleep(period)
            try:
                load = self.load(period)
                body = {"role": "consumer", "name": self.consumer, "node": self.me, "types": types,
                        "state": "active", "load": load}
                reply = await self.broker.publish(f"{HB_TOPIC}.{self.consumer}", json.dumps(body).encode(), None,
                                                  1, 0.0, "", "")
                if any(load.values()):
                    self.records.write("pool", event="load", consumer=self.consumer, load=load,
                                       sent=reply.accepted)
            except Exception:
                log.exception("%s: pools: heartbeat failed", self.me)

    # -- events (the broker's topic transform) -------------------------------------------------------------
    @asynccontextmanager
    async def derive(self, pub: link_pb2.Publication) -> AsyncIterator[Derived | str | None]:
        parts = pub.topic.split(".")
        if len(parts) != 3:
            yield f"an event's topic is ev.<type>.<source>, not {pub.topic!r}"
            return
        event_type = parts[1]
        apps = sorted(a for a, types in self.app_types.items() if event_type in types)
        if not apps:
            yield None                       # no application wants it: an ordinary publication
            return
        async with self._lock:               # one event numbered at a time: a number is taken once durable
            why = self._problem(apps, event_type)
            if why:
                self.refused_events += 1
                yield why
                return
            pubs, advance = [], {}
            for app in apps:
                instance, version = self.in_force[app]
                seq = self.seqs.get(app, 0) + 1
                pubs.append((pool_topic(app, instance, self.consumer, event_type), f"{pub.pub_id}:{seq}:{version}"))
                advance[app] = (seq - 1, seq)
            derived = Derived(pubs, store.op_advance(self.consumer, advance))
            try:
                yield derived
            finally:
                if derived.stored:
                    for app, (_old, seq) in advance.items():
                        self.seqs[app] = seq
                        self.sent[app] = self.sent.get(app, 0) + 1
                else:                        # not stored: the spool's numbers are the truth, whatever happened
                    self.seqs = (await self.spool.run(store.op_create(self.consumer))).seqs

    def _problem(self, apps: list[str], event_type: str) -> str | None:
        """Why an event wanted by `apps` cannot be accepted now (refused before anything is stored), or None."""
        for app in apps:
            got = self.in_force.get(app)
            if got is None:
                return f"not now: no instance of application {app} is assigned to consumer {self.consumer} yet"
            if not self._durable_known(pool_topic(app, got[0], self.consumer, event_type)):
                return (f"not now: no durable subscription of instance {got[0]} of application {app} is known at "
                        f"{self.me}")
        return None

    def _durable_known(self, topic: str) -> bool:
        return any(s.durable for subs in self.broker.interest.matching(topic).values() for s in subs)

    # -- assignments ------------------------------------------------------------------------------------
    async def _on_assignment(self, d: pubsub_pb2.Delivery) -> None:
        a = self._parse(d)
        if isinstance(a, str):
            self.bad += 1
            self.records.write("pool", event="refused", consumer=self.consumer, reason=a, pub_id=d.pub_id)
            log.warning("%s: pools: assignment %s refused: %s", self.me, d.pub_id, a)
            return
        await self.offer(a)

    def _parse(self, d: pubsub_pb2.Delivery) -> Assignment | str:
        """An assignment delivery's content, or why it is refused: only a node or the admin (publisher "") may
        send one (node/pools/messages.py parses the body)."""
        if d.publisher:
            return f"an assignment from user {d.publisher!r}: only the controller (a node) sends them"
        try:
            return messages.parse_assignment(d.payload)
        except messages.BadMessage as exc:
            return str(exc)

    async def offer(self, a: Assignment) -> str | None:
        """An assignment from the leader: None when accepted (it is in force, or waits for an instance's
        subscription to be known here), else why it was refused (a `refused` line)."""
        if self.wanted is not None and (a.term, a.version) == (self.wanted.term, self.wanted.version) \
                and a.connections == self.wanted.connections:
            return None                      # the one taken already, again (redelivered after a crash): no news
        why = self.guard.accept(a)
        if why:
            self.records.write("pool", event="refused", consumer=self.consumer, term=a.term, version=a.version,
                               reason=why, highest_term=self.term)
            log.warning("%s: pools: assignment refused: %s", self.me, why)
            return why
        async with self._lock:
            self.term, self.version, self.wanted = max(self.term, a.term), a.version, a
            await self._save()
        await self._switch()
        return None

    def _in_force_now(self, a: Assignment) -> bool:
        return {app: i for app, (i, _v) in self.in_force.items()} == a.connections

    def _interest_changed(self) -> None:
        """A new interest record: an application waiting for its new instance may move now."""
        if self.wanted is None or self._in_force_now(self.wanted):
            return
        if self._switching is None or self._switching.done():
            self._switching = self._spawn(self._switch())

    async def _switch(self) -> None:
        """Move every application whose new instance's subscription is known here, between two events."""
        async with self._lock:
            a = self.wanted
            if a is None:
                return
            changed = False
            for app in sorted(set(self.in_force) - set(a.connections)):
                del self.in_force[app]
                changed = True
            for app, instance in sorted(a.connections.items()):
                old = self.in_force.get(app)
                if old is not None and old[0] == instance:
                    continue
                types = self.app_types.get(app, [])
                if types and not any(self._durable_known(pool_topic(app, instance, self.consumer, t)) for t in types):
                    continue                 # its subscription is not known here yet: the old instance goes on
                self.in_force[app] = (instance, a.version)
                changed = True
                self.unsent.append({"consumer": self.consumer, "app": app, "seq": self.seqs.get(app, 0),
                                    "old": None if old is None else old[0], "new": instance,
                                    "version": a.version, "term": a.term})
            if changed:
                await self._save()
            if self._in_force_now(a) and self.applied < (a.term, a.version):
                self.applied = (a.term, a.version)
                self.records.write("pool", event="applied", consumer=self.consumer, term=a.term, version=a.version,
                                   connections=dict(a.connections))
        if self.unsent:
            await self._publish_fences()

    async def _publish_fences(self) -> None:
        """Publish the fences of the moves made (to the old instance and the new), until none is left."""
        while True:
            async with self._lock:
                if not self.unsent:
                    return
                fence = self.unsent[0]
                body = json.dumps(fence, sort_keys=True).encode()
                ok = True
                for instance in [i for i in (fence["old"], fence["new"]) if i is not None]:
                    topic = pool_topic(fence["app"], instance, self.consumer, FENCE_TYPE)
                    reply = await self.broker.publish(topic, body, None, 1, 0.0, f"fence:{fence['seq']}", "")
                    if not reply.accepted:
                        ok = False
                        log.warning("%s: pools: fence for %s not published now: %s", self.me, topic, reply.reason)
                if ok:
                    self.unsent.pop(0)
                    await self._save()
                    self.records.write("pool", event="fence_sent", **fence)
                    self._fence_sent[_fence_key(fence["app"], fence["seq"], fence["new"], fence["version"],
                                                fence["term"])] = (time.time(), fence["old"])
                    while len(self._fence_sent) > FENCES_TIMED:
                        del self._fence_sent[next(iter(self._fence_sent))]
            if not ok:
                await asyncio.sleep(RETRY)

    async def _on_done(self, d: pubsub_pb2.Delivery) -> None:
        """A new instance released what it held for one of this consumer's fences: a `fence_done` line."""
        try:
            done = messages.parse_done(d.payload)
            if done.consumer != self.consumer:
                raise messages.BadMessage(f"fence done: for consumer {done.consumer!r}, not {self.consumer!r}")
            if d.publisher and d.publisher != done.app:
                raise messages.BadMessage(f"fence done: of application {done.app!r} from user {d.publisher!r}")
        except messages.BadMessage as exc:
            self.bad += 1
            self._done_refused += 1
            if self._done_refused <= 10 or self._done_refused % 1000 == 0:    # anyone may publish: few lines
                self.records.write("pool", event="refused", consumer=self.consumer, reason=str(exc),
                                   pub_id=d.pub_id, refused=self._done_refused)
                log.warning("%s: pools: fence done %s refused: %s", self.me, d.pub_id, exc)
            return
        self.fence_done(done)

    def fence_done(self, done: FenceDone) -> None:
        sent = self._fence_sent.pop(_fence_key(done.app, done.seq, done.instance, done.version, done.term), None)
        self.records.write("pool", event="fence_done", consumer=self.consumer, app=done.app, seq=done.seq,
                           old=None if sent is None else sent[1], new=done.instance, version=done.version,
                           term=done.term, pause_s=None if sent is None else round(time.time() - sent[0], 6))

    async def _save(self) -> None:
        wanted = {} if self.wanted is None else {"term": self.wanted.term, "version": self.wanted.version,
                                                 "connections": self.wanted.connections, "fences": self.wanted.fences}
        await self.spool.run(store.op_save_map(self.consumer, self.term, self.version,
                                               {a: [i, v] for a, (i, v) in self.in_force.items()}, wanted,
                                               self.unsent))

    def load(self, period: float) -> dict[str, float]:
        """The load per application in force, events/s (EWMA): call once per heartbeat `period` seconds."""
        for app in self.in_force:
            now = self.sent.get(app, 0)
            rate = (now - self._counted.get(app, 0)) / period
            self._counted[app] = now
            before = self.rates.get(app)
            self.rates[app] = rate if before is None else LOAD_ALPHA * rate + (1 - LOAD_ALPHA) * before
        for app in set(self.rates) - set(self.in_force):
            del self.rates[app]
        return {app: round(r, 3) for app, r in sorted(self.rates.items())}

    def snapshot(self) -> dict[str, Any]:
        return {"consumer": self.consumer, "term": self.term, "version": self.version,
                "applied_term": self.applied[0], "applied_version": self.applied[1],
                "connections": {a: i for a, (i, _v) in sorted(self.in_force.items())},
                "seqs": dict(sorted(self.seqs.items())), "sent": dict(sorted(self.sent.items())),
                "load": {a: round(r, 3) for a, r in sorted(self.rates.items())},
                "refused_events": self.refused_events, "fences_unsent": len(self.unsent), "bad": self.bad}


def _fence_key(app: str, seq: int, new: str, version: int, term: int) -> tuple[str, int, str, int, int]:
    return (app, seq, new, version, term)
