"""A node restarted with a full spool does not load the queued payloads into memory, and delivers
everything once its neighbour is back (bench/bench_restart_memory.py measures the same at 2 GB)."""
from __future__ import annotations

import pytest

from nodenet_support import wait_until
from tests.integration.support import rss_bytes

pytestmark = pytest.mark.timeout(120)

MB = 1 << 20
MESSAGES = 5
SIZE = 10 * MB          # 50 MB queued in all
FRAGMENT = 65536        # big pieces: what is measured is payload bytes, not Python objects per piece


def test_a_restart_with_50_mb_queued_keeps_the_payloads_in_the_spool_and_delivers_all(localnet) -> None:
    net = localnet(hops=1, start=False, fragment_size=FRAGMENT, limits={"max_frame_bytes": FRAGMENT})
    net.start("n1")
    fresh = rss_bytes(net.nodes["n1"].proc.pid)
    with net.client("n1") as c:
        ids = []
        for _ in range(MESSAGES):
            r = c.send(["n2"], size=SIZE)
            assert r.accepted, r.reason
            ids.append(r.msg_id)
        assert c.stats()["neighbours"]["n2"]["queue_bytes"] == MESSAGES * SIZE
    assert net.stop("n1") == 0
    net.start("n1")                          # ready = recovered: the daemon recovers before it serves
    with net.client("n1") as c:
        assert c.stats()["neighbours"]["n2"]["queue_bytes"] == MESSAGES * SIZE
    grown = rss_bytes(net.nodes["n1"].proc.pid) - fresh
    # the payloads stayed in the spool: what a restart costs is far below the 50 MB queued
    assert grown < MESSAGES * SIZE // 5, f"resident memory grew by {grown / MB:.1f} MB after the restart"
    net.start("n2")
    with net.client("n2") as c:
        wait_until(lambda: len(c.mailbox()) >= MESSAGES, 60, what="all messages in the mailbox of n2")
        got = c.mailbox()
        assert sorted(i.msg_id for i in got) == sorted(ids) and {i.size for i in got} == {SIZE}
    with net.client("n1") as c:
        wait_until(lambda: c.stats()["neighbours"]["n2"]["queue_bytes"] == 0, 20, what="n1's queue drained")
