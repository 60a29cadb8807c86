"""The node's resources metrics record (ResourceManager.snapshot and each link queue's snapshot) is JSON and
carries the numbers the brief lists: buffers, streams, recipient space, RBSAD, and the links' queues."""
from __future__ import annotations

import json
import time

from node.registry import config_from_dict as from_dict
from node.policy import PassThrough
from node.resource_manager import ResourceManager
from node.piece import Piece

F = 1000


def piece(msg: str, dst: str, fragments: int, hops: int = 1, prio: int = 1) -> Piece:
    now = time.time()
    return Piece(msg, dst, 0, fragments * F, hops, "a", "", ["bob"], prio, now, now + 60, "", fragments,
                 b"x" * F)


def test_snapshot_is_json_and_complete() -> None:
    cfg = from_dict({"name": "b", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2",
                     "neighbours": {"a": "127.0.0.1:3", "c": "127.0.0.1:4"}, "routes": {"d": "c", "e": "c"},
                     "resources": {"transit_buffers": 8, "class_min": 1, "input_pool": 4, "stream_allocation": 1,
                                   "recipient_pool": 40, "recipient_single_share": 0.25,   # multi part: 30
                                   "removal_interval": 0.0, "rbsad": 2.0, "rbsad_probability": 1.0}})
    rm = ResourceManager(cfg, lambda _peer: None)
    s = piece("s", "d", 5, prio=2)                     # a stream through b: one class-1 buffer
    assert rm.admit("a", s) is None
    rm.stored("a", s, True)
    m = piece("m", "b", 20, hops=2)                    # for b itself: reserves 20 of 30, in use at once
    assert rm.admit("c", m) is None
    rm.stored("c", m, True)
    n = piece("n", "b", 20, hops=2)                    # does not fit behind m: queued (FCFS)
    verdict = rm.admit("a", n)
    assert verdict is not None and verdict[0].startswith("recipient_wait")
    assert rm.gate(piece("g", "c", 1)) > time.monotonic()   # RBSAD: b is next-to-last for c
    q = rm.make_queue("c", lambda: None)
    q.push(s)

    # the shape node/metrics.py writes: the policy's record plus each neighbour's queue
    rec = {"resources": rm.snapshot(), "neighbours": {"c": {"scheduler": q.snapshot()}}}
    back = json.loads(json.dumps(rec))
    res = back["resources"]
    assert res["buffers"]["usage"] == [0, 1, 0, 0, 0] and res["buffers"]["limits"] == [4, 2, 2, 2, 2]
    # Was active_by_neighbour {"a": 1, "c": 1} (upstream and downstream): the node counts upstreams.
    assert res["streams"] == {"active": 2, "by_upstream": {"a": 1, "c": 1}, "allocated_buffers": 1,
                              "held_fragments": 1}   # the recipient-side stream of m holds no transit buffer
    assert res["recipient"]["used"] == {"single": 0, "multi": 20}
    assert res["recipient"]["reservation_queue_length"] == 1 and res["recipient"]["reservation_queue_fragments"] == 20
    assert res["rbsad"]["draws"] == 1 and res["rbsad"]["delayed"] == 1 and res["rbsad"]["total_delay"] > 0
    assert res["refusals"] == {"recipient_wait": 1}
    assert back["neighbours"]["c"]["scheduler"]["queued_by_priority"] == {"2": 1}

    rm.release_mail("m")                               # read: n's reservation is granted, not yet used
    after = rm.snapshot()
    assert after["recipient"]["reserved"] == 20 and after["recipient"]["reservation_queue_length"] == 0
    assert after["room_signals"] == 1                  # a, refused for n, is told there is room


def test_a_node_without_resource_management_reports_no_resources() -> None:
    policy = PassThrough()
    assert policy.managed is False and policy.snapshot() == {}
