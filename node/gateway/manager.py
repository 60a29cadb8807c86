"""The gateway's policy manager: every `period` it reads the outgoing connectors' queues, runs the policy
(node/gateway/policy.py) and carries its decisions out on the engine: load balancing off and on (the router's
deactivate/activate), THROUGHPUT of the incoming connectors (MAXRATE split equally), drops (Engine.give_up:
each dropped copy becomes a non-delivery report, never a silent loss). Each decision is one gateway.jsonl line.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
from typing import Any, Callable

from node.gateway.admission import GatewayPolicy
from node.gateway.config import GatewayConfig
from node.gateway.policy import Candidate, Decision, Policy, choose_drops
from node.gateway.records import GatewayRecords

log = logging.getLogger("node.gateway")

DROP_REASON = "dropped by gateway policy"


class Manager:
    def __init__(self, gw: GatewayConfig, engine: Any, admission: GatewayPolicy, records: GatewayRecords,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.gw = gw
        self.engine = engine
        self.admission = admission
        self.records = records
        self._clock = clock
        self.connectors = sorted(gw.outgoing) or sorted(engine.peers)
        self.policy = Policy(gw, self.connectors)
        self.dropped = 0
        self.rng = random.Random(engine.me)       # the node's own: no global state
        # (time, messages sent by the outgoing connectors, accepted per incoming connector) over `settle` s
        self._samples: collections.deque = collections.deque()
        self.phi_out = 0.0
        self.phi: dict[str, float] = {c: 0.0 for c in self.connectors}
        self.phi_in: dict[str, float] = {n: 0.0 for n in admission.incoming}
        self._task: asyncio.Task | None = None

    # -- measuring --------------------------------------------------------------------------------
    def queues(self) -> dict[str, int]:
        return {c: self.engine.peers[c].queue.messages for c in self.connectors}

    def _measure(self, now: float) -> None:
        """Phi_out (per outgoing connector and in all) and each incoming connector's phi_in over the last
        `settle` seconds: pieces its next hop acknowledged (one per message at one piece per message), messages
        let in."""
        sent = {c: self.engine.peers[c].stats.frags_out for c in self.connectors}
        accepted = {n: x.accepted for n, x in self.admission.incoming.items()}
        self._samples.append((now, sent, accepted))
        window = max(self.gw.settle, self.gw.period)
        while len(self._samples) > 2 and now - self._samples[1][0] >= window:
            self._samples.popleft()
        t0, s0, a0 = self._samples[0]
        if now > t0:
            self.phi = {c: (sent[c] - s0.get(c, 0)) / (now - t0) for c in sent}
            self.phi_out = sum(self.phi.values())
            self.phi_in = {n: (accepted[n] - a0.get(n, 0)) / (now - t0) for n in accepted}

    def original(self) -> float:
        """MAXRATE before any throttling: the configured THROUGHPUTs (a connector without one: what it takes)."""
        return sum(x.configured if x.configured is not None else self.phi_in.get(n, 0.0)
                   for n, x in self.admission.incoming.items())

    # -- the loop ---------------------------------------------------------------------------------
    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.gw.period)
            try:
                await self.tick()
            except Exception:
                log.exception("%s: gateway policy tick failed", self.engine.me)

    async def tick(self) -> list[Decision]:
        now = self._clock()
        self._measure(now)
        decisions = self.policy.tick(now, self.queues(), self.phi_out, self.original())
        for d in decisions:
            await self.apply(d)
        self.admission.offer_again()
        return decisions

    async def apply(self, d: Decision) -> None:
        values = dict(d.values)
        router = self.engine.router
        if d.action == "deactivate_lb" and hasattr(router, "deactivate"):
            router.deactivate(d.connector, self.gw.move_queued)
            values["move_queued"] = self.gw.move_queued
        elif d.action == "activate_lb" and hasattr(router, "activate"):
            router.activate(d.connector)
        elif d.action == "throttle":
            values["throughput"] = self.throttle(self.policy.maxrate)
        elif d.action == "restore":
            values["throughput"] = self.restore()
        elif d.action == "drop":
            values["dropped"] = await self.drop(d.connector, int(values.pop("count", 0)))
        self.records.decision(d.event, d.action, d.connector, self.policy.gamma, d.queue, d.threshold,
                              self.policy.maxrate, values)

    def throttle(self, rate: float | None) -> dict[str, float | None]:
        """MAXRATE split equally over the incoming connectors' THROUGHPUT."""
        incoming = self.admission.incoming
        share = None if rate is None else rate / max(1, len(incoming))
        for n in incoming:
            self.admission.set_throughput(n, share)
        return {n: x.throughput for n, x in incoming.items()}

    def restore(self) -> dict[str, float | None]:
        for n, x in self.admission.incoming.items():
            self.admission.set_throughput(n, x.configured)
        return {n: x.throughput for n, x in self.admission.incoming.items()}

    def candidates(self, connector: str) -> tuple[list[Candidate], dict[tuple[str, str], Any]]:
        """The copies queued whole for `connector`, in queue order, and one piece of each."""
        seen: dict[tuple[str, str], list] = {}
        order: list[tuple[str, str]] = []
        for p in self.engine.peers[connector].queue.pieces():
            got = seen.get(p.mkey)
            if got is None:
                seen[p.mkey] = [p, 0]
                order.append(p.mkey)
            seen[p.mkey][1] += p.size
        users = self.gw.users
        out = []
        first = {}
        for i, key in enumerate(order):
            p, have = seen[key]
            if have < p.total:      # part of it is in flight or passed on already: not ours to drop
                continue
            u = users.get(p.originator)
            out.append(Candidate(p.msg_id, p.dst, p.submit_ts, p.expires_ts, u.priority if u else 1, i))
            first[key] = p
        return out, first

    async def drop(self, connector: str, n: int) -> list[str]:
        cands, first = self.candidates(connector)
        chosen = choose_drops(cands, self.gw.drop_order, n, time.time(), self.phi.get(connector, 0.0), self.rng)
        done = []
        for c in chosen:
            if await self.engine.give_up(first[(c.msg_id, c.dst)], DROP_REASON):
                done.append(c.msg_id)
        self.dropped += len(done)
        return done
