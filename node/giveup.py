"""Giving up on a copy: the engine stops trying to deliver it and reports it, in ONE spool transaction.

Lifetimes that run out (node/expiry.py) and a gateway's drops (node/gateway/) end copies this way. The copy's
queued pieces are taken out, and its deletion and its non-delivery report commit together, so after a crash
either the copy or its report is there, never neither (the loss checker's `reported`). A spool that cannot
store that now leaves the copy queued as before.
"""
from __future__ import annotations

import logging
from typing import Any

from node.piece import Piece
from node.spool import Spool

log = logging.getLogger("node.giveup")


async def give_up(e: Any, p: Piece, reason: str, in_flight_too: bool = False) -> bool:
    """`e`: the node's Engine (node/mta.py). A copy not queued whole here (a piece of it in flight to a
    neighbour, being read for sending, or passed on) is left alone unless `in_flight_too` (its lifetime ended:
    no hop takes it now). True when given up; False when left as it was (not whole, being given up already, or
    the spool cannot store it now)."""
    if p.mkey in e.giving_up or (not in_flight_too and not queued_whole(e, p)):
        return False
    e.giving_up.add(p.mkey)
    try:
        return await _give_up(e, p, reason)
    finally:
        e.giving_up.discard(p.mkey)


async def _give_up(e: Any, p: Piece, reason: str) -> bool:
    removed = [x for peer in e.peers.values() for x in peer.queue.remove_if(lambda x: x.mkey == p.mkey)]
    drop = Spool.op_drop(p.msg_id, p.dst)
    # a report without a route now is kept as an orphan: giving up must not wait for one
    report = e.reporter.message(p, reason, orphan_ok=True)
    # the record first: a crash after the commit must not leave a copy gone without its `ndr_made` line (the
    # loss checker's `reported`); one before it leaves the copy, and a delivery outranks the line
    e.reporter.note(p, reason)
    try:
        if report is not None and await e.spool.read(Spool.op_ndr_made(p.msg_id, p.dst)):
            report = None     # made when pieces of this copy that came earlier were given up
        if report is None:
            await e.spool.run(drop)
        else:
            once = Spool.op_ndr_once(p.msg_id, p.dst, p.expires_ts)

            def also(c) -> None:
                drop(c)
                once(c)
            why = await e.origination.originate_together([report], also)
            if why:
                raise OSError(why)
    except Exception as exc:        # nothing was stored: the copy stays, queued as before
        for x in removed:
            e._enqueue(x)
        log.error("%s: cannot give up %s for %s now (%s): %s", e.me, p.msg_id, p.dst, reason, exc)
        return False
    for x in removed:
        e.policy.dropped(x)
    if report is not None:
        e.reporter.made += 1
    return True


def queued_whole(e: Any, p: Piece) -> bool:
    """Whether every byte of this copy waits in a link queue here: none sent and unacknowledged, none taken for
    sending (its bytes being read), none passed on."""
    for peer in e.peers.values():
        inflight = getattr(peer.session, "inflight", None) or {}
        if any(x.mkey == p.mkey for x in inflight.values()):
            return False
    have = sum(x.size for peer in e.peers.values() for x in peer.queue.pieces() if x.mkey == p.mkey)
    return have >= p.total
