"""The node daemons of one run: start, health, kill/restart/pause/resume, stop.

Each daemon is `python -m node --config nodes/<name>/node.yaml` started in its
host through the runtime (so it lives in the host's network namespace or
container) and is only ever signalled through the pid the runtime gave back.
A restarted daemon reuses its config and spool: that is the point of the
kill -9 drills.
"""
from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

from node.client import Access, NodeClient
from node.errors import UserError
from testbed import pycmd
from testbed.experiment import nodeconfig
from testbed.network import Network
from testbed.runtime.base import Process
from testbed.runtime.docker import DockerHost

log = logging.getLogger(__name__)

TERM_GRACE = 10.0     # seconds a daemon gets to flush its records after SIGTERM
LOG_TAIL = 15         # lines of a failed daemon's log shown in the error
READY_POLL = 0.05     # wall seconds between looks at a starting daemon's management port
HEALTH_RETRY = 1.0    # wall seconds between health calls to a node whose port does not seem to listen yet
SESSIONS_POLL = 0.1   # wall seconds between looks at the neighbour sessions


class NodeDaemons:
    """The set of node daemons of one network."""

    def __init__(self, network: Network, config_paths: dict[str, Path], docker: bool = False,
                 tokens: dict[str, Access] | None = None) -> None:
        self.network = network
        # node -> what health checks, stats and drain carry there: the node's admin token (security.auth) or its
        # control_token, and with security.tls the run's CA and the node's name (nodeconfig.client_tokens)
        self.tokens = tokens or {}
        self.config_paths = config_paths
        self.docker = docker
        self.procs: dict[str, Process] = {}
        self.state: dict[str, str] = {}          # node -> running | killed | paused | stopped
        self._lock = threading.Lock()
        # (node, timeout) -> a client kept for repeated Stats calls (drain, progress): one connection (and, with
        # security, one TLS handshake) per node rather than one per call
        self._stats_clients: dict[tuple[str, float], NodeClient] = {}

    # ---- lifecycle ------------------------------------------------------------------------

    def _argv(self, node: str) -> list[str]:
        if self.docker:
            return ["python3", "-m", "node", "--config", f"{nodeconfig.CONTAINER_WORKDIR}/node.yaml"]
        return pycmd.module_argv("node", "--config", str(self.config_paths[node].resolve()))

    def start(self, node: str) -> None:
        proc = self.network.host(node).start("daemon", self._argv(node), env=self.network.daemon_env(node))
        with self._lock:
            self.procs[node] = proc
            self.state[node] = "running"
        log.debug("node %s started: pid %d", node, proc.pid)

    def start_all(self) -> None:
        # A node dials the neighbours whose names sort after its own (node/link.py) and backs off after each
        # refused dial (0.1 s, doubling). Started from the last name down, the nodes a daemon dials are a
        # little ahead of it in the race for the CPU, so its first dials find them listening more often.
        for node in sorted(self.config_paths, reverse=True):
            self.start(node)
        with self._lock:        # the nodes in their own order again, as the host monitor writes them
            self.procs = {n: self.procs[n] for n in self.config_paths if n in self.procs}

    def client(self, node: str, timeout: float = 10.0) -> NodeClient:
        return NodeClient.to(nodeconfig.mgmt_target(self.network, node), self.tokens.get(node, Access()), timeout)

    def wait_healthy(self, timeout: float, stop: threading.Event | None = None) -> None:
        """Every daemon answers Health within `timeout`; else one UserError naming a node that did not.

        A gRPC channel whose first connection was refused (the daemon still importing) waits out its reconnect
        backoff (1 s, then 1.6 s, ...) before it dials again, so a daemon that became ready in the meantime
        went unnoticed for up to that long. Instead the management port is probed with a plain TCP connect
        every READY_POLL, and Health is asked over a fresh channel once the port takes connections (and every
        HEALTH_RETRY regardless, for a port a plain connect cannot tell about)."""
        deadline = time.monotonic() + timeout
        pending = list(self.config_paths)
        asked: dict[str, float] = {}         # node -> when Health was last asked
        while pending:
            if stop is not None and stop.is_set():
                return
            for n in list(pending):
                if self._exited(n):
                    raise UserError(f"node {n} exited during start-up; end of its log:\n{self.log_tail(n)}")
                target = nodeconfig.mgmt_target(self.network, n)
                if not _listening(target) and time.monotonic() - asked.get(n, 0.0) < HEALTH_RETRY:
                    continue
                asked[n] = time.monotonic()
                with self.client(n) as c:
                    if c.health(timeout=1.0):
                        pending.remove(n)
            if pending and time.monotonic() > deadline:
                n = pending[0]
                raise UserError(f"node {n} did not become healthy within {timeout:.0f} s "
                                f"({len(pending)} node(s) not ready); end of its log:\n{self.log_tail(n)}")
            if pending:
                time.sleep(READY_POLL)

    def wait_sessions(self, timeout: float, stop: threading.Event | None = None) -> list[str]:
        """Wait until every neighbour session is up; returns the nodes still missing one at the deadline."""
        deadline = time.monotonic() + timeout
        pending = list(self.config_paths)
        while pending and time.monotonic() < deadline and not (stop is not None and stop.is_set()):
            for n in list(pending):
                try:
                    if all(v.get("up") for v in self.stats(n, timeout=2.0)["neighbours"].values()):
                        pending.remove(n)
                except UserError:
                    pass
            if pending:
                time.sleep(SESSIONS_POLL)
        return pending

    def stats(self, node: str, timeout: float = 5.0) -> dict[str, Any]:
        """The node's Stats over a channel kept for the node. A kept channel that fails (its daemon was killed,
        say, and the channel now waits out gRPC's reconnect backoff) is dropped and the call made once more over
        a fresh one, so an answer is missed no more often than with a channel per call. UserError when the node
        does not answer. Called from the cell's thread only: a channel is closed by the thread that uses it."""
        key = (node, timeout)
        with self._lock:
            kept = self._stats_clients.get(key)
        if kept is not None:
            try:
                return kept.stats()
            except UserError:
                self._drop(key, kept)
        c = self.client(node, timeout=timeout)
        try:
            st = c.stats()
        except UserError:
            c.close()
            raise
        with self._lock:
            old = self._stats_clients.get(key)
            self._stats_clients[key] = c
        if old is not None and old is not c:
            old.close()
        return st

    def _drop(self, key: tuple[str, float], client: NodeClient) -> None:
        with self._lock:
            if self._stats_clients.get(key) is client:
                del self._stats_clients[key]
        client.close()

    def close_clients(self) -> None:
        """Close the channels `stats` keeps."""
        with self._lock:
            clients, self._stats_clients = list(self._stats_clients.values()), {}
        for c in clients:
            c.close()

    def _exited(self, node: str) -> bool:
        p = self.procs.get(node)
        return p is not None and p.popen is not None and p.popen.poll() is not None and not self.docker

    def log_tail(self, node: str) -> str:
        lines: list[str] = []
        d = self.config_paths[node].parent
        for name in ("node.log", "daemon.log"):
            f = d / name
            if f.exists():
                text = f.read_text(errors="replace").splitlines()
                if text:
                    lines += [f"  [{name}] {line}" for line in text[-LOG_TAIL:]]
        return "\n".join(lines) or "  (the log is empty)"

    def pids(self) -> dict[str, int]:
        """Machine-wide pids of running daemons (for the host monitor)."""
        with self._lock:
            live = {n: p for n, p in self.procs.items() if self.state.get(n) in ("running", "paused")}
        if not self.docker:
            return {n: p.pid for n, p in live.items()}
        # Inside a container the runtime's pid is container-local; the host monitor reads /proc.
        out: dict[str, int] = {}
        for n, proc in live.items():
            pid = self._docker_host(n).host_pid(proc)
            if pid:
                out[n] = pid
        return out

    def _docker_host(self, node: str) -> DockerHost:
        host = self.network.host(node)
        assert isinstance(host, DockerHost), host
        return host

    # ---- faults ----------------------------------------------------------------------------

    def _signal(self, node: str, sig: int) -> None:
        proc = self.procs.get(node)
        if proc is None:
            raise UserError(f"no daemon was started on {node}.")
        self.network.host(node).signal(proc, sig)

    def kill(self, node: str) -> dict[str, Any]:
        """kill -9: the daemon gets no chance to clean up (what the durability guarantees are about).

        On docker the whole container is killed (the real thing); its links stay, held by the
        named namespace, until `restart` starts it again and moves them in.
        """
        if self.docker:
            if node not in self.procs:
                raise UserError(f"no daemon was started on {node}.")
            host = self._docker_host(node)
            if self.state.get(node) == "paused":
                host.unpause()          # a frozen cgroup would hold the SIGKILL until thawed
            host.kill()
            self._reap(node)
            self.state[node] = "killed"
            return {"scope": "container"}
        if self.state.get(node) == "paused":
            self._signal(node, signal.SIGCONT)
        self._signal(node, signal.SIGKILL)
        self._reap(node)
        self.state[node] = "killed"
        return {"scope": "process"}

    def _reap(self, node: str) -> None:
        proc = self.procs[node]
        if proc.popen is not None:
            try:
                proc.popen.wait(timeout=5)
            except Exception:  # noqa: BLE001 - the runtime's teardown reaps it later
                pass

    def restart(self, node: str) -> dict[str, Any]:
        """Start the daemon again with the same config and spool (killing it first if it still runs).

        On docker this is a container restart: a fresh container process tree in which the
        runtime re-plumbs the host's links, addresses and routes before the daemon starts.
        """
        detail: dict[str, Any] = {"scope": "process"}
        if self.docker:
            report = self._docker_host(node).restart()
            if node in self.procs:
                self._reap(node)
            log.info("container of %s restarted, %d interfaces re-plumbed", node, len(report.interfaces))
            detail = {"scope": "container", "replumbed": sorted(report.interfaces),
                      "replumb_seconds": round(report.seconds, 3)}
        elif self.state.get(node) in ("running", "paused"):
            self.kill(node)
        self.start(node)
        return detail

    def pause(self, node: str) -> None:
        if self.state.get(node) == "running":
            if self.docker:
                self._docker_host(node).pause()       # freezes the container's cgroup
            else:
                self._signal(node, signal.SIGSTOP)
            self.state[node] = "paused"

    def resume(self, node: str) -> None:
        if self.state.get(node) == "paused":
            if self.docker:
                self._docker_host(node).unpause()
            else:
                self._signal(node, signal.SIGCONT)
            self.state[node] = "running"

    def reachable(self, node: str) -> bool:
        return self.state.get(node) == "running"

    # ---- stop ------------------------------------------------------------------------------

    def stop_all(self, grace: float = TERM_GRACE) -> list[str]:
        """SIGTERM every daemon (resuming paused ones first), SIGKILL after `grace`; returns nodes killed hard."""
        self.close_clients()
        live = {n: p for n, p in self.procs.items() if self.state.get(n) in ("running", "paused")}
        for n in live:
            if self.state[n] == "paused":
                self.resume(n)
            self._signal(n, signal.SIGTERM)
        deadline = time.monotonic() + grace
        hard: list[str] = []
        for n, p in live.items():
            if p.popen is None:
                continue
            try:
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
                hard.append(n)
                self._signal(n, signal.SIGKILL)
                try:
                    p.popen.wait(timeout=5)
                except Exception:  # noqa: BLE001
                    pass
            self.state[n] = "stopped"
        if hard:
            log.warning("daemons %s did not stop within %.0f s of SIGTERM and were killed", ", ".join(hard), grace)
        return hard


def _listening(target: str, timeout: float = READY_POLL) -> bool:
    """Whether something accepts TCP connections at `target` ("address:port")."""
    address, _, port = target.rpartition(":")
    try:
        with socket.create_connection((address.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False
