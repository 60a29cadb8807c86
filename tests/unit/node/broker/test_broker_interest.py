"""The interest table's answer to "who wants this topic", remembered per topic until the table changes."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from node.broker import interest
from node.broker.interest import InterestTable, Sub
from node.rpc import link_pb2
from node.spool import Spool

MAX_AGE = 0.3


class Neighbour:
    """The Peer a frame comes from, as far as the table uses it (a neighbour's records are all it needs here)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.capabilities: set[str] = set()

    def send_control(self, frame: link_pb2.Frame) -> None:
        pass


def record(origin: str, seq: int, subs: list[tuple[str, str]], age: float = 0.0) -> link_pb2.Frame:
    return link_pb2.Frame(interest=link_pb2.Interest(origin=origin, seq=seq, age=age, subscriptions=[
        link_pb2.InterestEntry(name=n, pattern=p, durable=True) for n, p in subs]))


def test_matches_are_remembered_until_any_interest_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[str] = []

    def counting(pattern: str, topic: str) -> bool:
        tried.append(pattern)
        return real(pattern, topic)
    real = interest.matches
    monkeypatch.setattr(interest, "matches", counting)
    spool = Spool(tmp_path / "spool.db")
    spool.open()

    def who(table: InterestTable) -> dict[str, list[str]]:
        return {node: sorted(s.name for s in subs) for node, subs in table.matching("a.b").items()}

    async def go() -> None:
        t = InterestTable("n1", spool, refresh=1000.0, max_age=MAX_AGE)
        await t.start([Sub("mine", "a.*", False)])
        n2 = Neighbour("n2")
        assert who(t) == {"n1": ["mine"]}
        tried.clear()
        assert who(t) == {"n1": ["mine"]} and tried == []          # the same topic again: remembered
        t.matching("a.b")["n1"] = []                               # a caller's change to its copy stays its own
        assert who(t) == {"n1": ["mine"]}
        t.set_own([Sub("mine", "a.*", False), Sub("more", "a.>", True)])      # this node's subscriptions
        assert who(t) == {"n1": ["mine", "more"]}
        t.on_frame(n2, record("n2", 1, [("far", "a.b")]))                    # a neighbour's new record
        assert who(t) == {"n1": ["mine", "more"], "n2": ["far"]}
        t.on_frame(n2, record("n2", 2, []))                                  # ... withdrawn by a newer one
        assert who(t) == {"n1": ["mine", "more"]}
        t.on_frame(n2, record("n3", 1, [("old", "a.b")], age=MAX_AGE - 0.1))  # a record about to expire
        assert who(t) == {"n1": ["mine", "more"], "n3": ["old"]}
        time.sleep(0.15)
        t.housekeeping()                                                      # nobody refreshed it: gone
        assert who(t) == {"n1": ["mine", "more"]}
        t.set_own([])
        assert who(t) == {}
        await spool.run(lambda c: None)          # the sequence numbers stored (the writer answers a live loop)
    try:
        asyncio.run(go())
    finally:
        spool.close()
