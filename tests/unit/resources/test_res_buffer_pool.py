"""Structured buffer pool: class accounting, input congestion, expression 5.1 and the 5.4 rules."""
from __future__ import annotations

import random

import pytest

from node.resources.buffer_pool import (
    CLASS_FULL,
    CONGESTED,
    SHARED_FULL,
    SINGLE_LIMIT,
    BufferPool,
    BufferPoolConfig,
    apply_class_deltas,
    class_limit_deltas,
)
from node.errors import UserError


def test_hop_h_fragment_only_ever_occupies_class_h() -> None:
    """Randomised (fixed seed): per-class usage always equals our own per-class ledger."""
    rng = random.Random(1234)
    cfg = BufferPoolConfig(num_classes=6, input_buffers=20, class_initial=5, class_minimum=1, readjust_every=7)
    pool = BufferPool(cfg)
    held: dict[int, int] = {c: 0 for c in range(6)}  # fragments with h hops we stored
    limit_vectors: set[tuple[int, ...]] = set()
    for _ in range(5000):
        h = rng.randrange(6)
        if rng.random() < 0.55:
            if pool.try_acquire(h):
                held[h] += 1
        elif held[h]:
            pool.release(h)
            held[h] -= 1
        for c in range(6):
            # Other classes never change when class h is touched, and limits are honoured.
            assert pool.usage(c) == held[c]
            assert pool.usage(c) <= pool.limit(c)
        assert sum(pool.limit(c) for c in range(1, 6)) + pool.free_pool == 25  # buffers are conserved
        assert all(pool.limit(c) >= 1 for c in range(1, 6))  # never below the minimum
        limit_vectors.add(tuple(pool.limit(c) for c in range(6)))
    # The property must hold while limits actually move (dynamic adjustment is exercised).
    assert len(limit_vectors) > 10


def test_full_class_refuses_even_when_others_have_room() -> None:
    pool = BufferPool(BufferPoolConfig(num_classes=3, input_buffers=4, class_initial=2, class_minimum=1))
    assert pool.try_acquire(1, 2)
    assert not pool.try_acquire(1)
    assert pool.available(2) == 2  # class 2 has room, but a 1-hop fragment may not use it
    assert pool.refusals() == {f"1:{CLASS_FULL}": 1}


def test_input_congestion_and_single_fragment_half_limit() -> None:
    pool = BufferPool(BufferPoolConfig(num_classes=2, input_buffers=10, class_initial=5))
    # Single-fragment messages: at most half of the 10 input buffers.
    for _ in range(5):
        assert pool.try_acquire(0, single_fragment=True)
    assert not pool.try_acquire(0, single_fragment=True)
    # Multi-fragment messages may take the rest, then class 0 is congested.
    assert pool.try_acquire(0, 5)
    assert not pool.try_acquire(0)
    assert pool.refusals() == {f"0:{CONGESTED}": 1, f"0:{SINGLE_LIMIT}": 1}
    pool.release(0, 1, single_fragment=True)
    assert pool.try_acquire(0, single_fragment=True)
    assert pool.snapshot()["usage"] == [10, 0]


def test_classes_disabled_is_one_shared_pool() -> None:
    pool = BufferPool(BufferPoolConfig(num_classes=3, input_buffers=2, class_initial=1, class_minimum=1, classes_enabled=False))
    assert pool.shared_capacity == 4
    assert pool.try_acquire(0, 4)  # input traffic alone can take every buffer
    assert not pool.try_acquire(2)
    assert pool.refusals() == {f"2:{SHARED_FULL}": 1}


def test_expression_5_1_hand_computed() -> None:
    # B_T = 300, sigma = 30/15/5 of 50 -> targets 180, 90, 30.
    assert class_limit_deltas([100, 100, 100], [30, 15, 5]) == [80, -10, -70]
    # Explicit total including 30 free buffers: targets floor(330*0.6)=198, 99, 33.
    assert class_limit_deltas([100, 100, 100], [30, 15, 5], total=330) == [98, -1, -67]
    assert class_limit_deltas([10, 10], [0, 0]) == [0, 0]  # no throughput: no change


def test_apply_deltas_moves_from_highest_shrinkable_class() -> None:
    lim, dl, free = apply_class_deltas([100, 100, 100], [100, 50, 20], [4, 4, 4], [80, -10, -70], [True, False, False])
    assert lim == [180, 90, 30] and dl == [0, 0, 0] and free == 0


def test_apply_deltas_never_below_usage_or_minimum() -> None:
    lim, _, _ = apply_class_deltas([100, 100, 100], [100, 50, 60], [4, 4, 4], [80, -10, -70], [True, False, False])
    assert lim == [150, 90, 60]  # class 3 stops at its usage 60
    lim, _, _ = apply_class_deltas([100, 10, 10], [100, 0, 0], [4, 4, 8], [30, -10, -10], [True, False, False])
    assert lim == [108, 4, 8]  # stops at the minimums 4 and 8


def test_apply_deltas_needs_refusals_to_grow() -> None:
    lim, dl, _ = apply_class_deltas([100, 100, 100], [100, 50, 20], [4, 4, 4], [80, -10, -70], [False, False, False])
    assert lim == [100, 100, 100] and dl == [80, -10, -70]


def test_apply_deltas_grows_highest_class_first() -> None:
    lim, _, free = apply_class_deltas([10, 10, 10], [10, 0, 10], [1, 1, 1], [5, 0, 5], [True, False, True], free=7)
    assert lim == [12, 10, 15] and free == 0  # class 3 served first from the free pool


