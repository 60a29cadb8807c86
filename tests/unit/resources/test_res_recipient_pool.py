"""Recipient space: FCFS reservations, expiry, optimistic transfer, quotas, hybrid choice."""
from __future__ import annotations

import pytest

from node.resources.recipient_pool import (
    HybridChooser,
    HybridConfig,
    RecipientPool,
    RecipientPoolConfig,
    RemovalProcess,
    ReservationState,
)
from node.errors import UserError

G, Q, R = ReservationState.GRANTED, ReservationState.QUEUED, ReservationState.REFUSED


def small_pool(**kw: object) -> RecipientPool:
    # 40 fragments: 10 single, 30 multi.
    return RecipientPool(RecipientPoolConfig(size=40, single_share=0.25, reservation_timeout=100.0, **kw))  # type: ignore[arg-type]


def test_default_split_is_125_375() -> None:
    snap = RecipientPool().snapshot()
    assert snap["capacity"] == {"single": 125, "multi": 375}


def test_reservations_are_granted_fcfs() -> None:
    pool = small_pool()
    assert pool.reserve("a", 25, 0.0) is G
    assert pool.reserve("b", 10, 1.0) is Q
    assert pool.reserve("c", 2, 2.0) is Q  # would fit, but must not overtake b
    assert pool.reserve("huge", 31, 3.0) is R
    pool.use("a", 4.0)
    assert pool.drain(4, 5.0) == []  # 9 free: b (10) still blocks the queue head
    assert pool.drain(3, 6.0) == ["b", "c"]  # 12 free: b then c, in order
    snap = pool.snapshot()
    assert snap["reservation_queue_length"] == 0 and snap["reserved"] == 12


def test_unused_reservation_expires_and_next_is_granted() -> None:
    pool = small_pool()
    assert pool.reserve("a", 30, 0.0) is G
    assert pool.reserve("b", 20, 10.0) is Q
    assert pool.expire(99.0) == ([], [])
    expired, granted = pool.expire(100.0)
    assert expired == ["a"] and granted == ["b"]
    pool.use("b", 101.0)
    assert pool.expire(1000.0) == ([], [])  # used space does not expire
    assert pool.used("multi") == 20


def test_optimistic_single_fragment_refused_when_full_and_retry_succeeds() -> None:
    pool = small_pool()
    for i in range(10):
        assert pool.try_store(f"m{i}", 1, 0.0)
    assert not pool.try_store("m10", 1, 0.0)  # originator keeps its copy
    pool.release_message("m0", 1.0)  # a mailbox read
    assert pool.try_store("m10", 1, 2.0)
    snap = pool.snapshot()
    assert snap["optimistic_ok"] == 11 and snap["optimistic_refused"] == 1


def test_hard_quota_per_user() -> None:
    pool = small_pool(user_hard_quota=12)
    assert pool.reserve("a", 10, 0.0, ["alice"]) is G
    assert pool.reserve("b", 5, 0.0, ["alice"]) is Q  # above alice's quota although the pool has room
    assert pool.reserve("c", 13, 0.0, ["bob"]) is R  # can never fit the quota
    assert not pool.try_store("d", 3, 0.0, ["alice"])
    assert pool.cancel("a", 1.0) == ["b"]
    assert pool.user_usage("alice") == 5


def test_soft_limits_for_multirecipient_messages() -> None:
    pool = small_pool(user_soft_limit=6)
    # Remaining soft room 6 + 6 = 12 >= 10: accepted, 5 charged to each.
    assert pool.reserve("m", 10, 0.0, ["alice", "bob"]) is G
    assert pool.user_usage("alice") == 5 and pool.user_usage("bob") == 5
    # Room now 1 + 1 + 6 = 8 < 9: must wait.
    assert pool.reserve("n", 9, 0.0, ["alice", "bob", "carol"]) is Q
    pool.use("m", 1.0)
    assert pool.release_message("m", 2.0) == ["n"]
    assert pool.user_usage("carol") == pytest.approx(3.0)


def test_hybrid_switches_on_success_rate() -> None:
    chooser = HybridChooser(HybridConfig(small_max_fragments=1, window=20, floor=0.05), seed=7)
    assert chooser.choose("o", "r", 5) == "preallocate"  # large messages always preallocate
    picks = [chooser.choose("o", "r", 1) for _ in range(200)]
    assert picks.count("optimistic") == 200  # no history: optimistic
    for _ in range(20):
        chooser.record("o", "r", False)
    picks = [chooser.choose("o", "r", 1) for _ in range(1000)]
    # Success 0 -> optimistic only with the probing floor 0.05 (binomial sd ~7 of 1000).
    assert 20 <= picks.count("optimistic") <= 85
    for _ in range(20):
        chooser.record("o", "r", True)
    assert chooser.success_rate("o", "r") == 1.0
    assert chooser.choose("o", "r", 1) == "optimistic"


def test_removal_process_is_seeded_and_matches_table_6_1() -> None:
    a = RemovalProcess(seed=3)
    b = RemovalProcess(seed=3)
    ea, eb = a.events(), b.events()
    first = [next(ea) for _ in range(5000)]
    assert first[:50] == [next(eb) for _ in range(50)]
    sizes = [s for _, s in first]
    assert all(1 <= s <= 100 for s in sizes)
    assert abs(sizes.count(1) / 5000 - 0.70) < 0.03  # binomial sd 0.0065
    gaps = [t2 - t1 for (t1, _), (t2, _) in zip(first, first[1:])]
    assert abs(sum(gaps) / len(gaps) - 50.0) < 1.5  # mean interval 50, sd of the mean ~0.18


def test_bad_config_is_a_user_error() -> None:
    with pytest.raises(UserError):
        RecipientPool(RecipientPoolConfig(size=1))
    with pytest.raises(UserError):
        RecipientPool(RecipientPoolConfig(user_hard_quota=0))


def test_repeated_request_is_idempotent() -> None:
    pool = small_pool()
    assert pool.reserve("a", 30, 0.0) is G
    assert pool.reserve("b", 5, 0.0) is Q
    assert pool.reserve("a", 30, 1.0) is G
    assert pool.reserve("b", 5, 1.0) is Q
    assert pool.snapshot()["reservation_queue_length"] == 1 and pool.used("multi") == 30
