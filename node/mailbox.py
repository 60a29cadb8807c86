"""Mailbox reads for the Submit service: status of a message, listing and deleting mail.

Reads go to the spool; a delete also tells the admission policy that the
recipient space of those messages is free again.
"""
from __future__ import annotations

from node.policy import ResourcePolicy
from node.spool import Spool
from node.states import MessageStatus, message_status


class Mailbox:
    def __init__(self, spool: Spool, policy: ResourcePolicy) -> None:
        self.spool = spool
        self.policy = policy

    async def status(self, msg_id: str) -> tuple[MessageStatus | None, dict]:
        info = await self.spool.run(Spool.op_status(msg_id))
        return message_status(info), info

    async def list(self, user: str, include_payload: bool) -> list[dict]:
        return await self.spool.run(Spool.op_mailbox(user, include_payload))

    async def delete(self, user: str, msg_ids: list[str]) -> int:
        n = await self.spool.run(Spool.op_delete_mail(user, msg_ids))
        if n:
            for m in msg_ids:
                self.policy.release_mail(m)
        return n
