"""Structured transit buffer pool with dynamic class limits (Brachman 1989, 4.2, 5.4, 6.2).

Buffers are counted in fragment-sized units.  A fragment that has made ``h``
hops may only occupy buffer class ``h`` at this MTA (the hop-count scheme of
6.2.1); class 0 is the input (submission) pool.  Because a fragment can only
move to a strictly higher class, the classes form an acyclic order and
store-and-forward deadlock cannot occur (4.2).

Class 0 is never adjusted (6.2.1: adjusting it would discriminate against big
messages) and single-fragment messages may hold at most half of it.  Transit
classes 1..N-1 start at ``class_initial`` buffers each, plus an unassigned
shared free pool; every ``readjust_every`` buffer releases their limits are
recomputed from relative throughput with expression 5.1 (see
:func:`class_limit_deltas`) and moved with the eligibility rules of 5.4 (see
:func:`apply_class_deltas`).

Two comparison modes:

- ``classes_enabled=False``: one shared pool, no classes -- the unstructured
  pool that store-and-forward deadlocks (used to demonstrate the problem);
- ``dynamic_adjustment=False``: fixed class limits, the non-fragmenting
  comparator of 6.2.3 (classes large enough for the largest message).
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from node.errors import UserError

log = logging.getLogger(__name__)

# Refusal reasons, as they appear in snapshot()["refusals"].
CONGESTED = "congested"  # class 0 full: "congested, try later"
SINGLE_LIMIT = "single_fragment_limit"  # single-fragment messages above half the input pool
CLASS_FULL = "class_full"  # transit class at its limit
SHARED_FULL = "shared_full"  # classes disabled and the one pool is full
WAITING = "waiting_fcfs"  # an earlier request of the class is still queued (FCFS, 6.2.3)


@dataclass(frozen=True)
class BufferPoolConfig:
    """Sizes in buffers (1 buffer = 1 fragment = ``fragment_bytes``); defaults from Table 6.2."""

    num_classes: int = 20  # longest route + 1 (class 0 = input)
    fragment_bytes: int = 1000
    input_buffers: int = 1000
    class_initial: int = 100
    class_minimum: int = 4
    free_pool: int = 0  # transit buffers not assigned to any class at start
    readjust_every: int = 50  # buffer releases between recomputations of expression 5.1
    single_fragment_input_share: float = 0.5
    classes_enabled: bool = True
    dynamic_adjustment: bool = True

    @classmethod
    def for_longest_route(cls, hops: int, **overrides: object) -> "BufferPoolConfig":
        """Configuration with ``hops + 1`` classes (a fragment with h hops lives in class h)."""
        return cls(num_classes=hops + 1, **overrides)  # type: ignore[arg-type]

    def validate(self) -> None:
        if self.num_classes < 1:
            raise UserError(f"buffer pool needs at least one class, got num_classes={self.num_classes}.")
        if self.input_buffers < 1 or self.fragment_bytes < 1:
            raise UserError("buffer pool input_buffers and fragment_bytes must be positive.")
        if self.class_minimum < 0 or self.class_initial < self.class_minimum:
            raise UserError(
                f"buffer class initial size {self.class_initial} must be at least the minimum {self.class_minimum} (>= 0)."
            )
        if self.free_pool < 0 or self.readjust_every < 1:
            raise UserError("buffer pool free_pool must be >= 0 and readjust_every >= 1.")
        if not 0.0 < self.single_fragment_input_share <= 1.0:
            raise UserError("single_fragment_input_share must be in (0, 1].")


def class_limit_deltas(limits: Sequence[int], throughput: Sequence[float], total: int | None = None) -> list[int]:
    """Expression 5.1 of Brachman (1989), section 5.4.

    The fraction of all buffers available to class X is bounded by its share of
    the throughput::

        B_X / B_T  <=  sigma_X / sigma_T                       (5.1)

    so the target limit of class X is ``floor(B_T * sigma_X / sigma_T)`` and the
    returned delta is ``target - current limit`` (positive: the class should
    grow).  ``B_T`` defaults to the sum of ``limits``.  With no throughput at
    all in the interval there is nothing to learn and every delta is 0.
    """
    if len(limits) != len(throughput):
        raise ValueError("limits and throughput must have the same length")
    b_total = sum(limits) if total is None else total
    sigma_total = float(sum(throughput))
    if sigma_total <= 0:
        return [0] * len(limits)
    return [int(b_total * s // sigma_total) - lim for lim, s in zip(limits, throughput)]


def apply_class_deltas(
    limits: Sequence[int],
    usage: Sequence[int],
    minimums: Sequence[int],
    deltas: Sequence[int],
    may_grow: Sequence[bool],
    free: int = 0,
) -> tuple[list[int], list[int], int]:
    """Move buffers between classes following the rules of section 5.4.

    A class may grow if its delta is positive and ``may_grow`` is true (the
    caller sets it when the class is full and refused a transfer in the last
    interval).  A class may shrink if its delta is negative, and never below
    its usage or its minimum.  Growth is paid from the unassigned ``free``
    buffers first, then by shrinking a class.  Both scans run from the highest
    class to the lowest (higher classes are used less often, and growing them
    drains messages that are closest to their recipients), repeating until
    nothing changes.  Returns ``(limits, remaining deltas, free)``.
    """
    lim = list(limits)
    dl = list(deltas)
    n = len(lim)
    order = range(n - 1, -1, -1)
    changed = True
    while changed:
        changed = False
        grow = next((x for x in order if dl[x] > 0 and may_grow[x]), None)
        if grow is None:
            break
        if free > 0:
            amount = min(dl[grow], free)
            free -= amount
        else:
            shrink = next(
                (x for x in order if x != grow and dl[x] < 0 and lim[x] > max(usage[x], minimums[x])), None
            )
            if shrink is None:
                break
            amount = min(dl[grow], -dl[shrink], lim[shrink] - max(usage[shrink], minimums[shrink]))
            lim[shrink] -= amount
            dl[shrink] += amount
        lim[grow] += amount
        dl[grow] -= amount
        changed = amount > 0
    return lim, dl, free


class BufferPool:
    """Per-MTA transit buffer accounting; callers acquire before storing a fragment and release after forwarding."""

    def __init__(self, config: BufferPoolConfig | None = None) -> None:
        self.config = config or BufferPoolConfig()
        self.config.validate()
        n = self.config.num_classes
        self._limits = [self.config.input_buffers] + [self.config.class_initial] * (n - 1)
        self._minimums = [self.config.input_buffers] + [self.config.class_minimum] * (n - 1)
        self._usage = [0] * n
        self._single_usage = 0  # class-0 buffers held by single-fragment messages
        self._free = self.config.free_pool
        self._deltas = [0] * n
        self._released_in_interval = [0] * n  # throughput sigma_X of the running interval
        self._releases_since_readjust = 0
        self._refused_now = [False] * n
        self._refused_last = [False] * n
        self._refusals: Counter[tuple[int, str]] = Counter()
        self._readjustments = 0
        self._waiters: list[tuple[int, int, bool, str]] = []  # (class, n, single_fragment, waiter), FCFS

    # -- queries -------------------------------------------------------------
    def _check_class(self, cls: int) -> None:
        if not 0 <= cls < self.config.num_classes:
            raise ValueError(f"buffer class {cls} outside 0..{self.config.num_classes - 1}")

    @property
    def shared_capacity(self) -> int:
        """Size of the single pool when classes are disabled: every buffer the MTA has."""
        return sum(self._limits) + self._free

    def class_for_hops(self, hops: int) -> int:
        """Buffer class of a fragment that has made ``hops`` hops (the hop-count scheme of 6.2.1)."""
        if not 0 <= hops < self.config.num_classes:
            raise ValueError(f"a fragment with {hops} hops exceeds the longest route ({self.config.num_classes - 1})")
        return hops

    def usage(self, cls: int) -> int:
        self._check_class(cls)
        return self._usage[cls]

    def limit(self, cls: int) -> int:
        self._check_class(cls)
        return self._limits[cls]

    def available(self, cls: int) -> int:
        self._check_class(cls)
        if not self.config.classes_enabled:
            return self.shared_capacity - sum(self._usage)
        return self._limits[cls] - self._usage[cls]

    @property
    def free_pool(self) -> int:
        return self._free

    def refusals(self) -> dict[str, int]:
        return {f"{cls}:{reason}": count for (cls, reason), count in sorted(self._refusals.items())}

    # -- acquire / release ---------------------------------------------------
    def _refusal_reason(self, cls: int, n: int, single_fragment: bool) -> str | None:
        if not self.config.classes_enabled:
            if sum(self._usage) + n > self.shared_capacity:
                return SHARED_FULL
        elif self._usage[cls] + n > self._limits[cls]:
            return CONGESTED if cls == 0 else CLASS_FULL
        if cls == 0 and single_fragment:
            if self._single_usage + n > int(self._limits[0] * self.config.single_fragment_input_share):
                return SINGLE_LIMIT
        return None

    def _take(self, cls: int, n: int, single_fragment: bool) -> None:
        if cls == 0 and single_fragment:
            self._single_usage += n
        self._usage[cls] += n

    def _scope(self, cls: int) -> int:
        """Waiters compete within their class, or for the one pool when classes are disabled."""
        return cls if self.config.classes_enabled else -1

    def try_acquire(self, cls: int, n: int = 1, *, single_fragment: bool = False, waiter: str | None = None) -> bool:
        """Take ``n`` buffers of class ``cls``; False (and a counted refusal) when there is no room.

        ``single_fragment`` marks a single-fragment message entering class 0,
        which may use at most half of the input pool (6.2.1).  With ``waiter``
        a refused request is queued first-come first-served (the
        non-fragmenting comparator, 6.2.3): later requests of the same class
        cannot overtake it, and :meth:`release` returns the waiters it granted
        (their buffers are then already taken on their behalf).
        """
        self._check_class(cls)
        if n < 1:
            raise ValueError("acquire at least one buffer")
        scope = self._scope(cls)
        queued_here = [w for w in self._waiters if self._scope(w[0]) == scope]
        if any(w[3] == waiter for w in queued_here if waiter is not None):
            return self._refuse(cls, WAITING)  # already in the queue: keep its place
        reason = WAITING if queued_here else self._refusal_reason(cls, n, single_fragment)
        if reason is not None:
            if waiter is not None:
                self._waiters.append((cls, n, single_fragment, waiter))
            return self._refuse(cls, reason)
        self._take(cls, n, single_fragment)
        return True

    def force_acquire(self, cls: int, n: int = 1, *, single_fragment: bool = False) -> None:
        """Take buffers even above the limit: for what is already stored (recovery after a restart)."""
        self._check_class(cls)
        if n < 1:
            raise ValueError("acquire at least one buffer")
        self._take(cls, n, single_fragment)

    def cancel_wait(self, waiter: str) -> None:
        """Forget a queued request (the transfer was abandoned)."""
        self._waiters = [w for w in self._waiters if w[3] != waiter]

    def _grant_waiters(self) -> list[str]:
        granted: list[str] = []
        blocked: set[int] = set()
        for w in list(self._waiters):
            cls, n, single, key = w
            scope = self._scope(cls)
            if scope in blocked:
                continue
            if self._refusal_reason(cls, n, single) is None:
                self._take(cls, n, single)
                self._waiters.remove(w)
                granted.append(key)
            else:
                blocked.add(scope)  # head of this queue does not fit: nobody behind it may pass
        return granted

    def _refuse(self, cls: int, reason: str) -> bool:
        self._refusals[(cls, reason)] += 1
        self._refused_now[cls] = True
        return False

    def release(
        self, cls: int, n: int = 1, *, single_fragment: bool = False, count_throughput: bool = True
    ) -> list[str]:
        """Return ``n`` buffers of class ``cls``; counts as ``n`` release events for readjustment.

        ``count_throughput=False`` frees a stream reservation whose fragments were
        already counted one by one with :meth:`note_forwarded`.  Returns the
        queued waiters granted by the freed space (FCFS), usually empty.
        """
        self._check_class(cls)
        if n < 1 or n > self._usage[cls]:
            raise ValueError(f"release of {n} buffers from class {cls} holding {self._usage[cls]}")
        if cls == 0 and single_fragment:
            if n > self._single_usage:
                raise ValueError("single-fragment release exceeds single-fragment usage")
            self._single_usage -= n
        self._usage[cls] -= n
        if count_throughput:
            return self.note_forwarded(cls, n)
        self._rebalance()
        return self._grant_waiters()

    def note_forwarded(self, cls: int, n: int = 1) -> list[str]:
        """Count fragments leaving class ``cls`` without freeing buffers (a stream reusing its allocation)."""
        self._check_class(cls)
        self._released_in_interval[cls] += n
        self._releases_since_readjust += n
        if self._releases_since_readjust >= self.config.readjust_every:
            self._readjust()
        else:
            self._rebalance()  # 5.4: the delta vector is also scanned after each release
        return self._grant_waiters()  # a grown limit may let a waiter in

    # -- expression 5.1 --------------------------------------------------------
    def _adjustable(self) -> bool:
        return self.config.classes_enabled and self.config.dynamic_adjustment and self.config.num_classes > 2

    def _readjust(self) -> None:
        self._releases_since_readjust = 0
        self._refused_last = self._refused_now
        self._refused_now = [False] * self.config.num_classes
        if self._adjustable():
            # Class 0 is excluded: its limit is never adjusted (6.2.1).
            transit = self._limits[1:]
            total = sum(transit) + self._free
            self._deltas = [0] + class_limit_deltas(transit, self._released_in_interval[1:], total)
            self._readjustments += 1
            log.debug("buffer class deltas %s from throughput %s", self._deltas, self._released_in_interval)
        self._released_in_interval = [0] * self.config.num_classes
        self._rebalance()

    def _rebalance(self) -> None:
        if not self._adjustable() or not any(d > 0 for d in self._deltas):
            return
        may_grow = [
            x > 0 and self._usage[x] >= self._limits[x] and (self._refused_last[x] or self._refused_now[x])
            for x in range(self.config.num_classes)
        ]
        lim, dl, free = apply_class_deltas(
            self._limits[1:], self._usage[1:], self._minimums[1:], self._deltas[1:], may_grow[1:], self._free
        )
        self._limits = [self._limits[0]] + lim
        self._deltas = [0] + dl
        self._free = free

    def snapshot(self) -> dict[str, object]:
        """Per-class usage, limits and refusals for metrics.jsonl."""
        return {
            "classes_enabled": self.config.classes_enabled,
            "dynamic_adjustment": self.config.dynamic_adjustment,
            "usage": list(self._usage),
            "limits": list(self._limits),
            "free_pool": self._free,
            "single_fragment_input_usage": self._single_usage,
            "deltas": list(self._deltas),
            "readjustments": self._readjustments,
            "refusals": self.refusals(),
            "waiting": len(self._waiters),
        }
