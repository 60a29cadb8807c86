"""Resource management of Brachman's message transfer framework (thesis 1989, ch. 4-6).

Pure, synchronous bookkeeping classes with the clock passed in as ``now``; the
node engine calls them from its event loop.  Nothing here does I/O or sleeps.

- :mod:`buffer_pool`     structured transit buffer pool, expression 5.1 adjustment
- :mod:`recipient_pool`  recipient buffer space: preallocation, optimistic, quotas
- :mod:`rbsad`           recipient buffer space allocation delay emulation

Message streams, the link queue and the metrics record are the node's own:
node/resource_manager.py (streams with hop-by-hop credits, ``snapshot``) and
node/transfer_queue.py (prioritised round robin per outgoing link).
"""
from node.resources.buffer_pool import (
    BufferPool,
    BufferPoolConfig,
    apply_class_deltas,
    class_limit_deltas,
)
from node.resources.rbsad import RbsadConfig, RbsadDelay
from node.resources.recipient_pool import (
    HybridChooser,
    HybridConfig,
    RecipientPool,
    RecipientPoolConfig,
    RemovalProcess,
    ReservationState,
)

__all__ = [
    "BufferPool",
    "BufferPoolConfig",
    "apply_class_deltas",
    "class_limit_deltas",
    "RbsadConfig",
    "RbsadDelay",
    "HybridChooser",
    "HybridConfig",
    "RecipientPool",
    "RecipientPoolConfig",
    "RemovalProcess",
    "ReservationState",
]
