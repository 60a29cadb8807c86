"""The docker runtime: containers as hosts, links plumbed into their named netns, faults, cleanup."""
from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator

import pytest

from testbed import image, registry
from testbed.docker_engine import docker
from testbed.runtime.docker import DockerRuntime, clean_orphans
from testbed.runtime.netns import netns_exists

# One Docker engine and image cache for the session: the Docker tests run on one worker.
pytestmark = [pytest.mark.xdist_group("docker"), pytest.mark.timeout(300)]


def _labelled(run_id: str) -> list[str]:
    return docker(["ps", "-a", "--filter", f"label=wanbed.run={run_id}", "--format", "{{.Names}}"]).stdout.split()


@pytest.fixture
def runtime(node_image: image.BuildResult) -> Iterator[DockerRuntime]:
    run_id = registry.new_run_id()
    registry.register(run_id, "test-docker")
    rt = DockerRuntime(run_id, image=node_image.image)
    try:
        yield rt
    finally:
        rt.close()
        registry.unregister(run_id)


def _veth(rt: DockerRuntime, a: str, b: str) -> None:
    """A veth pair between two hosts' named netns, 10.77.0.1/24 <-> 10.77.0.2/24."""
    ha, hb = rt.hosts[a], rt.hosts[b]
    va, vb = f"{rt.prefix}{a}", f"{rt.prefix}{b}"
    subprocess.run(["ip", "link", "add", va, "type", "veth", "peer", "name", vb], check=True)
    subprocess.run(["ip", "link", "set", va, "netns", ha.netns], check=True)
    subprocess.run(["ip", "link", "set", vb, "netns", hb.netns], check=True)
    for h, v, addr in ((ha, va, "10.77.0.1/24"), (hb, vb, "10.77.0.2/24")):
        subprocess.run(["ip", "-n", h.netns, "addr", "add", addr, "dev", v], check=True)
        subprocess.run(["ip", "-n", h.netns, "link", "set", v, "up"], check=True)


def test_link_between_containers(runtime: DockerRuntime) -> None:
    a, b = runtime.add_hosts(["a", "b"])
    assert netns_exists(a.netns) and netns_exists(b.netns)
    assert set(_labelled(runtime.run_id)) == {a.container, b.container}
    # Hardening: no privilege gain inside, pids and memory capped (testbed/runtime/docker.py defaults).
    hc = json.loads(docker(["inspect", "--format", "{{json .HostConfig}}", a.container]).stdout)
    assert "no-new-privileges" in (hc["SecurityOpt"] or []) and hc["PidsLimit"] == 4096
    assert hc["Memory"] == 2 << 30
    _veth(runtime, "a", "b")
    res = a.run(["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.77.0.2"])
    assert res.returncode == 0 and " 0% packet loss" in res.stdout
    # tc inside the container's namespace from outside: 30 ms egress delay on a's side (TBF/HTB work
    # here, netem does not, so the delay comes from a pacing qdisc only when netem exists).
    tc = subprocess.run(["ip", "netns", "exec", a.netns, "tc", "qdisc", "add", "dev", f"{runtime.prefix}a",
                         "root", "tbf", "rate", "10mbit", "burst", "32kbit", "latency", "50ms"])
    assert tc.returncode == 0
    assert a.run(["ping", "-c", "1", "-W", "2", "10.77.0.2"]).returncode == 0


def test_process_and_faults(runtime: DockerRuntime) -> None:
    (h,) = runtime.add_hosts(["n1"])
    p = h.start("sleeper", ["sleep", "300"])
    assert p.pid > 1 and h.run(["kill", "-0", str(p.pid)]).returncode == 0
    h.signal(p, signal.SIGKILL)
    assert p.popen is not None and p.popen.wait(timeout=10) != 0
    h.pause()
    assert h.state() == "paused"
    h.unpause()
    assert h.state() == "running"
    h.kill()
    assert h.state() == "exited"
    h.restart()
    assert h.state() == "running" and netns_exists(h.netns)
    assert h.run(["ip", "link", "show", "lo"]).returncode == 0


def test_cleanup_close_and_orphans(node_image: image.BuildResult) -> None:
    run_id = registry.new_run_id()
    registry.register(run_id, "test-docker")
    rt = DockerRuntime(run_id, image=node_image.image)
    try:
        rt.add_hosts(["x", "y"])
        rt.close()
        assert _labelled(run_id) == []
        hosts = rt.add_hosts(["z"])
        netns = hosts[0].netns
        rt.hosts.clear()                    # simulated crash: the runtime forgets its containers
        registry.unregister(run_id)         # and its owner is gone
        removed = clean_orphans(registry.is_live).removed
        assert f"container {rt.prefix}-z" in removed
        assert _labelled(run_id) == [] and not netns_exists(netns)
    finally:
        rt.close()
        registry.unregister(run_id)
