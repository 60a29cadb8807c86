"""Prioritised round robin: 1:2:4 shares, aging against starvation, control first."""
from __future__ import annotations

import pytest

from node.resources.link_scheduler import LinkScheduler, LinkSchedulerConfig


@pytest.mark.parametrize("backlog", [1, 3])
def test_shares_follow_priorities_1_2_4(backlog: int) -> None:
    sched: LinkScheduler[tuple[str, int]] = LinkScheduler(LinkSchedulerConfig(aging_after=1000))
    prio = {"a": 1, "b": 2, "c": 4}
    served = {k: 0 for k in prio}
    seq = 0
    for tid, p in prio.items():  # keep every transfer backlogged (also with a single queued item)
        for _ in range(backlog):
            seq += 1
            sched.enqueue(tid, (tid, seq), p)
    for _ in range(7000):
        item = sched.next()
        assert item is not None
        served[item[0]] += 1
        seq += 1
        sched.enqueue(item[0], (item[0], seq), prio[item[0]])
    # Expected 1000 : 2000 : 4000; allow 10 %.
    for tid, expected in {"a": 1000, "b": 2000, "c": 4000}.items():
        assert abs(served[tid] - expected) <= 0.1 * expected, served
    assert sched.lengths_by_priority() == {1: backlog, 2: backlog, 4: backlog}


def test_round_robin_within_one_priority() -> None:
    sched: LinkScheduler[str] = LinkScheduler()
    for tid in ("x", "y", "z"):
        for i in range(2):
            sched.enqueue(tid, f"{tid}{i}", 3)
    assert [sched.next() for _ in range(6)] == ["x0", "y0", "z0", "x1", "y1", "z1"]
    assert sched.next() is None


def low_priority_waits(aging_after: int) -> tuple[list[int], int]:
    """Ten priority-8 transfers always backlogged plus one priority-1 transfer; picks between its turns."""
    sched: LinkScheduler[str] = LinkScheduler(LinkSchedulerConfig(max_priority=8, aging_after=aging_after))
    for i in range(10):
        sched.enqueue(f"h{i}", f"h{i}", 8)
    sched.enqueue("low", "low", 1)
    waits: list[int] = []
    gap = 0
    for _ in range(3000):
        item = sched.next()
        assert item is not None
        if item == "low":
            waits.append(gap)
            gap = 0
            sched.enqueue("low", "low", 1)
        else:
            gap += 1
            sched.enqueue(item, item, 8)  # constant high-priority load
    return waits, sched.aged


def test_aging_bounds_the_wait_of_a_low_priority_transfer() -> None:
    # Without aging the low transfer gets 1 turn in 81 (weights 10 x 8 against 1): waits of 80 picks.
    waits, aged = low_priority_waits(aging_after=10**9)
    assert aged == 0 and max(waits) == 80
    # Aging after 8 lost turns: one bump per 8 picks, so the wait stays within a few aging periods.
    waits, aged = low_priority_waits(aging_after=8)
    assert aged > 0
    assert max(waits) <= 3 * 8
    assert len(waits) >= 3000 // (3 * 8 + 1)


def test_control_frames_first_when_configured() -> None:
    sched: LinkScheduler[str] = LinkScheduler(LinkSchedulerConfig(control_first=True))
    sched.enqueue("t", "data1", 8)
    sched.enqueue("t", "data2", 8)
    sched.enqueue("ctl", "grant", 1, control=True)
    assert sched.next() == "grant"
    off: LinkScheduler[str] = LinkScheduler(LinkSchedulerConfig(control_first=False))
    off.enqueue("t", "data1", 1)
    off.enqueue("ctl", "grant", 1, control=True)
    assert off.next() == "data1"  # competes normally (at max priority) instead of jumping ahead
    assert off.next() == "grant"


def test_bad_priority_and_remove() -> None:
    sched: LinkScheduler[str] = LinkScheduler(LinkSchedulerConfig(max_priority=4))
    with pytest.raises(ValueError):
        sched.enqueue("t", "x", 5)
    sched.enqueue("t", "x", 2)
    sched.enqueue("t", "y", 2)
    assert sched.remove("t") == 2
    assert sched.next() is None and len(sched) == 0
