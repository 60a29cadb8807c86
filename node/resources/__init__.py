"""Resource management of Brachman's message transfer framework (thesis 1989, ch. 4-6).

Pure, synchronous bookkeeping classes with the clock passed in as ``now``; the
node engine calls them from its event loop.  Nothing here does I/O or sleeps.

- :mod:`buffer_pool`     structured transit buffer pool, expression 5.1 adjustment
- :mod:`streams`         message streams with hop-by-hop credits
- :mod:`recipient_pool`  recipient buffer space: preallocation, optimistic, quotas
- :mod:`rbsad`           recipient buffer space allocation delay emulation
- :mod:`link_scheduler`  prioritised round robin per outgoing link
- :mod:`snapshot`        all of the above as one metrics record
"""
from node.resources.buffer_pool import (
    BufferPool,
    BufferPoolConfig,
    apply_class_deltas,
    class_limit_deltas,
)
from node.resources.link_scheduler import LinkScheduler, LinkSchedulerConfig
from node.resources.rbsad import RbsadConfig, RbsadDelay
from node.resources.recipient_pool import (
    HybridChooser,
    HybridConfig,
    RecipientPool,
    RecipientPoolConfig,
    RemovalProcess,
    ReservationState,
)
from node.resources.snapshot import resources_snapshot
from node.resources.streams import (
    StreamConfig,
    StreamError,
    StreamRecord,
    StreamTable,
    stream_allocation_targets,
)

__all__ = [
    "BufferPool",
    "BufferPoolConfig",
    "apply_class_deltas",
    "class_limit_deltas",
    "LinkScheduler",
    "LinkSchedulerConfig",
    "RbsadConfig",
    "RbsadDelay",
    "HybridChooser",
    "HybridConfig",
    "RecipientPool",
    "RecipientPoolConfig",
    "RemovalProcess",
    "ReservationState",
    "resources_snapshot",
    "StreamConfig",
    "StreamError",
    "StreamRecord",
    "StreamTable",
    "stream_allocation_targets",
]
