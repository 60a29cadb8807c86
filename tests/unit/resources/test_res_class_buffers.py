"""`resources.class_buffers`: transit classes sized per class, and the non-fragmenting comparator's
messages counted in fragment-sized buffers, first come first served (thesis 6.2.1, 6.2.3)."""
from __future__ import annotations

import time

from node.config import NodeConfig

from node.registry import config_from_dict as from_dict
from node.resource_manager import ResourceManager
from node.piece import Piece

F = 1000


def cfg(mode: str, **res) -> NodeConfig:
    """Node b between a and c; it knows five nodes, so classes 0..4 (four transit classes)."""
    return from_dict({"name": "b", "mode": mode, "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2",
                      "fragment_size": F,
                      "neighbours": {"a": "127.0.0.1:3", "c": "127.0.0.1:4"}, "routes": {"d": "c", "e": "c"},
                      "resources": {"adjust_every": 10**6, "removal_interval": 0.0, **res}})


def manager(mode: str = "non-fragmenting", **res) -> ResourceManager:
    return ResourceManager(cfg(mode, **res), lambda _peer: None)


def message(msg: str, size_fragments: int, hops: int = 1) -> Piece:
    """A non-fragmenting message in one piece on its way from a to d."""
    now = time.time()
    total = size_fragments * F
    return Piece(msg, "d", 0, total, hops, "a", "", ["bob"], 1, now, now + 3600, "", 1, b"x" * total)


def test_class_buffers_sizes_every_transit_class_and_the_old_split_stays_the_default() -> None:
    assert manager(class_buffers=100).pool.snapshot()["limits"][1:] == [100] * 4
    assert manager(transit_buffers=40).pool.snapshot()["limits"][1:] == [10] * 4
    assert manager("fragmenting", class_buffers=30).pool.snapshot()["limits"][1:] == [30] * 4


def test_a_message_takes_one_buffer_per_fragment_of_its_size_and_frees_them_all() -> None:
    rm = manager(class_buffers=10)
    big, small = message("big", 7), message("small", 1)
    assert rm.admit("a", big) is None
    assert rm.pool.usage(1) == 7
    assert rm.admit("a", small) is None
    assert rm.pool.usage(1) == 8
    rm.forwarded(big)
    assert rm.pool.usage(1) == 1
    # without class_buffers a message of any size is one unit (the old comparator)
    old = manager(transit_buffers=40)
    assert old.admit("a", message("big", 7)) is None and old.pool.usage(1) == 1


def test_the_class_queue_is_first_come_first_served_and_a_grant_waits_for_its_message() -> None:
    rm = manager(class_buffers=10)
    first = message("first", 8)
    assert rm.admit("a", first) is None
    big = message("big", 5)
    verdict = rm.admit("a", big)                        # 2 free: it queues
    assert verdict is not None and verdict[0].startswith("class_full") and verdict[1] > 0
    small = message("small", 1)
    verdict = rm.admit("a", small)                      # would fit, but may not overtake the queued big one
    assert verdict is not None and verdict[0].startswith("class_full")
    rm.forwarded(first)                                 # 10 free: big, then small, granted on their behalf
    assert rm.pool.usage(1) == 6 and rm.snapshot()["fcfs"] == {"waiting": 0, "granted": 2}
    assert rm.admit("a", big) is None                   # the next offer claims the grant
    assert rm.admit("a", small) is None
    assert rm.pool.usage(1) == 6 and rm.snapshot()["fcfs"] == {"waiting": 0, "granted": 0}
    rm.forwarded(big)
    rm.forwarded(small)
    assert rm.pool.usage(1) == 0


def test_a_message_larger_than_its_class_is_refused_for_ever() -> None:
    rm = manager(class_buffers=10)
    verdict = rm.admit("a", message("huge", 11))
    assert verdict is not None and verdict[1] == 0.0 and "can never fit buffer class 1" in verdict[0]
    assert rm.pool.usage(1) == 0 and rm.snapshot()["refusals"] == {"class_never_fits": 1}


def test_without_classes_a_message_larger_than_the_shared_pool_is_refused_for_ever() -> None:
    rm = manager(class_buffers=10, buffer_classes=False, input_pool=4, transit_buffers=6)   # one pool of 10
    verdict = rm.admit("a", message("huge", 11))
    assert verdict is not None and verdict[1] == 0.0 and "can never fit the shared buffer pool" in verdict[0]
    assert rm.snapshot()["refusals"] == {"class_never_fits": 1}
    assert rm.admit("a", message("fits", 10)) is None


def test_a_sender_that_stops_offering_loses_its_place_and_its_grant() -> None:
    rm = manager(class_buffers=10)
    first = message("first", 8)
    assert rm.admit("a", first) is None
    assert rm.admit("a", message("gone", 5)) is not None     # queued, then never offered again
    assert rm.admit("a", message("later", 9)) is not None    # queued behind it
    time.sleep(0.2)
    rm.admit("a", message("later", 9))                       # still offered
    rm.sweep(idle=0.1, stream_idle=60.0)
    assert rm.snapshot()["fcfs"] == {"waiting": 1, "granted": 0}
    rm.forwarded(first)
    assert rm.snapshot()["fcfs"] == {"waiting": 0, "granted": 1} and rm.pool.usage(1) == 9
    time.sleep(0.2)
    rm.sweep(idle=0.1, stream_idle=60.0)                     # granted, never claimed: given back
    assert rm.snapshot()["fcfs"] == {"waiting": 0, "granted": 0} and rm.pool.usage(1) == 0


def test_submissions_take_input_buffers_by_size() -> None:
    rm = manager(class_buffers=10, input_pool=20)
    now = time.time()
    pieces = [Piece("m", "d", 0, 6 * F, 0, "b", "", ["bob"], 1, now, now + 3600, "", 1, b"x" * 6 * F, "queued")]
    assert rm.admit_submission(pieces, 1, internal=False) is None
    assert rm.pool.usage(0) == 6
    rm.forwarded(pieces[0])
    assert rm.pool.usage(0) == 0
