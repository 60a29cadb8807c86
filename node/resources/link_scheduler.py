"""Prioritised round robin over the transfers sharing one outgoing link (Brachman 1989, 5.2.2).

Each transfer (a message stream or a single message) has its own FIFO of
items and a priority P >= 1; a ready transfer of priority P is served about P
times as often as one of priority 1.  This is done by stride scheduling: every
transfer carries a virtual "pass"; the ready transfer with the smallest pass
is served and its pass advances by 1/P; a transfer becoming ready starts at
the current virtual time (or its own pass if later), so idleness earns no credit.  Ties go to the
transfer that became ready first (round robin within a level).

Aging (5.2.2: "a transfer that loses its turn ... has its priority
increased"): a ready transfer passed over ``aging_after`` times in a row gains
one priority level, up to ``max_priority``, and drops back to its own
priority once served.  Control frames are served strictly before data when
``control_first`` is set, otherwise they compete at ``max_priority``.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Generic, Hashable, TypeVar

from node.errors import UserError

T = TypeVar("T")


@dataclass(frozen=True)
class LinkSchedulerConfig:
    max_priority: int = 8
    aging_after: int = 32  # consecutive lost turns before a priority bump
    control_first: bool = True

    def validate(self) -> None:
        if self.max_priority < 1 or self.aging_after < 1:
            raise UserError("link scheduler max_priority and aging_after must be >= 1.")


@dataclass
class _Transfer(Generic[T]):
    transfer_id: Hashable
    priority: int
    effective: int
    queue: deque[T] = field(default_factory=deque)
    pass_: float = 0.0
    ready_seq: int = 0
    lost_turns: int = 0


class LinkScheduler(Generic[T]):
    def __init__(self, config: LinkSchedulerConfig | None = None) -> None:
        self.config = config or LinkSchedulerConfig()
        self.config.validate()
        self._transfers: dict[Hashable, _Transfer[T]] = {}
        self._control: deque[T] = deque()
        self._vtime = 0.0
        self._seq = 0
        self._idle_pass: dict[Hashable, float] = {}  # pass of transfers whose queue ran empty
        self.served_by_priority: dict[int, int] = {}
        self.aged = 0

    def enqueue(self, transfer_id: Hashable, item: T, priority: int = 1, *, control: bool = False) -> None:
        if not 1 <= priority <= self.config.max_priority:
            raise ValueError(f"priority {priority} outside 1..{self.config.max_priority}")
        if control and self.config.control_first:
            self._control.append(item)
            return
        if control:
            priority = self.config.max_priority
        tr = self._transfers.get(transfer_id)
        if tr is None:
            self._seq += 1
            # A transfer that emptied its queue keeps its pass: re-enqueueing must not jump the line.
            start = max(self._vtime, self._idle_pass.pop(transfer_id, self._vtime))
            tr = _Transfer(transfer_id, priority, priority, pass_=start, ready_seq=self._seq)
            self._transfers[transfer_id] = tr
        tr.queue.append(item)

    def next(self) -> T | None:
        """The item to send next, or None when nothing is queued."""
        if self._control:
            return self._control.popleft()
        if not self._transfers:
            return None
        chosen = min(self._transfers.values(), key=lambda t: (t.pass_, t.ready_seq))
        self._vtime = chosen.pass_
        for tr in self._transfers.values():
            if tr is chosen:
                continue
            tr.lost_turns += 1
            if tr.lost_turns >= self.config.aging_after and tr.effective < self.config.max_priority:
                # Raise the priority and shorten the remaining wait in proportion, so aging takes effect now.
                remaining = tr.pass_ - self._vtime
                tr.pass_ = self._vtime + remaining * tr.effective / (tr.effective + 1)
                tr.effective += 1
                tr.lost_turns = 0
                self.aged += 1
        item = chosen.queue.popleft()
        self.served_by_priority[chosen.priority] = self.served_by_priority.get(chosen.priority, 0) + 1
        chosen.pass_ += 1.0 / chosen.effective
        chosen.effective = chosen.priority
        chosen.lost_turns = 0
        if not chosen.queue:
            del self._transfers[chosen.transfer_id]
            self._idle_pass[chosen.transfer_id] = chosen.pass_
            if len(self._idle_pass) > 64 + 2 * len(self._transfers):
                # Entries at or behind virtual time carry no information any more.
                self._idle_pass = {k: v for k, v in self._idle_pass.items() if v > self._vtime}
        return item

    def remove(self, transfer_id: Hashable) -> int:
        """Drop a transfer's queued items (stream closed); returns how many were dropped."""
        self._idle_pass.pop(transfer_id, None)
        tr = self._transfers.pop(transfer_id, None)
        return 0 if tr is None else len(tr.queue)

    def __len__(self) -> int:
        return len(self._control) + sum(len(t.queue) for t in self._transfers.values())

    def lengths_by_priority(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for tr in self._transfers.values():
            out[tr.priority] = out.get(tr.priority, 0) + len(tr.queue)
        return out

    def snapshot(self) -> dict[str, object]:
        return {
            "control_queued": len(self._control),
            "queued_by_priority": {str(k): v for k, v in sorted(self.lengths_by_priority().items())},
            "active_transfers": len(self._transfers),
            "served_by_priority": {str(k): v for k, v in sorted(self.served_by_priority.items())},
            "aged": self.aged,
        }
