"""Two Docker engines on one machine, each in a network namespace of its own, as two machines' engines would be.

Each dockerd is started with `nsenter --net=/run/netns/<ns>` (`ip netns exec` would remount /sys and hide the
cgroups from it), with its own data root, exec root, pidfile and socket, and no iptables or bridge (hosts are
`--network none` containers). They start empty: the node image is built once on the session's engine (the
`node_image` fixture) and copied onto both with `docker save | docker load`. At the end each dockerd is stopped
through its own pid and its namespace and roots are removed. The start-up cost (both engines, then both image
loads) is printed with `-s` and kept in `Machines`.

The rig's tests are an xdist group of their own (`docker-multi`), run by another worker than the single-engine
tests' group while those run: the two groups share the session's one engine (../conftest.py).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbed import docker_engine, image
from testbed.docker_engine import Engine

NAMESPACES = ("wanbed-eng1", "wanbed-eng2")    # not the testbed's run prefix: `testbed clean` must leave them
# The two machines' network between them (a veth pair, as in bench/probe_swarm.sh): what the agents' wire halves
# open their tunnels on. It goes with the namespaces.
MACHINE_NET = {"m1": ("wanbed-ve1", "10.231.7.1"), "m2": ("wanbed-ve2", "10.231.7.2")}
# The controller (this root namespace) reaches each machine's address as it would over a real LAN: a veth pair
# per engine namespace (a /30 each) and a host route to the machine's address through it. The clock exchange
# probes the machines there over UDP. Bridging is avoided: the root namespace's firewall may drop forwarded frames.
CONTROLLER_NET = {"m1": ("wanbed-vc1", "10.231.8.1", "wanbed-vm1", "10.231.8.2"),
                  "m2": ("wanbed-vc2", "10.231.8.5", "wanbed-vm2", "10.231.8.6")}


@dataclass
class Machines:
    engines: list[Engine]                      # m1, m2
    source: Engine                             # the session's engine, where the image was built
    missing_before: list[str]                  # machines that had no node image before the rig loaded it
    loaded: dict[str, float] = field(default_factory=dict)   # machine -> seconds of its save | load
    start_seconds: float = 0.0                 # both dockerd up (started concurrently)
    addresses: dict[str, str] = field(default_factory=dict)  # machine -> its address on the machines' network
    # (reached from the controller too: CONTROLLER_NET)


def _start(index: int, ns: str) -> docker_engine.StartedEngine:
    # Short root: containerd's sockets live under the exec root (108-byte unix path limit).
    root = Path(tempfile.mkdtemp(prefix=f"tb-m{index}-", dir="/tmp"))
    return docker_engine.start_engine(root, netns=ns, name=f"m{index}")


@pytest.fixture(scope="session")
def machines(engine: str, node_image: image.BuildResult) -> Iterator[Machines]:
    if shutil.which("nsenter") is None:
        pytest.skip("nsenter (util-linux) is not installed")
    for ns in NAMESPACES:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)   # left by a killed session
        subprocess.run(["ip", "netns", "add", ns], check=True)
    (v1, _), (v2, _) = MACHINE_NET.values()
    subprocess.run(["ip", "link", "add", v1, "netns", NAMESPACES[0], "type", "veth", "peer", "name", v2,
                    "netns", NAMESPACES[1]], check=True)
    for ns, (dev, addr) in zip(NAMESPACES, MACHINE_NET.values()):
        for args in (["addr", "add", f"{addr}/24", "dev", dev], ["link", "set", dev, "up"],
                     ["link", "set", "lo", "up"]):
            subprocess.run(["ip", "-n", ns, *args], check=True)
    for (m, (mine, mine_addr, theirs, their_addr)), ns in zip(CONTROLLER_NET.items(), NAMESPACES):
        subprocess.run(["ip", "link", "del", mine], capture_output=True)     # left by a killed session
        subprocess.run(["ip", "link", "add", mine, "type", "veth", "peer", "name", theirs, "netns", ns], check=True)
        subprocess.run(["ip", "addr", "add", f"{mine_addr}/30", "dev", mine], check=True)
        subprocess.run(["ip", "link", "set", mine, "up"], check=True)
        subprocess.run(["ip", "-n", ns, "addr", "add", f"{their_addr}/30", "dev", theirs], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", theirs, "up"], check=True)
        subprocess.run(["ip", "route", "replace", f"{MACHINE_NET[m][1]}/32", "via", their_addr, "dev", mine],
                       check=True)
    docker_engine.sweep_stale_roots(Path("/tmp"), ("tb-m1-", "tb-m2-"))     # a killed session's engines
    started: list[docker_engine.StartedEngine] = []
    try:
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(_start, i + 1, ns) for i, ns in enumerate(NAMESPACES)]
        errors = [f.exception() for f in futures if f.exception() is not None]
        started += [f.result() for f in futures if f.exception() is None]   # stopped below even if one failed
        if errors:
            raise errors[0]
        engines = [s.engine for s in started]
        source = Engine("controller", engine)
        rig = Machines(engines, source, [e.name for e in engines if not image.image_exists(node_image.image, e)],
                       start_seconds=time.monotonic() - t0,
                       addresses={m: addr for m, (_, addr) in MACHINE_NET.items()})
        rig.loaded = image.distribute_image(node_image.image, [source, *engines])
        print(f"\nmulti-engine rig: 2 dockerd up in {rig.start_seconds:.1f} s; node image loaded: "
              + ", ".join(f"{m} {s:.1f} s" for m, s in rig.loaded.items()), flush=True)
        yield rig
    finally:
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda s: s.stop(), started))
        print(f"\nmulti-engine rig: 2 dockerd stopped in {time.monotonic() - t0:.1f} s", flush=True)
        for s in started:
            docker_engine.unmount_under(s.root)
            shutil.rmtree(s.root, ignore_errors=True)
        for mine, *_ in CONTROLLER_NET.values():
            subprocess.run(["ip", "link", "del", mine], capture_output=True)   # its route goes with it
        for ns in NAMESPACES:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
