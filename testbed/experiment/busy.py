"""The scenario's `hosts.busy`: k processes spinning on the CPU in every host that runs a node daemon.

They start in the host (its network namespace, or its container) through the runtime, like the daemons,
and are ended by the pids the runtime gave back (SIGKILL: a spinner has nothing to flush).
"""
from __future__ import annotations

import logging
import signal
import sys

from testbed.network import Network
from testbed.runtime.base import Process

log = logging.getLogger(__name__)

SPIN = "while True: pass"
WAIT = 5.0          # seconds a killed spinner gets to be reaped


def spinner_argv(docker: bool) -> list[str]:
    # -S -E: nothing from site or the environment, so a spinner is only the loop
    return ["python3" if docker else sys.executable, "-S", "-E", "-c", SPIN]


class BusyLoad:
    """k spinners per host in `hosts`; stop() ends every one it started."""

    def __init__(self, network: Network, hosts: list[str], k: int, docker: bool = False) -> None:
        self.network = network
        self.hosts = hosts
        self.k = k
        self.docker = docker
        self.procs: list[Process] = []

    def start(self) -> None:
        for host in self.hosts:
            for i in range(self.k):
                self.procs.append(self.network.host(host).start(f"busy{i}", spinner_argv(self.docker)))
        if self.procs:
            log.info("%d busy processes started (%d per host)", len(self.procs), self.k)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        for p in self.procs:
            try:
                self.network.host(p.host).signal(p, signal.SIGKILL)
            except Exception as exc:  # noqa: BLE001 - one spinner must not keep the others running
                log.warning("cannot end busy process %d in %s: %s", p.pid, p.host, exc)
        for p in self.procs:
            if p.popen is not None:
                try:
                    p.popen.wait(timeout=WAIT)
                except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: the runtime's teardown reaps it
                    log.warning("busy process %d in %s did not end", p.pid, p.host)
        self.procs = []
