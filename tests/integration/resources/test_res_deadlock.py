"""Store-and-forward deadlock: an unstructured shared pool locks up a loaded ring, buffer classes do not.

Four real daemons on loopback in a unidirectional ring, non-fragmenting (whole
messages, one buffer each), 2000-byte messages to the nodes 2 and 3 hops
ahead, submitted as fast as the nodes take them. With `buffer_classes: false`
every node's few buffers end up full of messages waiting for the next node,
whose buffers are full too: nothing moves again, which the watchdog reports.
With the structured pool (a message that made h hops may only take a class-h
buffer) the same load drains completely.
"""
from __future__ import annotations

import time

import pytest

from node.resource_manager import RETRY_CAP
from resnet_support import Load, delivered_ids, watch_progress

NAMES = ["n1", "n2", "n3", "n4"]
# 2 and 3 hops ahead on the unidirectional ring
PLAN = {n: [NAMES[(i + 2) % 4], NAMES[(i + 3) % 4]] for i, n in enumerate(NAMES)}
RESOURCES = {"transit_buffers": 2, "input_pool": 2, "class_min": 1, "recipient_pool": 1_000_000,
             "removal_interval": 0.0}
# No delivery for 5 retry caps (a refused piece is offered again at least every RETRY_CAP s) = no progress.
QUIET = 5 * RETRY_CAP
LOAD_TIME = 4.0


def run(ringnet, buffer_classes: bool) -> tuple[str, Load, object]:
    net = ringnet(4, unidirectional=True, mode="non-fragmenting",
                  resources={**RESOURCES, "buffer_classes": buffer_classes})
    load = Load(net, PLAN, sizes=[2000], threads_per_node=3).start()
    time.sleep(LOAD_TIME)
    load.stop()
    return watch_progress(net, load.accepted, quiet=QUIET, limit=60.0), load, net


@pytest.mark.timeout(150)
def test_shared_pool_deadlocks_and_buffer_classes_deliver_everything(ringnet) -> None:
    verdict, load, net = run(ringnet, buffer_classes=False)
    assert load.accepted, "the load generator got nothing accepted"
    assert verdict == "deadlock", f"expected the unstructured pool to lock up, watchdog says {verdict}"
    shared = RESOURCES["transit_buffers"] + RESOURCES["input_pool"]
    for n in NAMES:
        with net.client(n) as c:
            st = c.stats()
        buffers = st["resources"]["buffers"]
        assert buffers["classes_enabled"] is False
        # the lock: every buffer of every node is taken, and the neighbours keep refusing
        assert buffers["usage"] == [shared], (n, buffers)
    assert len(delivered_ids(net)) < len(load.accepted)

    verdict, load, net = run(ringnet, buffer_classes=True)
    assert len(load.accepted) > 20
    assert verdict == "done", f"structured pool: watchdog says {verdict}"
    got = delivered_ids(net)
    assert set(got) == set(load.accepted), "every accepted message is delivered, exactly those"
    for mid, d in got.items():
        assert d["dst"] == load.accepted[mid]["dst"] and d["size"] == load.accepted[mid]["size"]
    for n in NAMES:
        with net.client(n) as c:
            buffers = c.stats()["resources"]["buffers"]
        assert buffers["classes_enabled"] is True and sum(buffers["usage"]) == 0, (n, buffers)
