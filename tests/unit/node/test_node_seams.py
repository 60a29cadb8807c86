"""The engine's router and admission-policy seams, and the link layer's frame-handler seam."""
from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from node.hooks import MessageKind, Received
from node.link import LinkManager, LinkSession
from node.mta import make_engine
from node.policy import PassThrough
from node.records import Records
from node.routing import StaticRouter
from node.rpc import link_pb2
from node.piece import Piece
from node.spool import Spool
from node.states import PieceState
from node.subsystem import Subsystem
from tests.unit.node.test_node_engine_spool import cfg_for, pieces_of


class AlternatingRouter(StaticRouter):
    """Answers n2, n4, n2, ... on every question: a weighted rule in its crudest form."""

    def __init__(self) -> None:
        super().__init__(["n2", "n4"], {})
        self.asked = 0
        self._next = itertools.cycle(["n2", "n4"])

    def next_hop(self, copy: Piece) -> str | None:
        self.asked += 1
        return next(self._next)


async def _engine(tmp: Path, **kw):
    cfg = cfg_for(tmp)
    spool = Spool(cfg.spool_path, 0.001)
    spool.open()
    eng = make_engine(cfg, spool, Records(tmp, cfg.name), **kw)
    await eng.recover()
    return eng


async def _close(eng) -> None:
    await eng.settle()
    eng.spool.close()
    eng.records.close()


def test_router_is_asked_once_per_copy_and_a_copy_is_never_split(tmp_path: Path) -> None:
    async def go() -> None:
        router = AlternatingRouter()
        eng = await _engine(tmp_path, router=router)
        ps = pieces_of(b"x" * 1000, msg="big", dst="n5")          # 10 pieces, arriving in three batches
        for part in (ps[:3], ps[3:7], ps[7:]):
            assert await eng.receive("n2", part) == [None] * len(part)
        other = pieces_of(b"y" * 300, msg="small", dst="n5")
        assert await eng.receive("n2", other) == [None] * 3
        big = [len([p for p in eng.peers[n].queue.remove_if(lambda p: p.msg_id == "big")]) for n in ("n2", "n4")]
        small = [len([p for p in eng.peers[n].queue.remove_if(lambda p: p.msg_id == "small")]) for n in ("n2", "n4")]
        assert sorted(big) == [0, 10] and sorted(small) == [0, 3]     # each copy whole at one next hop
        assert big != small and router.asked == 2                     # one question per copy
        await _close(eng)
    asyncio.run(go())


def test_routes_changed_moves_queued_copies_and_frees_orphans(tmp_path: Path) -> None:
    async def go() -> None:
        eng = await _engine(tmp_path)
        assert await eng.receive("n2", pieces_of(b"q" * 300, msg="a", dst="n5")) == [None] * 3
        assert await eng.receive("n2", pieces_of(b"o" * 100, msg="b", dst="n7")) == [None]   # no route yet
        assert len(eng.peers["n4"].queue) == 3 and len(eng.orphans) == 1
        eng.set_routes({"n5": "n2", "n7": "n4"})
        assert len(eng.peers["n4"].queue) == 1 and len(eng.peers["n2"].queue) == 3 and not eng.orphans
        assert {p.msg_id for p in eng.take("n2", 10, 1 << 20)} == {"a"}
        await eng.settle()
        status = await eng.spool.run(Spool.op_status("b"))
        assert status["states"] == {PieceState.QUEUED: 1}                 # the orphan is queued again, durably
        await _close(eng)
    asyncio.run(go())


def test_default_policy_is_pass_through_with_one_fifo_per_priority(tmp_path: Path) -> None:
    async def go() -> None:
        eng = await _engine(tmp_path)
        assert isinstance(eng.policy, PassThrough)
        for i in range(4):
            assert (await eng.receive("n2", pieces_of(b"z" * 200, msg=f"m{i}", dst="n5")))[0] is None
        assert [p.msg_id for p in eng.take("n4", 8, 1 << 20)] == ["m0", "m0", "m1", "m1", "m2", "m2", "m3", "m3"]
        assert "resources" not in eng.snapshot()
        await _close(eng)
    asyncio.run(go())


class Wire:
    """The two ends of a stream as the session sees them: what it wrote, and what it will read."""

    def __init__(self) -> None:
        self.written: list[link_pb2.FrameBatch] = []
        self.inbox: asyncio.Queue = asyncio.Queue()

    async def write(self, batch) -> None:
        self.written.append(batch)

    async def read(self):
        return await self.inbox.get()


