"""A container restart keeps the host's place in the WAN: links, addresses, routes, shaping, partitions."""
from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator

import pytest

from testbed import image
from testbed.network import Network
from testbed.runtime.docker import OLD_NETNS_SUFFIX, DockerHost
from testbed.runtime.netns import netns_exists
from testbed.topology.generators import linear
from testbed.topology.model import Direction

# One Docker engine and image cache for the session: the Docker tests run on one worker.
pytestmark = [pytest.mark.xdist_group("docker"), pytest.mark.timeout(240)]

DELAY = 0.010    # one-way per link; a -> c crosses two links: RTT >= 4 x DELAY


def _rtts(out: str) -> list[float]:
    return [float(x) / 1000 for x in re.findall(r"time=([\d.]+) ms", out)]


def _ping(net: Network, src: str, dst_addr: str, count: int = 3) -> list[float]:
    res = net.host(src).run(["ping", "-n", "-c", str(count), "-i", "0.1", "-W", "2", dst_addr])
    return _rtts(res.stdout)


def _reachable(net: Network, src: str, dst_addr: str, within: float = 6.0) -> bool:
    """Pings until one answer or `within` seconds (ARP after a carrier change may need a retry)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if _ping(net, src, dst_addr, count=1):
            return True
        time.sleep(0.2)
    return False


def _routes(net: Network, name: str) -> set[str]:
    out = net.host(name).run(["ip", "-4", "route", "show"]).stdout
    return {" ".join(w for w in line.split() if w != "linkdown") for line in out.splitlines() if line.strip()}


@pytest.fixture
def net3(node_image: image.BuildResult) -> Iterator[Network]:
    net = Network(linear(3, defaults=Direction(delay=DELAY)), runtime="docker", shaper="wire",
                  handle_signals=False, sysctls={"net.ipv4.tcp_slow_start_after_idle": 0})
    with net:
        yield net


def test_restart_replumbs_links_addresses_routes(net3: Network) -> None:
    a, b, c = list(net3.hosts)
    host = net3.host(b)
    assert isinstance(host, DockerHost)
    ifaces_before = {line.split()[0].split("@")[0] for line in host.run(["ip", "-br", "link"]).stdout.splitlines()}
    ifaces_before -= {"lo"}
    assert len(_ping(net3, a, net3.data_address(c))) == 3
    sleeper = host.start("sleeper", ["sleep", "300"])
    report = host.restart()
    assert host.state() == "running"
    # Every interface came along (mgmt eth0 and both data links), with addresses and routes.
    assert set(report.interfaces) == ifaces_before
    assert report.addresses >= 3 and report.routes >= 1
    assert not netns_exists(host.netns + OLD_NETNS_SUFFIX)
    # The container's processes did not survive (it is a restart), the links did.
    assert host.run(["kill", "-0", str(sleeper.pid)]).returncode != 0
    rtts = _ping(net3, a, net3.data_address(c), count=5)[1:]
    assert rtts, "a cannot reach c through the restarted b"
    assert min(rtts) >= 4 * DELAY, rtts           # still shaped: two links, both directions
    # b itself is reachable on every plane: management from the testbed, data from its neighbours.
    mgmt = subprocess.run(["ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", net3.mgmt_address(b)],
                          capture_output=True, text=True)
    assert mgmt.returncode == 0, mgmt.stdout
    assert _ping(net3, c, net3.data_address(b))
    # Link faults still work after the move (the wire emulator kept the TAP file descriptors).
    net3.link_down(a, b)
    assert _ping(net3, a, net3.data_address(b)) == []
    net3.link_up(a, b)
    assert _reachable(net3, a, net3.data_address(b))


def test_restart_keeps_partition_and_heal_works(net3: Network) -> None:
    a, b, c = list(net3.hosts)
    net3.partition([a], [b, c])
    assert _ping(net3, a, net3.data_address(b)) == []
    report = net3.host(b).restart()
    assert report.iptables
    assert _ping(net3, a, net3.data_address(b)) == [], "the partition was lost in the restart"
    net3.heal()
    assert _reachable(net3, a, net3.data_address(b))


def test_kill_keeps_namespace_then_restart(net3: Network) -> None:
    """docker kill stops every process; the named netns (and the links) stay until the restart."""
    a, b, _ = list(net3.hosts)
    host = net3.host(b)
    assert isinstance(host, DockerHost)
    host.kill()
    assert host.state() == "exited" and netns_exists(host.netns)
    # The kernel stack of b's namespace still answers, as with a killed daemon on the netns runtime.
    assert _ping(net3, a, net3.data_address(b))
    host.restart()
    assert _ping(net3, a, net3.data_address(b))
    p = host.start("sleeper", ["sleep", "30"])
    assert host.run(["kill", "-0", str(p.pid)]).returncode == 0


def test_restart_while_a_link_is_down(net3: Network) -> None:
    """Routes over a link that is down print as `linkdown`; they must come back all the same."""
    a, b, c = list(net3.hosts)
    net3.link_down(b, c)
    before = _routes(net3, b)
    report = net3.host(b).restart()
    assert report.routes >= 1
    assert _routes(net3, b) == before
    assert _ping(net3, a, net3.data_address(c)) == []
    net3.link_up(b, c)
    assert _reachable(net3, a, net3.data_address(c))


def test_restart_sets_the_scenario_sysctls_again(net3: Network) -> None:
    b = list(net3.hosts)[1]

    def value() -> str:
        return net3.host(b).run(["cat", "/proc/sys/net/ipv4/tcp_slow_start_after_idle"]).stdout.strip()
    assert value() == "0"
    net3.host(b).restart()
    assert value() == "0"        # a new container has a new namespace with the kernel's defaults
