"""Whether the pieces held of a message copy still make the whole message.

A copy held only in part (a fragment row gone from every spool) can never be delivered: it is not late but
lost. The pieces of one copy may sit at several nodes (copy-until-ack); together they count, and pieces
held twice count once.
"""
from __future__ import annotations

from typing import Iterable

Range = tuple[int, int]      # (offset, length) of a held piece, bytes


def held_bytes(ranges: Iterable[Range], total: int) -> int:
    """How many of the message's `total` bytes the pieces hold (overlaps counted once)."""
    covered = 0
    end = 0          # everything below `end` is counted already
    for off, length in sorted(ranges):
        start, stop = max(off, end, 0), min(off + length, total)
        if stop > start:
            covered += stop - start
            end = stop
    return covered


def whole(ranges: Iterable[Range], total: int) -> bool:
    """True when the pieces cover every byte of the message; an empty message (total 0) needs one piece."""
    ranges = list(ranges)
    if total <= 0:
        return bool(ranges)
    return held_bytes(ranges, total) >= total
