"""WAN conformance on links plumbed into containers (wire shaper): delay, loss, rate, down/up.

The probes run inside the containers (`docker exec`: ping, iperf3 from the image), so the
traffic crosses the containers' own network namespaces and the TAP ends moved into them.
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest

from testbed import image
from testbed.network import Network
from testbed.topology.generators import linear
from testbed.topology.model import Direction
from tests.integration.support import binomial_interval

# timing-sensitive (measured delays, rates or fault timing): runs while no other test does
# One Docker engine and image cache for the session: the Docker tests run on one worker.
pytestmark = [pytest.mark.xdist_group("docker"), pytest.mark.alone, pytest.mark.timeout(240)]

DELAY = 0.015        # one-way delay per direction on the link (s)
LOSS = 0.10          # random loss a -> b only
RATE = 20e6          # bit/s, both directions
SLACK = 0.010        # per one-way trip: userspace relay + docker exec scheduling on 2 busy cores


def _pings(out: str) -> list[float]:
    return [float(x) / 1000 for x in re.findall(r"time=([\d.]+) ms", out)]


@pytest.fixture(scope="module")
def wan(node_image: image.BuildResult) -> Iterator[Network]:
    d = Direction(delay=DELAY, rate=RATE)
    net = Network(linear(2, defaults=d), runtime="docker", shaper="wire", handle_signals=False)
    with net:
        yield net


def test_delay_is_configured(wan: Network) -> None:
    a, b = list(wan.hosts)
    res = wan.host(a).run(["ping", "-n", "-c", "8", "-i", "0.1", "-W", "2", wan.data_address(b)])
    rtts = _pings(res.stdout)[1:]          # the first one includes ARP
    assert len(rtts) == 7, res.stdout + res.stderr
    rtts.sort()
    med = rtts[len(rtts) // 2]
    # Twice the one-way delay, never less, at most two trips of slack more.
    assert 2 * DELAY <= med <= 2 * DELAY + 2 * SLACK, rtts


def test_rate_limits_tcp(wan: Network) -> None:
    a, b = list(wan.hosts)
    server = wan.host(b).start("iperf3", ["iperf3", "-s", "-1"])
    try:
        time.sleep(0.5)
        res = wan.host(a).run(["iperf3", "-c", wan.data_address(b), "-t", "4", "-O", "1", "-J"], timeout=60)
        bps = json.loads(res.stdout)["end"]["sum_received"]["bits_per_second"]
    finally:
        assert server.popen is not None
        server.popen.wait(timeout=20)
    # Goodput = rate x 1448/1514 (headers); at least 90% of that, above the raw rate only by noise (1%).
    expected = RATE * 1448 / 1514
    assert 0.90 * expected <= bps <= 1.01 * RATE, (bps, expected)


def test_loss_in_binomial_interval(wan: Network) -> None:
    a, b = list(wan.hosts)
    wan.set_link(a, b, direction="a_to_b", loss=LOSS)      # frames sent by a, as named here
    try:
        n = 600
        res = wan.host(a).run(["ping", "-n", "-q", "-c", str(n), "-i", "0.005", "-W", "1", wan.data_address(b)],
                              timeout=60)
        m = re.search(r"(\d+) packets transmitted, (\d+) received", res.stdout)
        assert m, res.stdout + res.stderr
        lost = int(m.group(1)) - int(m.group(2))
        # Only the request direction is lossy: n x p +- 4 sd (31-89 of 600); both directions would be ~114.
        lo, hi = binomial_interval(n, LOSS)
        assert lo <= lost <= hi, (lost, lo, hi)
    finally:
        wan.set_link(a, b, loss=0.0)


def test_link_down_and_up(wan: Network) -> None:
    a, b = list(wan.hosts)
    dst = wan.data_address(b)
    assert wan.host(a).run(["ping", "-n", "-c", "2", "-i", "0.1", "-W", "2", dst]).returncode == 0
    wan.link_down(a, b)
    res = wan.host(a).run(["ping", "-n", "-c", "3", "-i", "0.2", "-W", "1", dst])
    assert _pings(res.stdout) == []
    wan.link_up(a, b)
    time.sleep(0.2)
    res = wan.host(a).run(["ping", "-n", "-c", "3", "-i", "0.1", "-W", "2", dst])
    assert len(_pings(res.stdout)) == 3, res.stdout
