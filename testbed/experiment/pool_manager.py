"""The testbed's side of a repetition's application instances (the scenario's `pools:`): it starts one client
process per instance (testbed/experiment/pool_apps.py, `python -P -m testbed.experiment.pool_apps`), hands
it its access on stdin, applies the pool faults to it and ends it at the teardown, always by the pid it
started.

`pool_join` starts an instance's process, `pool_leave` sends it `leave` (the process ends by itself once
drained; the teardown ends it if not), `pool_kill` writes killed.json (pid, time) into its folder and sends
SIGKILL to its pid. The teardown sends SIGTERM to every process at once and waits STOP_GRACE seconds for
their files, then SIGKILL. The live processes' pids stand in the run's registry record (`pool_client_pids`),
so `testbed clean` ends what a crashed testbed left.
"""
from __future__ import annotations

import json
import logging
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

from node.client import Access, NodeClient
from node.errors import UserError
from testbed import netstate, pycmd, registry
from testbed.experiment.pool_apps import (LOG, MODULE, SUBSCRIBED, instance_dir, mark_killed, read_info,
                                          subscription_name, write_info)

log = logging.getLogger(__name__)

PIDS_KEY = "pool_client_pids"  # in the run's registry state (testbed/cleanup.py ends recorded *_pids)
STOP_GRACE = 10.0             # seconds the instance processes get after SIGTERM to write their files
REAP_WAIT = 5.0               # seconds to wait for a killed process to be gone


class InstanceProcess:
    """The testbed's handle on one instance client process: started, told to leave, killed and stopped, always
    through the pid it started."""

    def __init__(self, app: str, name: str, node: str, argv: list[str], access: dict[str, Access],
                 directory: Path) -> None:
        self.app, self.name, self.node = app, name, node
        self.argv = argv
        self.access = access
        self.dir = directory
        self.state = "new"                 # new | active | leaving | killed | stopped
        self.proc: subprocess.Popen[str] | None = None
        self.subscribed = threading.Event()
        self.killed = 0.0

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / LOG, "ab") as logf:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logf,
                                         text=True, bufsize=1, start_new_session=True, env=pycmd.env())
        self.state = "active"
        self._send(json.dumps({n: {"token": a.token, "ca": a.ca.decode(), "name": a.name}
                               for n, a in self.access.items()}))
        threading.Thread(target=self._read, name=f"pool-out-{self.app}-{self.name}", daemon=True).start()

    def _send(self, line: str) -> bool:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):      # the process has ended (a broken pipe, a closed file)
            return False

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == SUBSCRIBED:
                self.subscribed.set()

    def leave(self) -> None:
        if not self._send("leave"):
            raise ValueError(f"the process of instance {self.app}.{self.name} has ended (see {self.dir / LOG})")
        self.state = "leaving"

    def kill(self) -> None:
        """kill -9 by pid: the successor's sign (killed.json) goes first, then the signal; nothing of the
        process's runs after it (its last instance.json stays, marked killed)."""
        assert self.proc is not None
        self.killed = time.time()
        mark_killed(self.dir, self.proc.pid, self.killed)
        self.proc.send_signal(signal.SIGKILL)
        self._reap(REAP_WAIT)
        self.state = "killed"
        info = read_info(self.dir) or {"app": self.app, "instance": self.name, "node": self.node}
        write_info(self.dir, {**info, "state": "killed", "pid": self.proc.pid, "killed": self.killed})

    def terminate(self) -> None:
        if self.running():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)

    def finish(self, deadline: float) -> None:
        """Wait for the process until `deadline` (monotonic), then SIGKILL it; its files are complete after."""
        if self.proc is None:
            return
        try:
            self.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("pool instance %s/%s (pid %d) did not stop within %.0f s of SIGTERM: killed",
                        self.app, self.name, self.proc.pid, STOP_GRACE)
            self.proc.send_signal(signal.SIGKILL)
            self._reap(REAP_WAIT)
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        if self.state != "killed" and self.proc.returncode not in (0, None):
            log.warning("pool instance %s/%s (pid %d) ended with status %s (see %s)", self.app, self.name,
                        self.proc.pid, self.proc.returncode, self.dir / LOG)
        if not read_info(self.dir):        # it died before its first instance.json
            write_info(self.dir, {"app": self.app, "instance": self.name, "node": self.node, "state": "exited",
                                  "pid": self.proc.pid, "exit_status": self.proc.returncode})
        if self.state != "killed":
            self.state = "stopped"

    def _reap(self, timeout: float) -> None:
        assert self.proc is not None
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("pool instance %s/%s (pid %d) still there %.0f s after SIGKILL", self.app, self.name,
                        self.proc.pid, timeout)


