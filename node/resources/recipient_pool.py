"""Recipient buffer space of one MTA (Brachman 1989, 5.5 and 6.2.1-6.2.2).

The pool (500 fragments by default) is split into a single-fragment part
(25 %) and a multi-fragment part (75 %) so neither kind of message can
monopolise it.  Space is returned by a removal process (synthetic removal
events, see :class:`RemovalProcess`) or by real mailbox reads
(:meth:`RecipientPool.release_message`).

- Preallocation (5.5.1): ``reserve`` grants space for a whole multi-fragment
  message now or queues the request; queued requests are granted strictly
  first-come first-served as space frees, so every request is eventually
  served.  A reservation not used within ``reservation_timeout`` is released
  and the next request in the queue is granted.
- Optimistic transfer (5.5.2): ``try_store`` for small messages; on refusal
  the originator keeps its copy and retries later.
- Hybrid (5.5.2): :class:`HybridChooser` keeps the recent outcome of
  optimistic transfers per originator/recipient pair and picks optimistic
  with a probability equal to the estimated success rate; large messages
  always preallocate (5.5.4).
- Quotas (5.5.4): a message with one local recipient is charged to that
  user's hard quota (requests above it are queued, optimistic attempts
  refused); a multirecipient message goes to the shared pool and is accepted
  when the pool has room and the recipients' remaining soft limits add up to
  the message size; each recipient is charged an equal share.  Exceeding a
  soft limit is only counted.
"""
from __future__ import annotations

import enum
import logging
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from node.errors import UserError

log = logging.getLogger(__name__)

SINGLE = "single"
MULTI = "multi"


