"""Crafted pcaps: every magic/endianness, truncation, and range-split equivalence."""
import struct

import pytest

from spark_analysis.pcap_parser import index_records, parse_range, read_format
from node.errors import UserError


def _tcp_frame(seq: int, payload: int) -> bytes:
    tcp = struct.pack("!HHIIHHHH", 5001, 40000, seq, 7, (5 << 12) | 0x18, 512, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 20 + payload, 0, 0, 64, 6, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    return b"\x00" * 12 + b"\x08\x00" + ip + tcp + b"x" * payload


def _pcap(endian: str, nano: bool, frames: list[bytes], snaplen: int = 65535) -> bytes:
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = struct.pack(endian + "IHHiIII", magic, 2, 4, 0, 0, snaplen, 1)
    for i, fr in enumerate(frames):
        cap = fr[:snaplen]
        out += struct.pack(endian + "IIII", 100 + i, 500, len(cap), len(fr)) + cap
    return out


@pytest.mark.parametrize("endian", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True])
def test_magic_and_fields(endian: str, nano: bool) -> None:
    data = _pcap(endian, nano, [_tcp_frame(1000, 100), _tcp_frame(1100, 9000)], snaplen=96)
    fmt = read_format(data[:24])
    offs = index_records(data, fmt)
    pkts = list(parse_range(data, fmt, 24, len(data)))
    assert len(offs) == 2 and len(pkts) == 2
    assert pkts[0].ts == pytest.approx(100 + 500 * (1e-9 if nano else 1e-6))
    assert (pkts[1].seq, pkts[1].length, pkts[1].payload) == (1100, 14 + 40 + 9000, 9000)
    assert pkts[0].src == "10.0.0.1" and pkts[0].dport == 40000 and pkts[0].flags == 0x18


def test_split_ranges_equal_single_range() -> None:
    data = _pcap("<", False, [_tcp_frame(i * 10, 10) for i in range(50)])
    fmt = read_format(data[:24])
    offs = index_records(data, fmt) + [len(data)]
    split = [p for a, b in zip(offs[:-1:3], offs[3::3] + [len(data)]) for p in parse_range(data, fmt, a, b)]
    assert split == list(parse_range(data, fmt, 24, len(data)))


def test_not_a_pcap() -> None:
    with pytest.raises(UserError):
        read_format(b"hello world, not a pcap at all")
