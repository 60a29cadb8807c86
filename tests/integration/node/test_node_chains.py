"""Linear chains of daemon processes on loopback: everything arrives exactly once, in both modes."""
from __future__ import annotations

import collections
import random

import pytest

from node import schema
from node.errors import UserError
from nodenet_support import FAST, wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("mode", ["fragmenting", "non-fragmenting"])
@pytest.mark.parametrize("hops", [3, 5])
def test_chain_delivers_everything_exactly_once(localnet, mode: str, hops: int) -> None:
    net = localnet(hops=hops, mode=mode, fragment_size=1000, wire_chunk=4096)
    first, last = "n1", f"n{hops + 1}"
    rng = random.Random(hops)
    sent: dict[str, bytes] = {}
    with net.client(first) as c:
        for size in [0, 1, 999, 1000, 1001, 20_000, 150_000] + [rng.randrange(1, 5000) for _ in range(13)]:
            body = rng.randbytes(size)
            r = c.send([f"bob@{last}"], payload=body)
            assert r.accepted, r.reason
            sent[r.msg_id] = body
        r = c.send([last], size=300_000)            # generated content
        assert r.accepted
        generated = r.msg_id
    with net.client(last) as c:
        # generous bound: a few seconds of loopback work
        wait_until(lambda: len(c.mailbox()) >= len(sent) + 1, 60,
                   what=f"{len(sent) + 1} messages in the mailbox of {last}")
        items = c.mailbox(include_payload=True)
    counts = collections.Counter(i.msg_id for i in items)
    assert set(counts) == set(sent) | {generated}
    assert all(n == 1 for n in counts.values())
    for i in items:
        assert i.hops == hops
        if i.msg_id in sent:
            assert i.payload == sent[i.msg_id]
        else:
            assert i.size == 300_000
    deliveries = net.records(last, "delivery")
    assert len(deliveries) == len(sent) + 1 and len({d["msg_id"] for d in deliveries}) == len(deliveries)
    for d in deliveries:
        assert schema.validate("delivery", d) == [] and d["mode"] == mode and d["hops"] == hops
        expected_frags = max(1, -(-d["size"] // 1000)) if mode == "fragmenting" else 1
        assert d["fragments"] == expected_frags
    subs = net.records(first, "submission")
    assert all(schema.validate("submission", s) == [] for s in subs) and len(subs) == len(sent) + 1
    # every hop handed everything on: nothing left in any spool queue
    for n in net.nodes:
        with net.client(n) as c:
            assert c.drain(10).empty
    # the first metrics line comes one metrics_interval after the node started: a fast run can end before it
    metrics = wait_until(lambda: net.records(first, "metrics"), 10 * FAST["metrics_interval"],
                         what=f"a metrics line from {first}")
    assert all(schema.validate("metrics", m) == [] for m in metrics)


def test_multi_recipient_and_local_delivery(localnet) -> None:
    net = localnet(hops=2)
    with net.client("n2") as c:
        r = c.send(["a@n1", "b@n3", "c@n2", "d@n3", "n3"], payload=b"to everyone")
        assert r.accepted
    for node, users in (("n1", {"a"}), ("n2", {"c"}), ("n3", {"b", "d", ""})):
        with net.client(node) as c:
            wait_until(lambda: len(c.mailbox()) >= len(users), 20, what=f"{len(users)} items in the mailbox of {node}")
            items = c.mailbox(include_payload=True)
            assert {i.user for i in items} == users and all(i.payload == b"to everyone" for i in items)
            assert c.status(r.msg_id).state == "delivered"
            # one user's copies at a time: an empty user is refused, not taken for every user
            with pytest.raises(UserError, match="DeleteMail needs a user"):
                c.delete_mail([r.msg_id])
            assert [c.delete_mail([r.msg_id], user=u) for u in sorted(users - {""})] == [1] * len(users - {""})
            assert c.delete_mail([r.msg_id], no_user=True) == ("" in users) and c.mailbox() == []
