"""What one node takes on is bounded: orphans (copies without a next hop) by their bytes and kept without their
payloads in memory, one submission by the bytes it makes the node store; an orphan is reported when its lifetime
ends, not when it becomes one."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from node.errors import ConfigError
from node.metrics import engine_snapshot
from node.origination import NewMessage
from node.refusal import Refusal
from tests.unit.node.test_node_engine_spool import _close, _engine, cfg_for, pieces_of


def test_orphans_keep_their_payloads_in_the_spool_and_are_sent_from_there_once_a_route_appears(
        tmp_path: Path) -> None:
    payload = bytes(range(250))

    async def go() -> None:
        eng = await _engine(tmp_path)
        assert await eng.receive("n2", pieces_of(payload, msg="mo", dst="n7")) == [None] * 3     # no route to n7
        await eng.settle()
        assert [p.data for p in eng.orphans.values()] == [None] * 3 and eng.orphans.bytes == 250
        assert (lambda m: (m["orphans"], m["orphan_bytes"]))(engine_snapshot(eng)) == (3, 250)    # metrics.jsonl, Stats
        eng.set_routes({"n7": "n4"})
        sent = await eng.take_loaded("n4", 10, 1 << 20)
        assert b"".join(p.data for p in sent) == payload and not eng.orphans and eng.orphans.bytes == 0
        await _close(eng)
    asyncio.run(go())


def test_orphan_bytes_above_max_orphan_bytes_are_refused_not_now_and_congested(tmp_path: Path) -> None:
    async def go() -> None:
        eng = await _engine(tmp_path, limits={"max_orphan_bytes": 300})
        assert await eng.receive("n2", pieces_of(b"a" * 300, msg="ma", dst="n7")) == [None] * 3
        late = await eng.receive("n2", pieces_of(b"b" * 100, msg="mb", dst="n8"))
        assert isinstance(late[0], Refusal) and late[0].for_now
        assert late[0].reason.startswith("congested, try later: 300 bytes of copies without a route are kept here")
        assert await eng.receive("n2", pieces_of(b"c" * 100, msg="mc", dst="n5")) == [None]   # routed: taken
        ok, _m, why = await eng.originate(NewMessage("alice", [("n8", "")], b"d" * 10, 1, 0.0, orphan_ok=True))
        assert not ok and why.startswith("congested, try later (300 bytes of copies without a route")
        eng.set_routes({"n7": "n4"})              # the orphans leave: room again
        assert await eng.receive("n2", pieces_of(b"b" * 100, msg="mb", dst="n8")) == [None]
        await _close(eng)
    asyncio.run(go())


def test_an_orphan_is_reported_to_its_originator_when_its_lifetime_ends_not_before(tmp_path: Path) -> None:
    async def go() -> tuple[int, int]:
        eng = await _engine(tmp_path)
        lifetime = 0.2
        assert await eng.receive("n2", pieces_of(b"o" * 100, msg="mo", dst="n7",
                                                 expires=time.time() + lifetime)) == [None]
        await eng.settle()
        while_kept = len(eng.peers["n2"].queue)           # report messages to the originator n1 go via n2
        await asyncio.sleep(lifetime + 0.05)
        await eng.sweep()
        await eng.settle()
        after = len(eng.peers["n2"].queue)
        await _close(eng)
        return while_kept, after

    assert asyncio.run(go()) == (0, 1)
    events = [json.loads(x)["event"] for x in (tmp_path / "reports.jsonl").read_text().splitlines()]
    assert events == ["orphan", "ndr_made"]


def test_a_submission_that_would_store_more_than_max_submission_bytes_is_refused(tmp_path: Path) -> None:
    async def go() -> list[tuple[bool, str, str]]:
        eng = await _engine(tmp_path, limits={"max_submission_bytes": 1000})
        out = [await eng.submit("alice", [("n5", "bob"), ("n1", "bob"), ("n1", "carol")], b"x" * 500, None),
               await eng.submit("alice", [("n5", "bob"), ("n1", "bob"), ("n3", "bob")], None, 400)]
        await _close(eng)
        return out

    two, three = asyncio.run(go())
    assert two[0] is True                                       # 500 bytes x 2 nodes: at the limit
    assert three[0] is False and three[2] == ("a message of 400 bytes to 3 nodes would store 1200 bytes here "
                                              "(limit 1000, limits.max_submission_bytes)")


@pytest.mark.parametrize("key", ["max_orphan_bytes", "max_submission_bytes"])
def test_the_storage_caps_must_be_positive(tmp_path: Path, key: str) -> None:
    assert getattr(cfg_for(tmp_path).limits, key) == 256 << 20
    with pytest.raises(ConfigError, match=f"limits.{key} must be at least 1 byte"):
        cfg_for(tmp_path, limits={key: 0})
