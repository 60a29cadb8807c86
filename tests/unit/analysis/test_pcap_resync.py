"""Resynchronising on record headers from an arbitrary byte: what lets one capture become many tasks."""
from __future__ import annotations

import random
import struct

import pytest

from spark_analysis.pcap_parser import first_record, index_records, read_format, resync_window, walk_offsets


def _frame(rng: random.Random, i: int) -> bytes:
    payload = rng.randint(0, 300)
    tcp = struct.pack("!HHIIHHHH", 5001, 40000, i * 1000, 7, (5 << 12) | 0x18, 512, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40 + payload, 0, 0, 64, 6, 0, bytes([10, 0, 0, 1]),
                     bytes([10, 0, 0, 2]))
    body = bytearray(rng.randbytes(payload))
    if payload >= 16 and i % 3 == 0:
        # a payload that looks like one plausible record header: the chain check must not stop here
        body[:16] = struct.pack("<IIII", 1_700_000_000 + i, 10, 8, 60)
    return b"\x00" * 12 + b"\x08\x00" + ip + tcp + bytes(body)


def _pcap(n: int, snaplen: int = 128, seed: int = 3, cut_tail: int = 0) -> bytes:
    rng = random.Random(seed)
    out = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, snaplen, 1)
    for i in range(n):
        fr = _frame(rng, i)
        cap = fr[:snaplen]
        out += struct.pack("<IIII", 1_700_000_000 + i // 10, (i * 7919) % 1_000_000_000, len(cap), len(fr)) + cap
    return out[:len(out) - cut_tail] if cut_tail else out


@pytest.mark.parametrize("snaplen", [128, 65535])
def test_resync_from_every_byte_finds_the_next_record(snaplen: int) -> None:
    data = _pcap(60, snaplen)
    fmt = read_format(data[:24])
    offs = index_records(data, fmt)
    ref = struct.unpack("<I", data[24:28])[0]
    for p in range(24, len(data)):
        window = data[p:p + resync_window(fmt)]
        got = first_record(window, fmt, ref)
        want = next((o for o in offs if o >= p), None)
        assert (None if got is None else p + got) == want, p


@pytest.mark.parametrize("chunk", [17, 100, 999, 4096])
def test_byte_ranges_cover_every_record_once(chunk: int) -> None:
    data = _pcap(300)
    fmt = read_format(data[:24])
    ref = struct.unpack("<I", data[24:28])[0]
    got: list[int] = []
    for start in range(24, len(data), chunk):
        stop = min(start + chunk, len(data))
        window = data[start:stop + resync_window(fmt)]
        first = 0 if start == 24 else first_record(window, fmt, ref)
        if first is not None and first < stop - start:
            got += [start + o for o in walk_offsets(window, fmt, first, stop - start)]
    assert got == index_records(data, fmt)


def test_truncated_tail_is_ignored_like_the_full_walk() -> None:
    data = _pcap(40, cut_tail=30)
    fmt = read_format(data[:24])
    ref = struct.unpack("<I", data[24:28])[0]
    offs = index_records(data, fmt)
    # a range starting two records before the cut still finds its records
    p = offs[-2] - 5
    got = first_record(data[p:], fmt, ref)
    assert got is not None and p + got == offs[-2]


def test_garbage_has_no_record() -> None:
    fmt = read_format(_pcap(1)[:24])
    assert first_record(random.Random(1).randbytes(5000), fmt, 1_700_000_000) is None
