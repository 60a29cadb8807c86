"""What a neighbour may not send, and what a node answers when it cannot store: every bad input gets one
clear refusal, and nothing holds a whole batch hostage."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from node.codec import SEQ_MAX, piece_from_frame, pieces_from_run
from node.refusal import Refusal
from node.link import STORE_FAILED, STORE_RETRY, LinkSession
from node.rpc import link_pb2
from node.spool import Spool
from tests.unit.node.test_node_engine_spool import _close, _engine, pieces_of
from tests.unit.node.test_node_frames import CFG, frag
from tests.unit.node.test_node_seams import Wire


@pytest.mark.parametrize("kw, expect", [
    ({"msg_id": "m1\nforged log line"}, "msg_id"),
    ({"submit_ts": float("nan")}, "finite"),
    ({"expires_ts": float("inf")}, "finite"),
    ({"priority": 99}, "priority 99"),
    ({"kind": "ndr"}, "may not set"),                          # a user message passed off as a report
    ({"kind": "ndr", "msg_id": "ndr.m0.n1"}, "may not set"),   # ... even with a report's id, but not its sender
    ({"originator": "eve\n"}, "originator"),
    ({"recipients": [{"node": "n3", "user": "bob smith"}]}, "recipient user"),
    ({"recipients": [{"node": "n3\n", "user": "bob"}]}, "one valid node"),
])
def test_neighbour_frames_with_bad_headers_are_refused(kw: dict, expect: str) -> None:
    reason = piece_from_frame(frag(**kw), CFG)
    assert isinstance(reason, Refusal) and expect in reason.reason


def test_a_report_made_by_a_node_passes() -> None:
    p = piece_from_frame(frag(kind="ndr", msg_id="ndr.n1-abc.n3", originator="mailer-daemon"), CFG)
    assert not isinstance(p, Refusal) and p.kind == "ndr"


def test_a_run_whose_sequence_numbers_overflow_is_refused_not_an_exception() -> None:
    head = frag(seq=SEQ_MAX - 1, data=b"", total_size=30)
    out = pieces_from_run(link_pb2.Run(head=head, data=[b"x" * 10] * 3), CFG)
    assert [seq for seq, _r in out] == [SEQ_MAX - 1, SEQ_MAX]           # the third cannot even be named
    assert all(isinstance(r, Refusal) and "overflow" in r.reason for _s, r in out)
    assert [link_pb2.Refuse(seq=s, reason=r.reason).seq for s, r in out] == [SEQ_MAX - 1, SEQ_MAX]


def test_a_failed_store_answers_not_now_and_the_retry_is_stored(tmp_path: Path) -> None:
    """SQLite fails under the batch (here: its table is gone): the sender is told to offer the frames again
    later, instead of waiting for an ack that never comes."""
    async def go() -> None:
        eng = await _engine(tmp_path)
        wire = Wire()
        session = LinkSession(eng.peers["n2"], eng, eng.cfg, wire.write, wire.read)
        task = asyncio.ensure_future(session.run())
        frames = [link_pb2.Frame(fragment=frag(msg_id="m7", recipients=[{"node": "n5", "user": ""}], seq=i + 1,
                                               offset=10 * i, total_size=30, hops=1, data=b"x" * 10))
                  for i in range(3)]

        async def answers(kind: str) -> list:
            for _ in range(200):
                got = [fr for b in wire.written for fr in b.frames if fr.WhichOneof("kind") == kind]
                if got:
                    return got
                await asyncio.sleep(0.01)
            raise AssertionError(f"no {kind} frame from the session")

        await eng.spool.run(lambda c: c.execute("ALTER TABLE frag RENAME TO frag_away"))
        await wire.inbox.put(link_pb2.FrameBatch(frames=frames))
        refused = await answers("refuse")
        assert [r.refuse.seq for r in refused] == [1, 2, 3]
        assert all(r.refuse.reason == STORE_FAILED and r.refuse.retry_after == STORE_RETRY for r in refused)
        await eng.spool.run(lambda c: c.execute("ALTER TABLE frag_away RENAME TO frag"))
        await wire.inbox.put(link_pb2.FrameBatch(frames=frames))           # the sender's retry
        acked = await answers("ack")
        assert sorted(s for a in acked for s in a.ack.seqs) == [1, 2, 3]
        assert len(eng.peers["n4"].queue) == 3
        session.close()
        await asyncio.gather(task, return_exceptions=True)
        await _close(eng)
    asyncio.run(go())


def test_a_user_without_a_mailbox_here_is_refused_not_stored(tmp_path: Path) -> None:
    async def go() -> None:
        eng = await _engine(tmp_path, local_users=["bob"])
        ok = pieces_of(b"a" * 100, msg="to-bob")
        stranger = pieces_of(b"b" * 100, msg="to-mallory")
        for p in stranger:
            p.users = ["mallory"]
        out = await eng.receive("n2", ok + stranger)
        assert out[0] is None and isinstance(out[1], Refusal) and not out[1].for_now and "mallory" in out[1].reason
        status = await eng.spool.run(Spool.op_status("to-mallory"))
        assert not status["states"] and not status["mailbox"]
        await _close(eng)
    asyncio.run(go())


def test_many_pieces_to_an_unknown_node_make_one_report_line_per_copy(tmp_path: Path) -> None:
    """Amplification: one batch of 2,000 one-byte pieces with no route must not write 2,000 records."""
    async def go() -> None:
        eng = await _engine(tmp_path)
        ps = pieces_of(b"z" * 2000, msg="flood", dst="n9", chunk=1)
        assert await eng.receive("n2", ps) == [None] * 2000            # kept as orphans, never dropped
        await eng.settle()
        assert len(eng.orphans) == 2000
        await _close(eng)
        lines = [json.loads(x) for x in (tmp_path / "reports.jsonl").read_text().splitlines()]
        assert [(r["msg_id"], r["event"]) for r in lines] == [("flood", "orphan")]
    asyncio.run(go())