class PoolApps:
    """All application instance processes of a repetition; `later`: the instances a `pool_join` fault starts."""

    def __init__(self, apps: dict[str, dict[str, str]], later: set[tuple[str, str]], rep_dir: Path,
                 address: Callable[[str], str], tokens: dict[str, Access], heartbeat: float, crash_timeout: float,
                 user_access: Callable[[str, str], Access] | None = None, run_id: str = "") -> None:
        """`tokens`: node -> the admin's access there; `user_access`: (node, user) -> a user's, when the run has
        user tokens: an instance then runs as its application's user (the owner of its subscription).
        `run_id`: the run whose registry record lists the processes' pids ("" : none)."""
        self.later = set(later)
        self.run_id = run_id
        self._lock = threading.Lock()

        def access(app: str) -> dict[str, Access]:
            nodes = set(apps[app].values())
            if user_access is None:
                return {n: a for n, a in tokens.items() if n in nodes}
            return {node: user_access(node, app) for node in set(tokens) & nodes}

        self.clients: dict[tuple[str, str], InstanceProcess] = {}
        for app, insts in apps.items():
            nodes = sorted(set(insts.values()))
            for inst, node in insts.items():
                argv = pycmd.module_argv(
                    MODULE, "--app", app, "--instance", inst, "--rep-dir", str(Path(rep_dir).resolve()),
                    "--heartbeat", repr(heartbeat), "--crash-timeout", repr(crash_timeout),
                    *[a for i, n in insts.items() for a in ("--peer", f"{i}={n}")],
                    *[a for n in nodes for a in ("--address", f"{n}={address(n)}")])
                self.clients[(app, inst)] = InstanceProcess(app, inst, node, argv, access(app),
                                                            instance_dir(rep_dir, node, app, inst))
        self._started: set[tuple[str, str]] = set()

    def start(self, timeout: float, stop: threading.Event) -> list[str]:
        """Start every instance not held back for a join; returns those not subscribed within `timeout`."""
        first = [k for k in self.clients if k not in self.later]
        for k in first:
            self._start(k)
        deadline = time.monotonic() + timeout
        for k in first:
            while not self.clients[k].subscribed.wait(0.1):
                if stop.is_set() or time.monotonic() > deadline:
                    break
        return [f"{a}/{i}" for a, i in first if not self.clients[(a, i)].subscribed.is_set()]

    def _start(self, key: tuple[str, str]) -> None:
        if key not in self._started:
            self._started.add(key)
            self.clients[key].start()
            self._record_pids()

    def _record_pids(self) -> None:
        """The live processes' pids in the run's registry record, for `testbed clean` after a crashed testbed."""
        if not self.run_id:
            return
        with self._lock, netstate.locked(self.run_id):
            rec = registry.load(self.run_id)
            if rec is None:
                return
            rec.state[PIDS_KEY] = sorted(c.pid for k in self._started if (c := self.clients[k]).running())
            registry.save(rec)

    def fault(self, action: str, target: str) -> dict[str, Any]:
        """Apply `pool_join`, `pool_leave` or `pool_kill` to `target` ("<app>.<instance>"); the details for
        events.jsonl (with the process's pid)."""
        app, _, inst = target.partition(".")
        client = self.clients.get((app, inst))
        if client is None:
            raise ValueError(f"no application instance {target!r}")
        if action == "pool_join":
            if (app, inst) in self._started:
                raise ValueError(f"instance {target} is running already")
            self._start((app, inst))
        elif (app, inst) not in self._started:
            raise ValueError(f"instance {target} has not started")
        elif not client.running():
            raise ValueError(f"instance {target} has ended ({client.state})")
        elif action == "pool_leave":
            client.leave()
        elif action == "pool_kill":
            client.kill()
            self._record_pids()
        else:
            raise ValueError(f"unknown pool action {action!r}")
        return {"host": client.node, "app": app, "instance": inst, "pid": client.pid}

    def backlog(self, client: Callable[[str], NodeClient]) -> dict[str, int | str]:
        """The durable subscriptions of running (or killed, not yet taken over) instances that hold publications."""
        out: dict[str, int | str] = {}
        names = {subscription_name(a, i) for a, i in self._started}
        for node in sorted({self.clients[k].node for k in self._started}):
            try:
                with client(node) as nc:
                    infos = nc.subscriptions()
            except UserError:
                out[f"{node}/*"] = "unreachable"
                continue
            for info in infos:
                if info.durable and info.name in names and info.backlog:
                    out[f"{node}/{info.name}"] = int(info.backlog)
        return out

    def stop(self) -> None:
        """SIGTERM every instance process at once, then wait for each with one bound (SIGKILL after it)."""
        started = [self.clients[k] for k in sorted(self._started)]
        for c in started:
            c.terminate()
        deadline = time.monotonic() + STOP_GRACE
        for c in started:
            try:
                c.finish(deadline)
            except Exception as exc:  # noqa: BLE001 - one client's end must not cost the others their files
                log.warning("stopping pool instance %s/%s failed: %s", c.app, c.name, exc)
        self._record_pids()


