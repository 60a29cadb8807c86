"""The running part of rate control: rate frames both ways, the root's rounds, rates.jsonl.

Client  reports its weight (and its backlog) to the root in a `rate` frame whenever the weight changes and at
        least every T/2; paces the link to the root at the last rate it was given; keeps that rate while the
        root is silent, and falls back to R/N once nothing came for max(session hold time, 2 T).
Root    keeps the latest report of each client; every T it computes each client's rate with the configured
        rule (node/rate/allocation.py) and sends it; a client whose session comes up gets its rate at once
        (so a restarted root resumes control within one round trip, not one T).

Records (nodes/<node>/rates.jsonl, node/schema.py "rate"):
  client  event "report" at each report (weight, queue, rate in force, bytes acknowledged so far, overflowed;
          `periodic` true for the one every T/2, false for one sent because the weight changed) and "assigned"
          at each rate it receives ("fallback" when it falls back to R/N)
  root    event "assign" per client per round and "queue" every T/2 (the consumer's mailbox bytes now, and their
          time average over the T/2 since the last sample)
"""
from __future__ import annotations

import asyncio
import logging
import time

from node.config import NodeConfig
from node.peer import Peer
from node.rate.admission import RatePolicy
from node.rate.allocation import Report, allocate
from node.records import Records
from node.rpc import link_pb2
from node.piece import Piece

log = logging.getLogger("node.rate")

KIND = "rate"           # the Link frame kind and capability


def _op_mailbox_sizes(user: str):
    def op(c) -> dict[str, int]:
        return {m: int(n) for m, n in c.execute("SELECT msg_id, size FROM mailbox WHERE user=?", (user,))}
    return op


