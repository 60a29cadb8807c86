"""The scenario's `hosts.busy`: the section, and the spinners started in a host and ended by pid."""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbed.experiment.busy import BusyLoad, spinner_argv
from testbed.runtime.base import Process
from testbed.scenario import ScenarioError, load_text

pytestmark = pytest.mark.timeout(30)

BASE = "name: b\ntopology: {generator: ring, params: {n: 3}}\n"


def test_hosts_busy_is_read_and_checked() -> None:
    assert load_text(BASE, "b.yaml").hosts.busy == 0
    assert load_text(BASE + "hosts: {busy: 2}\n", "b.yaml").hosts.busy == 2
    for bad, words in (("hosts: {busy: -1}", "hosts.busy"), ("hosts: {busy: two}", "hosts.busy"),
                       ("hosts: {spin: 1}", "spin")):
        with pytest.raises(ScenarioError) as info:
            load_text(BASE + bad + "\n", "b.yaml")
        assert words in str(info.value)


@dataclass
class LocalHost:
    """A host whose processes run on this machine (what the runtime's start and signal do, without a namespace)."""
    name: str
    workdir: Path
    started: list[Process] = field(default_factory=list)

    def start(self, name: str, argv: list[str]) -> Process:
        log = self.workdir / f"{self.name}-{name}.log"
        popen = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        proc = Process(self.name, name, popen.pid, argv, log, popen)
        self.started.append(proc)
        return proc

    def signal(self, process: Process, sig: int) -> None:
        os.kill(process.pid, sig)


@dataclass
class LocalNetwork:
    hosts: dict[str, LocalHost]

    def host(self, name: str) -> LocalHost:
        return self.hosts[name]


def test_spinners_run_per_host_and_end_by_pid(tmp_path: Path) -> None:
    net = LocalNetwork({h: LocalHost(h, tmp_path) for h in ("n1", "n2")})
    busy = BusyLoad(net, ["n1", "n2"], 2)       # type: ignore[arg-type]
    busy.start()
    try:
        assert [len(h.started) for h in net.hosts.values()] == [2, 2]
        assert all(p.argv == spinner_argv(False) for h in net.hosts.values() for p in h.started)
        time.sleep(0.2)
        assert all(p.popen is not None and p.popen.poll() is None for p in busy.procs)     # spinning
    finally:
        started = [p for h in net.hosts.values() for p in h.started]
        busy.stop()
    assert all(p.popen is not None and p.popen.poll() is not None for p in started)
    assert busy.pids() == []
