"""The broker's onward copies: the router is asked once per target until it says the routes changed (not once per
publication and target) when its answers depend on the destination alone, and per publication otherwise; each
copy's bytes parse to the publication with this hop's count and the targets beyond its next hop."""
from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from types import SimpleNamespace

from node import registry
from node.broker.broker import Broker
from node.piece import Piece
from node.routing import StaticRouter
from node.rpc import link_pb2
from node.spool import Spool

CFG = registry.config_from_dict({"name": "n1", "data_listen": "127.0.0.1:7000", "mgmt_listen": "127.0.0.1:7001",
                                 "neighbours": {"n2": "127.0.0.1:7002", "n3": "127.0.0.1:7003"}})


class CountingRouter(StaticRouter):
    """A static table that counts the destinations it is asked about."""

    def __init__(self) -> None:
        super().__init__(["n2", "n3"], {"a": "n2", "b": "n3", "c": "n2"})
        self.asked: list[str] = []

    def hop_for(self, dst: str) -> str | None:
        self.asked.append(dst)
        return super().hop_for(dst)


class AlternatingRouter(StaticRouter):
    """Answers n2, n3, n2, ... whatever the destination: a weighted rule in its crudest form."""

    def __init__(self) -> None:
        super().__init__(["n2", "n3"], {})
        self.asked = 0
        self._next = itertools.cycle(["n2", "n3"])

    def next_hop(self, copy: Piece) -> str | None:
        self.asked += 1
        return next(self._next)


def _pub(i: int) -> link_pb2.Publication:
    now = time.time()
    return link_pb2.Publication(pub_id=f"n0-{i:016x}", origin="n0", topic="t.x", key="k", priority=2, publish_ts=now,
                                expires_ts=now + 60, hops=1, targets=["a", "b", "c", "n1"], payload=b"p" * 300,
                                publisher="alice", size=300)


def _broker(tmp_path: Path, router: StaticRouter) -> Broker:
    return Broker(CFG, SimpleNamespace(spool=Spool(tmp_path / "spool.db"), peers={}, router=router), None)


def test_next_hops_are_asked_once_per_target_until_the_routes_change(tmp_path: Path) -> None:
    router = CountingRouter()
    broker = _broker(tmp_path, router)
    for i in range(5):
        pub = _pub(i)
        copies = broker._copies(pub, 2, {"a", "b", "c"}, {})
        got = [(m.recipients, link_pb2.Publication.FromString(m.payload)) for m in copies]
        assert [(r, list(p.targets), p.hops) for r, p in got] == [([("n2", "")], ["a", "c"], 2),
                                                                   ([("n3", "")], ["b"], 2)]
        for _r, p in got:            # all but the routing is the publication's own
            p.ClearField("targets")
            p.hops = pub.hops
            pub.ClearField("targets")
            assert p == pub
        assert [m.msg_id for m in copies] == [f"pub.{pub.pub_id}.n1.2.n2", f"pub.{pub.pub_id}.n1.2.n3"]
    assert sorted(router.asked) == ["a", "b", "c"]             # once per target, not once per publication
    router.set_routes({"a": "n3"})                            # routes changed: asked again
    copies = broker._copies(_pub(9), 2, {"a"}, {})
    assert router.asked[3:] == ["a"] and copies[0].recipients == [("n3", "")]


def test_a_router_that_answers_per_copy_is_asked_per_publication(tmp_path: Path) -> None:
    router = AlternatingRouter()
    broker = _broker(tmp_path, router)
    hops = [broker._copies(_pub(i), 2, {"a"}, {})[0].recipients[0][0] for i in range(4)]
    assert router.asked == 4 and hops == ["n2", "n3", "n2", "n3"]


def test_a_copy_whose_payload_fits_a_fragment_is_one_piece_not_two(tmp_path: Path) -> None:
    """fragment_size 100: the broker's copy of a 100-byte publication (its header makes it ~170 bytes) is one piece,
    stored and sent whole; one of a 150-byte publication is still cut into fragments."""
    from node.mta import make_engine
    from node.records import Records
    from tests.unit.node.test_node_engine_spool import cfg_for

    async def go() -> None:
        cfg = cfg_for(tmp_path)
        spool = Spool(cfg.spool_path, 0.0)
        spool.open()
        eng = make_engine(cfg, spool, Records(tmp_path, cfg.name))
        await eng.recover()
        broker = Broker(cfg, eng, None)
        try:
            for size in (100, 150):
                pub = _pub(size)
                pub.payload = b"q" * size
                (m,) = broker._copies(pub, 2, {"n5"}, {})
                assert len(m.payload) > 100
                pieces = 1 if size == 100 else -(-len(m.payload) // 100)
                assert await eng.originate_together([m], lambda c: None) is None
                got = eng.take("n4", 10, 1 << 20)
                assert [(p.msg_id, p.fragments) for p in got] == [(m.msg_id, pieces)] * pieces
                assert b"".join(p.data for p in got) == m.payload
        finally:
            await eng.settle()
            spool.close()
            eng.records.close()
    asyncio.run(go())
