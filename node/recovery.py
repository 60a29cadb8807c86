"""The engine's restart: everything the spool holds that was not acknowledged goes back where it was.

Queued copies return to their links' queues, held and partial ones to their tables, orphans to the orphans;
pieces of submissions a crash interrupted before they were accepted are dropped (the submitter was never
told they were accepted). Payloads are not loaded: each piece's bytes are read when its link sends it.
"""
from __future__ import annotations

import logging
from typing import Any

from node.spool import Spool
from node.states import PieceState as S

log = logging.getLogger("node.recovery")


async def recover(e: Any) -> None:
    """`e`: the node's Engine (node/mta.py), before any session."""
    dropped = await e.spool.run(Spool.op_drop_unaccepted(e.me))
    if dropped:
        log.warning("%s: dropped %d stored pieces of submissions a crash interrupted before they were "
                    "accepted (the submitter was not told they were accepted)", e.me, dropped)
    # without the payloads: each piece's bytes are read when its link sends it (take_loaded), so memory
    # does not grow with the spool; a body keyword rule needs the first bytes of every copy
    first = getattr(e.router, "reads_body", False)
    pieces = await e.spool.run(Spool.op_load_pieces(payloads=False, first_bytes=first))
    for p in pieces:
        if p.state in (S.QUEUED, S.HELD, S.PART):
            e.policy.recover(p)
        if p.state == S.QUEUED:
            e._enqueue(p)
        elif p.state == S.HELD:
            e._collect(e.held, p)
        elif p.state == S.PART:
            e._collect(e.partial, p)
        elif p.state == S.ORPHAN:
            e.orphans.add(p)
    for mkey, pend in list(e.held.items()):
        if pend.got >= pend.total:
            await e._release_held(mkey)
    for mkey, pend in list(e.partial.items()):
        if pend.got >= pend.total:
            await e._deliver(mkey)
    log.info("recovered %d pieces (%d queued, %d partial messages, %d held, %d orphans)", len(pieces),
             sum(len(p.queue) for p in e.peers.values()), len(e.partial), len(e.held), len(e.orphans))

