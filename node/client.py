"""A small blocking client for a node's management address (Submit, Control, PubSub): CLI, tests, benchmarks.

A node with `security.tls` serves its management port over TLS with its own certificate, which names the node
(DNS:<node>). The client is given the CA certificate to trust and the node's name, and checks that name rather
than the address it dials (`grpc.ssl_target_name_override`, as the Link dialler does): a certificate of another
CA, or one naming another node, fails the handshake.
"""
from __future__ import annotations

import json
import queue
import threading
from dataclasses import dataclass
from typing import Iterator

import grpc

from node.rpc import (common_pb2, control_pb2, control_pb2_grpc, gateway_pb2, gateway_pb2_grpc, pools_pb2,
                      pools_pb2_grpc, pubsub_pb2, pubsub_pb2_grpc, submit_pb2, submit_pb2_grpc)
from node.errors import UserError
from node.security.tls import TARGET_NAME_OPTION


# Management channels ping the node when idle, so a client on a silently cut path (a subscriber waiting for
# publications) hears that the node is gone instead of waiting forever; the node's management server
# permits pings this often (node/daemon.py).
KEEPALIVE_OPTIONS = [("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 5_000),
                     ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.max_pings_without_data", 0)]
NO_GATEWAY = "has no gateway (its node config has no enabled gateway: section)"
CLOSE_WAIT = 5.0        # seconds Subscription.close() waits for the node to take the last acks
DELIVERY_BATCH = 64     # deliveries a subscription lets the node put in one stream message (fewer messages, less CPU)
ACK_MERGE = 1024        # publication ids one ack message carries at most when queued acks are merged
_NOTHING = object()


@dataclass(frozen=True)
class Access:
    """What a client needs to call one node: its token ("" for none) and, when the node serves its management
    port over TLS, the CA certificate (PEM) that issued the node's certificate and the name it must carry."""
    token: str = ""
    ca: bytes = b""
    name: str = ""


class SubscriptionEnded(UserError):
    """A Subscribe stream ended: `code` is the gRPC status name (UNAVAILABLE: the node is not reachable;
    ABORTED: taken over by another client; CANCELLED: the node shut down or the subscription was removed;
    UNAUTHENTICATED: a token refused, or the node's certificate failed the TLS check)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class SendResult:
    accepted: bool
    msg_id: str
    reason: str


def parse_recipient(text: str) -> common_pb2.Recipient:
    """"node" or "user@node"."""
    user, _, node = text.rpartition("@")
    return common_pb2.Recipient(node=node.strip(), user=user.strip())


def tls_problem(exc: grpc.RpcError, address: str, name: str) -> str | None:
    """One sentence when a call failed a TLS check (a lasting failure, not worth retrying), else None."""
    details = exc.details() or ""
    if "Hostname Verification" in details:
        return f"the certificate of the node at {address} does not name {name!r} (TLS refused)"
    if "CERTIFICATE_VERIFY_FAILED" in details:
        return f"the certificate of the node at {address} is not from the CA this client trusts (TLS refused)"
    if "WRONG_VERSION_NUMBER" in details:
        return f"the node at {address} does not speak TLS on its management port"
    return None


class NodeClient:
    def __init__(self, address: str, token: str = "", timeout: float = 30.0, ca: bytes = b"",
                 name: str = "") -> None:
        """`ca` (PEM): dial over TLS, trusting only that CA, and accept only a certificate naming `name`."""
        self.address = address
        self.timeout = timeout
        self.name = name
        self._md = (("authorization", token),) if token else ()
        options = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20),
                   *KEEPALIVE_OPTIONS]
        if ca:
            if not name:
                raise UserError(f"a TLS client of {address} needs the node's name to check its certificate.")
            self._channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=ca),
                                                options=options + [(TARGET_NAME_OPTION, name)])
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self.submit = submit_pb2_grpc.SubmitStub(self._channel)
        self.control = control_pb2_grpc.ControlStub(self._channel)
        self.pubsub = pubsub_pb2_grpc.PubSubStub(self._channel)
        self.gateway_stub = gateway_pb2_grpc.GatewayStub(self._channel)
        self.pools = pools_pb2_grpc.PoolsStub(self._channel)

    @classmethod
    def to(cls, address: str, access: Access, timeout: float = 30.0) -> "NodeClient":
        """A client of the node at `address` with what `access` holds for it."""
        return cls(address, access.token, timeout, ca=access.ca, name=access.name)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "NodeClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, fn, request, **kw):
        kw.setdefault("metadata", self._md)      # the token goes with every call (security.auth needs it on all)
        missing = kw.pop("unimplemented", "")     # what it means when the node does not offer the call
        try:
            return fn(request, timeout=kw.pop("timeout", self.timeout), **kw)
        except grpc.RpcError as exc:
            problem = tls_problem(exc, self.address, self.name)
            if problem:
                raise UserError(f"{problem}.") from None
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise UserError(f"node at {self.address} is not reachable ({exc.code().name.lower()}).") from None
            if missing and exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise UserError(f"node at {self.address} {missing}.") from None
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                raise UserError(f"node at {self.address} refused the call: {exc.details()} (a token of the run's "
                                f"secrets/tokens.json is needed).") from None
            raise UserError(f"node at {self.address}: {exc.details()}") from None

    def send(self, to: list[str], size: int | None = None, payload: bytes | None = None, priority: int = 1,
             lifetime: float = 0.0, originator: str = "") -> SendResult:
        req = submit_pb2.SendRequest(originator=originator, recipients=[parse_recipient(t) for t in to],
                                     priority=priority, lifetime=lifetime)
        if payload is not None:
            req.payload = payload
        else:
            req.size = int(size or 0)
        r = self._call(self.submit.Send, req)
        return SendResult(r.accepted, r.msg_id, r.reason)

    def mailbox(self, user: str = "", include_payload: bool = False, limit: int = 0) -> list[submit_pb2.MailItem]:
        """The whole mailbox (or its oldest `limit` items), oldest delivery first, fetched page by page."""
        items: list[submit_pb2.MailItem] = []
        token = ""
        while True:
            reply = self._call(self.submit.ListMailbox, submit_pb2.MailboxRequest(
                user=user, include_payload=include_payload, page_token=token, limit=max(0, limit - len(items))))
            items.extend(reply.items)
            token = reply.next_page_token
            if not token or (limit and len(items) >= limit):
                return items[:limit] if limit else items

    def delete_mail(self, msg_ids: list[str], user: str = "", no_user: bool = False) -> int:
        """Delete `user`'s copies (a user token: "" is its own), or with `no_user` the copies addressed to the node
        without a user; the node never takes "" for every user."""
        req = submit_pb2.DeleteMailRequest(user=user, msg_ids=msg_ids, no_user=no_user)
        return self._call(self.submit.DeleteMail, req).deleted

    def status(self, msg_id: str) -> submit_pb2.StatusReply:
        return self._call(self.submit.Status, submit_pb2.StatusRequest(msg_id=msg_id))

    def stats(self) -> dict:
        return json.loads(self._call(self.control.Stats, control_pb2.StatsRequest(), metadata=self._md).json)

    def health(self, timeout: float = 2.0) -> bool:
        """Whether the node answers; a node that refuses this client's token or fails its TLS check is a UserError
        (waiting is no use)."""
        try:
            return self.control.Health(control_pb2.HealthRequest(), timeout=timeout, metadata=self._md).ready
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                raise UserError(f"node at {self.address} refused the health check: {exc.details()}.") from None
            problem = tls_problem(exc, self.address, self.name)
            if problem:
                raise UserError(f"{problem}.") from None
            return False

    def drain(self, timeout: float) -> control_pb2.DrainReply:
        return self._call(self.control.Drain, control_pb2.DrainRequest(timeout=timeout), metadata=self._md,
                          timeout=timeout + 10)

    def set_routes(self, routes: dict[str, str]) -> int:
        req = control_pb2.SetRoutesRequest(routes=[control_pb2.Route(destination=d, next_hop=h) for d, h in routes.items()])
        return self._call(self.control.SetRoutes, req, metadata=self._md).installed

    def routes(self, timeout: float | None = None) -> control_pb2.GetRoutesReply:
        """The node's routing table, measured links and rules (Control.GetRoutes)."""
        kw = {"timeout": timeout} if timeout is not None else {}
        return self._call(self.control.GetRoutes, control_pb2.GetRoutesRequest(), metadata=self._md, **kw)

    def queue(self, limit: int = 0, page: int = 0) -> list[control_pb2.QueuedCopy]:
        """The copies the node holds for others (or the first `limit`), fetched `page` at a time (0: the node's
        default page)."""
        items: list[control_pb2.QueuedCopy] = []
        token = ""
        while True:
            want = page if not limit else min(page or limit, limit - len(items))
            reply = self._call(self.control.ListQueue, control_pb2.QueueRequest(limit=want, page_token=token),
                               metadata=self._md)
            items.extend(reply.items)
            token = reply.next_page_token
            if not token or (limit and len(items) >= limit):
                return items[:limit] if limit else items

    def set_rules(self, rules: list) -> int:
        """Replace the node's routing rules (the config's form: a list of mappings)."""
        req = control_pb2.SetRulesRequest(rules_json=json.dumps(rules))
        return self._call(self.control.SetRules, req, metadata=self._md).installed

    # -- Gateway (node/gateway/) -----------------------------------------------------------------------
    def gateway(self, gamma: float | None = None, threshold: int | None = None, lower: int | None = None) -> dict:
        """The node's gateway state (its metrics section); with any value given, set those first."""
        if gamma is None and threshold is None and lower is None:
            reply = self._call(self.gateway_stub.GetGateway, gateway_pb2.GetGatewayRequest(), unimplemented=NO_GATEWAY)
        else:
            req = gateway_pb2.SetGatewayRequest(gamma=gamma, threshold=threshold, lower=lower)
            reply = self._call(self.gateway_stub.SetGateway, req, unimplemented=NO_GATEWAY)
        return json.loads(reply.json)

    def gateway_request(self, user: str, throughput: float, guarantee: float, percent: float) -> tuple[bool, str]:
        """Would the gateway accept `user` asking for `throughput` msg/s at `guarantee` (0..1), `percent` of the
        time: (accept, why)."""
        req = gateway_pb2.UserRequest(user=user, throughput=throughput, guarantee=guarantee, percent=percent)
        reply = self._call(self.gateway_stub.RequestUser, req, unimplemented=NO_GATEWAY)
        return reply.accept, reply.why

    # -- PubSub ------------------------------------------------------------------------------------------
    def publish(self, topic: str, size: int | None = None, payload: bytes | None = None, priority: int = 0,
                lifetime: float = 0.0, key: str = "", publisher: str = "") -> pubsub_pb2.PublishReply:
        req = pubsub_pb2.PublishRequest(topic=topic, priority=priority, lifetime=lifetime, key=key, publisher=publisher)
        if payload is not None:
            req.payload = payload
        else:
            req.size = int(size or 0)
        return self._call(self.pubsub.Publish, req)

    def subscribe(self, pattern: str, name: str = "", durable: bool = False, window: int = 0,
                  batch: int = DELIVERY_BATCH) -> "Subscription":
        """A subscription stream: iterate it for events, `ack(...)` what was processed, `close()` when done.
        `batch`: deliveries the node may put in one stream message (the iteration yields them one by one)."""
        return Subscription(self.pubsub, self.address, pubsub_pb2.SubscribeStart(
            pattern=pattern, name=name, durable=durable, window=window, batch=batch), self._md, node=self.name)

    def unsubscribe(self, name: str) -> pubsub_pb2.UnsubscribeReply:
        return self._call(self.pubsub.Unsubscribe, pubsub_pb2.UnsubscribeRequest(name=name))

    def subscriptions(self, remote: bool = False) -> list[pubsub_pb2.SubscriptionInfo]:
        return list(self._call(self.pubsub.ListSubscriptions,
                               pubsub_pb2.ListSubscriptionsRequest(remote=remote)).subscriptions)

    # -- Pools -------------------------------------------------------------------------------------------
    def get_pools(self) -> pools_pb2.GetPoolsReply:
        """The pool controller's view at this node (a replica): leader, term, version and the maps."""
        return self._call(self.pools.GetPools, pools_pb2.GetPoolsRequest(),
                          unimplemented="runs no pools (pools.enabled)")


class Subscription:
    """One Subscribe stream (blocking): the events in arrival order; acks go back on the same stream.
    Iterating raises SubscriptionEnded when the stream ends other than by `close()`."""

    def __init__(self, stub: pubsub_pb2_grpc.PubSubStub, address: str, start: pubsub_pb2.SubscribeStart,
                 metadata: tuple = (), node: str = "") -> None:
        self.address = address
        self.node = node             # the name its TLS certificate must carry (for the error message)
        self._out: queue.Queue = queue.Queue()
        self._out.put(pubsub_pb2.SubscribeRequest(start=start))
        self._call = stub.Subscribe(self._requests(), metadata=metadata)
        self._ended = threading.Event()
        self._call.add_done_callback(lambda _call: self._ended.set())
        self.closed = False

    def _requests(self) -> Iterator[pubsub_pb2.SubscribeRequest]:
        """What goes to the node, in order; acks queued one after another leave as one message (fewer messages for
        the node to read, whatever the caller's ack granularity)."""
        held = _NOTHING                  # taken from the queue but not merged: goes next
        while True:
            item, held = (self._out.get() if held is _NOTHING else held), _NOTHING
            if item is None:
                return
            if item.WhichOneof("kind") == "ack":
                ids = list(item.ack.pub_ids)
                while len(ids) < ACK_MERGE:
                    try:
                        nxt = self._out.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None or nxt.WhichOneof("kind") != "ack":
                        held = nxt
                        break
                    ids.extend(nxt.ack.pub_ids)
                item = pubsub_pb2.SubscribeRequest(ack=pubsub_pb2.SubscribeAck(pub_ids=ids))
            yield item

    def __iter__(self) -> Iterator[pubsub_pb2.SubscribeEvent]:
        """The events, a `deliveries` message taken apart into one `delivery` event each."""
        try:
            for ev in self._call:
                if ev.WhichOneof("kind") == "deliveries":
                    for d in ev.deliveries.items:
                        yield pubsub_pb2.SubscribeEvent(delivery=d)
                else:
                    yield ev
        except grpc.RpcError as exc:
            if self.closed and exc.code() == grpc.StatusCode.CANCELLED:
                return
            code = exc.code().name
            problem = tls_problem(exc, self.address, self.node)
            if problem:         # the node is there but is not the one asked for: no use reconnecting
                raise SubscriptionEnded(f"{problem}.", grpc.StatusCode.UNAUTHENTICATED.name) from None
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise SubscriptionEnded(f"node at {self.address} is not reachable ({code.lower()}).", code) from None
            raise SubscriptionEnded(f"node at {self.address}: {exc.details()}", code) from None

    def ack(self, pub_ids: list[str]) -> None:
        if pub_ids and not self.closed:
            self._out.put(pubsub_pb2.SubscribeRequest(ack=pubsub_pb2.SubscribeAck(pub_ids=pub_ids)))

    def close(self, wait: float = CLOSE_WAIT) -> None:
        """End the stream: the node first takes every ack sent before (they are durable once the stream has
        ended), waiting at most `wait` seconds; then the call is cancelled."""
        if self.closed:
            return
        self.closed = True
        self._out.put(pubsub_pb2.SubscribeRequest(close=pubsub_pb2.SubscribeClose()))
        self._out.put(None)
        self._ended.wait(wait)
        self._call.cancel()

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
