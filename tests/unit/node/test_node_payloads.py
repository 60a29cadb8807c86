"""node/payloads.py: the bytes of pieces recovered without them, read for the link writers with read-ahead."""
from __future__ import annotations

import asyncio
from pathlib import Path

from node.piece import split
from node.payloads import PayloadReader
from node.piece import Piece
from node.spool import Spool


def _stored(spool: Spool, msg: str, size: int = 10_000, chunk: int = 1000) -> list[Piece]:
    payload = bytes(i % 251 for i in range(size))
    pieces = [Piece(msg, "n5", off, size, 0, "n1", "", ["bob"], 1, 1.0, 99.0, "", 10, payload[off:off + n])
              for off, n in split(size, chunk)]
    spool.run_sync(Spool.op_insert(pieces))
    return spool.run_sync(Spool.op_load_pieces(payloads=False))


def test_the_rest_of_a_copy_is_read_ahead_and_the_cache_stays_bounded(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.db", 0.0)
    spool.open()
    try:
        lazy = [p for p in _stored(spool, "m1") if p.msg_id == "m1"]
        full = spool.run_sync(Spool.op_load_pieces())

        async def go() -> None:
            r = PayloadReader(spool, budget=3000)
            got = await r.fill("n4", lazy[:2])                  # a read of its own, then 2 pieces read ahead
            assert got == {p.key: p.data for p in full[:2]} and r.reads == 1
            got = await r.fill("n4", lazy[2:4])                 # from the read-ahead: no read of its own
            assert got == {p.key: p.data for p in full[2:4]} and r.reads == 1 and r.hits == 2
            for i in range(4, 10, 2):
                assert await r.fill("n4", lazy[i:i + 2]) == {p.key: p.data for p in full[i:i + 2]}
            assert r.reads == 1 and r.hits == 8
            await asyncio.sleep(0.05)
            assert r._bytes <= 2 * r.budget                     # bounded, whatever was read ahead
            spool.run_sync(Spool.op_drop("m1", "n5"))
            assert await r.fill("n9", lazy[:1]) == {}           # gone from the spool: nothing to send

        asyncio.run(go())
    finally:
        spool.close()
