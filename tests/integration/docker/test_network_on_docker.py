"""The public Network API on runtime docker: wire-shaped links plumbed into containers."""
from __future__ import annotations

import re

import pytest

from testbed import image
from testbed.docker_engine import docker
from testbed.network import Network
from testbed.topology.generators import linear
from testbed.topology.model import Direction

# One Docker engine and image cache for the session: the Docker tests run on one worker.
pytestmark = [pytest.mark.xdist_group("docker"), pytest.mark.timeout(300)]

DELAY = 0.020   # seconds one way per direction; ping RTT crosses it twice


def test_linear_network_on_docker(node_image: image.BuildResult) -> None:
    net = Network(linear(2, defaults=Direction(delay=DELAY)), runtime="docker", handle_signals=False)
    run_id = net.run_id
    with net:
        a, b = list(net.hosts)
        assert net.hosts[a].netns.startswith("tb")
        res = net.host(a).run(["ping", "-c", "5", "-i", "0.2", "-W", "2", net.data_address(b)])
        assert res.returncode == 0, res.stdout + res.stderr
        rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", res.stdout)]
        # Lower bound from the configured delay (2 x 20 ms); upper bound a generous sanity limit.
        assert rtts and min(rtts) >= 2 * DELAY * 1000 * 0.9
        assert max(rtts) < 2 * DELAY * 1000 + 200
    left = docker(["ps", "-a", "--filter", f"label=wanbed.run={run_id}", "--format", "{{.Names}}"]).stdout
    assert left.strip() == ""
