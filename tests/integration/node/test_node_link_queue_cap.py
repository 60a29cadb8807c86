"""Without `resources:` a link's queue is capped in bytes (limits.max_link_queue): above it a transit
node refuses arriving pieces "not now" (the sender keeps them) and the origin refuses submissions "congested";
nothing accepted is lost and everything flows once the next hop is back."""
from __future__ import annotations

import time

import pytest

from nodenet_support import wait_until

pytestmark = pytest.mark.timeout(120)

CAP = 1 << 20
SIZE = 50_000
BATCH = 64 << 10        # bytes per gRPC message at most: how far one stored batch can overshoot the cap


def test_a_full_link_queue_refuses_for_now_and_loses_nothing(localnet) -> None:
    net = localnet(hops=2, limits={"max_link_queue": CAP}, batch={"max_bytes": BATCH, "min_bytes": 16384})
    net.stop("n3")
    accepted: list[str] = []
    refused: list[str] = []
    with net.client("n1") as c:
        for _ in range(200):
            r = c.send(["n3"], size=SIZE)
            if r.accepted:
                accepted.append(r.msg_id)
                continue
            refused.append(r.reason)
            if len(refused) >= 3:
                break
            time.sleep(0.3)           # the queue at n1 fills as n2 defers what it cannot queue
    assert refused and all(x.startswith("congested, try later") for x in refused), refused
    assert "the queue for n2 holds" in refused[0]
    with net.client("n2") as c:
        st = wait_until(lambda: (lambda s: s if s["neighbours"]["n1"].get("deferred_in", 0) > 0 else None)(c.stats()),
                        20, what="n2 deferring pieces from n1")
        # the queue for the missing n3 stops near the cap: at most the batches being stored when it filled
        assert CAP <= st["neighbours"]["n3"]["queue_bytes"] <= CAP + 4 * BATCH + SIZE, st["neighbours"]["n3"]
    with net.client("n1") as c:
        n1 = c.stats()["neighbours"]["n2"]
        assert n1["deferred_out"] > 0, n1          # n1 keeps what n2 deferred, and offers it again
    net.start("n3")
    with net.client("n3") as c:
        wait_until(lambda: len(c.mailbox()) >= len(accepted), 60, what="every accepted message at n3")
        assert sorted(i.msg_id for i in c.mailbox()) == sorted(accepted)
