"""A durable subscription's backlog count (what ListSubscriptions reports, and what a draining pool instance waits to
see at 0) against the rows of a real SQLite spool: every acknowledgement that removes rows lowers the count by the
rows it removed, also when the caller is cancelled while the removal commits, and never for a row already gone; a
publication queued for it counts even when the publishing call is cancelled while it commits; a new subscription
counts the rows already queued under its name."""
from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from node import registry
from node.broker import store
from node.broker.broker import Broker
from node.broker.subscriptions import DurableSubscription, Stream
from node.rpc import pubsub_pb2
from node.spool import Spool

CFG = registry.config_from_dict({"name": "n1", "data_listen": "127.0.0.1:7000", "mgmt_listen": "127.0.0.1:7001"})


def rows(spool: Spool, name: str) -> int:
    return spool.run_sync(lambda c: c.execute("SELECT COUNT(*) FROM pub_queue WHERE name=?", (name,)).fetchone()[0])


async def queued(tmp_path: Path, n: int) -> tuple[Broker, Spool, DurableSubscription, Stream, dict[str, int]]:
    """A broker (engine reduced to its spool) with durable subscription `s`, `n` rows queued for it and all of them
    sent on an attached stream: pub_id -> queue seq."""
    spool = Spool(tmp_path / "spool.db", 0.0)
    spool.open()
    broker = Broker(CFG, SimpleNamespace(spool=spool, peers={}), None)
    await spool.run(store.op_create())
    await spool.run(store.op_subscribe("s", "a.>", 0.0, ""))

    def fill(c) -> dict[str, int]:
        for k in range(n):
            c.execute("INSERT INTO pub_queue(name, pub_id, hops, expires_ts, body) VALUES ('s', ?, 0, 9e9, x'')",
                      (f"p{k}",))
        return dict(c.execute("SELECT pub_id, seq FROM pub_queue WHERE name='s'"))
    sent = await spool.run(fill)
    sub = DurableSubscription("s", "a.>", backlog=n)
    broker.durable["s"] = sub
    stream = Stream()
    sub.attach(stream, 16)
    sub.inflight.update(sent)
    return broker, spool, sub, stream, sent


def test_an_ack_whose_caller_is_cancelled_mid_commit_still_lowers_the_count(tmp_path: Path) -> None:
    async def main() -> None:
        broker, spool, sub, stream, _sent = await queued(tmp_path, 1)
        try:
            # the Subscribe call ends while the ack commits (its pending acks are cancelled with it)
            task = asyncio.ensure_future(broker.ack(sub, stream, ["p0"]))
            await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await spool.run(lambda c: None)       # the writer went past the ack
            await asyncio.sleep(0.05)
            assert rows(spool, "s") == 0
            assert sub.backlog == 0               # was 1: a drain waiting for backlog 0 stalled
        finally:
            spool.close()
    asyncio.run(main())


def test_an_ack_for_a_row_already_removed_does_not_count_twice(tmp_path: Path) -> None:
    async def main() -> None:
        broker, spool, sub, stream, sent = await queued(tmp_path, 2)
        try:
            # a takeover: the old stream's ack of p0 removed its row after the new stream had been sent p0 again
            new = Stream()
            sub.attach(new, 16)
            sub.inflight.update(sent)
            await spool.run(store.op_ack("s", [sent["p0"]]))
            sub.backlog -= 1
            await broker.ack(sub, new, ["p0"])
            assert rows(spool, "s") == 1
            assert sub.backlog == 1               # was 0 while p1 still waited: a drain would end early
        finally:
            spool.close()
    asyncio.run(main())


def test_a_publication_whose_caller_is_cancelled_mid_commit_still_counts(tmp_path: Path) -> None:
    async def main() -> None:
        spool = Spool(tmp_path / "spool.db", 0.0)
        spool.open()

        async def originate_together(messages, also) -> None:
            await spool.run(also)
        engine = SimpleNamespace(spool=spool, peers={}, originate_together=originate_together)
        broker = Broker(CFG, engine, SimpleNamespace(write=lambda *a, **k: None))
        try:
            await spool.run(store.op_create())
            await broker.interest.start([])
            sub, _stream = await broker.subscribe(pubsub_pb2.SubscribeStart(pattern="a.>", name="s", durable=True),
                                                  "", True)
            task = asyncio.ensure_future(broker.publish("a.b", b"x", None, 1, 0.0, "", ""))
            await asyncio.sleep(0)
            task.cancel()                         # the client's deadline, while the store commits
            await asyncio.gather(task, return_exceptions=True)
            await spool.run(lambda c: None)
            await asyncio.sleep(0.05)
            assert rows(spool, "s") == 1
            assert sub.backlog == 1               # was 0 with a row waiting: a drain would end and discard it
        finally:
            spool.close()
    asyncio.run(main())


def test_a_new_subscription_counts_the_rows_left_under_its_name(tmp_path: Path) -> None:
    async def main() -> None:
        spool = Spool(tmp_path / "spool.db", 0.0)
        spool.open()
        broker = Broker(CFG, SimpleNamespace(spool=spool, peers={}), SimpleNamespace(write=lambda *a, **k: None))
        try:
            await spool.run(store.op_create())
            await broker.interest.start([])
            # a publication stored while the subscription of that name was being removed: its row stayed
            await spool.run(lambda c: c.execute("INSERT INTO pub_queue(name, pub_id, hops, expires_ts, body) "
                                                "VALUES ('s', 'p0', 0, 9e9, x'')"))
            sub, _stream = await broker.subscribe(pubsub_pb2.SubscribeStart(pattern="a.>", name="s", durable=True),
                                                  "", True)
            assert sub.backlog == rows(spool, "s") == 1   # was 0: a drain to backlog 0 would discard the row
        finally:
            spool.close()
    asyncio.run(main())