@dataclass(frozen=True)
class RecipientPoolConfig:
    size: int = 500  # fragments (Table 6.2)
    single_share: float = 0.25  # rest is for multi-fragment messages (6.2.1)
    reservation_timeout: float = 600.0  # seconds a granted reservation may stay unused
    user_hard_quota: int | None = None  # fragments per user for single-recipient messages; None = no quota
    user_soft_limit: int | None = None  # fragments per user in the shared pool for multirecipient messages

    def validate(self) -> None:
        if self.size < 2 or not 0.0 < self.single_share < 1.0:
            raise UserError("recipient pool size must be >= 2 and single_share within (0, 1).")
        if self.reservation_timeout <= 0:
            raise UserError("reservation_timeout must be positive.")
        for name in ("user_hard_quota", "user_soft_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UserError(f"recipient pool {name} must be >= 1 when set.")

    @property
    def single_capacity(self) -> int:
        return max(1, round(self.size * self.single_share))

    @property
    def multi_capacity(self) -> int:
        return self.size - self.single_capacity


class ReservationState(enum.Enum):
    GRANTED = "granted"
    QUEUED = "queued"
    REFUSED = "refused"  # can never fit (larger than the partition or the user's quota)


@dataclass
class _Request:
    msg_id: str
    size: int
    recipients: tuple[str, ...]
    requested_at: float


@dataclass
class _Holding:
    """Space held for one message: reserved (granted, not yet used) or stored."""

    msg_id: str
    partition: str
    size: int
    recipients: tuple[str, ...]
    granted_at: float
    stored: bool = False
    shares: dict[str, float] = field(default_factory=dict)


class RecipientPool:
    def __init__(self, config: RecipientPoolConfig | None = None) -> None:
        self.config = config or RecipientPoolConfig()
        self.config.validate()
        self._capacity = {SINGLE: self.config.single_capacity, MULTI: self.config.multi_capacity}
        self._used = {SINGLE: 0, MULTI: 0}
        self._holdings: dict[str, _Holding] = {}  # insertion order = age, used by drain()
        self._queue: deque[_Request] = deque()
        self._user_usage: dict[str, float] = {}
        self._counters: dict[str, int] = {
            "granted": 0,
            "queued": 0,
            "refused_never_fits": 0,
            "expired": 0,
            "optimistic_ok": 0,
            "optimistic_refused": 0,
            "soft_limit_exceeded": 0,
        }

    # -- helpers ---------------------------------------------------------------
    def _free(self, partition: str) -> int:
        return self._capacity[partition] - self._used[partition]

    def _fits_quota(self, size: int, recipients: tuple[str, ...]) -> bool:
        if len(recipients) == 1:
            quota = self.config.user_hard_quota
            return quota is None or self._user_usage.get(recipients[0], 0.0) + size <= quota
        if len(recipients) > 1 and self.config.user_soft_limit is not None:
            room = sum(max(0.0, self.config.user_soft_limit - self._user_usage.get(r, 0.0)) for r in recipients)
            return room >= size
        return True

    def _never_fits(self, partition: str, size: int, recipients: tuple[str, ...]) -> bool:
        if size > self._capacity[partition]:
            return True
        quota = self.config.user_hard_quota
        return len(recipients) == 1 and quota is not None and size > quota

    def _take(self, msg_id: str, partition: str, size: int, recipients: tuple[str, ...], now: float, stored: bool) -> None:
        self._used[partition] += size
        shares: dict[str, float] = {}
        for r in recipients:
            shares[r] = size / len(recipients)
            self._user_usage[r] = self._user_usage.get(r, 0.0) + shares[r]
            soft = self.config.user_soft_limit
            if len(recipients) > 1 and soft is not None and self._user_usage[r] > soft:
                self._counters["soft_limit_exceeded"] += 1
        self._holdings[msg_id] = _Holding(msg_id, partition, size, recipients, now, stored, shares)

    def _give_back(self, holding: _Holding, amount: int) -> None:
        self._used[holding.partition] -= amount
        fraction = amount / holding.size if holding.size else 1.0
        for r, share in holding.shares.items():
            back = share * fraction
            holding.shares[r] = share - back
            self._user_usage[r] = max(0.0, self._user_usage.get(r, 0.0) - back)
        holding.size -= amount
        if holding.size <= 0:
            del self._holdings[holding.msg_id]

    def _grant_queue(self, now: float) -> list[str]:
        """Grant queued requests strictly in arrival order (head of line blocks the rest)."""
        granted: list[str] = []
        while self._queue:
            head = self._queue[0]
            if head.size > self._free(MULTI) or not self._fits_quota(head.size, head.recipients):
                break
            self._queue.popleft()
            self._take(head.msg_id, MULTI, head.size, head.recipients, now, stored=False)
            self._counters["granted"] += 1
            granted.append(head.msg_id)
        return granted

    # -- preallocation -----------------------------------------------------------
    def reserve(self, msg_id: str, size: int, now: float, recipients: Sequence[str] = ()) -> ReservationState:
        """Reserve multi-fragment space for a whole message (piggybacked request of 6.2.2)."""
        if size < 1:
            raise ValueError("reserve at least one fragment")
        # A repeated request (the originator resent its first fragment) gets the current answer.
        if msg_id in self._holdings:
            return ReservationState.GRANTED
        if any(r.msg_id == msg_id for r in self._queue):
            return ReservationState.QUEUED
        rcpts = tuple(recipients)
        if self._never_fits(MULTI, size, rcpts):
            self._counters["refused_never_fits"] += 1
            return ReservationState.REFUSED
        if not self._queue and size <= self._free(MULTI) and self._fits_quota(size, rcpts):
            self._take(msg_id, MULTI, size, rcpts, now, stored=False)
            self._counters["granted"] += 1
            return ReservationState.GRANTED
        self._queue.append(_Request(msg_id, size, rcpts, now))
        self._counters["queued"] += 1
        return ReservationState.QUEUED

    def is_granted(self, msg_id: str) -> bool:
        return msg_id in self._holdings

    def use(self, msg_id: str, now: float) -> None:
        """The reserved message arrived: its space is now stored mail, no longer expiring."""
        holding = self._holdings.get(msg_id)
        if holding is None:
            raise KeyError(f"no granted reservation for {msg_id}")
        holding.stored = True

    def cancel(self, msg_id: str, now: float) -> list[str]:
        """Drop a reservation or a queued request (transfer aborted); returns newly granted ids."""
        holding = self._holdings.get(msg_id)
        if holding is not None and not holding.stored:
            self._give_back(holding, holding.size)
        else:
            self._queue = deque(r for r in self._queue if r.msg_id != msg_id)
        return self._grant_queue(now)

    def expire(self, now: float) -> tuple[list[str], list[str]]:
        """Release reservations unused for ``reservation_timeout``; returns (expired, newly granted)."""
        stale = [
            h for h in self._holdings.values()
            if not h.stored and now - h.granted_at >= self.config.reservation_timeout
        ]
        for h in stale:
            log.info("recipient reservation %s expired", h.msg_id)
            self._give_back(h, h.size)
        self._counters["expired"] += len(stale)
        return [h.msg_id for h in stale], self._grant_queue(now)

    # -- optimistic ------------------------------------------------------------------
    def try_store(self, msg_id: str, size: int, now: float, recipients: Sequence[str] = ()) -> bool:
        """Optimistic transfer: store now or refuse (the originator keeps its copy and retries)."""
        if size < 1:
            raise ValueError("store at least one fragment")
        rcpts = tuple(recipients)
        partition = SINGLE if size == 1 else MULTI
        # Queued reservations come first in the multi part (FCFS).
        blocked = partition == MULTI and bool(self._queue)
        if blocked or size > self._free(partition) or not self._fits_quota(size, rcpts) or msg_id in self._holdings:
            self._counters["optimistic_refused"] += 1
            return False
        self._take(msg_id, partition, size, rcpts, now, stored=True)
        self._counters["optimistic_ok"] += 1
        return True

    def force_store(self, msg_id: str, size: int, now: float, recipients: Sequence[str] = ()) -> None:
        """Count space that is already in use whatever the limits (recovery after a restart)."""
        if size < 1 or msg_id in self._holdings:
            return
        self._take(msg_id, SINGLE if size == 1 else MULTI, size, tuple(recipients), now, stored=True)

    # -- draining ------------------------------------------------------------------------
    def release_message(self, msg_id: str, now: float) -> list[str]:
        """A mailbox read/deleted a stored message; returns newly granted reservation ids."""
        holding = self._holdings.get(msg_id)
        if holding is None:
            raise KeyError(f"message {msg_id} holds no recipient space")
        self._give_back(holding, holding.size)
        return self._grant_queue(now)

    def drain(self, amount: int, now: float, partition: str = MULTI) -> list[str]:
        """Removal event: free up to ``amount`` stored fragments of ``partition``, oldest first."""
        if partition not in self._capacity:
            raise ValueError(f"partition must be {SINGLE!r} or {MULTI!r}")
        for holding in list(self._holdings.values()):
            if amount <= 0:
                break
            if holding.partition != partition or not holding.stored:
                continue
            take = min(amount, holding.size)
            self._give_back(holding, take)
            amount -= take
        return self._grant_queue(now)

    def user_usage(self, user: str) -> float:
        return self._user_usage.get(user, 0.0)

    def used(self, partition: str) -> int:
        return self._used[partition]

    def queue_length(self) -> int:
        return len(self._queue)

    def snapshot(self) -> dict[str, object]:
        reserved = sum(h.size for h in self._holdings.values() if not h.stored)
        return {
            "capacity": dict(self._capacity),
            "used": dict(self._used),
            "reserved": reserved,
            "reservation_queue_length": len(self._queue),
            "reservation_queue_fragments": sum(r.size for r in self._queue),
            **self._counters,
        }


@dataclass(frozen=True)
class HybridConfig:
    small_max_fragments: int = 1  # "small" messages may go optimistic (5.5.4)
    window: int = 20  # recent outcomes remembered per originator/recipient pair
    floor: float = 0.05  # keep probing optimistic occasionally so a pair can recover

    def validate(self) -> None:
        if self.small_max_fragments < 1 or self.window < 1 or not 0.0 <= self.floor <= 1.0:
            raise UserError("hybrid small_max_fragments and window must be >= 1 and floor within [0, 1].")


class HybridChooser:
    """Optimistic vs preallocation by recent success rate per originator/recipient pair (5.5.2)."""

    def __init__(self, config: HybridConfig | None = None, seed: int = 0) -> None:
        self.config = config or HybridConfig()
        self.config.validate()
        self._rng = random.Random(seed)
        self._outcomes: dict[tuple[str, str], deque[bool]] = {}

    def record(self, originator: str, recipient: str, success: bool) -> None:
        q = self._outcomes.setdefault((originator, recipient), deque(maxlen=self.config.window))
        q.append(success)

    def success_rate(self, originator: str, recipient: str) -> float:
        q = self._outcomes.get((originator, recipient))
        return 1.0 if not q else sum(q) / len(q)  # optimistic is selected initially

    def choose(self, originator: str, recipient: str, fragments: int) -> str:
        """Returns "optimistic" or "preallocate"."""
        if fragments > self.config.small_max_fragments:
            return "preallocate"
        p = max(self.config.floor, self.success_rate(originator, recipient))
        return "optimistic" if self._rng.random() < p else "preallocate"


# Table 6.1: message sizes in fragments -> probability (uniform within a range).
MESSAGE_SIZE_TABLE: tuple[tuple[int, int, float], ...] = ((1, 1, 0.70), (2, 30, 0.20), (31, 100, 0.10))


class RemovalProcess:
    """Seeded removal events: Normal(mean_interval) gaps, amounts from the Table 6.1 size distribution."""

    def __init__(self, mean_interval: float = 50.0, stddev: float | None = None, seed: int = 0) -> None:
        if mean_interval <= 0:
            raise UserError("removal mean_interval must be positive.")
        self.mean_interval = mean_interval
        self.stddev = mean_interval / 4 if stddev is None else stddev  # the thesis gives no spread
        self._rng = random.Random(seed)

    def message_size(self) -> int:
        u = self._rng.random()
        acc = 0.0
        for lo, hi, p in MESSAGE_SIZE_TABLE:
            acc += p
            if u < acc:
                return self._rng.randint(lo, hi)
        return MESSAGE_SIZE_TABLE[-1][1]

    def events(self, start: float = 0.0) -> Iterator[tuple[float, int]]:
        """Infinite (time, fragments) stream; gaps truncated at a small positive value."""
        t = start
        while True:
            t += max(1e-3, self._rng.gauss(self.mean_interval, self.stddev))
            yield t, self.message_size()
