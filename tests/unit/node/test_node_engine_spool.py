"""The engine over a real SQLite spool: reassembly (out of order, duplicates), dedup, crash recovery."""
from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from node import config, schema

from node import registry
from node.mta import make_engine
from node.origination import SUBMIT_CHUNK, SUBMIT_EARLY_MIN
from node.piece import split
from node.records import Records
from node.piece import Piece
from node.spool import Spool

ROOT = Path(__file__).resolve().parents[3]


def cfg_for(tmp: Path, name: str = "n3", mode: str = "fragmenting", **kw) -> config.NodeConfig:
    return registry.config_from_dict({"name": name, "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2",
                                      "neighbours": {"n2": "127.0.0.1:3", "n4": "127.0.0.1:4"}, "routes": {"n5": "n4", "n1": "n2"},
                                      "mode": mode, "fragment_size": 100, "wire_chunk": 100, "records_dir": str(tmp),
                                      **kw})


def pieces_of(payload: bytes, msg: str = "m1", dst: str = "n3", hops: int = 2, chunk: int = 100,
              expires: float = 0.0) -> list[Piece]:
    n = len(payload)
    return [Piece(msg, dst, o, n, hops, "n1", "alice", ["bob"], 1, time.time(), expires or time.time() + 60, "",
                  len(split(n, chunk)), payload[o:o + ln]) for o, ln in split(n, chunk)]


async def _engine(tmp: Path, **kw):
    cfg = cfg_for(tmp, **kw)
    spool = Spool(cfg.spool_path, 0.001)
    spool.open()
    eng = make_engine(cfg, spool, Records(tmp, cfg.name))
    await eng.recover()
    return eng


async def _close(eng) -> None:
    await eng.settle()
    eng.spool.close()
    eng.records.close()


def _deliveries(tmp: Path) -> list[dict]:
    f = tmp / "deliveries.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


def test_out_of_order_and_duplicate_fragments_reassemble_once(tmp_path: Path) -> None:
    payload = bytes(random.Random(1).randbytes(1050))

    async def go() -> list[dict]:
        eng = await _engine(tmp_path)
        ps = pieces_of(payload)
        shuffled = ps[::-1] + ps[3:6]            # reverse order, then duplicates
        random.Random(2).shuffle(shuffled)
        results = []
        for i in range(0, len(shuffled), 4):
            results += await eng.receive("n2", shuffled[i:i + 4])
        assert results == [None] * len(shuffled)  # duplicates are acked (the sender may drop them) too
        await eng.settle()
        assert eng.peers["n2"].stats.duplicates_in == 3
        # a late duplicate after delivery is dropped as well
        await eng.receive("n2", ps[:1])
        await eng.settle()
        rows, _more = await eng.spool.run(Spool.op_mailbox("", True))
        await _close(eng)
        return rows

    rows = asyncio.run(go())
    assert len(rows) == 1 and rows[0]["payload"] == payload and rows[0]["user"] == "bob"
    dl = _deliveries(tmp_path)
    assert len(dl) == 1 and dl[0]["fragments"] == 11 and dl[0]["size"] == 1050
    assert schema.validate("delivery", dl[0]) == []


def test_transit_fragment_is_queued_at_once_when_fragmenting_but_held_when_not(tmp_path: Path) -> None:
    async def go(mode: str, d: Path) -> tuple[int, int]:
        eng = await _engine(d, mode=mode)
        ps = pieces_of(b"y" * 300, dst="n5")
        await eng.receive("n2", ps[:2])
        await eng.settle()
        early = len(eng.peers["n4"].queue)
        await eng.receive("n2", ps[2:])
        await eng.settle()
        late = len(eng.peers["n4"].queue)
        await _close(eng)
        return early, late

    (tmp_path / "f").mkdir()
    (tmp_path / "n").mkdir()
    assert asyncio.run(go("fragmenting", tmp_path / "f")) == (2, 3)       # pipelined
    assert asyncio.run(go("non-fragmenting", tmp_path / "n")) == (0, 3)   # store whole, then forward


