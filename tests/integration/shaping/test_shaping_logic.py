"""Pure logic of the shapers (no root): wire-byte accounting of GSO frames, netem argument mapping."""
from __future__ import annotations

import struct

from testbed.shaping.netem import netem_args
from testbed.shaping.wire_emulator import VNET_HDR_LEN, wire_bytes
from testbed.topology.model import Direction, GilbertElliott


def test_plain_frame_counts_its_length() -> None:
    frame = bytes(VNET_HDR_LEN) + bytes(1514)
    assert wire_bytes(frame) == 1514


def test_gso_frame_counts_one_header_per_segment() -> None:
    hdr_len, mss, segs = 66, 1448, 10
    vnet = struct.pack("<BBHHHH", 1, 1, hdr_len, mss, 0, 0)      # GSO TCPv4
    frame = vnet + bytes(hdr_len + segs * mss)
    assert wire_bytes(frame) == segs * (hdr_len + mss)


def test_netem_arguments() -> None:
    args = netem_args(Direction(delay=0.01, jitter=0.002, loss=0.01, rate=1e7, queue=50))
    assert args == ["limit", "50", "delay", "10000us", "2000us", "loss", "random", "1.0%", "rate", "10000000bit"]
    ge = netem_args(Direction(gilbert=GilbertElliott(p=0.05, r=0.2, loss_good=0.0, loss_bad=1.0)))
    assert ge[ge.index("gemodel") + 1:] == ["5.0%", "20.0%", "100.0%", "0.0%"]
