"""Faults with real daemon processes: kill -9 mid-transfer, a neighbour down, lifetime expiry, refusals."""
from __future__ import annotations

import collections
import json
import threading
import time

import pytest

from node import schema
from nodenet_support import FAST, wait_until
from tests.integration.support import kill_with_pieces_in_flight

pytestmark = pytest.mark.timeout(180)
HOLD = FAST["session"]["hold_time"]
SIZE = 20_000          # bytes per stream message
# How long before a kill -9 a committed delivery may still be waiting for its record line: one pass of a busy
# event loop over a group commit's deliveries (commit_window is 2 ms; this allows for a loaded machine).
LAST_MOMENTS = 2.0


def _stream(net, count: int, size: int, to: str, out: list[str], stop: threading.Event) -> None:
    with net.client("n1") as c:
        for _ in range(count):
            if stop.is_set():
                return
            r = c.send([to], size=size)
            assert r.accepted, r.reason
            out.append(r.msg_id)


def _kill_with_pieces_in_flight(net, victim: str, upstream: str, sent: list[str]) -> int:
    """kill -9 `victim` while `upstream` provably has pieces in flight to it (tests/integration/support.py);
    the message that guarantees it is one more of the stream, n1 -> n4. Returns the pieces re-sent."""
    def one_more() -> None:
        with net.client("n1") as c:
            r = c.send(["n4"], size=SIZE)
            assert r.accepted, r.reason
            sent.append(r.msg_id)
    return kill_with_pieces_in_flight(net, victim, upstream, one_more, HOLD)


@pytest.mark.parametrize("mode", ["fragmenting", "non-fragmenting"])
def test_kill_9_of_the_middle_node_mid_stream_delivers_exactly_once(localnet, mode: str) -> None:
    net = localnet(hops=3, mode=mode, fragment_size=1000, wire_chunk=8192)
    sent: list[str] = []
    stop = threading.Event()
    # 300 messages in all: the stream thread's and one more at each of the three kills
    t = threading.Thread(target=_stream, args=(net, 300 - 3, SIZE, "n4", sent, stop))
    t.start()
    resent: dict[str, int] = {}
    try:
        with net.client("n4") as c4:
            # mid-transfer: messages are already arriving at the end and many more are on their way
            wait_until(lambda: len(sent) >= 60 and c4.stats()["delivered"] >= 5, 30, 0.01,
                       what="60 messages sent and 5 delivered")
        # each kill hits pieces in flight to the victim (see _kill_with_pieces_in_flight)
        resent["n2"] = _kill_with_pieces_in_flight(net, "n2", "n1", sent)     # kill -9 mid-stream
        kill_at = len(sent)
        time.sleep(0.5)
        net.start("n2")
        wait_until(lambda: len(sent) >= 150, 30, 0.01, what="150 messages sent")
        resent["n3"] = _kill_with_pieces_in_flight(net, "n3", "n2", sent)     # and the other middle node
        net.start("n3")
        wait_until(lambda: len(sent) >= 220, 30, 0.01, what="220 messages sent")
        n4_killed_after = time.time()
        resent["n4"] = _kill_with_pieces_in_flight(net, "n4", "n3", sent)     # and the recipient, mid-reassembly
        net.start("n4")
    finally:
        t.join(60)
    assert len(sent) == 300 and kill_at < 250
    # every kill hit data in flight: the surviving upstream neighbour had to send pieces again
    assert all(n > 0 for n in resent.values()), resent
    print(f"pieces re-sent by the upstream neighbour after each kill ({mode}): {resent}")
    with net.client("n4") as c:
        # generous: 6 MB over loopback plus reconnects (backoff_max 0.5 s, hold time 1.5 s)
        wait_until(lambda: len(c.mailbox()) >= 300, 90, 0.2, what="300 messages in the mailbox of n4")
        items = c.mailbox()
    counts = collections.Counter(i.msg_id for i in items)
    assert set(counts) == set(sent) and max(counts.values()) == 1
    deliveries = net.records("n4", "delivery")
    # The mailbox is authoritative. A record line is written once its delivery's transaction has committed, so
    # the kill of n4 may lose the lines of the deliveries committed in its last moments (one group commit can
    # hold many); a delivery made well before that kill must have its line.
    ids = [d["msg_id"] for d in deliveries]
    assert len(ids) == len(set(ids)) and set(ids) <= set(sent)
    unrecorded = {i.msg_id: i.deliver_ts for i in items if i.msg_id not in set(ids)}
    early = {m: ts for m, ts in unrecorded.items() if ts < n4_killed_after - LAST_MOMENTS}
    assert not early, f"deliveries without a record line made more than {LAST_MOMENTS} s before n4's kill: {early}"
    assert all(d["size"] == SIZE for d in deliveries)
    with net.client("n1") as c:
        st = c.stats()
        assert st["neighbours"]["n2"]["reconnects"] >= 1


