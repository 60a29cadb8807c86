"""Several node daemon PROCESSES on loopback, wired as a chain or any graph: for tests and benchmarks.

Each daemon is a real `python -m node --config FILE` process with its own
SQLite spool and records directory under `workdir`. The run is registered in
testbed.registry (kind "node-localnet", daemon pids in its state) before any
process starts and unregistered by `close()`, which ends exactly the pids it
started.
"""
from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from node.client import NodeClient
from node.config import NodeConfig, dump as dump_config
from node.registry import config_from_dict
from testbed import registry, secrets

ROOT = Path(__file__).resolve().parent.parent


def free_port(taken: set[int] | None = None) -> int:
    """A free TCP port BELOW the kernel's ephemeral range.

    A port the kernel hands out for bind(0) is an ephemeral one: between our check and the node's bind, any
    outgoing connection (another node dialling a neighbour) may take it as its source port. Ports below
    ip_local_port_range are never chosen by the kernel on its own, so the check stays true.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    pick = random.SystemRandom()
    for _ in range(200):
        port = pick.randrange(max(1024, low - 12000), low)
        if taken is not None and port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if taken is not None:
            taken.add(port)
        return port
    raise RuntimeError("no free TCP port below the ephemeral range")


def shortest_routes(name: str, edges: list[tuple[str, str]]) -> dict[str, str]:
    """Static next hops from BFS over the graph (what the testbed computes from a topology)."""
    adj: dict[str, list[str]] = {}
    for a, b in edges:
        adj.setdefault(a, []).append(b)
        adj.setdefault(b, []).append(a)
    routes: dict[str, str] = {}
    first: dict[str, str] = {}
    frontier = [name]
    seen = {name}
    while frontier:
        nxt = []
        for u in frontier:
            for v in sorted(adj.get(u, [])):
                if v not in seen:
                    seen.add(v)
                    first[v] = v if u == name else first[u]
                    nxt.append(v)
        frontier = nxt
    for dst, hop in first.items():
        if dst != hop:
            routes[dst] = hop
    return routes


@dataclass(frozen=True)
class NetnsLinks:
    """Put every node in its own network namespace, neighbours joined by veth pairs shaped by TBF.

    Rate only (the kernel here has no netem, so no delay); needs root. Management
    addresses become Unix sockets in the work directory, so the test reaches them
    from the root namespace.
    """
    rate_mbit: float
    burst_bytes: int = 32_000
    queue_latency_ms: int = 400


def _sh(*cmd: str) -> None:
    out = subprocess.run(list(cmd), capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")


@dataclass
class LocalNode:
    name: str
    cfg: NodeConfig
    cfg_path: Path
    proc: subprocess.Popen | None = None

    @property
    def mgmt(self) -> str:
        return self.cfg.mgmt_listen


@dataclass
class LocalNet:
    workdir: Path
    nodes: dict[str, LocalNode] = field(default_factory=dict)
    run_id: str = ""
    netns: dict[str, str] = field(default_factory=dict)
    secrets: secrets.RunSecrets = field(default_factory=secrets.RunSecrets)

    @classmethod
    def build(cls, workdir: Path, names: list[str], edges: list[tuple[str, str]], netns: NetnsLinks | None = None,
              tls: bool = False, auth: bool = False, users: dict[str, list[str]] | None = None,
              **overrides) -> "LocalNet":
        """`tls`/`auth`: the scenario's `security:` (a CA and certificates, tokens for `users`: node -> names)."""
        per_node: dict[str, dict] = overrides.pop("per_node", {})    # node -> settings for that node only
        net = cls(Path(workdir))
        net.run_id = registry.new_run_id()
        registry.register(net.run_id, "node-localnet", state={"workdir": str(workdir), "pids": [], "netns": []})
        try:
            net.workdir.mkdir(parents=True, exist_ok=True)
            net.secrets = secrets.make(net.workdir, {n: list((users or {}).get(n, [])) for n in names}, tls, auth,
                                       nodes_dir=net.workdir)
            addrs = net._wire(names, edges, netns)
            for n in names:
                net._configure(n, addrs, edges, {**overrides, **per_node.get(n, {})})
        except BaseException:
            net.close()
            raise
        return net

    def _configure(self, n: str, addrs: dict, edges: list[tuple[str, str]], overrides: dict) -> None:
        d = self.workdir / n
        d.mkdir(parents=True, exist_ok=True)
        neigh = {peer: addr for (me, peer), addr in addrs["neigh"].items() if me == n}
        raw = {"name": n, "data_listen": addrs["data"][n], "mgmt_listen": addrs["mgmt"][n],
               "neighbours": neigh, "routes": shortest_routes(n, edges), "records_dir": str(d),
               "spool": str(d / "spool.db")}
        security = self.secrets.node_section(n)
        if security:
            raw["security"] = security
        for k, v in overrides.items():
            if isinstance(v, dict) and k in ("batch", "session", "limits"):
                raw[k] = dict(v)
            else:
                raw[k] = v
        cfg = config_from_dict(raw)
        path = d / "node.yaml"
        path.write_text(dump_config(cfg))
        self.nodes[n] = LocalNode(n, cfg, path)

    def _wire(self, names: list[str], edges: list[tuple[str, str]], netns: NetnsLinks | None) -> dict:
        """Addresses for every node: loopback ports, or namespaces + shaped veth pairs."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if netns is None:
            taken: set[int] = set()   # ports are only checked, not held: never hand one out twice
            ports = {n: free_port(taken) for n in names}
            return {"data": {n: f"127.0.0.1:{ports[n]}" for n in names},
                    "mgmt": {n: f"127.0.0.1:{free_port(taken)}" for n in names},
                    "neigh": {**{(a, b): f"127.0.0.1:{ports[b]}" for a, b in edges},
                              **{(b, a): f"127.0.0.1:{ports[a]}" for a, b in edges}}}
        if os.geteuid() != 0:
            raise PermissionError("network namespaces need root")
        pre = registry.prefix(self.run_id)
        self.netns = {n: f"{pre}{n}"[:15] for n in names}
        rec = registry.load(self.run_id)
        if rec is not None:
            rec.state["netns"] = list(self.netns.values())
            registry.save(rec)
        for ns in self.netns.values():
            _sh("ip", "netns", "add", ns)
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        neigh: dict[tuple[str, str], str] = {}
        for i, (a, b) in enumerate(edges):
            va, vb = f"{pre}v{i}a", f"{pre}v{i}b"
            _sh("ip", "link", "add", va, "netns", self.netns[a], "type", "veth", "peer", "name", vb,
                "netns", self.netns[b])
            for v, node, host in ((va, a, 1), (vb, b, 2)):
                ns = self.netns[node]
                _sh("ip", "-n", ns, "addr", "add", f"10.{200 + i // 250}.{i % 250}.{host}/24", "dev", v)
                _sh("ip", "-n", ns, "link", "set", v, "up")
                _sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", v, "root", "tbf",
                    "rate", f"{int(netns.rate_mbit * 1000)}kbit", "burst", str(netns.burst_bytes),
                    "latency", f"{netns.queue_latency_ms}ms")
            neigh[(a, b)] = f"10.{200 + i // 250}.{i % 250}.2:7000"
            neigh[(b, a)] = f"10.{200 + i // 250}.{i % 250}.1:7000"
        return {"data": {n: "0.0.0.0:7000" for n in names},
                "mgmt": {n: f"unix:{(self.workdir / n / 'mgmt.sock').resolve()}" for n in names},
                "neigh": neigh}

    @classmethod
    def chain(cls, workdir: Path, hops: int, **overrides) -> "LocalNet":
        names = [f"n{i}" for i in range(1, hops + 2)]
        return cls.build(workdir, names, list(zip(names, names[1:])), **overrides)

    def _save_pids(self) -> None:
        rec = registry.load(self.run_id)
        if rec is not None:
            rec.state["pids"] = [n.proc.pid for n in self.nodes.values() if n.proc and n.proc.poll() is None]
            registry.save(rec)

    def start(self, *names: str, wait: bool = True) -> None:
        for n in names or list(self.nodes):
            node = self.nodes[n]
            if node.proc is not None and node.proc.poll() is None:
                continue
            wrap = ["ip", "netns", "exec", self.netns[n]] if self.netns else []   # ip execs: the pid is python's
            with open(node.cfg_path.parent / "stderr.txt", "a") as err:   # the child keeps its own copy
                node.proc = subprocess.Popen([*wrap, sys.executable, "-m", "node", "--config", str(node.cfg_path)],
                                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
        self._save_pids()
        if wait:
            for n in names or list(self.nodes):
                self.wait_ready(n)
            self.wait_sessions()

    def wait_ready(self, name: str, timeout: float = 20.0) -> None:
        node = self.nodes[name]
        deadline = time.monotonic() + timeout
        with self.client(name) as c:
            while time.monotonic() < deadline:
                if node.proc is not None and node.proc.poll() is not None:
                    raise RuntimeError(f"node {name} exited with {node.proc.returncode}: "
                                       + (node.cfg_path.parent / "stderr.txt").read_text()[-2000:])
                if c.health(timeout=1.0):
                    return
                time.sleep(0.05)
        raise RuntimeError(f"node {name} not ready after {timeout} s")

    def wait_sessions(self, timeout: float = 20.0) -> None:
        """Until every node reports every neighbour session up."""
        deadline = time.monotonic() + timeout
        while True:
            down = []
            for n, node in self.nodes.items():
                if node.proc is None or node.proc.poll() is not None:
                    continue
                with self.client(n) as c:
                    down += [f"{n}-{p}" for p, v in c.stats()["neighbours"].items()
                             if not v["up"] and self.nodes[p].proc is not None and self.nodes[p].proc.poll() is None]
            if not down:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"sessions not up after {timeout} s: {', '.join(down)}")
            time.sleep(0.05)

    def kill(self, name: str) -> None:
        """kill -9."""
        p = self.nodes[name].proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
        self._save_pids()

    def stop(self, name: str, timeout: float = 20.0) -> int:
        """SIGTERM and wait; the exit status."""
        p = self.nodes[name].proc
        if p is None:
            return 0
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._save_pids()
        return p.returncode

    def client(self, name: str, user: str = "") -> NodeClient:
        """A client with the node's admin token (or `user`'s) when the net has tokens, else the control token;
        over TLS, checking the node's certificate, when the net has certificates."""
        node = self.nodes[name]
        access = self.secrets.access(name, user)
        return NodeClient(node.mgmt, token=access.token or node.cfg.control_token, ca=access.ca, name=access.name)

    def records(self, name: str, kind: str) -> list[dict]:
        import json
        from node.records import FILES
        f = self.nodes[name].cfg_path.parent / FILES[kind]
        if not f.exists():
            return []
        return [json.loads(line) for line in f.read_text().splitlines() if line.strip()]

    def close(self) -> None:
        for n in self.nodes:
            self.stop(n, timeout=10.0)
        for ns in self.netns.values():   # deleting a namespace deletes the veth ends inside it
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        registry.unregister(self.run_id)

    def __enter__(self) -> "LocalNet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
