"""Pure-Python pcap header parser: record index and per-packet header fields.

Handles micro/nanosecond magic, both endiannesses, snaplen-truncated frames and
frames larger than the MTU (only the captured bytes are parsed; length is orig len).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from node.errors import UserError

_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}


@dataclass(frozen=True)
class PcapFormat:
    endian: str
    ts_unit: float
    linktype: int
    snaplen: int = 0        # from the global header; 0 = not stated


MAX_RECORD = 262144         # largest captured length accepted when resynchronising (tcpdump's maximum)


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
    snaplen, linktype = struct.unpack(endian + "II", head[16:24])
    return PcapFormat(endian, unit, linktype & 0x0FFFFFFF, snaplen)


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


# ---- vectorised parser (what the Spark tasks use) ---------------------------------------------

# Column order of a parsed block; the Spark schema in pcap_ingest.py follows it.
COLUMNS = ("ts", "length", "ipver", "src4", "dst4", "src6", "dst6", "proto", "sport", "dport",
           "flags", "seq", "ack", "window", "payload")


def walk_offsets(data: bytes | memoryview, fmt: PcapFormat, start: int, stop: int) -> list[int]:
    """Offsets of the records whose header starts in [start, stop) (start must be a record boundary).

    This chain walk is the only sequential part: each header gives the next one's position."""
    unpack = struct.Struct(fmt.endian + "I").unpack_from
    offs: list[int] = []
    append = offs.append
    pos, end = start, len(data)
    while pos < stop and pos + 16 <= end:
        incl = unpack(data, pos + 8)[0]
        if pos + 16 + incl > end:
            break  # truncated final record (capture still being written, or cut): ignored
        append(pos)
        pos += 16 + incl
    return offs


def max_incl(fmt: PcapFormat) -> int:
    """Largest plausible captured length of one record of this file."""
    return min(fmt.snaplen, MAX_RECORD) if fmt.snaplen > 0 else MAX_RECORD


def resync_window(fmt: PcapFormat, chain: int = 8) -> int:
    """Bytes past a range's end a task must read: enough to finish its last record and to verify a
    chain of `chain` records when resynchronising."""
    return (chain + 1) * (16 + max_incl(fmt))


def first_record(data: bytes | memoryview, fmt: PcapFormat, ref_sec: int, chain: int = 8) -> int | None:
    """Offset of the first record header in `data`, which starts at an arbitrary byte of a capture.

    A pcap has no sync marks, so a candidate offset is accepted when `chain` consecutive headers from
    it are plausible: captured length <= snaplen and <= original length, original length <= 256 KiB,
    sub-second field below one second, seconds within a day of the file's first record and of the
    previous header. A chain may end early only at the end of `data` (exactly, or after two
    records when the next one is cut). Random payload bytes
    pass all of this with vanishing probability; the benchmark checks the count against a full walk."""
    hdr = struct.Struct(fmt.endian + "IIII").unpack_from
    cap = max_incl(fmt)
    frac_max = 1_000_000_000 if fmt.ts_unit < 1e-6 else 1_000_000
    end = len(data)

    def plausible(q: int, prev_sec: int) -> tuple[bool, int]:
        sec, frac, incl, orig = hdr(data, q)
        ok = (incl <= cap and incl <= orig <= MAX_RECORD and frac < frac_max and abs(sec - ref_sec) <= 86400
              and abs(sec - prev_sec) <= 86400)
        return ok, (q + 16 + incl if ok else -1)

    for cand in range(0, max(end - 15, 0)):
        q, prev, good = cand, ref_sec, 0
        while good < chain:
            if q == end:
                break                     # the chain ends exactly at the end of the data: accepted
            if q + 16 > end:
                good = -1
                break
            ok, nxt = plausible(q, prev)
            if not ok:
                good = -1
                break
            prev = hdr(data, q)[0]
            if nxt > end:
                # a record cut by the end of the capture (truncated tail): enough evidence after two
                good = good if good >= 2 else -1
                break
            q, good = nxt, good + 1
        if good > 0:
            return cand
    return None


def split_points(data: bytes | memoryview, fmt: PcapFormat, chunk: int) -> list[int]:
    """Record-aligned byte offsets about `chunk` bytes apart, first 24 and last the end of the last record."""
    unpack = struct.Struct(fmt.endian + "I").unpack_from
    points = [24]
    pos, end, nxt = 24, len(data), 24 + chunk
    while pos + 16 <= end:
        incl = unpack(data, pos + 8)[0]
        if pos + 16 + incl > end:
            break
        pos += 16 + incl
        if pos >= nxt:
            points.append(pos)
            nxt = pos + chunk
    if points[-1] != pos:
        points.append(pos)
    return points


def _u16(a, idx):
    return (a[idx].astype(np.uint32) << 8) | a[idx + 1]


def _u32(a, idx):
    return ((a[idx].astype(np.uint64) << 24) | (a[idx + 1].astype(np.uint64) << 16)
            | (a[idx + 2].astype(np.uint64) << 8) | a[idx + 3])