def test_recovery_requeues_unacked_and_dedup_survives_restart(tmp_path: Path) -> None:
    ps = pieces_of(b"z" * 250, dst="n5")

    async def first() -> None:
        eng = await _engine(tmp_path)
        await eng.receive("n2", ps)
        taken = eng.take("n4", 10, 1 << 20)   # "sent" but never acknowledged
        assert len(taken) == 3
        eng.spool.close()                     # stop without acks: as if the process died here

    async def second() -> None:
        eng = await _engine(tmp_path)
        assert len(eng.peers["n4"].queue) == 3     # unacknowledged work is queued again
        assert await eng.receive("n2", ps) == [None] * 3
        assert eng.peers["n2"].stats.duplicates_in == 3 and len(eng.peers["n4"].queue) == 3
        got = eng.take("n4", 10, 1 << 20)
        eng.acked("n4", got)
        await _close(eng)

    async def third() -> None:
        eng = await _engine(tmp_path)
        assert len(eng.peers["n4"].queue) == 0     # acked copies are gone for good
        await _close(eng)

    asyncio.run(first())
    asyncio.run(second())
    asyncio.run(third())


def test_crash_between_durable_write_and_ack_loses_nothing(tmp_path: Path) -> None:
    """A real process stores fragments, then dies with os._exit before it could ack or close."""
    script = textwrap.dedent(f"""
        import asyncio, os, sys
        sys.path[:0] = [{str(ROOT)!r}, {str(Path(__file__).parent)!r}]
        from test_node_engine_spool import _engine, pieces_of
        from pathlib import Path
        async def go():
            eng = await _engine(Path({str(tmp_path)!r}))
            await eng.receive("n2", pieces_of(b"q" * 500, dst="n5") + pieces_of(b"r" * 150, msg="m2"))
            os._exit(9)
        asyncio.run(go())
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=60, capture_output=True, text=True)
    assert out.returncode == 9, out.stderr

    async def after() -> tuple[int, int]:
        eng = await _engine(tmp_path)
        await eng.settle()
        n = len(eng.peers["n4"].queue)
        rows, _more = await eng.spool.run(Spool.op_mailbox("", False))
        await _close(eng)
        return n, len(rows)

    assert asyncio.run(after()) == (5, 1)   # 5 transit fragments back in the queue, m2 delivered at recovery


def test_a_kill_while_two_batches_commit_together_keeps_the_acked_and_stores_none_of_the_unacked(
        tmp_path: Path) -> None:
    """kill -9 of a real process while one transaction holds two received batches (five transit pieces): the
    batch acked before stays, none of the two is acked or stored, and the sender's offer again stores each once.
    The last operation of that transaction writes a marker from inside it with the piece rows it can see, so
    the kill provably fell while those pieces were being committed together."""
    marker = tmp_path / "in-transaction"
    script = textwrap.dedent(f"""
        import asyncio, os, sys, threading, time
        sys.path[:0] = [{str(ROOT)!r}, {str(Path(__file__).parent)!r}]
        from test_node_engine_spool import _engine, pieces_of
        from pathlib import Path
        async def go():
            eng = await _engine(Path({str(tmp_path)!r}))
            await eng.receive("n2", pieces_of(b"c" * 200, msg="c", dst="n5"))
            print("acked c", flush=True)
            inside, gate = threading.Event(), threading.Event()
            held = eng.spool.run(lambda c: (inside.set(), gate.wait(30)))
            await asyncio.to_thread(inside.wait, 30)      # the writer is busy: what follows queues up for one commit
            a = asyncio.ensure_future(eng.receive("n2", pieces_of(b"a" * 300, msg="a", dst="n5")))
            b = asyncio.ensure_future(eng.receive("n2", pieces_of(b"b" * 200, msg="b", dst="n5")))
            await asyncio.sleep(0.2)                              # both stores queued behind the held one

            def tripwire(c):
                n = c.execute("SELECT COUNT(*) FROM frag WHERE msg_id IN ('a', 'b')").fetchone()[0]
                Path({str(marker)!r}).write_text(str(n))
                time.sleep(60)                                    # killed here, before the COMMIT
            eng.spool.run(tripwire)
            gate.set()
            await held
            await asyncio.wait({{a, b}})
            print("acked a b", flush=True)                       # never reached
        asyncio.run(go())
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not marker.exists() or not marker.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.02)
        in_flight = int(marker.read_text())
    finally:
        proc.kill()
        out, _err = proc.communicate(timeout=30)
    assert in_flight == 5                     # both batches' pieces inside the one open transaction
    assert out.splitlines() == ["acked c"]    # the acked batch was acked, the two in flight were not

    async def after() -> tuple[list[str], list[str], list]:
        eng = await _engine(tmp_path)
        await eng.settle()
        kept = sorted({p.msg_id for p in eng.peers["n4"].queue.pieces()})
        # the sender kept both unacked batches and offers them again: stored now, once
        again = await eng.receive("n2", pieces_of(b"a" * 300, msg="a", dst="n5")
                                  + pieces_of(b"b" * 200, msg="b", dst="n5"))
        await eng.settle()
        stored = sorted(m for (m,) in await eng.spool.run(lambda c: c.execute(
            "SELECT msg_id FROM frag ORDER BY msg_id, off").fetchall()))
        await _close(eng)
        return kept, stored, again

    kept, stored, again = asyncio.run(after())
    assert kept == ["c"]
    assert again == [None] * 5
    assert stored == ["a", "a", "a", "b", "b", "c", "c"]


