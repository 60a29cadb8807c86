"""Discrete-event check on a 4-node unidirectional ring: the unstructured pool deadlocks, the structured one does not.

The simulation lives here (it is a proof of the pool's property, not a product
feature): each tick every MTA first admits new single-fragment messages into
its pool (heavy load), then forwards one fragment over its outgoing link,
trying its highest buffer class first.  A fragment with h hops is stored in
class h; reaching its recipient it leaves the transit system.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from node.resources.buffer_pool import BufferPool, BufferPoolConfig

N = 4  # ring size; longest route N-1 hops -> N classes
TICKS = 1500
WINDOW = 300  # the last WINDOW ticks decide "still delivering"
DRAIN = 200  # ticks without new messages at the end; 4 links x 200 ticks >> 4 MTAs x 10 buffers


@dataclass
class Mta:
    pool: BufferPool
    queues: list[deque[int]] = field(default_factory=lambda: [deque() for _ in range(N)])  # per class: destinations


def simulate(classes_enabled: bool, seed: int = 42) -> tuple[list[int], int, BufferPool]:
    rng = random.Random(seed)
    cfg = BufferPoolConfig.for_longest_route(
        N - 1, input_buffers=4, class_initial=2, class_minimum=1, readjust_every=10, classes_enabled=classes_enabled
    )
    mtas = [Mta(BufferPool(cfg)) for _ in range(N)]
    delivered_at: list[int] = []
    accepted = 0
    for tick in range(TICKS + DRAIN):
        for i, mta in enumerate(mtas):
            for _ in range(2 if tick < TICKS else 0):  # offered load: 2 per MTA per tick, more than a link carries
                if mta.pool.try_acquire(0):
                    accepted += 1
                    mta.queues[0].append((i + rng.randint(1, N - 1)) % N)
        for i, mta in enumerate(mtas):
            nxt = (i + 1) % N
            for h in range(N - 1, -1, -1):
                if not mta.queues[h]:
                    continue
                dest = mta.queues[h][0]
                if dest == nxt:
                    mta.queues[h].popleft()
                    mta.pool.release(h)
                    delivered_at.append(tick)
                    break
                if mtas[nxt].pool.try_acquire(h + 1):
                    mta.queues[h].popleft()
                    mta.pool.release(h)
                    mtas[nxt].queues[h + 1].append(dest)
                    break
    return delivered_at, accepted, mtas[0].pool


def test_unstructured_pool_deadlocks_on_a_ring() -> None:
    delivered_at, accepted, pool = simulate(classes_enabled=False)
    assert delivered_at, "some messages get through before the deadlock"
    assert max(delivered_at) < TICKS - WINDOW  # then nothing moves any more, even without new load
    assert len(delivered_at) < accepted
    assert sum(pool.snapshot()["usage"]) == pool.shared_capacity  # every buffer held, none can move


def test_structured_pool_keeps_delivering() -> None:
    delivered_at, accepted, pool = simulate(classes_enabled=True)
    late = [t for t in delivered_at if TICKS - WINDOW <= t < TICKS]
    # 4 links carry at most 4 fragments a tick; ask for a quarter of that in the final window.
    assert len(late) >= WINDOW
    assert len(delivered_at) == accepted  # every accepted message is delivered once the load stops
    assert pool.snapshot()["refusals"]  # the input class did refuse under overload (congestion control)
