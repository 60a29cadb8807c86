"""Message-stream backpressure: a stalled recipient stops a long stream at its source.

Chain n1-n2-n3-n4 (fragmenting, real daemons on loopback). n4's recipient pool
has 75 multi-fragment units and no removal process (space returns only when
mail is deleted). A 60-fragment message fills most of it; then a 50-fragment
message cannot get a reservation and waits (FCFS). Its stream may hold at most
`stream_allocation` fragments at each intermediate MTA; everything else stays
at the source. Deleting the first message from the mailbox frees the space,
the reservation is granted and the stream completes.
"""
from __future__ import annotations

import time

import pytest

from testbed.localnet import LocalNet
from resnet_support import FAST

F = 1000
ALLOC = 2
RESOURCES = {"recipient_pool": 100, "recipient_single_share": 0.25, "removal_interval": 0.0,
             "stream_allocation": ALLOC, "transit_buffers": 60, "input_pool": 200}


def stats(net: LocalNet, n: str) -> dict:
    with net.client(n) as c:
        return c.stats()


def wait_delivered(net: LocalNet, n: str, count: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        got = stats(net, n)["delivered"]
        if got >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


@pytest.mark.timeout(120)
def test_stalled_recipient_keeps_the_stream_at_its_source(tmp_path) -> None:
    with LocalNet.chain(tmp_path / "net", 3, mode="fragmenting", fragment_size=F, resources=RESOURCES, **FAST) as net:
        net.start()
        with net.client("n1") as c:
            first = c.send(["n4"], size=60 * F)
            assert first.accepted, first.reason
            assert wait_delivered(net, "n4", 1, 30) == 1
            second = c.send(["n4"], size=50 * F)
            assert second.accepted, second.reason
        # let the stream advance as far as it can: several retry rounds (RETRY_CAP = 1 s) and probe periods
        time.sleep(4.0)
        assert stats(net, "n4")["delivered"] == 1, "the second message must wait for recipient space"
        rec = stats(net, "n4")["resources"]["recipient"]
        assert rec["reservation_queue_length"] == 1 and rec["used"]["multi"] == 60, rec
        for n in ("n2", "n3"):
            res = stats(net, n)["resources"]
            assert res["streams"]["held_fragments"] <= ALLOC, (n, res["streams"])
            assert sum(res["buffers"]["usage"]) <= ALLOC, (n, res["buffers"])
        src = stats(net, "n1")["neighbours"]["n2"]
        # everything not held by the two intermediate hops is still at the source
        assert src["queue_fragments"] + src["inflight"] >= 50 - 2 * ALLOC, src
        assert src["scheduler"]["waiting_for_credit"] + src["scheduler"]["waiting_for_timer"] >= 1, src

        with net.client("n4") as c:
            assert c.delete_mail([first.msg_id], no_user=True) == 1          # the user reads the first message
        assert wait_delivered(net, "n4", 2, 60) == 2
        got = {d["msg_id"]: d for d in net.records("n4", "delivery")}
        assert got[second.msg_id]["size"] == 50 * F and got[second.msg_id]["fragments"] == 50
        for n in ("n2", "n3"):
            res = stats(net, n)["resources"]
            assert res["streams"]["active"] == 0 and sum(res["buffers"]["usage"]) == 0, (n, res)