def test_pool_readjusts_after_n_releases_with_eligibility() -> None:
    cfg = BufferPoolConfig(num_classes=4, input_buffers=10, class_initial=10, class_minimum=2, readjust_every=10)
    pool = BufferPool(cfg)
    assert pool.try_acquire(1, 10)
    assert not pool.try_acquire(1)  # class 1 full and refusing
    pool.note_forwarded(1, 8)  # stream traffic: throughput without freeing buffers
    assert [pool.limit(c) for c in range(4)] == [10, 10, 10, 10]  # 8 < 10 releases: not yet
    pool.note_forwarded(2, 2)
    # targets: 30 * 8/10 = 24, 30 * 2/10 = 6, 0 -> deltas +14, -4, -10; class 3 shrinks to its minimum 2,
    # class 2 by its delta 4, class 1 grows by 12 (still wanting 2 more).
    assert [pool.limit(c) for c in range(4)] == [10, 22, 6, 2]
    assert pool.snapshot()["deltas"] == [0, 2, 0, -2]
    assert pool.try_acquire(1, 12)


def test_pool_does_not_grow_a_class_that_did_not_refuse() -> None:
    pool = BufferPool(BufferPoolConfig(num_classes=4, input_buffers=10, class_initial=10, class_minimum=2, readjust_every=10))
    assert pool.try_acquire(1, 10)
    pool.note_forwarded(1, 10)
    assert [pool.limit(c) for c in range(4)] == [10, 10, 10, 10]


def test_fixed_classes_mode_never_adjusts() -> None:
    pool = BufferPool(BufferPoolConfig(num_classes=4, input_buffers=10, class_initial=10, readjust_every=5, dynamic_adjustment=False))
    assert pool.try_acquire(1, 10)
    assert not pool.try_acquire(1)
    pool.note_forwarded(1, 50)
    assert [pool.limit(c) for c in range(4)] == [10, 10, 10, 10]


def test_bad_configuration_is_a_user_error() -> None:
    with pytest.raises(UserError):
        BufferPool(BufferPoolConfig(num_classes=0))
    with pytest.raises(UserError):
        BufferPool(BufferPoolConfig(class_initial=2, class_minimum=4))
    pool = BufferPool(BufferPoolConfig(num_classes=2))
    with pytest.raises(ValueError):
        pool.try_acquire(5)
    with pytest.raises(ValueError):
        pool.release(1)  # nothing held


def test_for_longest_route_and_defaults() -> None:
    cfg = BufferPoolConfig.for_longest_route(3)
    assert cfg.num_classes == 4
    snap = BufferPool(cfg).snapshot()
    assert snap["limits"] == [1000, 100, 100, 100]  # Table 6.2


def test_pending_delta_is_applied_after_a_later_release() -> None:
    """5.4: the delta vector is scanned again after each release, not only at recomputation."""
    pool = BufferPool(BufferPoolConfig(num_classes=4, input_buffers=10, class_initial=10, class_minimum=2, readjust_every=10))
    assert pool.try_acquire(1, 10) and pool.try_acquire(3, 10)
    assert not pool.try_acquire(1)
    pool.note_forwarded(1, 10)  # targets 30, 0, 0: class 2 gives 8, class 3 is pinned by its usage
    assert [pool.limit(c) for c in range(4)] == [10, 18, 2, 10]
    assert pool.try_acquire(1, 8)
    assert not pool.try_acquire(1)  # still full and refusing
    pool.release(3, 5)  # class 3 usage drops: the pending delta moves 5 more buffers to class 1
    assert [pool.limit(c) for c in range(4)] == [10, 23, 2, 5]
    assert pool.usage(3) <= pool.limit(3)


def test_class_for_hops() -> None:
    pool = BufferPool(BufferPoolConfig.for_longest_route(3))
    assert pool.class_for_hops(3) == 3
    with pytest.raises(ValueError):
        pool.class_for_hops(4)


def test_fcfs_waiters_for_the_non_fragmenting_comparator() -> None:
    """6.2.3: whole-message transit requests are served first-come first-served."""
    pool = BufferPool(BufferPoolConfig(num_classes=3, input_buffers=10, class_initial=10, dynamic_adjustment=False))
    assert pool.try_acquire(1, 8, waiter="m0")
    assert not pool.try_acquire(1, 5, waiter="big")  # queued
    assert not pool.try_acquire(1, 1, waiter="small")  # fits, but must not overtake "big"
    assert not pool.try_acquire(1, 1)  # neither may an anonymous request
    assert pool.try_acquire(2, 3)  # other classes are unaffected
    assert not pool.try_acquire(1, 5, waiter="big")  # asking again keeps its place, no duplicate
    assert pool.release(1, 2) == []  # 4 free: "big" still does not fit and blocks "small"
    assert pool.release(1, 2) == ["big", "small"]  # 6 free: big (5), then small (1), in order
    assert pool.usage(1) == 4 + 5 + 1
    assert pool.snapshot()["waiting"] == 0
    assert pool.refusals()["1:waiting_fcfs"] == 3


def test_fcfs_waiters_share_one_queue_when_classes_are_disabled() -> None:
    pool = BufferPool(BufferPoolConfig(num_classes=2, input_buffers=2, class_initial=2, class_minimum=1, classes_enabled=False))
    assert pool.try_acquire(0, 4)
    assert not pool.try_acquire(1, 1, waiter="a")
    assert not pool.try_acquire(0, 1, waiter="b")
    pool.cancel_wait("a")
    assert pool.release(0, 1) == ["b"]