def test_link_dispatches_registered_kinds_and_sends_control_before_data(tmp_path: Path) -> None:
    async def go() -> None:
        eng = await _engine(tmp_path)
        links = LinkManager(eng.cfg, eng)
        with pytest.raises(ValueError):
            links.register("ack", lambda peer, fr: None)           # a base kind stays the link's own
        with pytest.raises(ValueError):
            links.register("no_such_kind", lambda peer, fr: None)
        assert links.capabilities() == ["runs"]
        assert await eng.receive("n2", pieces_of(b"d" * 300, msg="m", dst="n5")) == [None] * 3
        peer = eng.peers["n4"]
        peer.send_control(link_pb2.Frame(keepalive=link_pb2.Keepalive(ts=1.0)))   # stands for a subsystem frame
        wire = Wire()
        session = LinkSession(peer, eng, eng.cfg, wire.write, wire.read, capabilities=frozenset({"runs"}))
        task = asyncio.ensure_future(session.run())
        for _ in range(100):
            if wire.written:
                break
            await asyncio.sleep(0.01)
        first = [fr.WhichOneof("kind") for fr in wire.written[0].frames]
        assert first[0] == "keepalive" and "run" in first[1:]         # control first, data as one Run frame
        assert peer.stats.up and peer.session is session
        session.close()
        await asyncio.gather(task, return_exceptions=True)
        assert not peer.stats.up and len(peer.queue) == 3            # unacknowledged data is queued again
        await _close(eng)
    asyncio.run(go())


def test_delivery_hooks_see_each_delivered_copy_once(tmp_path: Path) -> None:
    async def go() -> None:
        eng = await _engine(tmp_path)
        seen: list[tuple[str, int]] = []
        eng.hooks.on_delivery.append(lambda m, size: seen.append((m.msg_id, size)))
        ps = pieces_of(b"h" * 250, msg="hooked", dst="n3")
        assert await eng.receive("n2", ps[:2]) == [None, None]
        assert seen == []                                              # not before the copy is whole
        assert await eng.receive("n2", ps[2:] + ps[:1]) == [None, None]   # the rest, and a duplicate
        await eng.settle()
        assert await eng.receive("n2", pieces_of(b"w" * 50, msg="whole", dst="n3")) == [None]
        assert seen == [("hooked", 250), ("whole", 50)]
        await _close(eng)
    asyncio.run(go())


def _kind_hook(eng, fail: bool = False) -> tuple[list, list, list]:
    """Message kind "k" with a receive hook whose op takes the inbox row away (or raises, with `fail`); returns
    (what the consumer got, what done() heard, the payloads the op ran for)."""
    consumed: list[bytes] = []
    done: list[bool] = []
    ran: list[bytes] = []

    def on_receive(m: Piece, payload: bytes) -> Received:
        def op(c) -> None:
            if fail:
                raise RuntimeError("the subsystem refuses it here")
            ran.append(payload)
            c.execute("DELETE FROM inbox WHERE msg_id=?", (m.msg_id,))
        return Received(op, done.append)
    eng.hooks.add(type("K", (Subsystem,), {
        "name": "k", "message_kinds": lambda self: [MessageKind("k", lambda i, o: True,
                                                                lambda m, p: consumed.append(p), on_receive)]})(
        eng.cfg))
    return consumed, done, ran


def _k_pieces(payload: bytes, msg: str) -> list[Piece]:
    ps = pieces_of(payload, msg=msg, dst="n3")
    for p in ps:
        p.kind = "k"
    return ps


def test_a_copy_in_pieces_is_reassembled_and_handled_by_its_kind_in_the_commit_that_completes_it(
        tmp_path: Path) -> None:
    async def go() -> None:
        eng = await _engine(tmp_path)
        consumed, done, ran = _kind_hook(eng)
        payload = bytes(range(250))
        ps = _k_pieces(payload, "split")
        assert await eng.receive("n2", ps[:2]) == [None, None]          # stored; the copy is not whole yet
        assert ran == [] and done == []
        before = eng.spool.commits
        assert await eng.receive("n2", ps[2:] + ps[:1]) == [None, None]  # the rest (and a retransmission)
        assert eng.spool.commits == before + 1                          # reassembled and handled in that one
        assert ran == [payload] and done == [True] and consumed == []
        assert ("split", "n3") not in eng.partial
        rows = eng.spool.run_sync(lambda c: (c.execute("SELECT count(*) FROM frag WHERE msg_id='split'").fetchone(),
                                             c.execute("SELECT count(*) FROM inbox").fetchone(),
                                             c.execute("SELECT outcome FROM done WHERE msg_id='split'").fetchone()))
        assert rows == ((0,), (0,), ("delivered",))
        assert await eng.receive("n2", ps[1:2]) == [None]               # late duplicate: acked, nothing more
        await eng.settle()
        assert ran == [payload] and consumed == []
        await _close(eng)
    asyncio.run(go())


def test_a_copy_in_pieces_whose_kind_op_fails_goes_to_the_consumer_once(tmp_path: Path) -> None:
    async def go() -> None:
        eng = await _engine(tmp_path)
        consumed, done, ran = _kind_hook(eng, fail=True)
        payload = b"p" * 250
        assert await eng.receive("n2", _k_pieces(payload, "refused")) == [None, None, None]
        await eng.settle()
        assert done == [False] and consumed == [payload] and ran == []
        assert ("refused", "n3") not in eng.partial
        await _close(eng)
    asyncio.run(go())
