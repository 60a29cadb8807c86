"""The combined metrics record is JSON-serialisable and carries the numbers the brief lists."""
from __future__ import annotations

import json

from node.resources import (
    BufferPool,
    BufferPoolConfig,
    LinkScheduler,
    RbsadDelay,
    RecipientPool,
    StreamTable,
    resources_snapshot,
)


def test_snapshot_is_json_and_complete() -> None:
    pool = BufferPool(BufferPoolConfig.for_longest_route(3))
    streams = StreamTable(pool)
    streams.open("s", upstream="a", downstream="c", buffer_class=1, fragments=5, now=0.0)
    recipient = RecipientPool()
    recipient.reserve("m", 300, 0.0)  # granted from the 375 multi-fragment fragments
    recipient.reserve("n", 100, 0.0)  # queued
    sched: LinkScheduler[object] = LinkScheduler()
    sched.enqueue("s", b"frag", 2)
    rec = resources_snapshot(pool=pool, streams=streams, recipient=recipient, links={"b": sched}, rbsad=RbsadDelay())
    text = json.dumps(rec)
    back = json.loads(text)
    assert back["buffers"]["usage"] == [0, 1, 0, 0] and back["buffers"]["limits"] == [1000, 100, 100, 100]
    assert back["streams"]["active_streams"] == 1 and back["streams"]["allocated_buffers"] == 1
    assert back["streams"]["active_by_neighbour"] == {"a": 1, "c": 1}
    assert back["recipient"]["reservation_queue_length"] == 1 and back["recipient"]["reserved"] == 300
    assert back["links"]["b"]["queued_by_priority"] == {"2": 1}
    assert resources_snapshot() == {}