class RateControl:
    def __init__(self, cfg: NodeConfig, engine, records: Records) -> None:
        policy = engine.policy
        if not isinstance(policy, RatePolicy):
            raise TypeError("rate control needs the RatePolicy admission layer (node/rate/subsystem.py)")
        self.cfg = cfg
        self.rc = cfg.rate
        self.me = cfg.name
        self.engine = engine
        self.policy = policy
        self.records = records
        self.peers: dict[str, Peer] = engine.peers
        self.reports: dict[str, Report] = {c: Report(queue_limit=0) for c in self.rc.clients}
        self.rates: dict[str, float] = {c: policy.fair for c in self.rc.clients}    # bits/s, last assigned
        self.round = 0
        self.rate_bps = policy.fair         # client: the rate in force
        self.assigned_at = 0.0              # client: monotonic time of the last assignment (0: none yet)
        self.reports_sent = 0
        self.assignments = 0
        self._task: asyncio.Task | None = None
        if self.rc.role != "root":
            policy.on_weight = lambda _w: self._report()

    def frame_handlers(self) -> dict:
        return {KIND: self._on_frame}

    async def start(self) -> None:
        if self.rc.role == "root":
            sizes = await self.engine.spool.run(_op_mailbox_sizes(self.rc.consumer))
            self.policy.count_mailbox(sizes)
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    # -- frames --------------------------------------------------------------------------
    def _on_frame(self, peer: Peer, frame: link_pb2.Frame) -> None:
        r = frame.rate
        if self.rc.role == "client" and peer.name == self.rc.root and r.assigned:
            self._assigned(r.rate_bps, r.round)
        elif self.rc.role == "root" and peer.name in self.reports and not r.assigned:
            self.reports[peer.name] = Report(weight=min(int(r.weight), 9), queue_bytes=int(r.queue_bytes),
                                             queue_limit=int(r.queue_limit), heard=time.monotonic())
        else:
            log.warning("%s: ignoring a rate frame from %s (not a %s of this %s)", self.me, peer.name,
                        "client" if self.rc.role == "root" else "root", self.rc.role)

    def _send(self, peer_name: str, msg: link_pb2.Rate) -> bool:
        p = self.peers.get(peer_name)
        if p is None or p.session is None or KIND not in p.capabilities:
            return False
        p.send_control(link_pb2.Frame(rate=msg))
        return True

    def session(self, peer: str, up: bool) -> None:
        if not up:
            return
        if self.rc.role == "client" and peer == self.rc.root:
            self._report()
        elif self.rc.role == "root" and peer in self.rates:
            self._send(peer, link_pb2.Rate(assigned=True, rate_bps=self.rates[peer], round=self.round,
                                           interval=self.rc.interval))

    # -- client ---------------------------------------------------------------------------
    def _report(self, periodic: bool = False) -> None:
        """Send the weight to the root (when the session is up) and record it: every report is a line, the
        periodic ones (every T/2, sent or not) are the time series the report draws."""
        pol = self.policy
        sent = self._send(self.rc.root, link_pb2.Rate(weight=pol.weight, queue_bytes=max(0, pol.queued),
                                                      queue_limit=self.rc.queue_limit))
        self.reports_sent += sent
        self.records.write("rate", event="report", client=self.me, weight=pol.weight, rate_bps=self.rate_bps,
                           queue_bytes=max(0, pol.queued), queue_limit=self.rc.queue_limit,
                           sent_bytes=pol.sent_bytes, overflowed=pol.overflowed, periodic=periodic, sent=sent)

    def _assigned(self, rate_bps: float, round_: int) -> None:
        rate_bps = max(0.0, min(float(rate_bps), self.rc.rate_bps)) if rate_bps == rate_bps else self.rate_bps
        self.assigned_at = time.monotonic()
        self.assignments += 1
        self._set_rate(rate_bps, "assigned", round_)

    def _set_rate(self, rate_bps: float, event: str, round_: int = 0) -> None:
        self.rate_bps = rate_bps
        if self.policy.pacer is not None:
            self.policy.pacer.set_rate(rate_bps / 8)
        self.records.write("rate", event=event, client=self.me, weight=self.policy.weight, rate_bps=rate_bps,
                           queue_bytes=max(0, self.policy.queued), round=round_)

    # -- root -------------------------------------------------------------------------------
    def _allocate(self) -> None:
        self.round += 1
        self.rates = allocate(self.rc.policy, self.rc.rate_bps, self.reports)
        for client, rate in self.rates.items():
            rep = self.reports[client]
            sent = self._send(client, link_pb2.Rate(assigned=True, rate_bps=rate, round=self.round,
                                                    interval=self.rc.interval))
            self.records.write("rate", event="assign", client=client, weight=rep.weight, rate_bps=rate,
                               queue_bytes=rep.queue_bytes, round=self.round, sent=sent)

    def delivered(self, m: Piece, size: int) -> None:
        self.policy.delivered(m.msg_id, m.users, size)

    # -- the clock ----------------------------------------------------------------------------
    async def _loop(self) -> None:
        half = self.rc.interval / 2
        silence = max(self.cfg.session.hold_time, 2 * self.rc.interval)
        loop = asyncio.get_running_loop()
        start = loop.time()
        tick = 0
        while True:
            # on a fixed grid: a round is never later than T after the last one, whatever a round costs
            tick += 1
            await asyncio.sleep(max(0.0, start + tick * half - loop.time()))
            try:
                if self.rc.role == "client":
                    self._report(periodic=True)
                    if (self.assigned_at and time.monotonic() - self.assigned_at > silence
                            and self.rate_bps != self.policy.fair):
                        self.assigned_at = 0.0
                        self._set_rate(self.policy.fair, "fallback")
                else:
                    self.records.write("rate", event="queue", client="", weight=0, rate_bps=self.rc.rate_bps,
                                       queue_bytes=self.policy.root_bytes, queue_messages=len(self.policy.mailbox),
                                       queue_mean_bytes=round(self.policy.root_mean(), 1),
                                       deferred=self.policy.deferred)
                    if tick % 2 == 0:
                        self._allocate()
            except Exception:
                log.exception("%s: rate control step failed", self.me)

    def snapshot(self) -> dict:
        pol = self.policy
        if self.rc.role == "client":
            return {"role": "client", "weight": pol.weight, "queue_bytes": max(0, pol.queued),
                    "queue_limit": self.rc.queue_limit, "rate_bps": self.rate_bps, "overflowed": pol.overflowed,
                    "sent_bytes": pol.sent_bytes, "reports": self.reports_sent, "assignments": self.assignments}
        return {"role": "root", "round": self.round, "queue_bytes": pol.root_bytes,
                "queue_messages": len(pol.mailbox), "deferred": pol.deferred,
                "clients": {c: {"weight": r.weight, "queue_bytes": r.queue_bytes, "rate_bps": self.rates.get(c, 0.0)}
                            for c, r in self.reports.items()}}
