"""The outgoing queue of one link under resource management: prioritised round robin over transfers.

Brachman (1989) 5.2.2: many transfers share one link; a transfer of priority P
is served about P times as often as one of priority 1 (stride scheduling: each
ready transfer has a virtual pass, the smallest pass is served and advances by
1/P; a transfer that becomes ready starts at the current virtual time, so a
waiting transfer's pass stays put while the others' advance -- nobody starves,
which is what aging is for in a strict-priority scheme).

A transfer is one message (fragmenting: messages are multiplexed fragment by
fragment, so a small message never waits for a big one; a message stream may
weigh more, `share`, so it gets that many fragments per round as the thesis'
streams sent half their allocation at a time) or, in the
non-fragmenting comparator, one FIFO per (priority, destination): messages for
the same recipient MTA go first-come first-served (thesis 6.2.3).

A transfer is *ready* only when
  - its head piece may be sent now (`Piece.not_before`: a retry after a
    "no room yet" refusal, or an RBSAD wait), and
  - for a message stream, the next hop has granted it a credit (one credit per
    fragment; a new stream starts with one, the first fragment carries the
    stream set-up).
Blocked transfers are not in the ready heap, so a link with only blocked work
costs nothing and the writer sleeps until a credit or a timer wakes it.

Pieces handed back to the front (refused "for now", put back, requeued after a
session ended) keep the order in which they were first queued, however many of
them come back and in whatever order: each piece carries its arrival number and
a front push inserts it in order among the pieces returned before it. A retry
wait belongs to the transfer: once a refused head may go (its timer, or ROOM),
the refused pieces right behind it go too instead of each waiting out its own
doubled timer; an RBSAD gate is still drawn for each piece at the head.

Interface: push, pop, remove_if, len, bytes, messages, has_ready, plus the
flow-control calls `credit`, `retry_now`, `session_up`, `probe` and `prune`.
Without resource management (node/policy.py PassThrough) a transfer is one
priority: one FIFO per priority, priorities sharing the link by stride.
"""
from __future__ import annotations

import asyncio
import collections
import heapq
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable

from node.piece import Piece

log = logging.getLogger("node.transfer_queue")

ROOM_RETRIES = 4        # refused transfers a ROOM signal wakes at once
IDLE_MEMORY = 4096      # transfers whose virtual pass is remembered after their queue ran empty


def _never(p: Piece) -> bool:
    return False


@dataclass
class _Transfer:
    key: Hashable
    weight: int
    queue: collections.deque = field(default_factory=collections.deque)
    pass_: float = 0.0
    ready_seq: int = 0          # heap entry that is valid for this transfer (0 = not in the heap)
    timer: asyncio.TimerHandle | None = None
    blocked_since: float = 0.0  # monotonic time it started waiting for a credit (0 = not waiting)
    returned: int = 0           # the first `returned` pieces were pushed back to the front (kept in arrival order)


