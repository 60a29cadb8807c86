"""The managed outgoing queue of one link (node/transfer_queue.py): shares, credits, timers, FCFS."""
from __future__ import annotations

import asyncio
import collections
import time

from node.piece import Piece
from node.transfer_queue import TransferQueue


def piece(msg: str, off: int = 0, prio: int = 1, fragments: int = 1, dst: str = "d") -> Piece:
    return Piece(msg, dst, off, 10_000, 0, "s", "", [""], prio, 0.0, 0.0, "", fragments, b"x" * 10)


def queue(fifo: bool = False, gate=None) -> tuple[TransferQueue, list[int]]:
    wakes: list[int] = []
    q = TransferQueue(lambda: wakes.append(1), fifo_per_destination=fifo,
                      is_stream=lambda p: p.fragments >= 3, gate=gate)
    return q, wakes


def test_priorities_1_2_4_get_shares_within_10_percent_of_1_2_4() -> None:
    q, _ = queue()
    rounds = 7000
    for prio in (1, 2, 4):
        for i in range(rounds):
            q.push(piece(f"m{prio}", off=i, prio=prio))
    served = collections.Counter(q.pop().prio for _ in range(rounds))
    total = sum(served.values())
    for prio in (1, 2, 4):
        share = served[prio] / total
        assert abs(share - prio / 7) <= 0.1 * prio / 7, (prio, share)


def test_a_low_priority_transfer_is_not_starved() -> None:
    q, _ = queue()
    q.push(piece("low", prio=1))
    for i in range(1000):
        q.push(piece("high", off=i, prio=15))
    order = [q.pop().msg_id for _ in range(40)]
    assert "low" in order          # stride scheduling: priority 15 gets ~15 turns per turn of priority 1


def test_messages_are_multiplexed_so_a_small_one_does_not_wait_for_a_big_one() -> None:
    q, _ = queue()
    for i in range(100):
        q.push(piece("big", off=i))
    q.push(piece("small"))
    first = [q.pop().msg_id for _ in range(3)]
    assert "small" in first


def test_non_fragmenting_queue_is_fcfs_per_destination() -> None:
    q, _ = queue(fifo=True)
    for i in range(5):
        q.push(piece("first", off=i))
    q.push(piece("second"))
    q.push(piece("elsewhere", dst="e"))
    order = [q.pop().msg_id for _ in range(7)]
    assert order.index("second") > max(i for i, m in enumerate(order) if m == "first")
    assert order.index("elsewhere") < 2            # another destination is its own transfer


def test_a_stream_sends_only_on_credit() -> None:
    async def body() -> None:
        q, wakes = queue()
        for i in range(4):
            q.push(piece("s", off=i, fragments=4))
        assert q.pop().off == 0                    # the set-up credit
        assert q.pop() is None and not q.has_ready() and len(q) == 3
        n = len(wakes)
        q.credit(("s", "d"), 2)
        assert len(wakes) > n
        assert [q.pop().off, q.pop().off] == [1, 2]
        assert q.pop() is None
        q.session_up()                             # a new session: a stalled stream may try once more
        assert q.pop().off == 3
    asyncio.run(body())


def test_a_piece_waits_for_its_not_before_time_and_the_timer_wakes_the_link() -> None:
    async def body() -> None:
        q, wakes = queue()
        p = piece("later")
        p.not_before = time.monotonic() + 0.2
        q.push(p)
        q.push(piece("now"))
        assert q.pop().msg_id == "now"
        assert q.pop() is None and len(q) == 1
        n = len(wakes)
        await asyncio.sleep(0.3)
        assert len(wakes) > n
        assert q.pop().msg_id == "later"
    asyncio.run(body())


