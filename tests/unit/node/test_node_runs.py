"""Run frames (consecutive fragments of one message with the header once) and range deletes in the spool."""
from __future__ import annotations

from pathlib import Path

from node import registry
from node.codec import MAX_RUN, frames_from_pieces, piece_from_frame, pieces_from_run
from node.refusal import Refusal
from node.piece import split
from node.rpc import link_pb2
from node.piece import Piece
from node.spool import Spool

CFG = registry.config_from_dict({"name": "n2", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2", "wire_chunk": 1000,
                                 "limits": {"max_message_size": 100_000, "max_frame_bytes": 2000, "max_hops": 8}})


def _pieces(msg: str = "m1", size: int = 5500, chunk: int = 1000, dst: str = "n3") -> list[Piece]:
    payload = bytes(range(256)) * (size // 256 + 1)
    return [Piece(msg, dst, off, size, 0, "n1", "alice", ["bob", "carol"], 2, 1.0, 99.0, "", 6,
                  payload[off:off + n]) for off, n in split(size, chunk)]


def _decode(frames: list[link_pb2.Frame]) -> list[tuple[int, Piece | str]]:
    wire = link_pb2.FrameBatch(frames=frames).SerializeToString()
    out: list[tuple[int, Piece | str]] = []
    for fr in link_pb2.FrameBatch.FromString(wire).frames:
        if fr.WhichOneof("kind") == "run":
            out += pieces_from_run(fr.run, CFG)
        else:
            out.append((fr.fragment.seq, piece_from_frame(fr.fragment, CFG)))
    return out


def test_consecutive_fragments_of_one_message_travel_as_one_run() -> None:
    ps = _pieces()
    frames = frames_from_pieces(ps, 10)
    assert [f.WhichOneof("kind") for f in frames] == ["run"]
    got = _decode(frames)
    assert [s for s, _p in got] == list(range(10, 16))
    for (_s, q), p in zip(got, ps):
        assert isinstance(q, Piece)
        assert (q.key, q.data, q.users, q.hops, q.prio, q.originator, q.fragments, q.total) == \
               (p.key, p.data, p.users, p.hops + 1, p.prio, p.originator, p.fragments, p.total)


def test_runs_break_at_other_messages_and_gaps_and_are_off_for_old_peers() -> None:
    a, b = _pieces("ma"), _pieces("mb")
    mixed = [a[0], a[1], b[0], a[3], a[4], b[1]]      # a[2] missing: a[3] starts a new run
    frames = frames_from_pieces(mixed, 1)
    assert [f.WhichOneof("kind") for f in frames] == ["run", "fragment", "run", "fragment"]
    got = _decode(frames)
    assert [s for s, _p in got] == list(range(1, 7))
    assert [(q.msg_id, q.off) for _s, q in got] == [(p.msg_id, p.off) for p in mixed]
    plain = frames_from_pieces(mixed, 1, runs=False)
    assert [f.WhichOneof("kind") for f in plain] == ["fragment"] * 6


def test_a_bad_run_header_refuses_every_fragment_and_a_bad_range_only_its_own() -> None:
    ps = _pieces()
    frames = frames_from_pieces(ps, 1)
    bad_head = link_pb2.Run()
    bad_head.CopyFrom(frames[0].run)
    bad_head.head.hops = 0
    got = pieces_from_run(bad_head, CFG)
    assert len(got) == len(ps) and all(isinstance(r, Refusal) and "hop count" in r.reason for _s, r in got)
    too_long = link_pb2.Run()
    too_long.CopyFrom(frames[0].run)
    too_long.data.append(b"x" * 600)                  # past the end of the 5500-byte message
    got = pieces_from_run(too_long, CFG)
    assert all(isinstance(q, Piece) for _s, q in got[:-1])
    assert isinstance(got[-1][1], Refusal) and "does not fit" in got[-1][1].reason
    huge = link_pb2.Run(head=frames[0].run.head, data=[b""] * (MAX_RUN + 1))
    assert all(isinstance(r, Refusal) for _s, r in pieces_from_run(huge, CFG))


def test_range_delete_removes_exactly_the_acknowledged_pieces(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.db", 0.0)
    spool.open()
    try:
        a, b = _pieces("ma"), _pieces("mb")
        spool.run_sync(Spool.op_insert(a + b))
        acked = [a[0], a[1], a[3], b[5], a[4]]            # a[2] and b[0..4] still unacknowledged
        spool.run_sync(Spool.op_delete_pieces(acked))
        left = spool.run_sync(lambda c: sorted(c.execute("SELECT msg_id, off FROM frag").fetchall()))
        assert left == [("ma", 2000), ("ma", 5000)] + [("mb", o) for o in range(0, 5000, 1000)]
        loaded = spool.run_sync(Spool.op_load_pieces())
        assert {p.key: p.data for p in loaded} == {p.key: p.data for p in a + b if p not in acked}
    finally:
        spool.close()


def test_recovery_loads_sizes_not_payloads_except_first_bytes_for_body_rules(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.db", 0.0)
    spool.open()
    try:
        a = _pieces("ma")
        spool.run_sync(Spool.op_insert(a))
        lazy = spool.run_sync(Spool.op_load_pieces(payloads=False))
        assert [(p.key, p.size, p.data) for p in lazy] == [(p.key, len(p.data), None) for p in a]
        assert len({id(p.users) for p in lazy}) == 1           # one users list shared by the copy's pieces
        first = spool.run_sync(Spool.op_load_pieces(payloads=False, first_bytes=True))
        assert first[0].data == a[0].data and all(p.data is None for p in first[1:])
        assert spool.run_sync(Spool.op_payloads(lazy[1:3])) == {p.key: p.data for p in a[1:3]}
    finally:
        spool.close()
