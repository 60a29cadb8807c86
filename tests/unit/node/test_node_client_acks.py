"""The node client's Subscribe stream sends acks queued one after another as one message (node/client.py)."""
from __future__ import annotations

from typing import Any, Callable, Iterator

from node.client import Subscription
from node.rpc import pubsub_pb2


class Call:
    """The stub's call object as far as Subscription uses it before anything is read (the logic above gRPC)."""

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        pass

    def cancel(self) -> None:
        pass


class Stub:
    def __init__(self) -> None:
        self.requests: Iterator[pubsub_pb2.SubscribeRequest] | None = None

    def Subscribe(self, requests: Iterator[pubsub_pb2.SubscribeRequest], metadata: tuple = ()) -> Call:  # noqa: N802
        self.requests = requests
        return Call()


def test_queued_acks_leave_as_one_message_in_order_before_the_close() -> None:
    stub = Stub()
    sub = Subscription(stub, "nowhere", pubsub_pb2.SubscribeStart(pattern="a.>"))
    sub.ack(["p1"])
    sub.ack(["p2", "p3"])
    sub.ack(["p4"])
    sub.close(wait=0)
    sent = [(r.WhichOneof("kind"), list(r.ack.pub_ids)) for r in stub.requests]
    assert sent == [("start", []), ("ack", ["p1", "p2", "p3", "p4"]), ("close", [])]
