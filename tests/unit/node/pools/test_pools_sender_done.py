"""A consumer's fence_done line (node/pools/sender.py): the new instance's FenceDone closes the pause its
fence_sent opened; a malformed or foreign one is refused and recorded, and changes nothing."""
from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from node.pools.sender import PoolSender


class FakeRecords:
    def __init__(self) -> None:
        self.lines: list[dict] = []

    def write(self, kind: str, **fields) -> None:
        self.lines.append({"kind": kind, **fields})


class FakeBroker:
    me = "n1"

    async def publish(self, *args, **kwargs) -> SimpleNamespace:
        return SimpleNamespace(accepted=True, reason="")


class FakeSpool:
    async def run(self, op) -> None:
        return None


def done(publisher: str = "A", **over) -> SimpleNamespace:
    body = {"consumer": "c1", "app": "A", "seq": 2, "instance": "a2", "version": 3, "term": 1, **over}
    return SimpleNamespace(payload=json.dumps(body).encode(), publisher=publisher, pub_id="h2-x", topic="_pools.done.c1")


def test_fence_done_times_the_handover_and_refuses_bad_ones() -> None:
    records = FakeRecords()
    sender = PoolSender("n1", "c1", {"A": ["alarm"]}, FakeBroker(), FakeSpool(), records)
    sender.unsent = [{"consumer": "c1", "app": "A", "seq": 2, "old": "a1", "new": "a2", "version": 3, "term": 1}]

    async def go() -> None:
        await sender._publish_fences()
        for bad in (done(consumer="c9"), done(publisher="B"), done(seq=-1),
                    SimpleNamespace(payload=b"{", publisher="", pub_id="h2-y", topic="_pools.done.c1")):
            await sender._on_done(bad)
        await sender._on_done(done())
        await sender._on_done(done(publisher=""))        # again (or never sent by this daemon): no pause
    asyncio.run(go())
    events = [r["event"] for r in records.lines]
    assert events == ["fence_sent"] + ["refused"] * 4 + ["fence_done"] * 2 and sender.bad == 4
    first, again = records.lines[-2:]
    assert (first["old"], first["new"], first["seq"], first["version"]) == ("a1", "a2", 2, 3)
    assert 0 <= first["pause_s"] < 5 and again["pause_s"] is None and again["old"] is None
