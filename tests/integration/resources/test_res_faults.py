"""Nothing accepted is lost when a transit MTA is killed -9 mid-stream with resource management on.

Chain n1-n2-n3-n4 (real daemons). Long messages travel on streams with an
allocation of 2; n2 dies while they are under way, with pieces from n1
provably in flight to it (n1 must send them again), and comes back. Its
unacknowledged pieces are re-sent, its recovered pieces are counted against
its buffers again, stalled streams get credits again on the new sessions, and
every message arrives exactly once; afterwards no buffer is left charged.
"""
from __future__ import annotations

import time

import pytest

from testbed.localnet import LocalNet
from resnet_support import FAST
from tests.integration.support import kill_with_pieces_in_flight, recoveries, wait_until

F = 1000
RESOURCES = {"stream_allocation": 2, "removal_interval": 0.05, "recipient_pool": 2000, "input_pool": 1000}
HOLD = FAST["session"]["hold_time"]


def stats(net: LocalNet, n: str) -> dict:
    with net.client(n) as c:
        return c.stats()


@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", ["fragmenting", "non-fragmenting"])
def test_kill_9_of_a_transit_mta_loses_nothing(tmp_path, mode: str) -> None:
    with LocalNet.chain(tmp_path / "net", 3, mode=mode, fragment_size=F, resources=RESOURCES, **FAST) as net:
        net.start()
        sizes = [80 * F, 500, 40 * F, 2 * F, 60 * F, 700, 30 * F]
        sent = {}

        def send(c, s: int) -> None:
            r = c.send(["n4"], size=s)
            assert r.accepted, r.reason
            sent[r.msg_id] = s

        with net.client("n1") as c:
            for s in sizes:
                send(c, s)

        def one_more() -> None:          # a single piece needs no stream credit: n1 sends it to n2 at once
            with net.client("n1") as c:
                send(c, 900)

        # n2 dies while the streams are under way, with pieces from n1 provably in flight to it
        # (frozen first, see tests/integration/support.py)
        resent = kill_with_pieces_in_flight(net, "n2", "n1", one_more, HOLD)
        time.sleep(1.0)
        net.start("n2")
        found = recoveries(tmp_path / "net" / "n2" / "node.log")
        print(f"{mode}: n1 re-sent {resent} pieces; n2 found at its restart: {found[-1]}")
        assert resent > 0
        assert len(found) == 2, found
        wait_until(lambda: stats(net, "n4")["delivered"] >= len(sent), 90, 0.2,
                   what=f"{len(sent)} messages delivered at n4")
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
