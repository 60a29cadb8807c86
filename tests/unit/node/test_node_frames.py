"""Frame validation."""
from __future__ import annotations

import pytest

from node import registry
from node.codec import frame_from_piece, piece_from_frame
from node.refusal import Refusal
from node.piece import split
from node.rpc import link_pb2
from node.piece import Piece

CFG = registry.config_from_dict({"name": "n2", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2",
                                 "wire_chunk": 1000, "limits": {"max_message_size": 10_000, "max_frame_bytes": 2000, "max_hops": 8}})


def frag(**kw) -> link_pb2.Fragment:
    base = dict(msg_id="m1", offset=0, total_size=10, hops=1, data=b"0123456789", src="n1",
                recipients=[{"node": "n3", "user": "bob"}], seq=1)
    base.update(kw)
    return link_pb2.Fragment(**base)


def test_valid_fragment_becomes_a_piece() -> None:
    p = piece_from_frame(frag(), CFG)
    assert isinstance(p, Piece)
    assert p.key == ("m1", "n3", 0) and p.users == ["bob"] and p.hops == 1


@pytest.mark.parametrize("kw, words", [
    ({"msg_id": ""}, "msg_id"),
    ({"total_size": 10**12, "data": b"x"}, "exceeds the limit"),
    ({"data": b"x" * 3000, "total_size": 3000}, "frame limit"),
    ({"offset": 5}, "does not fit"),
    ({"data": b"", "total_size": 10}, "does not fit"),
    ({"recipients": []}, "recipients"),
    ({"recipients": [{"node": "n3"}, {"node": "n4"}]}, "one valid node"),
    ({"recipients": [{"node": "bad node"}]}, "one valid node"),
    ({"hops": 0}, "hop count"),
    ({"hops": 9}, "hop count"),
    ({"src": ""}, "source"),
])
def test_bad_fragments_are_refused_with_a_reason(kw: dict, words: str) -> None:
    reason = piece_from_frame(frag(**kw), CFG)
    assert isinstance(reason, Refusal) and words in reason.reason


def test_frame_round_trip_counts_a_hop() -> None:
    p = piece_from_frame(frag(), CFG)
    back = frame_from_piece(p, 42).fragment
    assert back.hops == 2 and back.seq == 42 and back.data == p.data and back.recipients[0].node == "n3"


def test_split_covers_the_message_exactly() -> None:
    assert split(0, 1000) == [(0, 0)]
    assert split(2500, 1000) == [(0, 1000), (1000, 1000), (2000, 500)]
    assert sum(n for _o, n in split(12345, 1000)) == 12345

