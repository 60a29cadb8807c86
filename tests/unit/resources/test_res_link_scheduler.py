"""Prioritised round robin on one outgoing link as the node runs it (node/transfer_queue.py).

1:2:4 shares by priority, round robin within one priority, a bounded wait for a low-priority transfer.
A transfer here is one message (the fragmenting mode's grouping); pieces are single-fragment messages,
so no stream credits are involved.
"""
from __future__ import annotations

import collections
import itertools

import pytest

from node.piece import Piece
from node.transfer_queue import TransferQueue

_offsets = itertools.count()


def piece(msg: str, prio: int) -> Piece:
    """One more piece of message `msg` (a fresh offset each time, so re-enqueued pieces are distinct)."""
    return Piece(msg, "d", next(_offsets), 10**9, 0, "s", "", [""], prio, 0.0, 0.0, "", 1, b"x" * 10)


def queue() -> TransferQueue:
    return TransferQueue(lambda: None, fifo_per_destination=False, is_stream=lambda p: False)


@pytest.mark.parametrize("backlog", [1, 3])
def test_shares_follow_priorities_1_2_4(backlog: int) -> None:
    q = queue()
    prio = {"a": 1, "b": 2, "c": 4}
    served: collections.Counter[str] = collections.Counter()
    for tid, p in prio.items():      # keep every transfer backlogged (also with a single queued piece)
        for _ in range(backlog):
            q.push(piece(tid, p))
    for _ in range(7000):
        got = q.pop()
        assert got is not None
        served[got.msg_id] += 1
        q.push(piece(got.msg_id, prio[got.msg_id]))
    # Expected 1000 : 2000 : 4000; allow 10 %.
    for tid, expected in {"a": 1000, "b": 2000, "c": 4000}.items():
        assert abs(served[tid] - expected) <= 0.1 * expected, served
    snap = q.snapshot()
    assert snap["queued_by_priority"] == {"1": backlog, "2": backlog, "4": backlog}
    assert snap["served_by_priority"] == {"1": served["a"], "2": served["b"], "4": served["c"]}


def test_round_robin_within_one_priority() -> None:
    q = queue()
    for tid in ("x", "y", "z"):
        for _ in range(2):
            q.push(piece(tid, 3))
    assert [q.pop().msg_id for _ in range(6)] == ["x", "y", "z", "x", "y", "z"]
    assert q.pop() is None


def test_stride_bounds_the_wait_of_a_low_priority_transfer() -> None:
    # Was aging (a transfer passed over `aging_after` times gains a level, waits <= 3 x aging_after picks).
    # The node's queue has no aging: stride scheduling bounds the wait by the weight ratio instead,
    # here ten transfers of weight 8 against one of weight 1: at most 80 picks between its turns.
    q = queue()
    for i in range(10):
        q.push(piece(f"h{i}", 8))
    q.push(piece("low", 1))
    waits: list[int] = []
    gap = 0
    picks = 3000
    for _ in range(picks):
        got = q.pop()
        assert got is not None
        if got.msg_id == "low":
            waits.append(gap)
            gap = 0
        else:
            gap += 1
        q.push(piece(got.msg_id, got.prio))    # constant load: every transfer stays backlogged
    assert max(waits + [gap]) <= 80, max(waits + [gap])   # never starved, also not at the end
    assert len(waits) >= picks // 81                     # its 1/81 share of the link


def test_priority_below_one_counts_as_one_and_a_removed_transfer_is_gone() -> None:
    # Was a ValueError for a priority outside 1..max_priority: the engine checks the range at submission
    # (node/submission.py); the queue serves priority 0 like 1.
    q = queue()
    q.push(piece("zero", 0))
    q.push(piece("one", 1))
    order: list[str] = []
    for _ in range(100):
        got = q.pop()
        order.append(got.msg_id)
        q.push(piece(got.msg_id, got.prio))
    assert order.count("zero") == order.count("one") == 50
    q.remove_if(lambda p: True)
    q.push(piece("t", 2))
    q.push(piece("t", 2))
    assert len(q.remove_if(lambda p: p.msg_id == "t")) == 2
    assert q.pop() is None and len(q) == 0 and q.messages == 0 and q.bytes == 0
