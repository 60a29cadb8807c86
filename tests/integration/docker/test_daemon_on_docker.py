"""The real node daemon in containers: runs as the non-root user, delivers across a shaped link, and
comes back after a container restart (the docker meaning of the `restart` fault) with its spool."""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from node.client import NodeClient
from testbed import image
from testbed.network import Network
from testbed.runtime.docker import CONTAINER_WORKDIR, DockerHost
from testbed.topology.generators import linear
from testbed.topology.model import Direction

# One Docker engine and image cache for the session: the Docker tests run on one worker.
pytestmark = [pytest.mark.xdist_group("docker"), pytest.mark.timeout(240)]

DATA_PORT, MGMT_PORT = 7000, 7001
UP_WITHIN = 60.0      # generous bound for a daemon to answer Health (2 cores, other tests running)


def _write_configs(net: Network) -> None:
    topo = net.topology
    for name in topo.node_names():
        neighbours = {p: f"{net.link_address(p, name)}:{DATA_PORT}" for p in topo.neighbours(name)}
        cfg = {"name": name, "data_listen": f"0.0.0.0:{DATA_PORT}",
               "mgmt_listen": f"{net.mgmt_address(name)}:{MGMT_PORT}", "neighbours": neighbours,
               "records_dir": CONTAINER_WORKDIR, "metrics_interval": 0.5}
        (net.host(name).workdir / "node.yaml").write_text(yaml.safe_dump(cfg))


def _start(net: Network, name: str) -> None:
    net.host(name).start("daemon", ["python3", "-m", "node", "--config", f"{CONTAINER_WORKDIR}/node.yaml"])


def _client(net: Network, name: str) -> NodeClient:
    return NodeClient(f"{net.mgmt_address(name)}:{MGMT_PORT}", timeout=10)


def _wait(cond, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {within:.0f} s")
        time.sleep(0.2)


def _sessions_up(net: Network, name: str) -> bool:
    with _client(net, name) as c:
        try:
            nb = c.stats()["neighbours"]
        except Exception:  # noqa: BLE001 - not up yet
            return False
        return bool(nb) and all(v.get("up") for v in nb.values())


def _delivered(workdir: Path, msg_id: str) -> bool:
    f = workdir / "deliveries.jsonl"
    return f.exists() and msg_id in f.read_text()


@pytest.fixture
def daemons(node_image: image.BuildResult) -> Iterator[Network]:
    net = Network(linear(2, defaults=Direction(delay=0.005)), runtime="docker", shaper="wire",
                  handle_signals=False)
    with net:
        _write_configs(net)
        for n in net.hosts:
            _start(net, n)
        for n in net.hosts:
            with _client(net, n) as c:
                _wait(lambda: c.health(timeout=1.0), UP_WITHIN, f"node {n} healthy")
        yield net


def test_daemon_runs_unprivileged_and_delivers(daemons: Network) -> None:
    a, b = list(daemons.hosts)
    host = daemons.host(a)
    assert isinstance(host, DockerHost)
    proc = host.processes[0]
    pid = host.host_pid(proc)
    assert pid is not None
    status = Path(f"/proc/{pid}/status").read_text()
    uid_line = [line for line in status.splitlines() if line.startswith("Uid:")][0]
    assert set(uid_line.split()[1:]) == {str(image.NODE_UID)}, uid_line
    cap_eff = [line for line in status.splitlines() if line.startswith("CapEff:")][0]
    assert int(cap_eff.split()[1], 16) == 0, "the daemon must hold no capabilities"
    _wait(lambda: _sessions_up(daemons, a), UP_WITHIN, "neighbour session up")
    with _client(daemons, a) as c:
        res = c.send([b], size=5000)
    assert res.accepted, res.reason
    _wait(lambda: _delivered(daemons.host(b).workdir, res.msg_id), 30, "delivery")
    # The records the daemon wrote in its mounted workdir are the testbed's run directory files.
    assert (daemons.host(a).workdir / "submissions.jsonl").exists()


def test_container_restart_then_daemon_again(daemons: Network) -> None:
    a, b = list(daemons.hosts)
    host = daemons.host(b)
    assert isinstance(host, DockerHost)
    _wait(lambda: _sessions_up(daemons, a), UP_WITHIN, "neighbour session up")
    host.kill()                                  # kill -9 of the whole container, daemon included
    with _client(daemons, a) as c:
        held = c.send([b], size=4000)            # a stores it and forwards once b is back
    assert held.accepted, held.reason
    report = host.restart()
    assert "eth0" in report.interfaces and len(report.interfaces) == 2
    with _client(daemons, b) as c:
        assert not c.health(timeout=1.0)
    _start(daemons, b)                           # same config, same spool in the mounted workdir
    with _client(daemons, b) as c:
        _wait(lambda: c.health(timeout=1.0), UP_WITHIN, "restarted node healthy")
    _wait(lambda: _sessions_up(daemons, a), UP_WITHIN, "session to the restarted node")
    _wait(lambda: _delivered(host.workdir, held.msg_id), 30, "delivery of the message held during the outage")
    with _client(daemons, a) as c:
        res = c.send([b], size=3000)
    assert res.accepted, res.reason
    _wait(lambda: _delivered(host.workdir, res.msg_id), 30, "delivery after the restart")
