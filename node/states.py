"""The states of a stored piece and of a message, named once (like Postfix's queue names).

`PieceState` is the `state` column of the spool's `frag` table:
  queued   waiting to be sent to the next hop ("active"/"sent, awaiting ack" is
           in memory only: after a crash everything unacknowledged is queued again)
  held     non-fragmenting transit: stored, waiting for the rest of the message
  part     at the recipient node, waiting for reassembly
  orphan   refused by the next hop or unroutable: kept and reported, never dropped
  whole    in memory only: a complete message for this node in one piece,
           delivered in the same transaction that stores it

`MessageStatus` is what the Submit service's Status call answers about one message id.
"""
from __future__ import annotations

from enum import StrEnum


class PieceState(StrEnum):
    QUEUED = "queued"
    HELD = "held"
    PART = "part"
    ORPHAN = "orphan"
    WHOLE = "whole"


class MessageStatus(StrEnum):
    DELIVERED = "delivered"
    NOT_DELIVERED = "not-delivered"      # a non-delivery report was made for it
    ORPHAN = "orphan"
    QUEUED = "queued"                    # queued or held here
    REASSEMBLING = "reassembling"
    ABORTED = "aborted"
    FORWARDED = "forwarded"              # accepted here and handed on


def message_status(info: dict) -> MessageStatus | None:
    """The status of a message from `Spool.op_status`'s answer; None when this node never saw it."""
    states = info["states"]
    if info["mailbox"]:
        return MessageStatus.DELIVERED
    if info["ndr"]:
        return MessageStatus.NOT_DELIVERED
    if PieceState.ORPHAN in states:
        return MessageStatus.ORPHAN
    if PieceState.QUEUED in states or PieceState.HELD in states:
        return MessageStatus.QUEUED
    if PieceState.PART in states:
        return MessageStatus.REASSEMBLING
    if any(v == "aborted" for v in info["done"].values()):
        return MessageStatus.ABORTED
    if info["origin"] is not None:
        return MessageStatus.FORWARDED
    return None
