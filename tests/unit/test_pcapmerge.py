"""A split link's two captures (one direction each) merged into the one file one emulator would write."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from testbed.shaping import pcapmerge


def _pcap(path: Path, stamps: list[tuple[int, int]], tag: bytes, linktype: int = 1, cut: bool = False) -> None:
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 128, linktype))
        for sec, ns in stamps:
            body = tag + struct.pack("<II", sec, ns)
            f.write(struct.pack("<IIII", sec, ns, len(body), len(body) + 100) + body)
        if cut:      # a record its writer did not finish
            f.write(struct.pack("<IIII", 9, 0, 50, 50) + b"x" * 10)


def _read(path: Path) -> tuple[tuple, list[tuple[int, int, bytes]]]:
    raw = path.read_bytes()
    head, off, out = struct.unpack_from("<IHHiIII", raw), 24, []
    while off < len(raw):
        sec, ns, caplen, _ = struct.unpack_from("<IIII", raw, off)
        out.append((sec, ns, raw[off + 16:off + 16 + 1]))
        off += 16 + caplen
    return head, out


def test_both_directions_interleave_by_delivery_time(tmp_path: Path) -> None:
    a, b, target = tmp_path / "l.m1.pcap", tmp_path / "l.m2.pcap", tmp_path / "l.pcap"
    _pcap(a, [(1, 5), (1, 900), (3, 0)], b"a")
    _pcap(b, [(1, 6), (2, 0), (2, 1), (4, 0)], b"b", cut=True)
    assert pcapmerge.merge([a, b], target) == 7
    head, recs = _read(target)
    assert head == (0xA1B23C4D, 2, 4, 0, 0, 128, 1)
    # a(1,5) b(1,6) a(1,900) b(2,0) b(2,1) a(3,0) b(4,0); the cut record of b is dropped
    assert b"".join(t for _, _, t in recs) == b"ababbab"
    assert [(s, n) for s, n, _ in recs] == [(1, 5), (1, 6), (1, 900), (2, 0), (2, 1), (3, 0), (4, 0)]


def test_captures_that_disagree_are_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a.pcap", tmp_path / "b.pcap"
    _pcap(a, [(1, 0)], b"a")
    _pcap(b, [(1, 1)], b"b", linktype=101)
    with pytest.raises(ValueError, match="link type"):
        pcapmerge.merge([a, b], tmp_path / "l.pcap")
    b.write_bytes(b"not a pcap at all, but long enough")
    with pytest.raises(ValueError, match="not a little-endian pcap"):
        pcapmerge.merge([a, b], tmp_path / "l.pcap")
