"""Non-delivery reports: what happens when this node gives up on a message copy.

Every undeliverable copy gets one line in reports.jsonl and one log line; the
originator gets one report message per copy per node (remembered durably in
the spool), never a report about a report. An orphan (a copy kept without a
next hop, node/orphans.py) is only recorded (event "orphan"): it is not final,
a route may still appear; the report message goes when its lifetime ends. The report is a new message from
`mailer-daemon` at this node: it is stored and queued through the engine's
`originate` path, not through the engine's `submit` (no user-input checks, no
re-entry into the submission path); like any message it gets a submission record.
"""
from __future__ import annotations

import json
import logging
from typing import Awaitable, Callable

from node.origination import NewMessage
from node.records import Records
from node.piece import Piece
from node.spool import Spool

REPORT_KIND = "ndr"
ORPHAN = "orphan"       # the event of a copy kept without a next hop: recorded, not reported yet
REPORTER = "mailer-daemon"
NOTED_MAX = 10_000      # recent reports remembered to keep one record per copy, event and reason


Originate = Callable[[NewMessage], Awaitable[tuple[bool, str, str]]]


class Reporter:
    def __init__(self, me: str, spool: Spool, records: Records, lifetime: float, originate: Originate,
                 log: logging.Logger) -> None:
        self.me = me
        self.spool = spool
        self.records = records
        self.lifetime = lifetime
        self._originate = originate
        self.log = log
        self.made = 0
        self._noted: dict[tuple[str, str, str, str], None] = {}     # recent (copy, event, reason), oldest first

    async def report(self, p: Piece, reason: str, event: str = "ndr_made") -> None:
        """Record why the copy `p` is not delivered and, when that is final (not an orphan), tell its originator
        (once per copy per node)."""
        if not self.note(p, reason, event):
            return
        report = self.message(p, reason) if event != ORPHAN else None
        if report is None:
            return
        if not await self.spool.run(Spool.op_ndr_once(p.msg_id, p.dst, p.expires_ts)):
            return
        self.made += 1
        ok, _mid, why = await self._originate(report)
        if not ok:
            self.log.error("cannot send a non-delivery report for %s to %s: %s", p.msg_id, p.src, why)

    def note(self, p: Piece, reason: str, event: str = "ndr_made") -> bool:
        """The record and log line of a copy not delivered; False when this copy, event and reason were noted
        already (many pieces of one copy: one record and one log line)."""
        note = (p.msg_id, p.dst, event, reason)
        if note in self._noted:
            return False
        self._noted[note] = None
        if len(self._noted) > NOTED_MAX:
            del self._noted[next(iter(self._noted))]
        self.records.write("report", event=event, msg_id=p.msg_id, dst=p.dst, reason=reason, src=p.src,
                           originator=p.originator)
        self.log.warning("message %s for %s %s: %s", p.msg_id, p.dst,
                         "not delivered" if event != ORPHAN else "kept as an orphan", reason)
        return True

    def message(self, p: Piece, reason: str, orphan_ok: bool = False) -> NewMessage | None:
        """The report message telling the copy's originator, or None: never a report about a report, nor about a
        subsystem's message (the caller stores it once per copy: Spool.op_ndr_once)."""
        if p.kind != "" or not p.src:
            return None
        body = json.dumps({"msg_id": p.msg_id, "dst": p.dst, "reason": reason, "at": self.me}).encode()
        return NewMessage(REPORTER, [(p.src, p.originator)], body, p.prio, self.lifetime, REPORT_KIND,
                          f"ndr.{p.msg_id}.{p.dst}", orphan_ok=orphan_ok)

    def delivered(self, m: Piece, now: float) -> None:
        """A report reached its originator here."""
        self.records.write("report", ts=now, event="ndr_delivered", msg_id=m.msg_id, dst=m.dst,
                           reason="non-delivery report reached the originator", src=m.src)
