"""A node subsystem's own subscription at this node's broker, its deliveries handed to a callback in-process.

This is the one way node/pools/ receives what travels over the broker (assignments, heartbeats): the broker's
client API itself (`Broker.subscribe`, `events`, `ack`, `detach`, what the PubSub service calls per client
stream), with the subsystem as the client and the node's admin as the owner. A durable subscription lives in the
spool like any other, its interest is flooded like any other, and a delivery is acknowledged only after the
callback returned, so one that a crash interrupted comes again after the restart (the callback must take a
delivery twice: an assignment is refused the second time as not newer). A non-durable one is at most once.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from node.broker.broker import Broker
from node.rpc import pubsub_pb2

log = logging.getLogger("node.pools")

Handler = Callable[[pubsub_pb2.Delivery], Awaitable[None]]
RETRY = 1.0                 # seconds before attaching again after the spool failed


class Listener:
    """One subscription with `name` on `pattern` at `broker`, read by a task from `start()` to `stop()`."""

    def __init__(self, broker: Broker, name: str, pattern: str, durable: bool, handler: Handler) -> None:
        self.broker = broker
        self.start_msg = pubsub_pb2.SubscribeStart(pattern=pattern, name=name, durable=durable)
        self.handler = handler
        self.handled = 0
        self.failed = 0
        self._task: asyncio.Task | None = None
        self._sub = None
        self._stream = None

    async def start(self) -> None:
        """After the broker started: the subscription exists (and its interest is flooded) when this returns."""
        self._sub, self._stream = await self.broker.subscribe(self.start_msg, "", True)
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        broken = False
        while True:
            try:
                if broken:      # attach again: what was sent and not acknowledged comes again
                    self.broker.detach(self._sub, self._stream)
                    self._sub, self._stream = await self.broker.subscribe(self.start_msg, "", True)
                    broken = False
                if await self._serve():
                    return                      # the stream was ended (the node is stopping)
            except asyncio.CancelledError:
                raise
            except Exception:                   # the spool failed now: the deliveries wait there
                log.exception("%s: pools: subscription %s failed", self.broker.me, self.start_msg.name)
                broken = True
                await asyncio.sleep(RETRY)

    async def _serve(self) -> bool:
        """Hand deliveries to the handler, acknowledging each after it; True once the stream was ended."""
        while True:
            events = await self.broker.events(self._sub, self._stream)
            if not events:
                return True
            for ev in events:
                if not ev.HasField("delivery"):
                    continue
                try:
                    await self.handler(ev.delivery)
                    self.handled += 1
                except asyncio.CancelledError:
                    raise
                except Exception:
                    self.failed += 1            # never again: a delivery that breaks the handler must not stall it
                    log.exception("%s: pools: handling %s failed", self.broker.me, ev.delivery.topic)
                await self.broker.ack(self._sub, self._stream, [ev.delivery.pub_id])

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._sub is not None:
            self.broker.detach(self._sub, self._stream)
