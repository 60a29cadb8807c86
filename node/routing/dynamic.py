"""routing: dynamic — measured link costs, flooded link state, shortest paths with hysteresis and damping.

The pipeline, once per change:
  link monitor (UDP probes) -> this node's link costs -> its advert, flooded over the Link sessions
  -> every node's link-state database -> flap damping per link -> Dijkstra + hysteresis -> the table.
A session that goes down withdraws its link at once, without waiting for probes. A destination the
table has never reached (start-up, before the adverts arrived) uses the static table from the config;
one that becomes unreachable keeps its last next hop (its messages wait there) until a path returns.
Every change of the table is a line in routes.jsonl.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Callable

from node.config import NodeConfig
from node.peer import Peer
from node.records import Records
from node.routing.damping import FlapDamper
from node.flood import FloodTable
from node.routing.linkstate import Advert, LinkStateDB, advert_from_frame
from node.routing.monitor import KEY_KIND, LinkMonitor
from node.routing.selector import Route, RouteSelector
from node.routing.spf import natural_key, path_cost
from node.routing.static import StaticRouter
from node.rpc import link_pb2
from node.spool import Spool

log = logging.getLogger("node.routing")

SEQ_KEY = "linkstate.seq"
CAPABILITY = "link_state"       # the frame kind, announced in OPEN by the link layer
HOUSEKEEPING = 1.0              # seconds between expiry / damping-release / refresh checks


def probe_listen(cfg: NodeConfig) -> list[str]:
    """Where the link monitor's UDP sockets listen: every address of the Link service, one socket each, and no
    other (a wildcard socket would take probes from networks the Link service does not listen on)."""
    return list(cfg.data_addresses)


class DynamicTable:
    """The routing table of `routing: dynamic`; `hop_for(dst)` is what the router asks."""

    def __init__(self, cfg: NodeConfig, spool: Spool, records: Records, fallback: StaticRouter) -> None:
        self.cfg = cfg
        self.me = cfg.name
        self.spool = spool
        self.records = records
        self.fallback = fallback
        r = cfg.routing
        self.quantum = r.cost.quantum
        self.db = LinkStateDB(r.max_age)
        self.flood: FloodTable[Advert] = FloodTable(
            self.me, spool, CAPABILITY, SEQ_KEY, "link-state advert", self.db, r.refresh, advert_from_frame,
            lambda seq, now: Advert(self.me, seq, now, dict(self.own)))
        self.damper = FlapDamper(r.damping)
        self.selector = RouteSelector(self.me, r.hysteresis, r.settle)
        self.monitor = (LinkMonitor(self.me, r, cfg.neighbours, probe_listen(cfg), self._measured)
                        if r.monitoring else None)
        self.own: dict[str, float] = {}           # the costs this node advertises for its up links
        self.peers: dict[str, Peer] = {}
        self.changes = 0                          # table changes so far (metrics)
        self._links_seen: set[tuple[str, str]] = set()
        self._watchers: list[Callable[[], None]] = []
        self._recompute_due = False
        self._task: asyncio.Task | None = None
        self._stopped = False

    # -- life cycle --------------------------------------------------------------------------------
    def attach(self, peers: dict[str, Peer]) -> None:
        self.flood.attach(peers)
        self.peers = peers

    @property
    def seq(self) -> int:
        return self.flood.seq

    @property
    def up(self) -> set[str]:
        return self.flood.up

    def watch(self, changed: Callable[[], None]) -> None:
        self._watchers.append(changed)

    async def start(self) -> None:
        await self.flood.load_seq()      # a restarted node counts on from its last number
        if self.monitor is not None:
            await self.monitor.start()
        self._originate()
        self._task = asyncio.ensure_future(self._housekeeping())

    async def stop(self) -> None:
        """Before the sessions close: a node shutting down has no route changes to record or advertise."""
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.monitor is not None:
            await self.monitor.stop()

    # -- this node's links ----------------------------------------------------------------------------
    def session(self, peer: str, up: bool) -> None:
        """A Link session came up (advertise the link, hand the neighbour our whole map) or went down
        (withdraw the link at once)."""
        if self._stopped:
            return
        self.flood.session(peer, up)
        if self.monitor is not None:
            self._probe_key(self.monitor, peer, up)
        if up:
            self.own[peer] = self.monitor.cost(peer) if self.monitor is not None else self.quantum
            if self.monitor is not None:
                self.monitor.republish(peer)
            self._originate()
            self.flood.send_table(peer, own_too=False)      # ours went with the origination just now
        elif self.own.pop(peer, None) is not None:
            self._originate()

    def _probe_key(self, monitor: LinkMonitor, peer: str, up: bool) -> None:
        """Each session gets fresh probe keys (node/routing/monitor.py): the one the neighbour is to probe this
        node with goes over the session that just came up."""
        key = monitor.session(peer, up)
        p = self.peers.get(peer)
        if key is None or p is None:
            return
        if KEY_KIND not in p.capabilities:
            log.warning("%s: %s takes no probe keys (an older node, or its link monitor is off): it cannot probe "
                        "this node", self.me, peer)
            return
        p.send_control(link_pb2.Frame(extension=link_pb2.Extension(kind=KEY_KIND, body=key)))

    def on_probe_key(self, peer: Peer, frame: link_pb2.Frame) -> None:
        """The key a neighbour sent over its session for this node's probes to it."""
        if self.monitor is not None:
            self.monitor.take_key(peer.name, frame.extension.body)

    def _measured(self, peer: str, cost: float) -> None:
        """The monitor published a new cost for the link to `peer`."""
        if peer in self.up and self.own.get(peer) != cost:
            self.own[peer] = cost
            self._originate()

    def _originate(self) -> None:
        self.flood.originate()
        self._schedule()

    # -- adverts from neighbours ----------------------------------------------------------------------
    def on_frame(self, peer: Peer, frame: link_pb2.Frame) -> None:
        """An advert from a neighbour (flooding rules: node/flood.py); news means a recomputation."""
        seq = self.flood.seq
        if self.flood.receive(peer, frame) is not None or self.flood.seq != seq:
            self._schedule()

    # -- the table ------------------------------------------------------------------------------------
    def _schedule(self) -> None:
        """Recompute once after the current burst of adverts (many arrive in one batch)."""
        if not self._recompute_due:
            self._recompute_due = True
            asyncio.get_running_loop().call_soon(self.recompute)

    def recompute(self) -> None:
        self._recompute_due = False
        if self._stopped:
            return
        now = time.monotonic()
        graph = self.db.graph()
        for u, vs in graph.items():
            self._links_seen.update((u, v) for v in vs)
        effective: dict[str, dict[str, float]] = {}
        for link in self._links_seen:
            cost = graph.get(link[0], {}).get(link[1], math.inf)
            eff = self.damper.observe(link, cost, now)
            if math.isfinite(eff):
                effective.setdefault(link[0], {})[link[1]] = eff
        changed = self.selector.update(effective, now)
        moved = False
        for dst in sorted(changed, key=natural_key):
            old, new = changed[dst]
            reason = _reason(old, new, effective)
            self.records.write("route", dst=dst, next_hop=new.next_hop,
                               cost=new.cost if math.isfinite(new.cost) else None, reason=reason)
            if old is None or old.next_hop != new.next_hop:
                moved = True
                if old is not None:
                    log.info("%s: route to %s moves from %s to %s (%s)", self.me, dst, old.next_hop,
                             new.next_hop, reason)
        self.changes += len(changed)
        if moved:
            for w in self._watchers:
                w()

    def hop_for(self, dst: str) -> str | None:
        route = self.selector.routes.get(dst)
        if route is not None:
            return route.next_hop
        return self.fallback.hop_for(dst)

    def table(self) -> list[tuple[str, str, float, str]]:
        """(destination, next hop, cost, how learned) for every destination this node can name."""
        out: dict[str, tuple[str, str, float, str]] = {}
        for dst, hop in self.fallback.table():
            out[dst] = (dst, hop, math.nan, "neighbour" if dst == hop else "static")
        for dst, route in self.selector.routes.items():
            out[dst] = (dst, route.next_hop, route.cost, "dynamic" if math.isfinite(route.cost) else "unreachable")
        return [out[d] for d in sorted(out, key=natural_key)]

    def links(self) -> dict[str, dict]:
        """Per neighbour: what the monitor measured, what we advertise, whether damping holds it."""
        measured = self.monitor.snapshot() if self.monitor is not None else {}
        now = time.monotonic()
        out = {}
        for peer in sorted(self.cfg.neighbours, key=natural_key):
            cost = self.own.get(peer, math.inf)
            out[peer] = {**measured.get(peer, {}), "up": peer in self.up,
                         "cost": cost if math.isfinite(cost) else None,
                         "suppressed": self.damper.suppressed((self.me, peer), now)}
        return out

    def snapshot(self) -> dict:
        out = {"mode": "dynamic", "routes": len(self.selector.routes), "changes": self.changes,
               "seq": self.seq, "adverts": len(self.db.adverts), "links": self.links()}
        if self.monitor is not None:
            out["probes_refused"] = self.monitor.refusals()
        return out

    # -- housekeeping -----------------------------------------------------------------------------------
    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING)
            now = time.monotonic()
            try:
                if self.flood.expire(now):
                    self._schedule()
                if self.flood.refresh_due(now):
                    self._originate()
                release = self.damper.next_release(now)
                if release is not None and release <= now:
                    self._schedule()
            except Exception:
                log.exception("%s: routing housekeeping failed", self.me)


def _reason(old: Route | None, new: Route, graph: dict[str, dict[str, float]]) -> str:
    if old is None:
        return "initial"
    if not math.isfinite(new.cost):
        return "unreachable"
    if old.next_hop == new.next_hop:
        return "cost"
    return "withdrawn" if not math.isfinite(path_cost(graph, old.path)) else "switch"
