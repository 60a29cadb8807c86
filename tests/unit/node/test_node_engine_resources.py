"""The engine with resource management on, over a real SQLite spool (no sockets): submissions, arrivals,
refusals for now (also of a node without it: one queue per priority), acks, recovery. The live behaviour is in
tests/integration/resources/."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from node import config, schema

from node import credits, registry
from node.mta import make_engine
from node.piece import split
from node.records import Records
from node.rpc import link_pb2
from node.piece import Piece
from node.spool import Spool
from node.transfer_queue import TransferQueue


def cfg_for(tmp: Path, mode: str = "fragmenting", **res) -> config.NodeConfig:
    return registry.config_from_dict({"name": "n3", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2",
                                      "neighbours": {"n2": "127.0.0.1:3", "n4": "127.0.0.1:4"}, "routes": {"n5": "n4", "n1": "n2"},
                                      "mode": mode, "fragment_size": 100, "wire_chunk": 100, "records_dir": str(tmp),
                                      "resources": res})


async def engine(tmp: Path, mode: str = "fragmenting", **res):
    cfg = cfg_for(tmp, mode, **res)
    spool = Spool(cfg.spool_path, 0.001)
    spool.open()
    eng = make_engine(cfg, spool, Records(tmp, cfg.name))
    await eng.recover()
    return eng


async def close(eng) -> None:
    await eng.settle()
    eng.spool.close()
    eng.records.close()


def transit(msg: str, size: int, hops: int = 1, dst: str = "n5") -> list[Piece]:
    frags = len(split(size, 100))
    return [Piece(msg, dst, o, size, hops, "n1", "alice", ["bob"], 1, time.time(), time.time() + 60, "", frags,
                  b"y" * ln) for o, ln in split(size, 100)]


def test_submissions_beyond_the_input_pool_are_refused_as_congested(tmp_path: Path) -> None:
    async def go() -> tuple[list, dict]:
        eng = await engine(tmp_path, input_pool=4)
        assert isinstance(eng.peers["n4"].queue, TransferQueue)
        out = [await eng.submit("alice", [("n5", "bob")], None, 100) for _ in range(3)]
        snap = eng.snapshot()
        await close(eng)
        return out, snap
    out, snap = asyncio.run(go())
    assert [ok for ok, _m, _r in out] == [True, True, False]           # single-fragment: half of 4
    assert out[2][2].startswith("congested, try later")
    lines = [json.loads(x) for x in (tmp_path / "submissions.jsonl").read_text().splitlines()]
    assert [x["accepted"] for x in lines] == [True, True, False]
    assert all(schema.validate("submission", x) == [] for x in lines)
    assert snap["resources"]["buffers"]["usage"][0] == 2
    assert schema.validate("metrics", {"ts": 1.0, "node": "n3", **snap}) == []
    assert schema.validate_optional("metrics", snap) == []


def test_a_full_class_refuses_for_now_and_an_ack_frees_the_buffer(tmp_path: Path) -> None:
    async def go() -> None:
        # 5 nodes known (n1..n5): 4 transit classes of 1 buffer each
        eng = await engine(tmp_path, transit_buffers=4, class_min=1)
        first, second = transit("a", 100), transit("b", 100)
        assert await eng.receive("n2", first) == [None]
        verdict = await eng.receive("n2", second)
        assert isinstance(verdict[0], tuple) and verdict[0][0].startswith("class_full") and verdict[0][1] > 0
        assert eng.peers["n2"].stats.deferred_in == 1 and eng.peers["n2"].stats.refused_in == 0
        sent = eng.take("n4", 10, 1 << 20)
        assert [p.msg_id for p in sent] == ["a"]
        eng.acked("n4", sent)                         # n4 stored it: the class-1 buffer is ours again
        assert await eng.receive("n2", second) == [None]
        assert credits.frames(eng.policy, eng.peers["n2"])[0].credit.msg_id == ""   # ROOM: n2 was refused, now room
        await close(eng)
    asyncio.run(go())


def test_a_piece_refused_for_now_is_kept_and_offered_again(tmp_path: Path) -> None:
    async def go() -> None:
        eng = await engine(tmp_path)
        ok, _mid, _ = await eng.submit("alice", [("n5", "bob")], None, 50)
        assert ok
        p = eng.take("n4", 10, 1 << 20)[0]
        eng.refused("n4", p, "class_full: no room", retry_after=0.05)
        assert eng.orphans == {} and len(eng.peers["n4"].queue) == 1 and eng.take("n4", 10, 1 << 20) == []
        await asyncio.sleep(0.1)
        again = eng.take("n4", 10, 1 << 20)
        assert [x.key for x in again] == [p.key] and again[0].retries == 1
        eng.refused("n4", again[0], "no such user", retry_after=0.0)   # a permanent refusal: an orphan
        assert p.key in eng.orphans
        await close(eng)
    asyncio.run(go())


def test_a_window_refused_for_now_resumes_in_send_order_on_room(tmp_path: Path) -> None:
    async def go() -> None:
        eng = await engine(tmp_path, enabled=False)   # no resource management: one queue per priority
        assert not eng.policy.managed
        for _ in range(5):
            assert (await eng.submit("alice", [("n5", "bob")], None, 50))[0]
        window = eng.take("n4", 4, 1 << 20)
        for p in window:                              # the next hop refuses them one by one, as sent
            eng.refused("n4", p, "busy", retry_after=30.0)
        assert eng.take("n4", 10, 1 << 20) == []
        credits.received(eng.peers["n4"], link_pb2.Credit())        # ROOM: the next hop has room again
        again = eng.take("n4", 10, 1 << 20)
        assert [p.key for p in again[:4]] == [p.key for p in window] and len(again) == 5
        await close(eng)
    asyncio.run(go())


def test_recovery_recharges_stored_pieces(tmp_path: Path) -> None:
    async def go() -> dict:
        eng = await engine(tmp_path, transit_buffers=8, class_min=1)        # 2 buffers per class
        assert await eng.receive("n2", transit("a", 200, hops=2)) == [None, None]
        await close(eng)
        eng = await engine(tmp_path, transit_buffers=8, class_min=1)     # a restart
        snap = eng.snapshot()["resources"]
        sent = eng.take("n4", 10, 1 << 20)
        eng.acked("n4", sent)
        after = eng.snapshot()["resources"]
        await close(eng)
        return {"before": snap["buffers"]["usage"], "after": after["buffers"]["usage"], "sent": len(sent)}
    r = asyncio.run(go())
    assert r["sent"] == 2 and r["before"][2] == 2 and sum(r["after"]) == 0
