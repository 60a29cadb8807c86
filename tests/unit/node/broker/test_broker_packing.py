"""Deliveries to one subscriber's stream packed into few stream messages (node/broker/subscriptions.py)."""
from __future__ import annotations

from node.broker.subscriptions import BATCH_BYTES, packed
from node.rpc import pubsub_pb2


def one(i: int, size: int = 10) -> pubsub_pb2.SubscribeEvent:
    return pubsub_pb2.SubscribeEvent(delivery=pubsub_pb2.Delivery(pub_id=f"p{i}", payload=b"x" * size))


def ids(messages: list[pubsub_pb2.SubscribeEvent]) -> list[list[str]]:
    out = []
    for m in messages:
        kind = m.WhichOneof("kind")
        out.append([d.pub_id for d in m.deliveries.items] if kind == "deliveries" else
                   [m.delivery.pub_id] if kind == "delivery" else [kind])
    return out


def test_runs_of_deliveries_are_packed_in_order_up_to_the_batch_and_around_other_events() -> None:
    dropped = pubsub_pb2.SubscribeEvent(dropped=pubsub_pb2.Dropped(total=3))
    events = [one(i) for i in range(5)] + [dropped] + [one(i) for i in range(5, 7)] + [dropped, one(7)]
    assert ids(packed(events, 2)) == [["p0", "p1"], ["p2", "p3"], ["p4"], ["dropped"], ["p5", "p6"], ["dropped"],
                                      ["p7"]]
    assert packed(events, 0) == events and packed(events, 1) == events       # a client that did not ask
    assert len(packed(events, 100)) == 5


def test_a_message_of_deliveries_stays_within_its_bytes_and_a_big_one_goes_alone() -> None:
    half = BATCH_BYTES // 2
    events = [one(0, half), one(1, half), one(2, 1), one(3, 2 * BATCH_BYTES), one(4, 1)]
    assert ids(packed(events, 100)) == [["p0", "p1"], ["p2"], ["p3"], ["p4"]]
