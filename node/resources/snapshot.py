"""One JSON-ready dict of every resource manager of an MTA, for a metrics.jsonl record.

The engine can merge it as ``{"resources": resources_snapshot(...)}``; every
argument is optional so an engine that uses only some managers still reports.
"""
from __future__ import annotations

from typing import Mapping

from node.resources.buffer_pool import BufferPool
from node.resources.link_scheduler import LinkScheduler
from node.resources.rbsad import RbsadDelay
from node.resources.recipient_pool import RecipientPool
from node.resources.streams import StreamTable


def resources_snapshot(
    *,
    pool: BufferPool | None = None,
    streams: StreamTable | None = None,
    recipient: RecipientPool | None = None,
    links: Mapping[str, LinkScheduler[object]] | None = None,
    rbsad: RbsadDelay | None = None,
    include_stream_details: bool = False,
) -> dict[str, object]:
    out: dict[str, object] = {}
    if pool is not None:
        out["buffers"] = pool.snapshot()
    if streams is not None:
        snap = streams.snapshot()
        if not include_stream_details:
            snap.pop("streams", None)  # per-stream rows can be large; counts suffice for periodic metrics
        out["streams"] = snap
    if recipient is not None:
        out["recipient"] = recipient.snapshot()
    if links is not None:
        out["links"] = {name: sched.snapshot() for name, sched in sorted(links.items())}
    if rbsad is not None:
        out["rbsad"] = rbsad.snapshot()
    return out
