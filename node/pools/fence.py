"""The handover fence: a consumer moves an app's connection from instance i1 to i2 without loss, duplicate or
reordering. State machines only, no I/O.

Protocol, per (consumer, app) with sequence numbers 1, 2, 3, ... on that pair's events:
  1. The consumer (ConsumerSwitch) cuts after its last routed sequence s: events <= s go to i1, > s to i2, and
     it publishes Fence(consumer, app, s, old=i1, new=i2, version, term) to both instances. A first
     connection is a fence with old=None (nothing to wait for).
  2. i1 releases its window up to s and, once those are processed, publishes Acked(s).
  3. i2 holds the consumer's events above s until it has Acked(s) from i1 (FenceDone), then releases them in
     sequence order. Each instance serves its windows in (term, version) order.
  4. Crash takeover: the successor attaches to the dead instance's subscription, hands what it finds to
     on_backlog (each sequence released once), and at backlog 0 publishes Drained(app, dead), which every
     instance takes as the dead instance's Acked of everything (a dead instance's name is not used again).
Idempotent: a duplicated event or fence is released or acted on once; events and acks arriving before
their fence wait for it; a fence older than one already acted on is refused with a reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Key = tuple[int, int]           # (term, version): the order of fences and maps


@dataclass(frozen=True)
class Fence:
    consumer: str
    app: str
    seq: int                    # the last sequence that goes to `old`
    old: str | None             # None: a first connection
    new: str
    version: int
    term: int

    @property
    def key(self) -> Key:
        return (self.term, self.version)


@dataclass(frozen=True)
class Acked:
    """The old instance has processed (and acknowledged) everything of the pair up to `seq`."""
    consumer: str
    app: str
    seq: int
    instance: str
    version: int
    term: int


@dataclass(frozen=True)
class FenceDone:
    """The new instance's window is open: it processes the pair's events above `seq` (the pause ends)."""
    consumer: str
    app: str
    seq: int
    instance: str
    version: int
    term: int


@dataclass(frozen=True)
class Drained:
    """A successor has drained the dead `instance`'s backlog of `app`."""
    app: str
    instance: str


@dataclass(frozen=True)
class Release:
    consumer: str
    app: str
    seq: int
    event: Any


@dataclass(frozen=True)
class Step:
    """What one input leads to: events to process now, in this order; then, once they are processed and
    acknowledged, the Acked messages to publish and the FenceDone ones to record (the pause ends there);
    `refused` says why an input was refused; `ignored` counts events dropped as duplicates or not this
    instance's (they are acknowledged all the same)."""
    released: tuple[Release, ...] = ()
    send: tuple[Acked | FenceDone, ...] = ()
    refused: str | None = None
    ignored: int = 0


class ConsumerSwitch:
    """The consumer's side: which instance each event goes to, given the cuts made so far."""

    def __init__(self, consumer: str) -> None:
        self.consumer = consumer
        self._cuts: dict[str, list[tuple[int, str]]] = {}       # app -> [(after seq, instance)]
        self._pending: dict[str, tuple[str, int, int]] = {}     # app -> (instance, version, term)

    def assign(self, app: str, instance: str, version: int, term: int) -> None:
        """A new assignment names `instance` for `app`; the switch waits for cut()."""
        if self.current(app) == instance:
            self._pending.pop(app, None)
        else:
            self._pending[app] = (instance, version, term)

    def pending(self) -> dict[str, str]:
        """app -> the instance it will switch to at the next cut."""
        return {app: p[0] for app, p in self._pending.items()}

    def cut(self, app: str, last_seq: int) -> Fence | None:
        """Switch `app` after `last_seq` (call it once the new instance's subscription is known here)."""
        if app not in self._pending:
            return None
        cuts = self._cuts.setdefault(app, [])
        if cuts and last_seq < cuts[-1][0]:
            raise ValueError(f"cut of {app} at {last_seq} is before the previous one at {cuts[-1][0]}")
        instance, version, term = self._pending.pop(app)
        old = cuts[-1][1] if cuts else None
        cuts.append((last_seq, instance))
        return Fence(self.consumer, app, last_seq, old, instance, version, term)

    def current(self, app: str) -> str | None:
        cuts = self._cuts.get(app)
        return cuts[-1][1] if cuts else None

    def target(self, app: str, seq: int) -> str | None:
        """The instance event `seq` of `app` goes to (also for a resend after a restart); None: no cut yet."""
        for after, instance in reversed(self._cuts.get(app, [])):
            if seq > after:
                return instance
        return None


@dataclass
class _Stream:
    fences: dict[Key, Fence] = field(default_factory=dict)  # fences naming this instance, old or new
    floor: Key | None = None        # the last fence acted on (window opened or Acked sent): older ones are stale
    serving: Fence | None = None    # the incoming fence whose window is open
    next: int = 1                   # next sequence to release in the open window
    delivered: int = 0              # highest sequence released through the windows
    held: dict[int, Any] = field(default_factory=dict)
    acks: dict[str, int] = field(default_factory=dict)      # highest sequence each predecessor acknowledged
    backlog: set[int] = field(default_factory=set)          # sequences released from a dead instance's backlog


