"""Message streams with hop-by-hop credits (Brachman 1989, 5.2 and 6.2.2).

A message of ``min_fragments`` (3) or more fragments travels on a stream set
up hop by hop as its first fragment advances.  Each MTA on the path records
the stream (id, upstream, downstream, allocation, lifetime) in a
:class:`StreamTable` and reserves the stream's allocation -- ``min(message
fragments, max_allocation)`` transit buffers of one buffer class -- in its
:class:`~node.resources.buffer_pool.BufferPool` for the stream's lifetime at
this MTA (6.2.2: a stream is established only when the whole allocation can
be granted).

Flow control is by credits: an upstream hop may send a fragment only into a
slot this hop granted to the stream.  A slot is granted (``grant``) when it is
free and not already promised, i.e. after a fragment was forwarded
downstream, so a recipient that stops granting throttles every hop back to
the source.  A hop forwards at most ``ceil(allocation / 2)`` fragments per
turn (half its allocation, rounded up so that allocation 1 still moves),
which lets it receive and forward at once and shares the link fairly.

The source MTA (``upstream=None``) holds the message in its input pool, and
the recipient MTA (``downstream=None``) in recipient space; both open the
stream with ``buffer_class=None`` so no transit buffers are taken (the source
releases one class-0 buffer per fragment it forwards; the recipient calls
``on_fragment_consumed`` when a fragment is stored in recipient space).

:func:`stream_allocation_targets` applies expression 5.1 inside one buffer
class to share it among the streams using it (5.4, last paragraph); the
table itself keeps the allocation fixed for a stream's life, as the thesis
simulation did (6.2.2).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Mapping

from node.resources.buffer_pool import BufferPool
from node.errors import UserError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamConfig:
    max_allocation: int = 1  # buffers per stream per MTA (Table 6.2)
    lifetime: float = 3600.0  # seconds without activity before a stream expires
    min_fragments: int = 3  # messages of this many fragments or more use a stream (6.2.2)

    def validate(self) -> None:
        if self.max_allocation < 1 or self.lifetime <= 0 or self.min_fragments < 1:
            raise UserError("stream max_allocation and min_fragments must be >= 1 and lifetime > 0.")


@dataclass
class StreamRecord:
    stream_id: str
    upstream: str | None
    downstream: str | None
    buffer_class: int | None
    allocation: int
    fragments_total: int
    expires_at: float
    held: int = 0  # fragments stored here, waiting to go downstream
    granted_upstream: int = 0  # slots promised upstream and not yet filled
    credit_downstream: int = 0  # slots the next hop promised us
    received: int = 0
    forwarded: int = 0

    @property
    def burst(self) -> int:
        """Half the allocation per turn, rounded up so allocation 1 still moves."""
        return max(1, math.ceil(self.allocation / 2))

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.stream_id,
            "upstream": self.upstream,
            "downstream": self.downstream,
            "class": self.buffer_class,
            "allocation": self.allocation,
            "held": self.held,
            "granted_upstream": self.granted_upstream,
            "credit_downstream": self.credit_downstream,
            "received": self.received,
            "forwarded": self.forwarded,
            "expires_at": self.expires_at,
        }


def stream_allocation_targets(
    class_limit: int, throughput: Mapping[str, float], minimum: int = 1, maximum: int = 1
) -> dict[str, int]:
    """Expression 5.1 applied within a buffer class (Brachman 1989, 5.4).

    Stream s of the class gets ``floor(class_limit * sigma_s / sigma_class)``
    buffers, clamped to ``[minimum, maximum]``; with no throughput every stream
    gets ``minimum``.
    """
    if minimum < 0 or maximum < minimum:
        raise ValueError("need 0 <= minimum <= maximum")
    total = float(sum(throughput.values()))
    out: dict[str, int] = {}
    for sid, sigma in throughput.items():
        share = int(class_limit * sigma // total) if total > 0 else minimum
        out[sid] = max(minimum, min(maximum, share))
    return out


class StreamError(Exception):
    """A peer broke the stream protocol (unknown stream, fragment without credit)."""


class StreamTable:
    """The streams passing through one MTA."""

    def __init__(self, pool: BufferPool | None, config: StreamConfig | None = None) -> None:
        self.config = config or StreamConfig()
        self.config.validate()
        self._pool = pool
        self._streams: dict[str, StreamRecord] = {}
        self._refused_opens = 0
        self._expired = 0

    def uses_stream(self, fragments: int) -> bool:
        return fragments >= self.config.min_fragments

    def get(self, stream_id: str) -> StreamRecord | None:
        return self._streams.get(stream_id)

    def __len__(self) -> int:
        return len(self._streams)

    def open(
        self,
        stream_id: str,
        *,
        upstream: str | None,
        downstream: str | None,
        buffer_class: int | None,
        fragments: int,
        now: float,
        held: int = 0,
    ) -> StreamRecord | None:
        """Record a stream; None (refusal) when its transit allocation cannot be reserved now.

        ``held`` is for the source: the fragments already stored in its input pool.
        """
        if stream_id in self._streams:
            raise StreamError(f"stream {stream_id} already open")
        if fragments < 1:
            raise ValueError("a stream carries at least one fragment")
        allocation = min(fragments, self.config.max_allocation)
        if buffer_class is not None:
            if self._pool is None:
                raise ValueError("a buffer class needs a buffer pool")
            if not self._pool.try_acquire(buffer_class, allocation):
                self._refused_opens += 1
                return None
        rec = StreamRecord(
            stream_id, upstream, downstream, buffer_class, allocation, fragments, now + self.config.lifetime, held=held
        )
        self._streams[stream_id] = rec
        return rec

    def _get(self, stream_id: str) -> StreamRecord:
        rec = self._streams.get(stream_id)
        if rec is None:
            raise StreamError(f"unknown stream {stream_id}")
        return rec

    def grant(self, stream_id: str) -> int:
        """Credits to send upstream now: free, unpromised slots of the allocation (0 at the source)."""
        rec = self._get(stream_id)
        if rec.upstream is None:
            return 0
        remaining = rec.fragments_total - rec.received - rec.granted_upstream
        new = min(rec.allocation - rec.held - rec.granted_upstream, remaining)
        if new <= 0:
            return 0
        rec.granted_upstream += new
        return new

    def on_credit(self, stream_id: str, credits: int, now: float) -> None:
        """The downstream hop granted ``credits`` slots."""
        if credits < 0:
            raise ValueError("credits must be >= 0")
        rec = self._get(stream_id)
        rec.credit_downstream += credits
        rec.expires_at = now + self.config.lifetime

    def on_fragment_received(self, stream_id: str, now: float) -> None:
        rec = self._get(stream_id)
        if rec.upstream is not None:
            if rec.granted_upstream < 1:
                raise StreamError(f"stream {stream_id}: fragment arrived without credit")
            rec.granted_upstream -= 1
        rec.held += 1
        rec.received += 1
        rec.expires_at = now + self.config.lifetime

    def can_send(self, stream_id: str) -> int:
        """Fragments this hop may forward in its next turn."""
        rec = self._get(stream_id)
        if rec.downstream is None:
            return 0
        return min(rec.held, rec.credit_downstream, rec.burst)

    def on_fragment_forwarded(self, stream_id: str, now: float) -> None:
        rec = self._get(stream_id)
        if rec.held < 1 or rec.credit_downstream < 1:
            raise StreamError(f"stream {stream_id}: forwarded without a fragment or credit")
        rec.held -= 1
        rec.credit_downstream -= 1
        rec.forwarded += 1
        rec.expires_at = now + self.config.lifetime
        if rec.buffer_class is not None and self._pool is not None:
            self._pool.note_forwarded(rec.buffer_class)  # throughput of the class (expression 5.1)

    def on_fragment_consumed(self, stream_id: str, now: float) -> None:
        """At the recipient: a fragment left the stream's slots (stored in recipient space)."""
        rec = self._get(stream_id)
        if rec.held < 1:
            raise StreamError(f"stream {stream_id}: nothing to consume")
        rec.held -= 1
        rec.forwarded += 1
        rec.expires_at = now + self.config.lifetime

    def finished(self, stream_id: str) -> bool:
        rec = self._get(stream_id)
        return rec.forwarded >= rec.fragments_total

    def close(self, stream_id: str) -> StreamRecord:
        """Tear the stream down here and release its transit buffers."""
        rec = self._streams.pop(stream_id, None)
        if rec is None:
            raise StreamError(f"unknown stream {stream_id}")
        if rec.buffer_class is not None and self._pool is not None:
            # Fragments were counted as forwarded one by one; only free the reservation.
            self._pool.release(rec.buffer_class, rec.allocation, count_throughput=False)
        return rec

    def expire(self, now: float) -> list[str]:
        """Close every stream idle past its lifetime; returns their ids."""
        gone = [sid for sid, rec in self._streams.items() if rec.expires_at <= now]
        for sid in gone:
            log.info("stream %s expired", sid)
            self.close(sid)
        self._expired += len(gone)
        return gone

    def snapshot(self) -> dict[str, object]:
        by_neighbour: dict[str, int] = {}
        for r in self._streams.values():
            for peer in (r.upstream, r.downstream):
                if peer is not None:
                    by_neighbour[peer] = by_neighbour.get(peer, 0) + 1
        return {
            "active_streams": len(self._streams),
            "active_by_neighbour": dict(sorted(by_neighbour.items())),
            "allocated_buffers": sum(r.allocation for r in self._streams.values() if r.buffer_class is not None),
            "held_fragments": sum(r.held for r in self._streams.values()),
            "refused_opens": self._refused_opens,
            "expired": self._expired,
            "streams": [r.as_dict() for r in self._streams.values()],
        }
