"""The mailbox comes in pages: bounded in items and payload bytes, in delivery order, nothing twice or missed."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from node.mailbox import PAGE_BYTES, PAGE_ITEMS, Mailbox
from tests.unit.node.test_node_engine_spool import _close, _engine, pieces_of


async def _all_pages(box: Mailbox, include_payload: bool, limit: int = 0) -> list[list[dict]]:
    pages, token = [], ""
    while True:
        rows, token = await box.page("", include_payload, limit, token)
        pages.append(rows)
        if not token:
            return pages


def test_pages_by_count_cover_the_mailbox_once_in_order(tmp_path: Path) -> None:
    async def go() -> None:
        eng = await _engine(tmp_path)
        n = PAGE_ITEMS * 2 + 300
        for i in range(0, n, 500):
            batch = [p for j in range(i, min(i + 500, n)) for p in pieces_of(b"m", msg=f"m{j:05d}")]
            assert await eng.receive("n2", batch) == [None] * len(batch)
        box = Mailbox(eng.spool, eng.policy)
        pages = await _all_pages(box, False)
        assert [len(p) for p in pages] == [PAGE_ITEMS, PAGE_ITEMS, 300]
        ids = [r["msg_id"] for p in pages for r in p]
        assert len(set(ids)) == n
        keys = [(r["deliver_ts"], r["msg_id"]) for p in pages for r in p]
        assert keys == sorted(keys)
        assert [len(p) for p in await _all_pages(box, False, limit=999)] == [999, 999, 302]
        with pytest.raises(ValueError):
            await box.page("", False, 0, "not a token")
        await _close(eng)
    asyncio.run(go())


def test_pages_with_payloads_stay_near_the_byte_bound(tmp_path: Path) -> None:
    async def go() -> None:
        eng = await _engine(tmp_path, fragment_size=1 << 20)
        big = PAGE_BYTES // 3 + 1                       # three of them do not fit one page
        for i in range(5):
            ps = pieces_of(b"p" * big, msg=f"big{i}", chunk=1 << 20)
            assert await eng.receive("n2", ps) == [None] * len(ps)
        await eng.settle()
        pages = await _all_pages(Mailbox(eng.spool, eng.policy), True)
        assert [len(p) for p in pages] == [2, 2, 1]
        assert all(sum(len(r["payload"]) for r in p) <= PAGE_BYTES for p in pages)
        await _close(eng)
    asyncio.run(go())
