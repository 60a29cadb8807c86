"""Pure-Python pcap header parser: record index and per-packet header fields.

Handles micro/nanosecond magic, both endiannesses, snaplen-truncated frames and
frames larger than the MTU (only the captured bytes are parsed; length is orig len).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

from testbed.errors import UserError

_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}


@dataclass(frozen=True)
class PcapFormat:
    endian: str
    ts_unit: float
    linktype: int


@dataclass(frozen=True)
class Packet:
    ts: float
    length: int
    src: str
    dst: str
    proto: int
    sport: int
    dport: int
    flags: int
    seq: int
    ack: int
    window: int
    payload: int


def read_format(head: bytes, name: str = "pcap") -> PcapFormat:
    """Parse the 24-byte global header; raise UserError when it is not a pcap."""
    if len(head) < 24 or head[:4] not in _MAGICS:
        raise UserError(f"{name} is not a readable pcap file (bad or missing magic number).")
    endian, unit = _MAGICS[head[:4]]
    linktype = struct.unpack(endian + "I", head[20:24])[0] & 0x0FFFFFFF
    return PcapFormat(endian, unit, linktype)


def index_records(data: bytes, fmt: PcapFormat) -> list[int]:
    """Offsets of every record, reading only the 16-byte record headers."""
    offs: list[int] = []
    hdr = struct.Struct(fmt.endian + "IIII")
    pos, end = 24, len(data)
    while pos + 16 <= end:
        incl = hdr.unpack_from(data, pos)[2]
        if pos + 16 + incl > end:
            break  # truncated final record: ignore
        offs.append(pos)
        pos += 16 + incl
    return offs


def _addr(b: bytes) -> str:
    if len(b) == 4:
        return ".".join(str(x) for x in b)
    return ":".join(b[i:i + 2].hex() for i in range(0, 16, 2))


def parse_range(data: bytes, fmt: PcapFormat, start: int, stop: int) -> Iterator[Packet]:
    """Parse the records whose header starts in [start, stop)."""
    hdr = struct.Struct(fmt.endian + "IIII")
    pos = start
    while pos < stop and pos + 16 <= len(data):
        sec, frac, incl, orig = hdr.unpack_from(data, pos)
        frame = data[pos + 16: pos + 16 + incl]
        pos += 16 + incl
        pkt = parse_frame(frame, sec + frac * fmt.ts_unit, orig, fmt.linktype)
        if pkt is not None:
            yield pkt


def parse_frame(f: bytes, ts: float, orig: int, linktype: int = 1) -> Packet | None:
    off = 0
    if linktype == 1:
        if len(f) < 14:
            return None
        etype = struct.unpack_from("!H", f, 12)[0]
        off = 14
        while etype in (0x8100, 0x88A8) and len(f) >= off + 4:
            etype = struct.unpack_from("!H", f, off + 2)[0]
            off += 4
    elif linktype == 101:  # raw IP
        etype = 0x0800 if f and f[0] >> 4 == 4 else 0x86DD
    else:
        return None
    if etype == 0x0800 and len(f) >= off + 20:
        ihl = (f[off] & 0x0F) * 4
        proto = f[off + 9]
        src, dst = _addr(f[off + 12:off + 16]), _addr(f[off + 16:off + 20])
        ip_payload = struct.unpack_from("!H", f, off + 2)[0] - ihl
        off += ihl
    elif etype == 0x86DD and len(f) >= off + 40:
        proto = f[off + 6]
        src, dst = _addr(f[off + 8:off + 24]), _addr(f[off + 24:off + 40])
        ip_payload = struct.unpack_from("!H", f, off + 4)[0]
        off += 40
    else:
        return None
    sport = dport = flags = seq = ack = win = 0
    payload = max(ip_payload, 0)
    if proto == 6 and len(f) >= off + 20:
        sport, dport, seq, ack, doff_flags, win = struct.unpack_from("!HHIIHH", f, off)
        flags = doff_flags & 0x1FF
        payload = max(ip_payload - (doff_flags >> 12) * 4, 0)
    elif proto == 17 and len(f) >= off + 8:
        sport, dport = struct.unpack_from("!HH", f, off)
        payload = max(ip_payload - 8, 0)
    return Packet(ts, orig, src, dst, proto, sport, dport, flags, seq, ack, win, payload)
