"""The link-state part of dynamic routing with a real spool and records but no sockets: flooding rules,
our own advert coming back, the sequence number across a restart, the two-way check."""
from __future__ import annotations

import asyncio
from pathlib import Path

from node import registry
from node.peer import Peer
from node.records import Records
from node.routing.dynamic import CAPABILITY, DynamicTable
from node.routing.linkstate import Advert, LinkStateDB
from node.routing.static import StaticRouter
from node.spool import Spool


def make(tmp_path: Path, spool: Spool) -> tuple[DynamicTable, dict[str, Peer]]:
    cfg = registry.config_from_dict({"name": "n1", "data_listen": "127.0.0.1:7000", "mgmt_listen": "127.0.0.1:7001",
                                     "neighbours": {"n2": "127.0.0.1:7002", "n3": "127.0.0.1:7004"},
                                     "routing": {"mode": "dynamic", "monitor": {"enabled": False}}})
    table = DynamicTable(cfg, spool, Records(tmp_path, "n1"), StaticRouter(cfg.neighbours, {}))
    peers = {n: Peer(n, queue=None, capabilities=frozenset({CAPABILITY})) for n in ("n2", "n3")}  # type: ignore[arg-type]
    for p in peers.values():
        p.stats.up = True
    table.attach(peers)
    return table, peers


def frames(peer: Peer) -> list[tuple[str, int]]:
    return [(f.link_state.origin, f.link_state.seq) for f in peer.take_control()]


def test_flooding_own_echoes_and_restart(tmp_path: Path) -> None:
    async def go() -> None:
        spool = Spool(tmp_path / "spool.db", 0.0)
        spool.open()
        table, peers = make(tmp_path, spool)
        await table.start()
        table.session("n2", True)
        table.session("n3", True)
        seq = table.seq
        assert frames(peers["n2"])[-1] == ("n1", seq) and frames(peers["n3"])[-1] == ("n1", seq)
        own = table.db.adverts["n1"]
        # our own current advert coming back (heard first by a faster longer path): nothing happens
        table.on_frame(peers["n2"], own.to_frame(0.0))
        assert table.seq == seq and frames(peers["n2"]) == [] and frames(peers["n3"]) == []
        # a newer one of ours (from before a restart): count past it and advertise
        table.on_frame(peers["n2"], Advert("n1", seq + 5, 0.0, {"n2": 1.0}).to_frame(0.0))
        assert table.seq == seq + 6 and frames(peers["n3"]) == [("n1", seq + 6)]
        frames(peers["n2"])
        # the same number with other links: also ours from before a restart
        table.on_frame(peers["n2"], Advert("n1", table.seq, 0.0, {"n9": 1.0}).to_frame(0.0))
        assert table.seq == seq + 7
        frames(peers["n2"]), frames(peers["n3"])
        # another node's advert: taken once and flooded to everyone but the sender
        adv = Advert("n4", 3, 0.0, {"n3": 1.0}).to_frame(0.0)
        table.on_frame(peers["n3"], adv)
        assert frames(peers["n2"]) == [("n4", 3)] and frames(peers["n3"]) == []
        table.on_frame(peers["n2"], adv)
        assert frames(peers["n2"]) == [] and frames(peers["n3"]) == []
        # an older one: the sender is behind, it gets ours
        table.on_frame(peers["n2"], Advert("n4", 2, 0.0, {}).to_frame(0.0))
        assert frames(peers["n2"]) == [("n4", 3)]
        last = table.seq
        await table.stop()
        await asyncio.sleep(0.05)          # the spool write of the last number
        again, _ = make(tmp_path, spool)
        await again.start()
        assert again.seq == last + 1       # went on from the spool, not from 1
        await again.stop()
        spool.close()
    asyncio.run(go())


def test_a_link_counts_only_when_both_ends_list_it() -> None:
    db = LinkStateDB(900.0)
    db.offer(Advert("a", 1, 0.0, {"b": 5.0, "c": 7.0}))
    db.offer(Advert("b", 1, 0.0, {"a": 6.0}))
    db.offer(Advert("c", 1, 0.0, {}))           # c withdrew its link to a
    assert db.graph() == {"a": {"b": 5.0}, "b": {"a": 6.0}}
    assert db.offer(Advert("a", 1, 0.0, {})) == 0 and db.offer(Advert("a", 0, 0.0, {})) == -1
    assert db.expire(1000.0, keep="a") == ["b", "c"] and set(db.adverts) == {"a"}
