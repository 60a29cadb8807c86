"""Merge the captures of a split link's two halves into one pcap, by timestamp.

Each half of a link split across machines (testbed/shaping/split.py) captures
the direction it delivers, stamped with the wall-clock time it wrote the frame
to its TAP, as one emulator stamps both directions of an ordinary link. Each
file is in time order already (stamped as written), so a streaming merge of the
two gives the file one emulator would have written: one header (nanosecond
timestamps, Ethernet), both directions interleaved by delivery time. The report
tells the directions apart by addresses, not by file, so it reads the merged
file as it reads a local link's.

Sound while the halves' clocks agree: on machines that share one kernel (the
only ones a placed run accepts today) they are one clock. Between separate
machines each half's timestamps would first need its machine's offset
(machines.json) taken off; within a direction the order holds either way.
"""
from __future__ import annotations

import heapq
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

HEADER = struct.Struct("<IHHiIII")      # magic, version, thiszone, sigfigs, snaplen, linktype
RECORD = struct.Struct("<IIII")         # seconds, sub-second, captured length, original length
MAGICS = (0xA1B2C3D4, 0xA1B23C4D)       # microsecond, nanosecond (little-endian, as the emulator writes)


def _records(f: BinaryIO) -> Iterator[tuple[int, int, bytes]]:
    """(seconds, sub-second, record bytes) of each record; a record cut short by an ended writer is dropped."""
    while True:
        head = f.read(RECORD.size)
        if len(head) < RECORD.size:
            return
        sec, sub, caplen, _ = RECORD.unpack(head)
        body = f.read(caplen)
        if len(body) < caplen:
            return
        yield sec, sub, head + body


def _header(f: BinaryIO, name: str) -> tuple[int, int, int]:
    raw = f.read(HEADER.size)
    if len(raw) < HEADER.size:
        raise ValueError(f"{name} is not a pcap file (no header)")
    magic, _, _, _, _, snaplen, linktype = HEADER.unpack(raw)
    if magic not in MAGICS:
        raise ValueError(f"{name} is not a little-endian pcap file (magic {magic:#x})")
    return magic, snaplen, linktype


def merge(parts: list[Path], target: Path) -> int:
    """Write `target` from the pcap files `parts` (same timestamp resolution and link type), records in time
    order; the number of records. ValueError when the parts disagree or one is not a pcap."""
    if not parts:
        raise ValueError("no capture to merge")
    files = [open(p, "rb") for p in parts]
    try:
        heads = [_header(f, str(p)) for f, p in zip(files, parts)]
        if len({(m, lt) for m, _, lt in heads}) != 1:
            raise ValueError("the captures differ in timestamp resolution or link type: "
                             + ", ".join(f"{p.name} {m:#x}/{lt}" for p, (m, _, lt) in zip(parts, heads)))
        magic, _, linktype = heads[0]
        snaplen = max(s for _, s, _ in heads)
        count = 0
        tmp = target.with_name(target.name + ".tmp")
        with open(tmp, "wb") as out:
            out.write(HEADER.pack(magic, 2, 4, 0, 0, snaplen, linktype))
            streams = [_records(f) for f in files]
            for _, _, rec in heapq.merge(*streams, key=lambda r: (r[0], r[1])):
                out.write(rec)
                count += 1
        tmp.replace(target)
        return count
    finally:
        for f in files:
            f.close()
