"""This node's subscriptions and the client streams attached to them.

A durable subscription lives in the spool (node/broker/store.py): what
arrives for it waits in `pub_queue` whether or not a client is attached, and
a row goes only when the client acknowledges it; a client that comes back
(or a node that restarted) gets everything unacknowledged again, so a client
that remembers what it processed sees each publication once. At most one
client stream is attached to a durable subscription; a new one replaces it.
Every subscription has an owner, the user whose token made it ("" for the
admin, and for everyone on a node without client tokens): only the owner or
the admin may attach to it, acknowledge for it, see it or remove it.

A non-durable subscription exists while its client is connected. What
arrives waits in a bounded buffer; when the client is too slow the newest
publication is dropped and counted (the client hears the running total), so
a slow subscriber never holds anything else up.
"""
from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from node.broker.interest import Sub
from node.rpc import link_pb2, pubsub_pb2


def delivery(pub: link_pb2.Publication, hops: int, redelivered: bool = False) -> pubsub_pb2.SubscribeEvent:
    return pubsub_pb2.SubscribeEvent(delivery=pubsub_pb2.Delivery(
        pub_id=pub.pub_id, topic=pub.topic, origin=pub.origin, publish_ts=pub.publish_ts, payload=pub.payload,
        key=pub.key, priority=pub.priority, hops=hops, size=pub.size, redelivered=redelivered,
        publisher=pub.publisher))


# payload bytes one stream message of several deliveries carries at most (a bigger delivery goes alone): a batch
# stays far below the clients' message size limit and does not hold the first delivery back for long
BATCH_BYTES = 1 << 20
MAX_BATCH = 4096                 # deliveries in one stream message at most, whatever the client asks


def packed(events: list[pubsub_pb2.SubscribeEvent], batch: int) -> list[pubsub_pb2.SubscribeEvent]:
    """`events` as the stream messages to write: each run of deliveries in `deliveries` messages of at most
    `batch` deliveries (and about BATCH_BYTES) each, in order; the other events as they are. With `batch` <= 1
    (a client that did not ask) one message per event, as before batches existed."""
    if batch <= 1:
        return events
    batch = min(batch, MAX_BATCH)
    out: list[pubsub_pb2.SubscribeEvent] = []
    run: list[pubsub_pb2.SubscribeEvent] = []
    size = 0

    def flush() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            out.append(pubsub_pb2.SubscribeEvent(deliveries=pubsub_pb2.Deliveries(items=[e.delivery for e in run])))
        run.clear()

    for ev in events:
        if not ev.HasField("delivery"):
            flush()
            out.append(ev)
            continue
        n = len(ev.delivery.payload)
        if run and (len(run) >= batch or size + n > BATCH_BYTES):
            flush()
        if not run:
            size = 0
        run.append(ev)
        size += n
    flush()
    return out


@dataclass(eq=False)
class Stream:
    """One attached client stream; `end(reason)` makes its event loop stop."""
    ended: str = ""
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def end(self, reason: str) -> None:
        if not self.ended:
            self.ended = reason
        self.wake.set()


@dataclass(eq=False)
class LiveSubscription:
    name: str
    pattern: str
    limit: int
    stream: Stream = field(default_factory=Stream)
    owner: str = ""
    buffer: deque = field(default_factory=deque)
    delivered: int = 0
    dropped: int = 0
    told_dropped: int = 0

    durable = False

    def may(self, user: str, admin: bool) -> bool:
        return admin or user == self.owner

    def sub(self) -> Sub:
        return Sub(self.name, self.pattern, False)

    def offer(self, event: pubsub_pb2.SubscribeEvent) -> None:
        if len(self.buffer) >= self.limit:
            self.dropped += 1
        else:
            self.buffer.append(event)
        self.stream.wake.set()

    def take(self) -> list[pubsub_pb2.SubscribeEvent]:
        """What to write to the client now (the drop total first when it grew)."""
        out = []
        if self.dropped > self.told_dropped:
            self.told_dropped = self.dropped
            out.append(pubsub_pb2.SubscribeEvent(dropped=pubsub_pb2.Dropped(total=self.dropped)))
        while self.buffer:
            out.append(self.buffer.popleft())
        self.delivered += sum(1 for e in out if e.HasField("delivery"))
        return out


@dataclass(eq=False)
class DurableSubscription:
    name: str
    pattern: str
    backlog: int = 0                        # rows in pub_queue for it
    owner: str = ""                         # stored with it in pub_subscription
    stream: Stream | None = None            # the attached client, if any
    window: int = 256
    inflight: dict[str, int] = field(default_factory=dict)   # pub_id -> queue seq, sent and not acknowledged
    cursor: int = 0                         # highest queue seq sent on the attached stream
    max_sent: int = 0                       # highest queue seq ever sent (a lower one is a redelivery)
    delivered: int = 0
    # rows may wait that the attached stream was not sent: set when a row is queued, on attach and when a read
    # stopped at its limit; cleared as a read starts. A wake for an ack alone then reads nothing from the spool.
    unread: bool = True

    durable = True

    def may(self, user: str, admin: bool) -> bool:
        return admin or user == self.owner

    def sub(self) -> Sub:
        return Sub(self.name, self.pattern, True)

    def attach(self, stream: Stream, window: int) -> None:
        if self.stream is not None:
            self.stream.end(f"durable subscription {self.name!r} was taken over by a new client")
        self.stream = stream
        self.window = window
        self.inflight.clear()
        self.cursor = 0                     # everything unacknowledged goes again
        self.unread = True

    def detach(self, stream: Stream) -> None:
        if self.stream is stream:
            self.stream = None
            self.inflight.clear()

    def wake(self) -> None:
        if self.stream is not None:
            self.stream.wake.set()

    def queued(self) -> None:
        """A row for it was committed: the attached stream reads the queue again."""
        self.backlog += 1
        self.unread = True
        self.wake()
