"""The gateway at the admission policy seam: incoming connectors' THROUGHPUT and the users' rules.

`GatewayPolicy` wraps the node's policy (and any layer under it) as node/rate/admission.py's RatePolicy does:

  from a neighbour   a piece of a message (counted once, at offset 0) from a neighbour that is an incoming
                     connector over its THROUGHPUT is refused "not now", retry_after = the time to its next token
                     (at most the manager's tick: a rate of 0 never has one); the sender keeps its copy, and
                     at the first tick its connector has a token again it is told to offer it again now (ROOM,
                     node/credits.py): its own backoff doubles per refusal, which would make a restored
                     THROUGHPUT take effect late
  a submission       refused when its user is locked (`locked until <time>`), out of credits (`no credits left`),
                     over its own or its connector's THROUGHPUT (`throttled`), or when a copy's next hop is a
                     connector the user may not use (`not permitted on <connector>`); once admitted its credit is
                     charged in the submission's own spool transaction (node/policy.py Admitted)

Everything else is the inner policy's.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

from node.gateway.config import GatewayConfig
from node.gateway.connectors import Incoming
from node.gateway.users import NOT_PERMITTED, THROTTLED, Users
from node.piece import Piece
from node.policy import AdmissionPolicy, Admitted, PolicyLayer
from node.refusal import Refusal
from node.resource_manager import ROOM

log = logging.getLogger("node.gateway")

NOT_NOW = "gateway throughput"     # the start of a neighbour's "not now" reason


class GatewayPolicy(PolicyLayer):
    """The admission policy of a gateway node: its incoming connectors' and users' rules, then the inner
    policy (node/policy.py PolicyLayer passes on what it does not change)."""

    def __init__(self, gw: GatewayConfig, me: str, inner: AdmissionPolicy,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        super().__init__(inner)
        self.gw = gw
        self.me = me
        self._clock = clock
        self._wall = wall
        now = clock()
        self.incoming = {n: Incoming(n, c.throughput, now) for n, c in gw.incoming.items()}
        self._by_neighbour = {c.neighbour: self.incoming[n] for n, c in gw.incoming.items() if c.neighbour}
        self._by_user = {c.user: self.incoming[n] for n, c in gw.incoming.items() if c.user}
        self.users = Users(gw, now)
        self.refused: dict[str, int] = {"throttled": 0, "no_credits": 0, "locked": 0, "not_permitted": 0}
        self.next_hop: Callable[[Piece], str | None] | None = None     # the engine's router (attach)
        self.wake: Callable[[str], None] | None = None                 # a neighbour's link writer (attach)
        self._owed: set[str] = set()        # neighbours told "not now" since their last ROOM
        self._room: set[str] = set()        # neighbours whose ROOM goes out in their next batch
        self.rooms = 0                      # ROOM signals sent

    # -- the gateway's own parts ----------------------------------------------------------------
    def permits(self, copy: Piece, hop: str) -> bool:
        """Whether the copy's user may use connector `hop` (the router skips one it may not)."""
        u = self.users.get(copy.originator)
        return u is None or u.allows(hop)

    def admit_submission(self, pieces: list[Piece], fragments: int, internal: bool) -> str | Admitted | None:
        if internal or not pieces:
            return self.inner.admit_submission(pieces, fragments, internal)
        user = pieces[0].originator
        refusal = self.users.refusal(user, self._wall())
        if refusal is not None:
            self.refused[refusal[0]] += 1
            return refusal[1]
        u = self.users.get(user)
        if u is not None and self.next_hop is not None:
            for p in pieces:
                if p.off != 0 or p.dst == self.me:
                    continue
                hop = self.next_hop(p)      # the copy's remembered choice: asking again picks nothing new
                if hop is not None and not u.allows(hop):
                    self.refused["not_permitted"] += 1
                    return f"{NOT_PERMITTED} on {hop}"
        now = self._clock()
        limits = [x for x in (self.users.rates.get(user), self._by_user.get(user)) if x is not None]
        late = [x for x in limits if not x.ready(now)]
        if late:
            for x in late:
                x.refused += 1
            self.refused["throttled"] += 1
            return THROTTLED
        verdict = self.inner.admit_submission(pieces, fragments, internal)
        if isinstance(verdict, str) and verdict:
            return verdict
        for x in limits:
            x.take()
        charge = self.users.charge(user)
        if charge is None:
            return verdict
        if isinstance(verdict, Admitted):       # the inner policy's change too, in the same transaction
            inner_verdict = verdict

            def both(c: Any) -> None:
                inner_verdict.op(c)
                charge.op(c)

            def undo() -> None:
                inner_verdict.undo()
                charge.undo()
            return Admitted(both, undo)
        return charge

    def admit(self, peer: str, p: Piece) -> Refusal | None:
        conn = self._by_neighbour.get(peer)
        if conn is None or p.off != 0:
            return self.inner.admit(peer, p)
        now = self._clock()
        if not conn.ready(now):
            conn.refused += 1
            self._owed.add(peer)
            return Refusal(f"{NOT_NOW}: {conn.name} over {conn.throughput:g} msg/s at {self.me}",
                           conn.retry_after(now, self.gw.period))
        verdict = self.inner.admit(peer, p)
        if verdict is None:
            conn.take()
        return verdict

    def set_throughput(self, name: str, rate: float | None) -> None:
        self.incoming[name].set_throughput(rate, self._clock())

    def offer_again(self) -> list[str]:
        """The neighbours told "not now" whose connector has a token now: each gets a ROOM signal (the manager
        calls this every tick). Without it a sender waits out its own backoff, which doubles per refusal of a
        copy up to its cap, so a THROUGHPUT restored after a throttle would take effect that much later."""
        now = self._clock()
        ready = sorted(peer for peer in self._owed if self._by_neighbour[peer].ready(now))
        for peer in ready:
            self._owed.discard(peer)
            self._room.add(peer)
            self.rooms += 1
            if self.wake is not None:
                self.wake(peer)
        return ready

    def take_credits(self, peer: str) -> list[tuple[tuple[str, str], int]]:
        credits = self.inner.take_credits(peer)
        if peer in self._room:
            self._room.discard(peer)
            if all(key != ROOM for key, _n in credits):
                credits = [*credits, (ROOM, 1)]
        return credits

    def has_credits(self, peer: str) -> bool:
        return peer in self._room or self.inner.has_credits(peer)
