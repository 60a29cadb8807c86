"""Mailbox reads for the Submit service: status of a message, listing and deleting mail.

Reads go to the spool; a delete also tells the admission policy that the
recipient space of those messages is free again.
"""
from __future__ import annotations

import json
import sqlite3

from node.policy import AdmissionPolicy
from node.spool import Spool
from node.states import MessageStatus, message_status


PAGE_ITEMS = 1000
PAGE_BYTES = 8 << 20
# A user's own messages at this node: those it sent here and those delivered to its mailbox here.
_OWNS = ("SELECT 1 FROM origin WHERE msg_id=?1 AND originator=?2 UNION ALL "
         "SELECT 1 FROM mailbox WHERE msg_id=?1 AND user=?2 LIMIT 1")


def _key(row: dict) -> tuple[float, str, str]:
    return (row["deliver_ts"], row["msg_id"], row["user"])


def _token(row: dict) -> str:
    return json.dumps(_key(row))


def _after(token: str) -> tuple[float, str, str] | None:
    """The row a page token names; a token this node did not make raises ValueError."""
    if not token:
        return None
    try:
        ts, msg_id, user = json.loads(token)
        return (float(ts), str(msg_id), str(user))
    except (TypeError, OverflowError, RecursionError) as exc:
        # JSON nested deeper than the parser goes (RecursionError) or an integer too big for a float
        # (OverflowError) are not ValueErrors: they escaped ListMailbox as UNKNOWN (test_node_fuzz.py)
        raise ValueError(f"not a page token: {type(exc).__name__}") from None


class Mailbox:
    def __init__(self, spool: Spool, policy: AdmissionPolicy) -> None:
        self.spool = spool
        self.policy = policy

    async def status(self, msg_id: str, user: str | None = None) -> tuple[MessageStatus | None, dict]:
        """The message's status and the spool's facts about it; with `user`, only for that user's own message
        (another's is (None, {}), as if this node never saw it: its existence is not the user's business)."""
        status = Spool.op_status(msg_id)

        def op(c: sqlite3.Connection) -> dict | None:
            if user is not None and c.execute(_OWNS, (msg_id, user)).fetchone() is None:
                return None
            return status(c)
        info = await self.spool.run(op)
        return (None, {}) if info is None else (message_status(info), info)

    async def page(self, user: str, include_payload: bool, limit: int = 0,
                   token: str = "") -> tuple[list[dict], str]:
        """One page of the mailbox and the token of the next ("" on the last page): at most `limit` (at most
        PAGE_ITEMS) items and about PAGE_BYTES of payload, far below gRPC's message size limit."""
        rows, more = await self.spool.run(Spool.op_mailbox(user, include_payload, _after(token),
                                                           min(limit or PAGE_ITEMS, PAGE_ITEMS), PAGE_BYTES))
        return rows, (_token(rows[-1]) if more else "")

    async def delete(self, user: str, msg_ids: list[str]) -> int:
        """Delete `user`'s copies of the messages ("": the copies addressed to the node without a user)."""
        n = await self.spool.run(Spool.op_delete_mail(user, msg_ids))
        if n:
            for m in msg_ids:
                self.policy.release_mail(m)
        return n
