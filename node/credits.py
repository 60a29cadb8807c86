"""Message-stream credits on the wire: the `credit` Link frame between the admission policy of one node and
the link queue of the node before it (Brachman's flow control of message streams, node/resource_manager.py).

A node's policy owes its upstream neighbour credits as buffers free up (`take_credits`); they travel in
`credit` frames ahead of data, and the upstream node's queue for that neighbour lets that many more pieces
of the stream go. A credit without a message id is ROOM: the neighbour freed space, offer again now what it
refused for want of it. The engine takes no part in this.
"""
from __future__ import annotations

from typing import Any

from node.peer import Peer
from node.rpc import link_pb2

MAX_GRANT = 1 << 16          # credits one frame may grant at most (a neighbour's number is not trusted)


def frames(policy: Any, peer: Peer) -> list[link_pb2.Frame]:
    """The credits this node's admission policy owes `peer` now, as frames for the next batch."""
    out = [link_pb2.Frame(credit=link_pb2.Credit(msg_id=m, dst=d, credits=n))
           for (m, d), n in policy.take_credits(peer.name)]
    peer.stats.credits_out += len(out)
    return out


def received(peer: Peer, credit: link_pb2.Credit) -> None:
    """A credit frame from `peer`: its queue here may send more of that stream (or, ROOM, retry now)."""
    if not credit.msg_id:
        peer.queue.retry_now()
    elif credit.credits > 0:
        peer.stats.credits_in += 1
        peer.queue.credit((credit.msg_id, credit.dst), min(credit.credits, MAX_GRANT))