def test_rbsad_gate_is_drawn_when_a_message_reaches_the_head() -> None:
    async def body() -> None:
        drawn: list[str] = []

        def gate(p: Piece) -> float:
            drawn.append(p.msg_id)
            return time.monotonic() + 30 if p.msg_id == "held" else 0.0
        q, _ = queue(fifo=True, gate=gate)
        q.push(piece("held"))
        q.push(piece("behind"))
        assert q.pop() is None                     # FCFS: the held message blocks those behind it
        assert "behind" not in drawn
        q2, _ = queue(fifo=False, gate=gate)
        q2.push(piece("held"))
        q2.push(piece("behind"))
        assert q2.pop().msg_id == "behind"         # fragmenting: the others pass it
    asyncio.run(body())


def test_remove_if_and_accounting() -> None:
    q, _ = queue()
    for i in range(3):
        q.push(piece("a", off=i))
    q.push(piece("b"))
    assert q.messages == 2 and len(q) == 4 and q.bytes == 40
    gone = q.remove_if(lambda p: p.msg_id == "a")
    assert len(gone) == 3 and len(q) == 1 and q.messages == 1 and q.bytes == 10
    assert q.pop().msg_id == "b" and q.pop() is None
    snap = q.snapshot()
    assert snap["served_by_priority"] == {"1": 1} and snap["queued_by_priority"] == {}


def test_room_signal_wakes_a_few_refused_transfers_but_not_an_rbsad_wait() -> None:
    async def body() -> None:
        held_until = time.monotonic() + 30
        q, _ = queue(gate=lambda p: held_until if p.msg_id == "rbsad" else 0.0)
        for i in range(6):
            p = piece(f"refused{i}")
            p.retries, p.not_before = 1, time.monotonic() + 30
            q.push(p)
        r = piece("rbsad")
        r.retries = 1
        q.push(r)
        assert q.pop() is None
        assert q.retry_now(at_most=4) == 4
        got = [q.pop() for _ in range(6)]
        assert sum(1 for p in got if p is not None) == 4 and all(p.msg_id != "rbsad" for p in got if p)
        assert q.retry_now(at_most=4) == 2        # two refused left; the one held by RBSAD keeps waiting
        got = {q.pop().msg_id for _ in range(2)}
        assert len(got) == 2 and "rbsad" not in got
        assert q.pop() is None and len(q) == 1
    asyncio.run(body())


# -- the node's default queue (no resource management, node/policy.py PassThrough): one FIFO per priority ------
# Moved from the legacy FIFO scheduler's tests (node.mta.Scheduler, strict priority). With stride the
# priorities share the link instead of the higher one always going first.

def pass_through_queue() -> TransferQueue:
    return TransferQueue(lambda: None, fifo_per_destination=False, is_stream=lambda p: False, gate=None,
                         key=lambda p: p.prio)


def test_default_queue_keeps_fifo_per_priority_and_counts() -> None:
    q = pass_through_queue()
    for i, prio in enumerate([1, 2, 1, 2]):
        q.push(piece(f"m{i}", prio=prio))
    q.push(piece("m0", off=10, prio=1))
    assert len(q) == 5 and q.messages == 4 and q.bytes == 50
    out = [q.pop() for _ in range(5)]
    assert [(p.msg_id, p.off) for p in out if p.prio == 1] == [("m0", 0), ("m2", 0), ("m0", 10)]
    assert [p.msg_id for p in out if p.prio == 2] == ["m1", "m3"]
    assert q.pop() is None and len(q) == 0 and q.bytes == 0 and q.messages == 0


def test_default_queue_serves_priority_2_about_twice_as_often_as_1_under_backlog() -> None:
    q = pass_through_queue()
    for i in range(3000):                         # many messages per priority: still one FIFO each
        q.push(piece(f"low{i}", prio=1))
        q.push(piece(f"high{i}", prio=2))
    out = [q.pop() for _ in range(1500)]
    low = [p.msg_id for p in out if p.prio == 1]
    high = [p.msg_id for p in out if p.prio == 2]
    assert abs(len(high) / len(low) - 2.0) <= 0.2, (len(high), len(low))
    assert low == [f"low{i}" for i in range(len(low))]       # FIFO within a priority
    assert high == [f"high{i}" for i in range(len(high))]


