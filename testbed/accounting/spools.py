"""What a node's spool (nodes/<node>/spool.db, node/spool.py) still held when the run was torn down.

Opened read-only (a WAL file beside it is read too): the checker must never
change the evidence, nor leave files beside it. Three tables matter:
  frag    the pieces still held, per message copy (msg_id, dst): their state
          (queued, held, part, orphan: node/states.py) and byte range (offset,
          length, and the message's total size), so the checker can tell a copy
          held whole from one of which a piece is gone
  done    copies delivered (or aborted) here: a delivery the spool made durable
          even if the daemon died before it wrote the deliveries.jsonl line
  origin  messages this node accepted from its users (or made as reports): an
          acceptance even if the daemon died before it wrote the submission line
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

SPOOL_FILE = "spool.db"

Pair = tuple[str, str]      # (msg_id, recipient node): one copy of a message


class SpoolUnreadable(Exception):
    """The spool is missing or cannot be read; the message says why in a few words."""


@dataclass
class Accepted:
    """One `origin` row: a message this node accepted."""
    msg_id: str
    originator: str
    dsts: list[str]


@dataclass(frozen=True)
class Span:
    """One held piece of a message copy: bytes [off, off + length) of a message of `total` bytes."""
    off: int
    length: int
    total: int


@dataclass
class SpoolContents:
    node: str
    held: dict[Pair, dict[str, int]] = field(default_factory=dict)   # copy -> state -> pieces
    spans: dict[Pair, list[Span]] = field(default_factory=dict)      # copy -> the byte ranges of those pieces
    delivered: set[Pair] = field(default_factory=set)                # `done` rows with outcome delivered
    accepted: list[Accepted] = field(default_factory=list)           # `origin` rows


def read_spool(path: Path, node: str) -> SpoolContents:
    """The contents of one spool file; raises SpoolUnreadable when it is missing or not a readable spool."""
    path = Path(path)
    if not path.exists():
        raise SpoolUnreadable("missing")
    if not path.is_file():
        raise SpoolUnreadable("not a file")
    out = SpoolContents(node)
    # Without a -wal file the database file is complete (the daemon's last close checkpointed it): open it as
    # immutable, or SQLite would leave an empty -wal and -shm beside it. With one (a daemon that was killed),
    # a read-only connection reads the WAL too.
    wal = path.with_name(path.name + "-wal")
    flags = "mode=ro" if wal.exists() else "mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?{flags}", uri=True, timeout=5.0)
    except sqlite3.Error as exc:
        raise SpoolUnreadable(f"cannot open ({exc})") from None
    try:
        for msg_id, dst, state, off, length, total in conn.execute(
                "SELECT msg_id, dst, state, off, length(data), total FROM frag"):
            pair = (str(msg_id), str(dst))
            states = out.held.setdefault(pair, {})
            states[str(state)] = states.get(str(state), 0) + 1
            out.spans.setdefault(pair, []).append(Span(int(off), int(length or 0), int(total)))
        for msg_id, dst in conn.execute("SELECT msg_id, dst FROM done WHERE outcome='delivered'"):
            out.delivered.add((str(msg_id), str(dst)))
        for msg_id, originator, dsts in conn.execute("SELECT msg_id, originator, dsts FROM origin"):
            out.accepted.append(Accepted(str(msg_id), str(originator or ""), _names(dsts)))
    except sqlite3.Error as exc:
        raise SpoolUnreadable(f"cannot read ({exc})") from None
    except (TypeError, ValueError) as exc:        # a row whose numbers are not numbers: a damaged spool
        raise SpoolUnreadable(f"damaged row ({exc})") from None
    finally:
        conn.close()
    return out


def _names(dsts: object) -> list[str]:
    """The origin row's recipient nodes (a JSON list); [] when the row is damaged."""
    try:
        value = json.loads(dsts) if isinstance(dsts, (str, bytes)) else dsts
    except ValueError:
        return []
    if isinstance(value, str):
        return [value]
    return [d for d in value if isinstance(d, str)] if isinstance(value, list) else []