class TransferQueue:
    """Prioritised round robin over the transfers of one outgoing link, with credit and timer blocking."""

    def __init__(self, wake: Callable[[], None], fifo_per_destination: bool,
                 is_stream: Callable[[Piece], bool] | None, gate: Callable[[Piece], float] | None = None,
                 key: Callable[[Piece], Hashable] | None = None,
                 share: Callable[[Piece], int] | None = None) -> None:
        self._wake = wake
        self._share = share         # fragments per round a transfer gets (times its priority); None: 1
        # which pieces form one transfer: `key` when given (the pass-through policy: one FIFO per priority),
        # else a message, or (prio, destination) for the non-fragmenting comparator
        self._key = key or ((lambda p: (p.prio, p.dst)) if fifo_per_destination else (lambda p: p.mkey))
        self._gate = gate           # RBSAD: drawn when a message first reaches the head of its transfer
        self._is_stream = is_stream or _never     # None: no message streams on this link (the hot path)
        self._streams = is_stream is not None
        self._transfers: dict[Hashable, _Transfer] = {}
        self._waiting: dict[Hashable, _Transfer] = {}      # transfers with a timer (retry or RBSAD)
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = 0
        self._arrivals = 0          # numbers the pieces pushed to the back: a returned piece goes back in order
        self._vtime = 0.0
        self._idle_pass: dict[Hashable, float] = {}
        self.credits: dict[tuple[str, str], int] = {}      # sender side of each message stream on this link
        self._credit_seen: dict[tuple[str, str], float] = {}
        self._count = 0
        self.bytes = 0
        self._msgs: collections.Counter = collections.Counter()
        self._by_prio: collections.Counter = collections.Counter()
        self.served_by_priority: collections.Counter = collections.Counter()

    # -- the Scheduler interface -------------------------------------------------------
    def __len__(self) -> int:
        return self._count

    @property
    def messages(self) -> int:
        return len(self._msgs)

    def message_keys(self) -> Iterable[tuple[str, str]]:
        """The message copies with a piece in this queue."""
        return self._msgs.keys()

    def pieces(self) -> Iterable[Piece]:
        """The pieces waiting in this queue (for listing; the queue must not change while this is read)."""
        for t in self._transfers.values():
            yield from t.queue

    def push(self, p: Piece, front: bool = False) -> None:
        key = self._key(p)
        t = self._transfers.get(key)
        if t is None:
            start = max(self._vtime, self._idle_pass.pop(key, self._vtime))
            weight = max(1, p.prio) * (max(1, self._share(p)) if self._share is not None else 1)
            t = self._transfers[key] = _Transfer(key, weight, pass_=start)
        if front:
            self._return(t, p)
        else:
            self._arrivals += 1
            p.order = self._arrivals
            t.queue.append(p)
        if self._streams and self._is_stream(p) and p.mkey not in self.credits:
            self.credits[p.mkey] = 1          # the set-up credit: the first fragment opens the stream
            self._credit_seen[p.mkey] = time.monotonic()
        self._count += 1
        self.bytes += p.size
        mkey = p.mkey
        self._msgs[mkey] = self._msgs.get(mkey, 0) + 1
        self._by_prio[p.prio] += 1
        self._consider(t)

    def pop(self) -> Piece | None:
        while self._heap:
            pass_, seq, key = heapq.heappop(self._heap)
            t = self._transfers.get(key)
            if t is None or t.ready_seq != seq:
                continue                      # a stale entry
            t.ready_seq = 0
            if not t.queue or not self._ready(t):
                self._consider(t)
                continue
            p = t.queue.popleft()
            if t.returned:
                t.returned -= 1
                if t.returned and p.retries:
                    # the transfer's retry wait is over (p goes): the refused pieces behind it need not wait
                    # out their own timers, or a refused window trickles out one timer at a time
                    nxt = t.queue[0]
                    if nxt.retries and nxt.not_before > p.not_before:
                        nxt.not_before = p.not_before
            if self._streams and self._is_stream(p):
                self.credits[p.mkey] = self.credits.get(p.mkey, 1) - 1
                self._credit_seen[p.mkey] = time.monotonic()
            self._vtime = max(self._vtime, pass_)
            t.pass_ = max(t.pass_, self._vtime) + 1.0 / t.weight
            self._account_out(p)
            self.served_by_priority[p.prio] += 1
            if t.queue:
                self._consider(t, wake=False)
            else:
                self._drop_transfer(t)
            return p
        return None

    def has_ready(self) -> bool:
        return bool(self._heap)

    def remove_if(self, pred: Callable[[Piece], bool]) -> list[Piece]:
        out: list[Piece] = []
        for t in list(self._transfers.values()):
            keep: collections.deque = collections.deque()
            returned = 0
            for i, p in enumerate(t.queue):
                if pred(p):
                    out.append(p)
                else:
                    keep.append(p)
                    returned += i < t.returned
            t.queue, t.returned = keep, returned
            if not keep:
                self._drop_transfer(t)
            else:
                self._consider(t)
        for p in out:
            self._account_out(p)
        return out

    def forget_streams(self, mkeys: Iterable[tuple[str, str]]) -> None:
        """These streams left this link (re-routed): drop the credits their old next hop granted."""
        for mkey in mkeys:
            self.credits.pop(mkey, None)
            self._credit_seen.pop(mkey, None)

    # -- flow control --------------------------------------------------------------------
    def credit(self, mkey: tuple[str, str], n: int) -> None:
        """The next hop granted n more fragments of this stream."""
        self.credits[mkey] = self.credits.get(mkey, 0) + n
        self._credit_seen[mkey] = time.monotonic()
        t = self._transfers.get(self._key_of_mkey(mkey))
        if t is not None:
            t.blocked_since = 0.0
            self._consider(t)

    def retry_now(self, at_most: int = ROOM_RETRIES) -> int:
        """The next hop has room again: the refused pieces that waited longest stop waiting for their retry
        timers (a few only: one freed buffer must not set off a storm of refusals)."""
        now = time.monotonic()
        waiting = [t for t in self._waiting.values() if t.queue and t.queue[0].retries and t.queue[0].not_before > now
                   and (self._gate is None or self._gate(t.queue[0]) <= now)]      # not one held by RBSAD
        for t in heapq.nsmallest(at_most, waiting, key=lambda t: t.queue[0].not_before):
            t.queue[0].not_before = now       # an RBSAD wait is put back by the gate in _consider
            self._cancel_timer(t)
            self._consider(t)
        return min(at_most, len(waiting))

    def _cancel_timer(self, t: _Transfer) -> None:
        if t.timer is not None:
            t.timer.cancel()
            t.timer = None
        self._waiting.pop(t.key, None)

    def session_up(self) -> None:
        """A new session: the next hop may have lost its stream state (restart), so every stalled stream may probe."""
        for mkey, c in list(self.credits.items()):
            if c <= 0:
                self.credit(mkey, 1 - c)

    def probe(self, after: float) -> int:
        """Give a stream that waited `after` seconds for a credit one probe credit (a lost credit must not stall it)."""
        now = time.monotonic()
        n = 0
        for t in list(self._transfers.values()):
            if t.blocked_since and now - t.blocked_since > after and t.queue:
                mkey = t.queue[0].mkey
                if self.credits.get(mkey, 1) <= 0:
                    log.info("stream %s/%s waited %.1f s for a credit: probing", mkey[0], mkey[1], now - t.blocked_since)
                    self.credit(mkey, 1 - self.credits.get(mkey, 0))
                    n += 1
        return n

    def prune(self, idle: float) -> None:
        """Forget stream credits of messages that left this link long ago."""
        if not self._credit_seen:
            return
        now = time.monotonic()
        live = {p.mkey for t in self._transfers.values() for p in t.queue}
        for mkey, seen in list(self._credit_seen.items()):
            if mkey not in live and now - seen > idle:
                self._credit_seen.pop(mkey, None)
                self.credits.pop(mkey, None)

    # -- internals -------------------------------------------------------------------------
    def _key_of_mkey(self, mkey: tuple[str, str]) -> Hashable:
        return mkey           # streams exist only in the fragmenting mode, where a transfer is a message

    def _return(self, t: _Transfer, p: Piece) -> None:
        """Back to the front, in arrival order among the pieces returned before it: a window refused (or
        requeued) piece by piece, in any order, comes back in the order it was sent."""
        q, i = t.queue, 0
        while i < t.returned and q[i].order < p.order:    # the returned run is short: at most a window
            i += 1
        q.insert(i, p)
        t.returned += 1
        if i == 0 and t.timer is not None:
            self._cancel_timer(t)     # a new head: its own wait, if any, decides (push calls _consider)

    def _ready(self, t: _Transfer) -> bool:
        head = t.queue[0]
        if head.not_before and head.not_before > time.monotonic():
            return False
        return not (self._streams and self._is_stream(head)) or self.credits.get(head.mkey, 1) > 0

    def _consider(self, t: _Transfer, wake: bool = True) -> None:
        """Put a transfer in the ready heap, or arrange to be told when it can be. `wake=False` from pop():
        the link's writer is the caller, awake already."""
        if t.ready_seq or not t.queue:
            return
        head = t.queue[0]
        if self._gate is not None:
            at = self._gate(head)
            if at > head.not_before:
                head.not_before = at
        if head.not_before:           # read the clock only for a piece that has to wait (not the hot path)
            now = time.monotonic()
            if head.not_before > now:
                if t.timer is None:
                    t.timer = asyncio.get_running_loop().call_later(head.not_before - now, self._timer_fired, t.key)
                    self._waiting[t.key] = t
                return
        if self._streams and self._is_stream(head) and self.credits.get(head.mkey, 1) <= 0:
            if not t.blocked_since:
                t.blocked_since = time.monotonic()
            return
        t.blocked_since = 0.0
        self._seq += 1
        t.ready_seq = self._seq
        heapq.heappush(self._heap, (t.pass_, self._seq, t.key))
        if wake:
            self._wake()

    def _timer_fired(self, key: Hashable) -> None:
        t = self._transfers.get(key)
        if t is None:
            return
        t.timer = None
        self._waiting.pop(key, None)
        if t.queue and t.queue[0].not_before > time.monotonic():
            t.queue[0].not_before = time.monotonic()     # float rounding: the loop may fire a hair early
        self._consider(t)

    def _drop_transfer(self, t: _Transfer) -> None:
        self._transfers.pop(t.key, None)
        self._cancel_timer(t)
        t.ready_seq = 0
        if t.pass_ > self._vtime:         # only a pass ahead of virtual time still matters on a comeback
            self._idle_pass[t.key] = t.pass_
        if len(self._idle_pass) > IDLE_MEMORY:
            # keep the newest half (amortised O(1)); a forgotten transfer merely restarts at virtual time
            keep = [(k, v) for k, v in self._idle_pass.items() if v > self._vtime][-(IDLE_MEMORY // 2):]
            self._idle_pass = dict(keep)

    def _account_out(self, p: Piece) -> None:
        self._count -= 1
        self.bytes -= p.size
        mkey = p.mkey
        left = self._msgs[mkey] - 1
        if left <= 0:
            del self._msgs[mkey]
        else:
            self._msgs[mkey] = left
        left = self._by_prio[p.prio] - 1
        if left <= 0:
            del self._by_prio[p.prio]
        else:
            self._by_prio[p.prio] = left

    def snapshot(self) -> dict:
        blocked_credit = sum(1 for t in self._transfers.values() if t.blocked_since)
        waiting = sum(1 for t in self._transfers.values() if t.timer is not None)
        return {"queued_by_priority": {str(k): v for k, v in sorted(self._by_prio.items())},
                "served_by_priority": {str(k): v for k, v in sorted(self.served_by_priority.items())},
                "transfers": len(self._transfers), "ready": len(self._heap),
                "waiting_for_credit": blocked_credit, "waiting_for_timer": waiting,
                "streams": sum(1 for k in self.credits if k in self._msgs or self.credits[k] != 1)}