def test_default_queue_front_push_and_remove() -> None:
    q = pass_through_queue()
    q.push(piece("a"))
    q.push(piece("c"))
    q.push(piece("b"), front=True)                # e.g. a refused piece: offered again first
    gone = q.remove_if(lambda p: p.msg_id == "a")
    assert [p.msg_id for p in gone] == ["a"] and len(q) == 2 and q.messages == 2 and q.bytes == 20
    assert [q.pop().msg_id, q.pop().msg_id] == ["b", "c"] and q.pop() is None


# -- pieces handed back to the front: refused "for now", put back, requeued ----------------------------------

def refuse(q: TransferQueue, p: Piece, wait: float) -> None:
    """What the engine does with a piece the next hop refused for now (node/mta.py Engine.refused)."""
    p.retries += 1
    p.not_before = time.monotonic() + wait
    q.push(p, front=True)


def test_a_window_refused_piece_by_piece_comes_back_in_send_order() -> None:
    async def body() -> None:
        q = pass_through_queue()
        for i in range(6):
            q.push(piece(f"m{i}"))
        sent = [q.pop() for _ in range(4)]
        for p in sent:                              # the refusals arrive in send order
            refuse(q, p, 0.02)
        assert q.pop() is None
        await asyncio.sleep(0.05)
        assert [q.pop().msg_id for _ in range(6)] == [f"m{i}" for i in range(6)]     # one batch, in order
        for p in sent:                              # out of order, and each refused more often than the last
            p.retries = 0
        for k, i in enumerate((2, 0, 3, 1)):
            refuse(q, sent[i], 0.02 * (k + 1))
        await asyncio.sleep(0.05)
        assert [q.pop().msg_id for _ in range(4)] == ["m0", "m1", "m2", "m3"]
    asyncio.run(body())


def test_refused_and_requeued_pieces_go_back_together_in_send_order() -> None:
    q = pass_through_queue()
    for i in range(5):
        q.push(piece(f"m{i}"))
    sent = [q.pop() for _ in range(4)]
    refuse(q, sent[1], 0.0)                          # no wait: the head may go at once
    refuse(q, sent[0], 0.0)
    for p in reversed(sent[2:]):                     # the session ended: Engine.requeue / _put_back
        q.push(p, front=True)
    assert [q.pop().msg_id for _ in range(5)] == ["m0", "m1", "m2", "m3", "m4"] and q.pop() is None
    assert len(q) == 0


def test_room_lets_a_refused_window_go_in_order_without_waiting_out_each_timer() -> None:
    async def body() -> None:
        q = pass_through_queue()
        for i in range(5):
            q.push(piece(f"m{i}"))
        sent = [q.pop() for _ in range(4)]
        for i, p in enumerate(sent):                 # each its own (doubled) wait, all far beyond this test
            refuse(q, p, 30.0 + i)
        assert q.pop() is None and q.snapshot()["waiting_for_timer"] == 1
        assert q.retry_now() == 1                    # one transfer: the node's single queue for priority 1
        assert [q.pop().msg_id for _ in range(5)] == ["m0", "m1", "m2", "m3", "m4"]
        assert q.pop() is None and len(q) == 0
    asyncio.run(body())


def test_room_does_not_let_a_refused_window_pass_an_rbsad_gate() -> None:
    async def body() -> None:
        gates = {"held": 0.0}
        q, _ = queue(fifo=True, gate=lambda p: gates.get(p.msg_id, 0.0))
        for m in ("m0", "held", "m2"):
            q.push(piece(m))
        sent = [q.pop() for _ in range(3)]
        assert [p.msg_id for p in sent] == ["m0", "held", "m2"]
        gates["held"] = time.monotonic() + 30        # e.g. its gate was drawn again after a restart
        for p in sent:
            refuse(q, p, 30.0)
        assert q.retry_now() == 1
        assert q.pop().msg_id == "m0"
        assert q.pop() is None and len(q) == 2       # "held" waits for its gate, and FCFS keeps m2 behind it
        assert q.retry_now() == 0 and q.pop() is None     # a ROOM does not cut an RBSAD wait short
    asyncio.run(body())