def parse_block(data: bytes | memoryview, fmt: PcapFormat, offsets) -> dict:
    """Header fields of the records at `offsets` as numpy arrays (one entry per record, COLUMNS order).

    IPv4/TCP/UDP over Ethernet is decoded with array gathers; anything else (VLAN tags, raw IP,
    IPv6) goes through parse_frame for those records only. Non-IP frames keep ipver 0."""
    n = len(offsets)
    a = np.frombuffer(data, dtype=np.uint8)
    o = np.asarray(offsets, dtype=np.int64)
    hdr_dt = np.dtype([("sec", fmt.endian + "u4"), ("frac", fmt.endian + "u4"),
                       ("incl", fmt.endian + "u4"), ("orig", fmt.endian + "u4")])
    if n:
        # 16-byte record headers gathered as one structured array
        raw = a[(o[:, None] + np.arange(16)).ravel()].view(hdr_dt)
        sec, frac = raw["sec"].astype(np.float64), raw["frac"].astype(np.float64)
        incl, orig = raw["incl"].astype(np.int64), raw["orig"].astype(np.int64)
    else:
        sec = frac = np.zeros(0)
        incl = orig = np.zeros(0, dtype=np.int64)
    out = {
        "ts": sec + frac * fmt.ts_unit, "length": orig,
        "ipver": np.zeros(n, np.int8), "src4": np.zeros(n, np.int64), "dst4": np.zeros(n, np.int64),
        "src6": [None] * n, "dst6": [None] * n,
        "proto": np.zeros(n, np.int16), "sport": np.zeros(n, np.int32), "dport": np.zeros(n, np.int32),
        "flags": np.zeros(n, np.int16), "seq": np.zeros(n, np.int64), "ack": np.zeros(n, np.int64),
        "window": np.zeros(n, np.int32), "payload": np.zeros(n, np.int64),
    }
    if n == 0:
        return out
    f = o + 16  # frame start
    slow = np.ones(n, dtype=bool)
    if fmt.linktype == 1:
        ok = incl >= 34
        fi = np.where(ok, f, 0)
        etype = _u16(a, fi + 12)
        v4 = ok & (etype == 0x0800) & ((a[fi + 14] >> 4) == 4)
        slow = ok & ~v4 & ((etype == 0x8100) | (etype == 0x88A8) | (etype == 0x86DD))
        idx = np.nonzero(v4)[0]
        if len(idx):
            ip = f[idx] + 14
            ihl = (a[ip] & 0x0F).astype(np.int64) * 4
            proto = a[ip + 9].astype(np.int16)
            tot = _u16(a, ip + 2).astype(np.int64)
            # GSO super-frames may carry tot_len 0: fall back to the captured original length
            ip_len = np.where(tot > 0, tot, orig[idx] - 14)
            out["ipver"][idx] = 4
            out["proto"][idx] = proto
            out["src4"][idx] = _u32(a, ip + 12).astype(np.int64)
            out["dst4"][idx] = _u32(a, ip + 16).astype(np.int64)
            out["payload"][idx] = np.maximum(ip_len - ihl, 0)
            l4 = ip + ihl
            cap_end = f[idx] + incl[idx]
            tcp = (proto == 6) & (l4 + 20 <= cap_end)
            t = idx[tcp]
            if len(t):
                p = l4[tcp]
                out["sport"][t] = _u16(a, p)
                out["dport"][t] = _u16(a, p + 2)
                out["seq"][t] = _u32(a, p + 4).astype(np.int64)
                out["ack"][t] = _u32(a, p + 8).astype(np.int64)
                doff_flags = _u16(a, p + 12)
                out["flags"][t] = (doff_flags & 0x1FF).astype(np.int16)
                out["window"][t] = _u16(a, p + 14)
                out["payload"][t] = np.maximum(ip_len[tcp] - ihl[tcp] - (doff_flags >> 12).astype(np.int64) * 4, 0)
            udp = (proto == 17) & (l4 + 8 <= cap_end)
            u = idx[udp]
            if len(u):
                p = l4[udp]
                out["sport"][u] = _u16(a, p)
                out["dport"][u] = _u16(a, p + 2)
                out["payload"][u] = np.maximum(ip_len[udp] - ihl[udp] - 8, 0)
    for i in np.nonzero(slow)[0].tolist():
        start = int(f[i])
        pkt = parse_frame(bytes(a[start:start + int(incl[i])]), 0.0, int(orig[i]), fmt.linktype)
        if pkt is None:
            continue
        if ":" in pkt.src:
            out["ipver"][i] = 6
            out["src6"][i], out["dst6"][i] = pkt.src, pkt.dst
        else:
            out["ipver"][i] = 4
            out["src4"][i] = int.from_bytes(bytes(int(x) for x in pkt.src.split(".")), "big")
            out["dst4"][i] = int.from_bytes(bytes(int(x) for x in pkt.dst.split(".")), "big")
        for k in ("proto", "sport", "dport", "flags", "seq", "ack", "window", "payload"):
            out[k][i] = getattr(pkt, k if k != "window" else "window")
    return out
