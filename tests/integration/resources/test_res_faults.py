"""Nothing accepted is lost when a transit MTA is killed -9 mid-stream with resource management on.

Chain n1-n2-n3-n4 (real daemons). Long messages travel on streams with an
allocation of 2; n2 dies while they are under way and comes back. Its
unacknowledged pieces are re-sent, its recovered pieces are counted against
its buffers again, stalled streams get credits again on the new sessions, and
every message arrives exactly once; afterwards no buffer is left charged.
"""
from __future__ import annotations

import time

import pytest

from testbed.localnet import LocalNet
from resnet_support import FAST

F = 1000
RESOURCES = {"stream_allocation": 2, "removal_interval": 0.05, "recipient_pool": 2000, "input_pool": 1000}


def stats(net: LocalNet, n: str) -> dict:
    with net.client(n) as c:
        return c.stats()


@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", ["fragmenting", "non-fragmenting"])
def test_kill_9_of_a_transit_mta_loses_nothing(tmp_path, mode: str) -> None:
    with LocalNet.chain(tmp_path / "net", 3, mode=mode, fragment_size=F, resources=RESOURCES, **FAST) as net:
        net.start()
        sizes = [80 * F, 500, 40 * F, 2 * F, 60 * F, 700, 30 * F]
        with net.client("n1") as c:
            sent = {}
            for s in sizes:
                r = c.send(["n4"], size=s)
                assert r.accepted, r.reason
                sent[r.msg_id] = s
        time.sleep(0.3)                 # under way (streams of allocation 2 move a few fragments per round trip)
        net.kill("n2")
        time.sleep(1.0)
        net.start("n2")
        deadline = time.monotonic() + 90
        while stats(net, "n4")["delivered"] < len(sent) and time.monotonic() < deadline:
            time.sleep(0.2)
        got = net.records("n4", "delivery")
        assert sorted(d["msg_id"] for d in got) == sorted(sent), "every message exactly once"
        for d in got:
            assert d["size"] == sent[d["msg_id"]]
        # streams whose first part passed before the crash close once idle (max(5 s, 2 x hold time)) and free
        # their allocation; everything else is freed by the last acks
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            usage = {n: stats(net, n)["resources"]["buffers"]["usage"] for n in ("n1", "n2", "n3")}
            if all(sum(u) == 0 for u in usage.values()):
                break
            time.sleep(0.5)
        assert all(sum(u) == 0 for u in usage.values()), usage
