"""The metrics.jsonl record of a node: queues, neighbours, counters (node/schema.py documents the fields)."""
from __future__ import annotations

from typing import Any


def engine_snapshot(e: Any) -> dict:
    """`e`: the node's Engine (node/mta.py), which calls this; subsystems add their sections (EngineHooks)."""
    neighbours = {}
    spool_bytes = 0
    spool_frags = 0
    msgs: set = set()
    managed = e.policy.managed
    for n, peer in e.peers.items():
        q, st = peer.queue, peer.stats
        neighbours[n] = {"queue_messages": q.messages, "queue_fragments": len(q), "queue_bytes": q.bytes,
                         **st.snapshot(managed)}
        if managed:
            neighbours[n]["scheduler"] = q.snapshot()
        spool_bytes += q.bytes
        spool_frags += len(q) + st.inflight
        msgs.update(q.message_keys())
    for table in (e.partial, e.held):
        spool_bytes += sum(p.got for p in table.values())
        msgs.update(table)
    return {"spool_messages": len(msgs), "spool_bytes": spool_bytes, "spool_fragments": spool_frags,
            "neighbours": neighbours, "delivered": e.delivered, "submitted": e.submitted,
            "refused_submissions": e.refused_submissions, "partial_messages": len(e.partial),
            "held_messages": len(e.held), "orphans": len(e.orphans), "orphan_bytes": e.orphans.bytes,
            "expired": e.expired,
            "reports": e.reporter.made, "mode": e.mode, "spool_commits": e.spool.commits,
            "spool_ops": e.spool.ops, **({"resources": e.policy.snapshot()} if managed else {}),
            **e.hooks.snapshot()}
