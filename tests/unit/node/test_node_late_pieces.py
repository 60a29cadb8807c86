"""Pieces that arrive after their lifetime: never stored (the duplicate check may have forgotten them), a
duplicate still acknowledged, and reported once, by the sender that holds the copy. Rows without a lifetime
are never pruned. A timestamp below 0 (0 is "none") is refused."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from node.codec import piece_from_frame
from node.piece import Piece
from node.refusal import Refusal
from node.spool import EXPIRED_ON_ARRIVAL, Spool
from node.states import PieceState as S
from tests.unit.node.test_node_engine_spool import _close, _deliveries, _engine, pieces_of
from tests.unit.node.test_node_frames import CFG, frag

LIFETIME = 0.2        # seconds: the pieces' lifetime in these tests


def _reports(tmp: Path) -> list[dict]:
    f = tmp / "reports.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


def test_a_retransmission_held_in_flight_past_expiry_and_pruning_is_not_taken_again(tmp_path: Path) -> None:
    """n3 takes a message for itself (two fragments, and a one-piece one) and one in transit to n5, hands the
    transit one on; the sender's retransmissions are held in flight. Before the prune they are duplicates (acked);
    after the lifetime and the prune n3 has forgotten them, and they are refused, not delivered again and not
    reported as undelivered."""
    async def go() -> tuple[list, list, int]:
        eng = await _engine(tmp_path)
        expires = time.time() + LIFETIME
        parts = pieces_of(b"p" * 150, msg="mpart", expires=expires)
        whole = pieces_of(b"w" * 50, msg="mwhole", expires=expires)
        transit = pieces_of(b"t" * 100, msg="mtransit", dst="n5", expires=expires)
        late = parts + whole + transit                 # the retransmissions, held in flight from here on
        assert await eng.receive("n2", [*parts, *whole, *transit]) == [None] * 4
        eng.acked("n4", eng.take("n4", 10, 1 << 20))   # the transit copy went on
        await eng.settle()
        await asyncio.sleep(expires - time.time() + 0.05)
        in_margin = await eng.receive("n2", late)      # expired, but still known here: duplicates
        await eng.spool.run(Spool.op_prune(time.time()))      # what the periodic prune forgets 60 s later
        released = await eng.receive("n2", late)
        await eng.sweep()
        await eng.settle()
        queued = len(eng.peers["n4"].queue)
        await _close(eng)
        return in_margin, released, queued

    in_margin, released, queued = asyncio.run(go())
    assert in_margin == [None] * 4
    assert all(isinstance(r, Refusal) and not r.for_now and r.reason == EXPIRED_ON_ARRIVAL for r in released)
    assert sorted(d["msg_id"] for d in _deliveries(tmp_path)) == ["mpart", "mwhole"]     # once each
    assert queued == 0 and _reports(tmp_path) == []       # no second copy on its way, no false report


def test_a_piece_refused_because_its_lifetime_ended_is_reported_once_by_its_sender(tmp_path: Path) -> None:
    """The next hop refused pieces that were in flight when their lifetime ended: the sender, which still holds
    the copy, drops it and reports it once (not as an orphan waiting for a route)."""
    async def go() -> tuple[int, int, int]:
        eng = await _engine(tmp_path)
        ps = pieces_of(b"s" * 200, msg="msent", dst="n5", expires=time.time() + LIFETIME)
        assert await eng.receive("n2", ps) == [None, None]
        sent = eng.take("n4", 10, 1 << 20)
        await asyncio.sleep(LIFETIME + 0.05)
        for p in sent:
            eng.refused("n4", p, EXPIRED_ON_ARRIVAL)
        await eng.settle()
        stored = await eng.spool.run(Spool.op_status("msent"))
        report_messages = len(eng.peers["n2"].queue)       # the report to the originator n1, via n2
        await _close(eng)
        return len(eng.orphans), sum(stored["states"].values()), report_messages

    orphans, stored, report_messages = asyncio.run(go())
    assert (orphans, stored, report_messages) == (0, 0, 1)
    assert [(r["msg_id"], r["event"]) for r in _reports(tmp_path)] == [("msent", "ndr_made")]
    assert "lifetime expired" in _reports(tmp_path)[0]["reason"]


def test_rows_without_a_lifetime_are_never_pruned(tmp_path: Path) -> None:
    """expires_ts 0 is "no lifetime": such a piece can arrive again at any time, so what recognises it stays."""
    def transit(off: int) -> Piece:
        return Piece("forever", "n9", off, 200, 2, "n1", "", [""], 1, 1.0, 0.0, "", 2, b"f" * 100, state=S.QUEUED)

    spool = Spool(tmp_path / "s.db", 0.0)
    spool.open()
    try:
        assert spool.run_sync(Spool.op_receive([transit(0), transit(100)])) == [True, True]
        spool.run_sync(Spool.op_delete([("forever", "n9", 0), ("forever", "n9", 100)]))    # handed on, acked
        # a one-piece message without a lifetime delivered here eight days ago
        spool.run_sync(lambda c: c.execute("INSERT INTO done VALUES ('old', 'me', 'delivered', ?, 0)",
                                           (time.time() - 8 * 86400,)))
        spool.run_sync(Spool.op_prune(time.time() - 60))
        assert spool.run_sync(Spool.op_receive([transit(0), transit(100)])) == [False, False]   # duplicates
        whole = Piece("old", "me", 0, 3, 1, "n1", "", [""], 1, 1.0, 0.0, "", 1, b"abc", state=S.WHOLE)
        assert spool.run_sync(Spool.op_receive([whole])) == [False]
    finally:
        spool.close()


@pytest.mark.parametrize("field", ["submit_ts", "expires_ts"])
def test_a_fragment_with_a_negative_timestamp_is_refused(field: str) -> None:
    reason = piece_from_frame(frag(**{field: -1.0}), CFG)
    assert isinstance(reason, Refusal) and reason.reason == "fragment with a negative timestamp"
    assert not isinstance(piece_from_frame(frag(**{field: 0.0}), CFG), Refusal)     # 0: none given

