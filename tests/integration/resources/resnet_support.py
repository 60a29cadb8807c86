"""Helpers for the resource-management integration tests: ring routes, a load generator, a progress watchdog."""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from node.config import dump
from testbed.localnet import LocalNet

# Fast session timers so a test never waits long on a dead peer.
FAST = {"session": {"keepalive": 0.3, "hold_time": 1.5, "backoff_min": 0.05, "backoff_max": 0.5},
        "metrics_interval": 0.5}


def ring_routes(names: list[str]) -> dict[str, dict[str, str]]:
    """Unidirectional ring: every node sends everything to its successor."""
    out: dict[str, dict[str, str]] = {}
    for i, n in enumerate(names):
        nxt = names[(i + 1) % len(names)]
        out[n] = {d: nxt for d in names if d != n}
    return out


def set_routes(net: LocalNet, routes: dict[str, dict[str, str]]) -> None:
    """Rewrite the nodes' config files with these routing tables (before start)."""
    for name, table in routes.items():
        node = net.nodes[name]
        node.cfg.routes = dict(table)
        node.cfg_path.write_text(dump(node.cfg))


@dataclass
class Load:
    """Submitter threads: each node sends to chosen destinations until stopped; counts what was accepted."""
    net: LocalNet
    plan: dict[str, list[str]]             # node -> destinations to pick from
    sizes: list[int]
    threads_per_node: int = 2
    seed: int = 1
    accepted: dict[str, dict] = field(default_factory=dict)      # msg_id -> {src, dst, size, ts}
    refused: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> "Load":
        for node, dsts in self.plan.items():
            for k in range(self.threads_per_node):
                t = threading.Thread(target=self._run, args=(node, dsts, random.Random(f"{self.seed}{node}{k}")),
                                     daemon=True)
                t.start()
                self._threads.append(t)
        return self

    def _run(self, node: str, dsts: list[str], rng: random.Random) -> None:
        with self.net.client(node) as c:
            while not self._stop.is_set():
                dst, size = rng.choice(dsts), rng.choice(self.sizes)
                try:
                    r = c.send([dst], size=size)
                except Exception:            # a busy node may time a call out; the load just goes on
                    continue
                with self._lock:
                    if r.accepted:
                        self.accepted[r.msg_id] = {"src": node, "dst": dst, "size": size, "ts": time.time()}
                    else:
                        assert "congested" in r.reason, r.reason
                        self.refused += 1
                if not r.accepted:
                    time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=35)


def delivered_ids(net: LocalNet) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for n in net.nodes:
        for d in net.records(n, "delivery"):
            out[d["msg_id"]] = d
    return out


def delivered_count(net: LocalNet) -> int:
    total = 0
    for n in net.nodes:
        with net.client(n) as c:
            total += c.stats()["delivered"]
    return total


def watch_progress(net: LocalNet, accepted: dict, quiet: float, limit: float, step: float = 0.25) -> str:
    """Watchdog: 'deadlock' when no message was delivered for `quiet` seconds while some accepted ones are
    still undelivered; 'done' when all accepted ones are delivered; 'timeout' after `limit` seconds."""
    deadline = time.monotonic() + limit
    last, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        n = delivered_count(net)
        if n != last:
            last, last_change = n, time.monotonic()
        if n >= len(accepted):
            return "done"
        if time.monotonic() - last_change > quiet:
            return "deadlock"
        time.sleep(step)
    return "timeout"


def thesis_size(rng: random.Random, f: int) -> int:
    """A message size from the thesis' mix (Table 6.1 shape): 70% single fragment, 20% 2-30, 10% 31-100."""
    u = rng.random()
    if u < 0.7:
        return rng.randint(100, f)
    if u < 0.9:
        return rng.randint(2, 30) * f
    return rng.randint(31, 100) * f


def submit_load(client: Callable[[str], Any], names: list[str], per_node: int, gap: float, f: int,
                seed: str) -> dict[str, dict]:
    """Every node submits `per_node` thesis-sized messages to random other nodes, one thread per node;
    returns the accepted ones by message id (every submission must be accepted)."""
    accepted: dict[str, dict] = {}
    lock = threading.Lock()

    def node_load(n: str) -> None:
        rng = random.Random(f"{seed}-{n}")
        with client(n) as c:
            for _ in range(per_node):
                dst, size = rng.choice([x for x in names if x != n]), thesis_size(rng, f)
                r = c.send([dst], size=size)
                assert r.accepted, r.reason
                with lock:
                    accepted[r.msg_id] = {"src": n, "dst": dst, "size": size}
                time.sleep(gap)

    threads = [threading.Thread(target=node_load, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return accepted
