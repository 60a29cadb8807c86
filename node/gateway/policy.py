"""The gateway's policy refinement, as pure logic (the EMG paper's §4): MAXRATE(gamma), the event -> actions state
machine with its hysteresis and escalation, the drop orders, the user acceptance rule. node/gateway/manager.py
runs it against the engine every tick.

Rules ([inferred] where the paper leaves it open):
  event        a connector's queue above its threshold
  first        deactivate load balancing on it (when `deactivate_lb` is among the actions), else the second
  not solved   still above the threshold `settle` s after the first action: gamma > 0 throttles the incoming
               connectors to MAXRATE(gamma) split equally; gamma < 0 drops |gamma| of the excess per tick
  escalation   while throttled, the threshold rises by `escalate` every `escalate_after` s; above the raised one
               MAXRATE is computed again (with the Phi_out of then)
  normal       below `lower` everything is undone: load balancing back, THROUGHPUT restored, threshold reset
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Sequence

from node.gateway.config import GatewayConfig

D_MAX = 0.5      # [inferred] the largest distance to the guarantee area a request with p = 0 may have


def maxrate(gamma: float, original: float, phi_out: float) -> float:
    """MAXRATE(gamma): `original` at 0 (and below), Phi_out at 0.5, 0 at 1, linear between (the paper's Fig. 7
    has no formula: [inferred])."""
    if gamma <= 0:
        return original
    if gamma <= 0.5:
        return max(0.0, original + 2 * gamma * (phi_out - original))
    return max(0.0, phi_out * (2 - 2 * gamma))


def accept_request(gamma: float, r: float, d: float, p: float, admitted: float, original: float,
                   phi_out: float, d_max: float = D_MAX) -> tuple[bool, str]:
    """User acceptance f(gamma, r, d, p) (the paper's §4.2, [inferred] reading): inside the guarantee area
    (d <= gamma and r + the throughput admitted already <= MAXRATE(gamma)) accept; outside accept when the
    distance to the area (the rate part relative to the original MAXRATE) is at most d_max * (1 - p)."""
    top = maxrate(gamma, original, phi_out)
    g = max(gamma, 0.0)
    total = r + admitted
    if d <= g and total <= top:
        return True, (f"inside the guarantee area: guarantee {d:g} <= gamma {gamma:g} and throughput "
                      f"{total:g} <= MAXRATE {top:g} msg/s")
    scale = original if original > 0 else max(top, 1.0)
    dist = math.hypot(max(0.0, d - g), max(0.0, total - top) / scale)
    allowed = d_max * (1 - p)
    verdict = dist <= allowed
    return verdict, (f"outside the guarantee area (guarantee <= {g:g}, throughput <= MAXRATE {top:g} msg/s) by "
                     f"{dist:.3g}; {'within' if verdict else 'beyond'} the {allowed:.3g} allowed at "
                     f"{p * 100:g}% of the time")


@dataclass
class Decision:
    event: str              # queue_high, queue_low, not_solved, escalate, reset
    action: str             # deactivate_lb, activate_lb, throttle, restore, drop, none
    connector: str
    queue: int
    threshold: float
    values: dict = field(default_factory=dict)


@dataclass
class ConnectorState:
    threshold: float
    active: bool = False
    stage: str = ""             # lb, throttle, drop, none
    acted_at: float = 0.0
    escalated_at: float = 0.0
    throttled_at: float = 0.0   # the threshold MAXRATE was last computed for
    deactivated: bool = False


class Policy:
    """The state machine over every outgoing connector's queue."""

    def __init__(self, gw: GatewayConfig, connectors: Sequence[str]) -> None:
        self.gw = gw
        self.gamma = gw.gamma
        self.threshold = float(gw.threshold)
        self.lower = float(gw.lower)
        self.states = {c: ConnectorState(self.threshold) for c in connectors}
        self.maxrate: float | None = None      # in force (None: the original THROUGHPUTs)
        self.throttling: set[str] = set()

    def set(self, gamma: float | None = None, threshold: float | None = None, lower: float | None = None) -> None:
        """New operator values (checked by the caller); they apply from the next tick."""
        if gamma is not None:
            self.gamma = gamma
        if threshold is not None:
            for st in self.states.values():
                if st.threshold == self.threshold:      # an escalated one keeps its raise until reset
                    st.threshold = float(threshold)
            self.threshold = float(threshold)
        if lower is not None:
            self.lower = float(lower)

    def tick(self, now: float, queues: dict[str, int], phi_out: float, original: float) -> list[Decision]:
        out: list[Decision] = []
        for c, st in self.states.items():
            q = queues.get(c, 0)
            if not st.active:
                if q > st.threshold:
                    st.active, st.acted_at = True, now
                    if "deactivate_lb" in self.gw.actions:
                        st.stage, st.deactivated = "lb", True
                        out.append(Decision("queue_high", "deactivate_lb", c, q, st.threshold))
                    else:
                        out.append(self._second("queue_high", c, st, q, now, phi_out, original))
            elif q < self.lower:
                out.extend(self._normal(c, st, q))
            elif st.stage == "lb":
                if now - st.acted_at >= self.gw.settle and q > st.threshold:
                    out.append(self._second("not_solved", c, st, q, now, phi_out, original))
            elif st.stage == "throttle":
                if self.gw.escalate > 0 and now - st.escalated_at >= self.gw.escalate_after:
                    st.threshold *= 1 + self.gw.escalate
                    st.escalated_at = now
                    out.append(Decision("escalate", "none", c, q, st.threshold))
                if q > st.threshold and st.threshold != st.throttled_at:
                    st.throttled_at = st.threshold
                    self.maxrate = maxrate(self.gamma, original, phi_out)
                    out.append(Decision("not_solved", "throttle", c, q, st.threshold, {"phi_out": phi_out}))
            elif st.stage == "drop":
                if q > st.threshold:
                    out.append(Decision("not_solved", "drop", c, q, st.threshold,
                                        {"count": self._drop_count(q, st.threshold)}))
        return out

    def _drop_count(self, q: int, threshold: float) -> int:
        return max(1, math.ceil(abs(self.gamma) * (q - threshold)))

    def _second(self, event: str, c: str, st: ConnectorState, q: int, now: float, phi_out: float,
                original: float) -> Decision:
        """The action after load balancing (or instead of it): by the sign of gamma."""
        if self.gamma > 0 and "throttle" in self.gw.actions:
            st.stage, st.escalated_at, st.throttled_at = "throttle", now, st.threshold
            self.maxrate = maxrate(self.gamma, original, phi_out)
            self.throttling.add(c)
            return Decision(event, "throttle", c, q, st.threshold, {"phi_out": phi_out})
        if self.gamma < 0 and "drop" in self.gw.actions:
            st.stage = "drop"
            return Decision(event, "drop", c, q, st.threshold, {"count": self._drop_count(q, st.threshold)})
        st.stage = "none"
        return Decision(event, "none", c, q, st.threshold)

    def _normal(self, c: str, st: ConnectorState, q: int) -> list[Decision]:
        actions = ["activate_lb"] if st.deactivated else []
        self.throttling.discard(c)
        if st.stage == "throttle" and not self.throttling and self.maxrate is not None:
            self.maxrate = None
            actions.append("restore")
        out = [Decision("queue_low", a, c, q, st.threshold) for a in actions or ["none"]]
        if st.threshold != self.threshold:
            st.threshold = self.threshold
            out.append(Decision("reset", "none", c, q, st.threshold))
        st.active, st.stage, st.deactivated = False, "", False
        return out


@dataclass(frozen=True)
class Candidate:
    """A copy queued whole for a connector (nothing of it in flight or passed on): one the drop policy may take."""
    msg_id: str
    dst: str
    submit_ts: float
    expires_ts: float
    priority: int           # its user's (gateway.users.<u>.priority; 1 when not configured)
    position: int           # messages ahead of it in the queue


def choose_drops(cands: Sequence[Candidate], order: Sequence[str], n: int, now: float, phi: float,
                 rng: random.Random) -> list[Candidate]:
    """Up to `n` copies, each drop policy of `order` in turn: expired (cannot be delivered within its lifetime at
    `phi` messages per second; the most hopeless first), priority (users below the highest priority present, the
    lowest first), random, newest, oldest."""
    chosen: list[Candidate] = []
    taken: set[tuple[str, str]] = set()
    for policy in order:
        if len(chosen) >= n:
            break
        if policy == "expired":
            late = [c for c in cands if c.expires_ts and
                    (phi <= 0 or c.expires_ts - now < (c.position + 1) / phi)]
            ranked = sorted(late, key=lambda c: c.expires_ts)
        elif policy == "priority":
            top = max((c.priority for c in cands), default=0)
            ranked = sorted((c for c in cands if c.priority < top), key=lambda c: (c.priority, -c.submit_ts))
        elif policy == "random":
            ranked = list(cands)
            rng.shuffle(ranked)
        elif policy == "newest":
            ranked = sorted(cands, key=lambda c: -c.submit_ts)
        else:
            ranked = sorted(cands, key=lambda c: c.submit_ts)
        for c in ranked:
            if len(chosen) >= n:
                break
            if (c.msg_id, c.dst) not in taken:
                taken.add((c.msg_id, c.dst))
                chosen.append(c)
    return chosen
