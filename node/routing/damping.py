"""Route flap damping per link: RFC 2439's shape, with time constants in seconds.

Every flap of a link adds a penalty that decays exponentially. A flap is a withdrawal or a return
(cost to or from infinity) or a change that reverses the direction of the link's previous change: a
link whose measured cost moves to a new level takes several published steps (the monitor smooths),
all in one direction, and that is one move, not a flap. RFC 2439 likewise charges per flap (a
withdrawal, a re-advertisement, an attribute change: in BGP each of those is a route change heard
once); charging every published cost step instead would suppress a link that merely got slower once.
One `penalty` serves every kind of flap. A link whose
penalty exceeds `suppress` is held at the highest cost advertised since its suppression began (so
routes avoid it while alternatives exist, and its flapping stops moving them back and forth); it is
released when the penalty decays below `reuse` or after `max_suppress` seconds, whichever is first.
Time is whatever clock the caller passes as `now` (seconds); nothing here reads a clock.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from node.routing.config import DampingConfig

Link = tuple[str, str]


@dataclass
class _LinkState:
    cost: float                         # the cost last advertised
    penalty: float = 0.0                # penalty at `stamp`
    stamp: float = 0.0                  # when `penalty` was last brought up to date
    since: float | None = None          # when the current suppression began; None = not suppressed
    held: float = 0.0                   # highest cost advertised since `since`
    trend: int = 0                      # direction of the last change: +1 up, -1 down, 0 none yet


class FlapDamper:
    def __init__(self, cfg: DampingConfig) -> None:
        self.cfg = cfg
        self._links: dict[Link, _LinkState] = {}

    def observe(self, link: Link, cost: float, now: float) -> float:
        """Record the link's advertised cost; returns the effective cost to route with."""
        st = self._links.get(link)
        if st is None:      # the first cost seen is where the link starts, not a change
            self._links[link] = _LinkState(cost=cost, stamp=now)
            return cost
        if not self.cfg.enabled:
            st.cost = cost
            return cost
        self._release_if_due(st, now)   # before the new penalty: a due release must not be skipped
        if cost != st.cost:
            trend = 1 if cost > st.cost else -1
            if math.isinf(cost) or math.isinf(st.cost) or trend == -st.trend:
                st.penalty = self._decayed(st, now) + self.cfg.penalty
                st.stamp = now
            st.trend = trend
            st.cost = cost
            if st.since is not None:
                st.held = max(st.held, cost)
            elif st.penalty > self.cfg.suppress:
                st.since, st.held = now, cost
        return st.held if st.since is not None else st.cost

    def effective(self, link: Link, now: float) -> float:
        """The cost to route with now (math.inf for a link never observed); may release the link."""
        st = self._links.get(link)
        if st is None:
            return math.inf
        self._release_if_due(st, now)
        return st.held if st.since is not None else st.cost

    def suppressed(self, link: Link, now: float) -> bool:
        st = self._links.get(link)
        if st is None:
            return False
        self._release_if_due(st, now)
        return st.since is not None

    def penalty(self, link: Link, now: float) -> float:
        st = self._links.get(link)
        return 0.0 if st is None else self._decayed(st, now)

    def next_release(self, now: float) -> float | None:
        """Earliest release time of a suppressed link (may be <= now when one is due), None if none is.

        The caller schedules a route recomputation then; it does not release anything by itself.
        """
        times = [self._release_at(st) for st in self._links.values() if st.since is not None]
        return min(times) if times else None

    def forget(self, link: Link) -> None:
        self._links.pop(link, None)

    def _decayed(self, st: _LinkState, now: float) -> float:
        elapsed = max(0.0, now - st.stamp)      # a clock read out of order must not grow the penalty
        return st.penalty * 2.0 ** (-elapsed / self.cfg.half_life)

    def _release_at(self, st: _LinkState) -> float:
        assert st.since is not None
        at_reuse = st.stamp + self.cfg.half_life * math.log2(st.penalty / self.cfg.reuse)
        return min(st.since + self.cfg.max_suppress, at_reuse)

    def _release_if_due(self, st: _LinkState, now: float) -> None:
        # Decided by comparing times, not the decayed penalty with `reuse`: a timer set for
        # next_release() then always finds the link released (no float near-miss, no re-arming loop).
        if st.since is not None and now >= self._release_at(st):
            st.since, st.held = None, 0.0
