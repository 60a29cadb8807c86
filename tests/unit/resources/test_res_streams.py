"""Message streams: credits throttle a 4-hop chain back to the source; half-allocation; expiry."""
from __future__ import annotations

import pytest

from node.resources.buffer_pool import BufferPool, BufferPoolConfig
from node.resources.streams import StreamConfig, StreamError, StreamTable

HOPS = 4  # S -> M1 -> M2 -> M3 -> R
SID = "msg-1"


class Chain:
    """Five MTAs, each with its own buffer pool and stream table; intermediate hop k uses class k."""

    def __init__(self, fragments: int, max_allocation: int) -> None:
        cfg = StreamConfig(max_allocation=max_allocation, lifetime=100.0)
        self.pools = [BufferPool(BufferPoolConfig.for_longest_route(HOPS, class_initial=10, readjust_every=1000))
                      for _ in range(HOPS + 1)]
        self.tables = [StreamTable(p, cfg) for p in self.pools]
        self.fragments = fragments
        self.consumed = 0
        names = ["S", "M1", "M2", "M3", "R"]
        for k, table in enumerate(self.tables):
            rec = table.open(
                SID,
                upstream=names[k - 1] if k else None,
                downstream=names[k + 1] if k < HOPS else None,
                buffer_class=k if 0 < k < HOPS else None,  # source: input pool; recipient: recipient space
                fragments=fragments,
                now=0.0,
                held=fragments if k == 0 else 0,
            )
            assert rec is not None

    def step(self, now: float, recipient_reads: bool) -> int:
        moved = 0
        for k in range(HOPS, 0, -1):  # grants travel upstream
            credits = self.tables[k].grant(SID)
            if credits:
                self.tables[k - 1].on_credit(SID, credits, now)
        for k in range(HOPS - 1, -1, -1):  # fragments travel downstream, one turn per hop
            for _ in range(self.tables[k].can_send(SID)):
                self.tables[k].on_fragment_forwarded(SID, now)
                self.tables[k + 1].on_fragment_received(SID, now)
                moved += 1
        rec = self.tables[HOPS].get(SID)
        assert rec is not None
        while recipient_reads and rec.held:
            self.tables[HOPS].on_fragment_consumed(SID, now)
            self.consumed += 1
        return moved

    def check_within_allocation(self) -> None:
        for k in range(1, HOPS):
            rec = self.tables[k].get(SID)
            assert rec is not None
            assert rec.held + rec.granted_upstream <= rec.allocation
            assert self.pools[k].usage(k) == rec.allocation  # exactly the allocation, in class k only
            assert sum(self.pools[k].usage(c) for c in range(HOPS + 1)) == rec.allocation


@pytest.mark.parametrize("allocation", [1, 3])
def test_stalled_recipient_throttles_the_source(allocation: int) -> None:
    chain = Chain(fragments=30, max_allocation=allocation)
    for t in range(200):
        chain.step(float(t), recipient_reads=False)
        chain.check_within_allocation()
    # Everything downstream of the source is full: 3 intermediates + recipient slots.
    source = chain.tables[0].get(SID)
    assert source is not None
    assert source.forwarded == 4 * allocation
    assert source.held == 30 - 4 * allocation
    assert chain.step(200.0, recipient_reads=False) == 0  # no movement at all

    for t in range(201, 400):  # recipient starts reading: the stream drains completely
        chain.step(float(t), recipient_reads=True)
        chain.check_within_allocation()
    assert chain.consumed == 30
    assert all(table.finished(SID) for table in chain.tables)
    for k, table in enumerate(chain.tables):
        table.close(SID)
        assert sum(chain.pools[k].usage(c) for c in range(HOPS + 1)) == 0


def test_half_allocation_rule() -> None:
    table = StreamTable(BufferPool(BufferPoolConfig(num_classes=3, class_initial=10)), StreamConfig(max_allocation=4))
    rec = table.open("s", upstream="A", downstream="C", buffer_class=1, fragments=10, now=0.0)
    assert rec is not None and rec.allocation == 4
    assert table.grant("s") == 4
    assert table.grant("s") == 0  # already promised
    for _ in range(4):
        table.on_fragment_received("s", 0.0)
    table.on_credit("s", 4, 0.0)
    assert table.can_send("s") == 2  # half of 4
    one = StreamTable(BufferPool(BufferPoolConfig(num_classes=3, class_initial=10)), StreamConfig(max_allocation=1))
    one.open("t", upstream="A", downstream="C", buffer_class=1, fragments=5, now=0.0)
    one.grant("t")
    one.on_fragment_received("t", 0.0)
    one.on_credit("t", 1, 0.0)
    assert one.can_send("t") == 1  # allocation 1 still moves


def test_allocation_is_capped_by_message_size_and_refused_without_room() -> None:
    pool = BufferPool(BufferPoolConfig(num_classes=3, class_initial=5, class_minimum=1))
    table = StreamTable(pool, StreamConfig(max_allocation=4))
    rec = table.open("small", upstream="A", downstream="C", buffer_class=1, fragments=3, now=0.0)
    assert rec is not None and rec.allocation == 3
    assert table.open("big", upstream="A", downstream="C", buffer_class=1, fragments=9, now=0.0) is None
    assert table.snapshot()["refused_opens"] == 1
    assert pool.usage(1) == 3


def test_fragment_without_credit_is_a_protocol_error() -> None:
    table = StreamTable(BufferPool(BufferPoolConfig(num_classes=3, class_initial=5)))
    table.open("s", upstream="A", downstream="C", buffer_class=1, fragments=5, now=0.0)
    with pytest.raises(StreamError):
        table.on_fragment_received("s", 0.0)
    with pytest.raises(StreamError):
        table.on_fragment_received("nope", 0.0)


def test_expiry_releases_buffers() -> None:
    pool = BufferPool(BufferPoolConfig(num_classes=3, class_initial=5))
    table = StreamTable(pool, StreamConfig(max_allocation=2, lifetime=10.0))
    table.open("a", upstream="A", downstream="C", buffer_class=2, fragments=5, now=0.0)
    table.open("b", upstream="A", downstream="C", buffer_class=2, fragments=5, now=5.0)
    assert pool.usage(2) == 4
    assert table.expire(9.9) == []
    assert table.expire(10.0) == ["a"]
    assert pool.usage(2) == 2
    table.on_credit("b", 0, 12.0)  # activity extends the lifetime
    assert table.expire(20.0) == []
    assert table.expire(22.0) == ["b"]
    assert pool.usage(2) == 0 and len(table) == 0


def test_stream_allocation_targets_expression_5_1_within_a_class() -> None:
    from node.resources.streams import stream_allocation_targets

    # Class of 20 buffers; throughputs 6/3/1 of 10 -> 12, 6, 2, clamped to [1, 8].
    assert stream_allocation_targets(20, {"a": 6, "b": 3, "c": 1}, minimum=1, maximum=8) == {"a": 8, "b": 6, "c": 2}
    assert stream_allocation_targets(20, {"a": 0, "b": 0}, minimum=1, maximum=8) == {"a": 1, "b": 1}
    with pytest.raises(ValueError):
        stream_allocation_targets(20, {}, minimum=3, maximum=2)
