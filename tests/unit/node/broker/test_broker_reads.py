"""A durable subscription's stream reads the spool's queue when a row may wait for it (a row queued, a read that
stopped at its limit, a new stream), not on every wake: an acknowledgement's wake alone reads nothing."""
from __future__ import annotations

import asyncio
from pathlib import Path

from node.rpc import link_pb2
from tests.unit.node.broker.test_broker_backlog import queued


def test_an_ack_alone_reads_nothing_and_a_queued_row_is_read(tmp_path: Path) -> None:
    async def main() -> None:
        broker, spool, sub, stream, _sent = await queued(tmp_path, 0)
        sub.inflight.clear()
        reads = []
        real = spool.read

        def counted(op):
            reads.append(op)
            return real(op)
        spool.read = counted

        async def add(pub_id: str) -> None:
            body = link_pb2.Publication(pub_id=pub_id, origin="n0", topic="a.b", payload=b"x").SerializeToString()
            await spool.run(lambda c: c.execute(
                "INSERT INTO pub_queue(name, pub_id, hops, expires_ts, body) VALUES ('s', ?, 1, 9e9, ?)",
                (pub_id, body)))
            sub.queued()
        try:
            assert await broker._durable_batch(sub, stream) == [] and len(reads) == 1   # a new stream reads once
            await add("p1")
            got = await broker._durable_batch(sub, stream)
            assert [e.delivery.pub_id for e in got] == ["p1"] and len(reads) == 2
            await broker.ack(sub, stream, ["p1"])
            assert stream.wake.is_set() and sub.backlog == 0
            assert await broker._durable_batch(sub, stream) == [] and len(reads) == 2   # the ack's wake: no read
            await add("p2")
            got = await broker._durable_batch(sub, stream)
            assert [e.delivery.pub_id for e in got] == ["p2"] and len(reads) == 3
            sub.window = 1                    # the window full with p2: p3 waits, the ack opens it again
            await add("p3")
            assert await broker._durable_batch(sub, stream) == [] and len(reads) == 3
            await broker.ack(sub, stream, ["p2"])
            got = await broker._durable_batch(sub, stream)
            assert [e.delivery.pub_id for e in got] == ["p3"] and len(reads) == 4
            await broker.ack(sub, stream, ["p3"])
            await add("p4")
            await add("p5")
            got = await broker._durable_batch(sub, stream)    # stops at the window: p5 is read after the ack
            assert [e.delivery.pub_id for e in got] == ["p4"] and len(reads) == 5
            await broker.ack(sub, stream, ["p4"])
            got = await broker._durable_batch(sub, stream)
            assert [e.delivery.pub_id for e in got] == ["p5"] and len(reads) == 6
        finally:
            spool.close()
    asyncio.run(main())
