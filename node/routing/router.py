"""The node's router: rules first, then the table (static or dynamic); what the engine asks.

`NodeRouter` is the engine's `router` seam. A copy goes where the first matching rule sends it;
with no rule matching, to the table's next hop for its destination. Rules whose targets depend on
which neighbours are usable (round robin, fail-over) are asked again whenever a session goes up or
down or a neighbour starts refusing, through the same "routes changed" callback as table changes.
"""
from __future__ import annotations

import json
import logging
import math
import time
from typing import Callable

from node.config import NodeConfig
from node.peer import Peer
from node.records import Records
from node.routing.dynamic import CAPABILITY, DynamicTable
from node.routing.monitor import KEY_KIND
from node.routing.rules import RuleSet, parse_rules, reads_body
from node.routing.static import StaticRouter
from node.rpc import link_pb2
from node.piece import Piece
from node.spool import Spool

log = logging.getLogger("node.routing")

REFUSING_FOR = 10.0      # seconds a neighbour that refused a copy for good is passed over by fail-over


class NodeRouter:
    def __init__(self, cfg: NodeConfig, spool: Spool, records: Records) -> None:
        self.cfg = cfg
        self.me = cfg.name
        self.records = records
        self.static = StaticRouter(cfg.neighbours, cfg.routes)
        self.dynamic = (DynamicTable(cfg, spool, records, self.static)
                        if cfg.routing.mode == "dynamic" else None)
        self.rules = RuleSet(parse_rules(cfg.routing.rules, cfg.neighbours))
        self.peers: dict[str, Peer] = {}
        self._refusing: dict[str, float] = {}     # neighbour -> monotonic time it refused last
        self._watchers: list[Callable[[], None]] = []
        self.deactivated: set[str] = set()        # round-robin members new copies avoid (a gateway's policy)
        # whether a copy may go to a neighbour (a gateway's per-user permit/deny): a member it may not use is
        # passed over like an unusable one
        self.permits: Callable[[Piece, str], bool] | None = None
        if self.dynamic is not None:
            self.dynamic.watch(self._changed)

    # -- the engine's side ------------------------------------------------------------------------------
    @property
    def reads_body(self) -> bool:
        """Whether a rule searches a message's body: recovery then loads the first bytes of every copy."""
        return reads_body(self.cfg.routing.rules, self.cfg.neighbours)

    def attach(self, peers: dict[str, Peer]) -> None:
        self.peers = peers
        if self.dynamic is not None:
            self.dynamic.attach(peers)

    @property
    def by_destination(self) -> bool:
        """Whether next_hop answers by the copy's destination alone (no rules): the same for every copy to a node
        until the routes change."""
        return not self.rules

    def next_hop(self, copy: Piece) -> str | None:
        return self._answer(copy, True)

    def preview(self, copy: Piece) -> str | None:
        """next_hop's answer now for a copy this node has not taken yet, committing no choice (Router.preview)."""
        return self._answer(copy, False)

    def _answer(self, copy: Piece, commit: bool) -> str | None:
        if self.rules:
            permits = self.permits
            allowed = None if permits is None else (lambda h: permits(copy, h))
            picked = self.rules.pick(copy, self.usable, self.deactivated, allowed, commit)
            if picked is not None:
                return picked[0]
        return self.hop_for(copy.dst)

    def hop_for(self, dst: str) -> str | None:
        if self.dynamic is not None:
            return self.dynamic.hop_for(dst)
        return self.static.hop_for(dst)

    def watch(self, changed: Callable[[], None]) -> None:
        self._watchers.append(changed)

    def usable(self, peer: str) -> bool:
        p = self.peers.get(peer)
        if p is None or not p.stats.up:
            return False
        since = self._refusing.get(peer)
        return since is None or time.monotonic() - since > REFUSING_FOR

    def deactivate(self, peer: str, move_queued: bool = False) -> None:
        """Take `peer` out of load balancing for new copies; the copies whose member it is stay with it, unless
        `move_queued` (they are picked anew, and the engine moves the queued ones)."""
        self.deactivated.add(peer)
        if move_queued and self.rules.forget(peer):
            self._changed()

    def activate(self, peer: str) -> None:
        """`peer` takes its share of new copies again."""
        self.deactivated.discard(peer)

    def session_changed(self, peer: str, up: bool) -> None:
        if self.dynamic is not None:
            self.dynamic.session(peer, up)
        if up:
            self._refusing.pop(peer, None)
        if self.rules.depends_on_sessions():
            self._changed()

    def refused(self, peer: str) -> None:
        """`peer` refused a copy for good: fail-over passes it over for a while."""
        was_usable = self.usable(peer)
        self._refusing[peer] = time.monotonic()
        if was_usable and self.rules.depends_on_sessions():     # once per episode: a re-ask moves every copy
            self._changed()

    def set_routes(self, routes: dict[str, str]) -> int:
        """The Control service's static table (in dynamic mode: the fallback for destinations not reached yet)."""
        n = self.static.set_routes(routes)
        for dst, hop in sorted(self.static.routes.items()):
            self.records.write("route", dst=dst, next_hop=hop, cost=None, reason="static")
        self._changed()
        return n

    def set_rules(self, raw: list) -> int:
        """Replace the rules (raises RuleError, keeping the old ones, when `raw` is invalid)."""
        self.rules = RuleSet(parse_rules(raw, self.cfg.neighbours))
        log.info("%s: %d routing rules installed", self.me, len(self.rules))
        self._changed()
        return len(self.rules)

    def _changed(self) -> None:
        for w in self._watchers:
            w()

    # -- the daemon's side --------------------------------------------------------------------------------
    def frame_handlers(self) -> dict[str, Callable[[Peer, link_pb2.Frame], None]]:
        """Frame kinds this router needs the link layer to hand it (announced as capabilities)."""
        if self.dynamic is None:
            return {}
        if self.dynamic.monitor is None:
            return {CAPABILITY: self.dynamic.on_frame}
        return {CAPABILITY: self.dynamic.on_frame, KEY_KIND: self.dynamic.on_probe_key}

    async def start(self) -> None:
        if self.dynamic is not None:
            await self.dynamic.start()

    async def stop(self) -> None:
        if self.dynamic is not None:
            await self.dynamic.stop()

    @property
    def mode(self) -> str:
        return "dynamic" if self.dynamic is not None else "static"

    def table(self) -> list[tuple[str, str, float, str]]:
        """(destination, next hop, cost, how learned), destinations in natural order."""
        if self.dynamic is not None:
            return self.dynamic.table()
        return [(d, h, math.nan, "neighbour" if d == h else "static") for d, h in self.static.table()]

    def links(self) -> dict[str, dict]:
        if self.dynamic is not None:
            return self.dynamic.links()
        return {n: {"up": p.stats.up} for n, p in sorted(self.peers.items())}

    def rules_json(self) -> str:
        return json.dumps(self.rules.to_plain())

    def snapshot(self) -> dict | None:
        """The metrics.jsonl `routing` record (None for plain static routing without rules)."""
        if self.dynamic is not None:
            return self.dynamic.snapshot()
        if self.rules:
            return {"mode": "static", "rules": len(self.rules)}
        return None