def test_neighbour_down_messages_wait_and_flow_when_it_returns(localnet) -> None:
    net = localnet(hops=2)
    net.stop("n3")
    with net.client("n1") as c:
        ids = [c.send(["n3"], size=5000).msg_id for _ in range(20)]
    with net.client("n2") as c:
        # the messages queue at n2 for the missing neighbour
        st = wait_until(lambda: (lambda s: s if s["neighbours"]["n3"]["queue_messages"] == 20 else None)(c.stats()), 20,
                        what="20 messages queued at n2 for the missing n3")
        assert st, c.stats()
        assert st["neighbours"]["n3"]["up"] is False and st["neighbours"]["n3"]["queue_bytes"] == 20 * 5000
    time.sleep(1.0)
    net.start("n3")
    with net.client("n3") as c:
        wait_until(lambda: len(c.mailbox()) >= 20, 30, what="20 messages in the mailbox of n3")
        assert sorted(i.msg_id for i in c.mailbox()) == sorted(ids)
    m = net.records("n2", "metrics")
    assert any(x["neighbours"]["n3"]["queue_messages"] > 0 for x in m)


def test_lifetime_expiry_sends_a_non_delivery_report_to_the_originator(localnet) -> None:
    net = localnet(hops=2)
    net.stop("n3")
    with net.client("n1") as c:
        r = c.send(["bob@n3"], size=3000, lifetime=1.0, originator="alice")
        assert r.accepted
        # expiry is checked every 0.5 s: report within lifetime + a few sweeps
        wait_until(lambda: any(i.kind == "ndr" for i in c.mailbox()), 15, what="a non-delivery report for alice at n1")
        ndr = [i for i in c.mailbox(include_payload=True) if i.kind == "ndr"]
        assert len(ndr) == 1 and ndr[0].user == "alice"
        body = json.loads(ndr[0].payload)
        assert body["msg_id"] == r.msg_id and body["dst"] == "n3" and "expired" in body["reason"]
        assert c.status(r.msg_id).state in ("forwarded", "not-delivered")
    reports = net.records("n2", "report")
    assert any(x["event"] == "ndr_made" and x["msg_id"] == r.msg_id for x in reports)
    assert all(schema.validate("report", x) == [] for x in reports)
    assert any(x["event"] == "ndr_delivered" for x in net.records("n1", "report"))
    # the expired message is never delivered later
    net.start("n3")
    time.sleep(1.0)
    with net.client("n3") as c:
        assert c.mailbox() == []


def test_unknown_recipient_and_bad_requests_are_refused_with_reasons(localnet) -> None:
    net = localnet(hops=1, local_users=["bob"])
    with net.client("n1") as c:
        r = c.send(["n9"], size=10)
        assert not r.accepted and "no route to n9" in r.reason
        r = c.send(["eve@n1"], size=10)
        assert not r.accepted and "unknown recipient eve@n1" in r.reason
        r = c.send(["n2"], size=10**13)
        assert not r.accepted and "exceeds" in r.reason
        r = c.send(["bad node!"], size=10)
        assert not r.accepted and "invalid recipient" in r.reason
        assert c.send(["n2"], size=10).accepted              # the node is unaffected
    subs = net.records("n1", "submission")
    assert [s["accepted"] for s in subs] == [False] * 4 + [True]