class InstanceFence:
    """An application instance's side, for every (consumer, app) pair that reaches it."""

    def __init__(self, me: str) -> None:
        self.me = me
        self._streams: dict[tuple[str, str], _Stream] = {}
        self._drained: dict[str, set[str]] = {}                 # app -> dead instances whose backlog is drained

    def on_event(self, consumer: str, app: str, seq: int, event: Any) -> Step:
        st = self._stream(consumer, app)
        if seq <= st.delivered or seq in st.held or (st.serving is not None and seq <= st.serving.seq):
            return Step(ignored=1)
        st.held[seq] = event
        return self._pump(consumer, app, st)

    def on_backlog(self, consumer: str, app: str, seq: int, event: Any) -> Step:
        """An event from the dead predecessor's subscription (crash takeover): released once, at once."""
        st = self._stream(consumer, app)
        if seq in st.backlog:
            return Step(ignored=1)
        st.backlog.add(seq)
        return Step(released=(Release(consumer, app, seq, event),))

    def on_fence(self, fence: Fence) -> Step:
        if fence.old == fence.new:
            return Step(refused=f"fence of {fence.consumer}/{fence.app} moves nowhere ({fence.new})")
        if self.me not in (fence.old, fence.new):
            return Step(refused=f"fence of {fence.consumer}/{fence.app} is for {fence.old} -> {fence.new}, "
                                f"not {self.me}")
        st = self._stream(fence.consumer, fence.app)
        known = st.fences.get(fence.key)
        if known is not None:
            if known != fence:
                return Step(refused=f"fence of {fence.consumer}/{fence.app} conflicts with another of term "
                                    f"{fence.term} version {fence.version}")
            if fence.old == self.me and st.floor is not None and fence.key <= st.floor:
                # the new instance may have missed the Acked: say it again
                return Step(send=(Acked(fence.consumer, fence.app, fence.seq, self.me, fence.version, fence.term),))
            return Step()
        if st.floor is not None and fence.key <= st.floor:
            return Step(refused=f"stale fence of {fence.consumer}/{fence.app}: term {fence.term} version "
                                f"{fence.version} is not above term {st.floor[0]} version {st.floor[1]}")
        st.fences[fence.key] = fence
        return self._pump(fence.consumer, fence.app, st)

    def on_predecessor_acked(self, acked: Acked) -> Step:
        st = self._stream(acked.consumer, acked.app)
        st.acks[acked.instance] = max(acked.seq, st.acks.get(acked.instance, 0))
        return self._pump(acked.consumer, acked.app, st)

    def on_drained(self, drained: Drained) -> Step:
        self._drained.setdefault(drained.app, set()).add(drained.instance)
        steps = [self._pump(c, a, st) for (c, a), st in sorted(self._streams.items()) if a == drained.app]
        return Step(released=tuple(r for s in steps for r in s.released), send=tuple(m for s in steps for m in s.send))

    def held(self) -> dict[tuple[str, str], int]:
        """(consumer, app) -> events waiting for a fence or a predecessor (the pause is while this is > 0)."""
        return {pair: len(st.held) for pair, st in self._streams.items() if st.held}

    def _stream(self, consumer: str, app: str) -> _Stream:
        return self._streams.setdefault((consumer, app), _Stream())

    def _predecessor_done(self, fence: Fence, st: _Stream) -> bool:
        return (fence.old is None or st.acks.get(fence.old, -1) >= fence.seq
                or fence.old in self._drained.get(fence.app, set()))

    def _pump(self, consumer: str, app: str, st: _Stream) -> Step:
        released: list[Release] = []
        send: list[Acked | FenceDone] = []
        ignored = 0
        while True:
            later = sorted(k for k in st.fences if st.floor is None or k > st.floor)
            nxt = st.fences[later[0]] if later else None
            if st.serving is None:
                # the next window to serve starts with a fence naming this instance as the new one; an outgoing
                # fence first means its window's incoming fence has not arrived yet
                if nxt is None or nxt.new != self.me or not self._predecessor_done(nxt, st):
                    break
                st.serving, st.floor = nxt, nxt.key
                st.next = max(nxt.seq, st.delivered) + 1
                for seq in [s for s in st.held if s < st.next]:     # the predecessor's share, not ours
                    del st.held[seq]
                    ignored += 1
                send.append(FenceDone(consumer, app, nxt.seq, self.me, nxt.version, nxt.term))
                continue
            end = nxt if nxt is not None and nxt.old == self.me else None
            while st.next in st.held and (end is None or st.next <= end.seq):
                released.append(Release(consumer, app, st.next, st.held.pop(st.next)))
                st.delivered = st.next
                st.next += 1
            if end is None or st.next <= end.seq:
                break
            send.append(Acked(consumer, app, end.seq, self.me, end.version, end.term))
            st.serving, st.floor = None, end.key
        return Step(released=tuple(released), send=tuple(send), ignored=ignored)