def test_submission_refusals_are_recorded_with_reasons(tmp_path: Path) -> None:
    async def go() -> list:
        eng = await _engine(tmp_path, local_users=["bob"])
        out = [await eng.submit("alice", [("n9", "")], b"x", None),
               await eng.submit("alice", [("n3", "eve")], b"x", None),
               await eng.submit("alice", [("n5", "")], None, 10**12),
               await eng.submit("alice", [], b"x", None),
               await eng.submit("alice", [("n5", "")], b"x", None, priority=99),
               await eng.submit("alice", [("n5", "")], b"x", None, lifetime=-1)]
        await _close(eng)
        return out

    out = asyncio.run(go())
    assert [ok for ok, _m, _r in out] == [False] * 6
    reasons = [r for _ok, _m, r in out]
    assert "no route to n9" in reasons[0] and "unknown recipient eve@n3" in reasons[1]
    assert "exceeds" in reasons[2] and "no recipients" in reasons[3] and "priority" in reasons[4]
    assert "lifetime" in reasons[5]
    lines = [json.loads(x) for x in (tmp_path / "submissions.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and all(schema.validate("submission", x) == [] and not x["accepted"] for x in lines)


def test_reassembly_inactivity_timeout_aborts_and_reports(tmp_path: Path) -> None:
    async def go() -> tuple:
        eng = await _engine(tmp_path, reassembly_timeout=0.2)
        ps = pieces_of(b"w" * 300)
        await eng.receive("n2", ps[:2])
        await asyncio.sleep(0.3)            # > reassembly_timeout
        await eng.sweep()
        await eng.settle()
        late = await eng.receive("n2", ps[2:])   # the straggler is acked but not delivered
        await eng.settle()
        rows, _more = await eng.spool.run(Spool.op_mailbox("", False))
        q = len(eng.peers["n2"].queue)           # the report travels back towards n1 via n2
        await _close(eng)
        return late, rows, q

    late, rows, q = asyncio.run(go())
    assert late == [None] and rows == [] and q >= 1
    reports = [json.loads(x) for x in (tmp_path / "reports.jsonl").read_text().splitlines()]
    assert any("timed out" in r["reason"] for r in reports)
    assert all(schema.validate("report", r) == [] for r in reports)


def test_large_submission_releases_early_chunks_before_it_is_accepted(tmp_path: Path) -> None:
    """Fragmenting: the first chunk of a large message is queued for its next hop while the rest is being
    written; the message is accepted only with the last chunk, and every piece ends up queued once."""
    n_frags = SUBMIT_EARLY_MIN * 2

    async def go() -> tuple[int, int, int]:
        eng = await _engine(tmp_path)
        task = asyncio.ensure_future(eng.submit("alice", [("n5", "bob")], None, n_frags * 100))
        queued_while_pending = 0       # queue length the first time pieces show up, the submission pending
        while not task.done():
            if not queued_while_pending and len(eng.peers["n4"].queue):
                queued_while_pending = len(eng.peers["n4"].queue)
            await asyncio.sleep(0)
        accepted, msg_id, _ = task.result()
        assert accepted
        status = await eng.spool.run(Spool.op_status(msg_id))
        total = len(eng.peers["n4"].queue)
        await _close(eng)
        return queued_while_pending, total, status["states"].get("queued", 0) if status["origin"] else -1

    early, total, stored = asyncio.run(go())
    assert SUBMIT_CHUNK <= early < n_frags     # the first chunk was on its way before the rest was written
    assert total == n_frags and stored == n_frags


def test_recovery_drops_pieces_of_a_submission_cut_short_by_a_crash(tmp_path: Path) -> None:
    """Early chunks stored, then the process dies before the origin row: not accepted, so not sent again."""
    async def crash() -> None:
        eng = await _engine(tmp_path)
        ps = [Piece("cut", "n5", o, 1000, 0, "n3", "alice", ["bob"], 1, time.time(), time.time() + 60, "", 10,
                    b"c" * 100) for o in range(0, 1000, 100)]
        await eng.spool.run(Spool.op_insert(ps[:4]))            # an early chunk, no origin row yet
        ok, _msg, _ = await eng.submit("alice", [("n5", "bob")], b"k" * 250, None)   # an accepted message
        assert ok
        eng.spool.close()

    async def restart() -> int:
        eng = await _engine(tmp_path)
        n = len(eng.peers["n4"].queue)
        await _close(eng)
        return n

    asyncio.run(crash())
    assert asyncio.run(restart()) == 3      # the accepted message's 3 pieces only; the cut-short one is gone


def test_a_piece_contradicting_the_stored_ones_is_refused_and_cannot_corrupt_the_reassembly(tmp_path: Path) -> None:
    payload = bytes(random.Random(3).randbytes(300))

    async def go() -> tuple[list, list[dict]]:
        eng = await _engine(tmp_path)
        ps = pieces_of(payload)                                  # 0+100, 100+100, 200+100
        first = await eng.receive("n2", ps[:1])
        forged = Piece("m1", "n3", 50, 300, 2, "n1", "alice", ["bob"], 1, time.time(), time.time() + 60, "", 3,
                       b"z" * 200)                               # 50+200: would fill the message early
        results = first + await eng.receive("n2", [forged]) + await eng.receive("n2", ps[1:])
        await eng.settle()
        rows, _more = await eng.spool.run(Spool.op_mailbox("", True))
        refused = eng.peers["n2"].stats.refused_in
        await _close(eng)
        return results + [refused], rows

    results, rows = asyncio.run(go())
    assert results[0] is None and results[2:4] == [None, None]
    assert results[1].reason == "byte range 50+200 overlaps the stored range 0+100" and results[4] == 1
    assert len(rows) == 1 and rows[0]["payload"] == payload


def test_an_orphan_is_kept_until_its_lifetime_ends_then_dropped_and_reported(tmp_path: Path) -> None:
    async def go() -> tuple[int, int, int, list]:
        eng = await _engine(tmp_path)
        # transit for n7, which this node has no route to: an orphan
        ps = pieces_of(b"q" * 150, msg="m9", dst="n7", expires=time.time() + 0.3)
        assert await eng.receive("n2", ps) == [None, None]
        await eng.settle()
        kept = len(eng.orphans)
        await eng.sweep()
        still = len(eng.orphans)
        await asyncio.sleep(0.4)
        await eng.sweep()
        await eng.settle()
        rows = await eng.spool.run(lambda c: c.execute("SELECT COUNT(*) FROM frag WHERE msg_id='m9'").fetchone()[0])
        reports = [json.loads(line) for line in (tmp_path / "reports.jsonl").read_text().splitlines()]
        await _close(eng)
        return kept, still, len(eng.orphans) + rows, reports

    kept, still, left, reports = asyncio.run(go())
    assert (kept, still, left) == (2, 2, 0)
    assert [r["event"] for r in reports if r["msg_id"] == "m9"] == ["orphan", "ndr_made"]
    assert "lifetime expired" in reports[-1]["reason"]


def test_a_message_to_many_nodes_holds_its_payload_once(tmp_path: Path) -> None:
    payload = bytes(random.Random(5).randbytes(1000))

    async def go() -> list[Piece]:
        eng = await _engine(tmp_path, routes={f"x{i}": "n4" for i in range(40)})
        ok, _msg_id, reason = await eng.submit("alice", [(f"x{i}", "u") for i in range(40)], payload, None)
        assert ok, reason
        pieces = [p for peer in eng.peers.values() for p in peer.queue.remove_if(lambda p: True)]
        await _close(eng)
        return pieces

    pieces = asyncio.run(go())
    assert len(pieces) == 40 * 10 and {p.dst for p in pieces} == {f"x{i}" for i in range(40)}
    by_off: dict[int, set[int]] = {}
    for p in pieces:
        by_off.setdefault(p.off, set()).add(id(p.data))
    assert all(len(ids) == 1 for ids in by_off.values())      # one bytes object per byte range, shared


def test_recovery_keeps_payloads_in_the_spool_until_the_link_sends_them(tmp_path: Path) -> None:
    """A restarted node queues its stored pieces without their bytes (sizes only), reads them in one
    batch when the link takes them, and a piece whose row went meanwhile is left out, not sent empty."""
    payloads = {f"m{i}": bytes(random.Random(i).randbytes(250)) for i in range(3)}

    async def first() -> None:
        eng = await _engine(tmp_path)
        for m, data in payloads.items():
            await eng.receive("n2", pieces_of(data, msg=m, dst="n5"))
        await _close(eng)

    async def second() -> None:
        eng = await _engine(tmp_path)
        q = eng.peers["n4"].queue
        assert len(q) == 9 and q.bytes == 750
        got = eng.take("n4", 9, 1 << 20)
        assert [p.data for p in got] == [None] * 9 and sum(p.size for p in got) == 750
        eng.requeue("n4", got)
        await eng.spool.run(Spool.op_drop("m1", "n5"))          # m1 went (as if it expired) while queued
        sent = await eng.take_loaded("n4", 9, 1 << 20)
        assert {p.msg_id for p in sent} == {"m0", "m2"}
        for m in ("m0", "m2"):
            assert b"".join(p.data for p in sorted(sent, key=lambda p: p.off) if p.msg_id == m) == payloads[m]
        eng.acked("n4", sent)
        await _close(eng)

    asyncio.run(first())
    asyncio.run(second())


def test_a_session_ending_while_payloads_are_read_loses_no_piece(tmp_path: Path) -> None:
    async def go() -> None:
        eng = await _engine(tmp_path)
        await eng.receive("n2", pieces_of(b"q" * 300, msg="mq", dst="n5"))
        await _close(eng)
        eng = await _engine(tmp_path)
        task = asyncio.ensure_future(eng.take_loaded("n4", 10, 1 << 20))
        await asyncio.sleep(0)            # it has taken the pieces and waits for the read
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(eng.peers["n4"].queue) == 3
        again = await eng.take_loaded("n4", 10, 1 << 20)
        assert [p.off for p in again] == [0, 100, 200] and all(p.data == b"q" * 100 for p in again)
        await _close(eng)

    asyncio.run(go())


def test_a_link_queue_above_max_link_queue_defers_transit_and_refuses_submissions(tmp_path: Path) -> None:
    """Without resources: the queue for n4 holds 300 bytes at most (limits.max_link_queue); what would go on it
    is refused "not now" (transit) or "congested" (a submission), what goes elsewhere is not affected."""
    async def go() -> None:
        eng = await _engine(tmp_path, limits={"max_link_queue": 300})
        assert await eng.receive("n2", pieces_of(b"a" * 300, msg="ma", dst="n5")) == [None] * 3
        late = await eng.receive("n2", pieces_of(b"b" * 200, msg="mb", dst="n5"))
        assert all(isinstance(r, tuple) and r[0].startswith("queue_full: the queue for n4 holds 300 bytes")
                   and r[1] > 0 for r in late), late
        assert eng.peers["n2"].stats.deferred_in == 2 and eng.peers["n2"].stats.snapshot(False)["deferred_in"] == 2
        ok, _m, why = await eng.submit("alice", [("n5", "bob")], b"c" * 10, None)
        assert not ok and why.startswith("congested, try later (the queue for n4 holds 300 bytes")
        ok, _m, why = await eng.submit("alice", [("n1", "bob")], b"c" * 10, None)      # via n2: room there
        assert ok, why
        eng.acked("n4", eng.take("n4", 1, 1 << 20))       # the queue drops below the cap: room again
        assert await eng.receive("n2", pieces_of(b"b" * 200, msg="mb", dst="n5")) == [None] * 2
        await _close(eng)

    asyncio.run(go())
