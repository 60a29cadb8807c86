"""The engine's clock: lifetimes that ran out, reassemblies that stalled, streams that went quiet.

`sweep` runs every half second (node/daemon.py); `expire` also when a link takes a piece whose lifetime is
over. Both report what they end (node/reports.py).
"""
from __future__ import annotations

import time
from typing import Any

from node.piece import Piece
from node.spool import Spool


async def expire(e: Any, p: Piece) -> None:
    """A copy's lifetime ran out here: drop it and everything queued of it, and report it, in one transaction
    (Engine.give_up; a spool that cannot store that now keeps the copy, and the next sweep tries again)."""
    if await e.give_up(p, f"lifetime expired at {e.me}", in_flight_too=True):
        e.expired += 1


async def sweep(e: Any) -> None:
    """Expire queued, held and partial copies, abort stalled reassemblies, let stalled streams probe.
    `e`: the node's Engine (node/mta.py)."""
    now = time.time()
    mono = time.monotonic()
    e.policy.sweep(idle=max(e.cfg.reassembly_timeout, e.cfg.resources.reservation_timeout),
                   stream_idle=max(5.0, 2 * e.cfg.session.hold_time))
    for peer in e.peers.values():
        q = peer.queue
        q.probe(after=max(2.0, 2 * e.cfg.session.hold_time))   # only for a credit that got lost
        q.prune(idle=120.0)
        expired = q.remove_if(lambda p: bool(p.expires_ts) and p.expires_ts < now)
        seen: set = set()
        for p in expired:
            e.policy.dropped(p)
            if p.mkey not in seen:
                seen.add(p.mkey)
                await expire(e, p)
    # an orphan waits for a route, but not beyond its lifetime
    gone: set[tuple[str, str]] = set()
    for key in [k for k, p in e.orphans.items() if p.expires_ts and p.expires_ts < now]:
        p = e.orphans.pop(key)
        if p.mkey not in gone:
            gone.add(p.mkey)
            await expire(e, p)
    for table, what in ((e.held, "transit"), (e.partial, "reassembly")):
        for mkey, pend in list(table.items()):
            m = pend.meta
            reason = None
            if m.expires_ts and m.expires_ts < now:
                reason = f"lifetime expired at {e.me} during {what}"
            elif table is e.partial and mono - pend.last > e.cfg.reassembly_timeout:
                reason = f"reassembly at {e.me} timed out after {e.cfg.reassembly_timeout:g} s without a fragment"
            if reason:
                table.pop(mkey, None)
                for x in pend.pieces:
                    e.policy.dropped(x)
                if table is e.partial:
                    e.policy.release_mail(mkey[0])
                await e.spool.run(Spool.op_abort(mkey[0], mkey[1], "aborted", m.expires_ts))
                e.expired += 1
                await e.reporter.report(m, reason)
