"""The PubSub gRPC service: a thin layer over node/broker/broker.py (protocol here, policy there)."""
from __future__ import annotations

import asyncio
import logging

import grpc
from google.protobuf.message import DecodeError

from node.broker.broker import Broker, BrokerError
from node.broker.subscriptions import packed
from node.rpc import pubsub_pb2, pubsub_pb2_grpc
from node.errors import clip
from node.security.tokens import Tokens, deny

log = logging.getLogger("node.broker")

START_TIMEOUT = 30.0         # seconds a Subscribe call may take to send its first message
# How a stream ends when the client broke its protocol after `start`: INVALID_ARGUMENT, not CANCELLED (the code of
# a cancelled call, which the client library takes for the end of its own close: the error went unseen).
NOT_AN_ACK = "a Subscribe stream takes only acks (and a close) after its start"
NOT_A_REQUEST = "the client sent a message that is not a SubscribeRequest"


class PubSubService(pubsub_pb2_grpc.PubSubServicer):
    """With client tokens (security.auth) any known token publishes and subscribes; a user token publishes only
    as its user. A subscription belongs to the user whose token made it: only that user or the admin attaches to
    it, acknowledges for it, lists it or removes it (the broker decides: node/broker/broker.py)."""

    def __init__(self, broker: Broker, tokens: Tokens | None = None) -> None:
        self.broker = broker
        self.tokens = tokens or Tokens(broker.cfg)

    async def Publish(self, request: pubsub_pb2.PublishRequest, context) -> pubsub_pb2.PublishReply:  # noqa: N802
        body = request.WhichOneof("body")
        if body is None:
            return pubsub_pb2.PublishReply(accepted=False, reason="a publication needs a payload or a size")
        caller = self.tokens.caller(context)
        if not caller.admin:
            if request.publisher and request.publisher != caller.user:
                await deny(context, clip(f"a user token publishes only as its user, not as {request.publisher!r}"))
            request.publisher = caller.user
        return await self.broker.publish(request.topic, request.payload if body == "payload" else None,
                                         request.size if body == "size" else None, request.priority,
                                         request.lifetime, request.key, request.publisher)

    async def Subscribe(self, request_iterator, context):  # noqa: N802
        try:
            first = await asyncio.wait_for(context.read(), START_TIMEOUT)
        except asyncio.TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no SubscribeStart within 30 s")
            return
        except DecodeError:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message is not a SubscribeRequest")
            return
        if first is grpc.aio.EOF:
            return
        if first.WhichOneof("kind") != "start":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message of Subscribe must be `start`")
        caller = self.tokens.caller(context)
        try:
            sub, stream = await self.broker.subscribe(first.start, caller.user, caller.admin)
        except BrokerError as exc:
            await context.abort(getattr(grpc.StatusCode, exc.code), clip(str(exc)))   # it may echo a long name
        acks = asyncio.ensure_future(self._acks(context, sub, stream))
        try:
            await context.write(pubsub_pb2.SubscribeEvent(subscribed=pubsub_pb2.Subscribed(
                node=self.broker.me, name=sub.name, durable=sub.durable, backlog=getattr(sub, "backlog", 0))))
            while True:
                events = await self.broker.events(sub, stream)
                if not events:
                    break
                for ev in packed(events, first.start.batch):    # several deliveries per message when asked
                    await context.write(ev)
        finally:
            acks.cancel()
            self.broker.detach(sub, stream)
        if stream.ended not in ("", "closed", "client closed"):
            code = (grpc.StatusCode.ABORTED if "taken over" in stream.ended else
                    grpc.StatusCode.INVALID_ARGUMENT if stream.ended in (NOT_AN_ACK, NOT_A_REQUEST) else
                    grpc.StatusCode.CANCELLED)
            await context.abort(code, stream.ended)

    async def _acks(self, context, sub, stream) -> None:
        """Read the client's acknowledgements until it half-closes; a bad message ends the stream. The next
        message is read while an ack's commit is under way, so acks that arrive meanwhile share one commit."""
        pending: set[asyncio.Task] = set()

        def done(t: asyncio.Task) -> None:
            pending.discard(t)
            if not t.cancelled() and t.exception() is not None:      # the spool failed: as if the client went
                log.debug("subscribe stream %s: %r", sub.name, t.exception())
                stream.end("client closed")
        try:
            while True:
                msg = await context.read()
                if msg is grpc.aio.EOF:
                    return
                kind = msg.WhichOneof("kind")
                if kind == "close":           # every ack before it is awaited: durable now
                    await asyncio.gather(*pending, return_exceptions=True)
                    stream.end("client closed")
                    return
                if kind != "ack":
                    stream.end(NOT_AN_ACK)
                    return
                # not awaited here; acks are taken in order (each task starts in the order made)
                t = asyncio.ensure_future(self.broker.ack(sub, stream, list(msg.ack.pub_ids)))
                pending.add(t)
                t.add_done_callback(done)
        except DecodeError:
            stream.end(NOT_A_REQUEST)
        except asyncio.CancelledError:
            raise
        except Exception as exc:       # the call went away: the stream's writes fail next and end it
            log.debug("subscribe stream %s: %r", sub.name, exc)
            stream.end("client closed")

    async def Unsubscribe(self, request: pubsub_pb2.UnsubscribeRequest, context) -> pubsub_pb2.UnsubscribeReply:  # noqa: N802
        caller = self.tokens.caller(context)
        try:
            removed, discarded = await self.broker.unsubscribe(request.name, caller.user, caller.admin)
        except BrokerError as exc:
            await context.abort(getattr(grpc.StatusCode, exc.code), clip(str(exc)))
        if not removed:
            await context.abort(grpc.StatusCode.NOT_FOUND,
                                clip(f"no subscription {request.name!r} at {self.broker.me}"))
        return pubsub_pb2.UnsubscribeReply(removed=True, discarded=discarded)

    async def ListSubscriptions(self, request: pubsub_pb2.ListSubscriptionsRequest, context):  # noqa: N802
        caller = self.tokens.caller(context)
        return pubsub_pb2.ListSubscriptionsReply(
            subscriptions=self.broker.subscriptions(request.remote, caller.user, caller.admin))
