"""Pools on real daemons (node/pools/): a consumer node turns events into per-application publications.

One network for the module: n1 - n2. n1 is consumer c1 (it produces t1, t2 and t3); application A wants t1, B wants
t1 and t2, C t3; instance i1 of A and i2 of B are durable subscribers at n2. No controller runs here: the assignment
is published on `_pools.assign.c1` as the leader would (the admin's publisher ""), so the map is fixed.
"""
from __future__ import annotations

import collections
import json
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest

from node.errors import UserError
from nodenet_support import FAST, wait_until
from tests.integration.support import stopped

pytestmark = pytest.mark.timeout(180)
HOLD = FAST["session"]["hold_time"]
SPREAD = 5 * HOLD          # interest and a publication cross one link within a few frames; generous under load
REPLICAS = {"r1": "127.0.0.1:1", "r2": "127.0.0.1:2", "r3": "127.0.0.1:3"}    # not running: no controller here
APPS = {"A": {"types": ["t1"], "instances": {"i1": "n2"}}, "B": {"types": ["t1", "t2"], "instances": {"i2": "n2"}},
        "C": {"types": ["t3"], "instances": {"i3": "n2"}}}        # C: no instance assigned to c1
BEAT = 0.2
POOLS = {"enabled": True, "replicas": REPLICAS, "apps": APPS, "heartbeat": BEAT, "crash_timeout": 5 * BEAT}


@pytest.fixture(scope="module")
def net():
    from testbed.localnet import LocalNet
    work = Path(tempfile.mkdtemp(prefix="wanbed-pools-"))
    n = LocalNet.build(work, ["n1", "n2"], [("n1", "n2")], **FAST, per_node={
        "n1": {"pools": {**POOLS, "consumer": {"name": "c1", "types": ["t1", "t2", "t3"]}}},
        "n2": {"pools": POOLS}})
    try:
        n.start()
        yield n
    finally:
        n.close()


class Instance:
    """An application instance's client: its durable subscription at n2, each delivery recorded then acknowledged;
    comes back after its node or stream went away."""

    def __init__(self, net, app: str, name: str) -> None:
        self.net, self.pattern, self.name = net, f"pool.{app}.{name}.>", f"pool-{app}-{name}"
        self.keys: collections.Counter[str] = collections.Counter()       # (event id:seq:version) -> arrivals
        self.topics: dict[str, str] = {}
        self.fences: list[dict] = []
        self.subscribed = threading.Event()
        self._stop = threading.Event()
        self._sub = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self.subscribed.wait(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self.net.client("n2") as c:
                    self._sub = c.subscribe(self.pattern, name=self.name, durable=True)
                    for ev in self._sub:
                        if ev.WhichOneof("kind") == "subscribed":
                            self.subscribed.set()
                        elif ev.WhichOneof("kind") == "delivery":
                            d = ev.delivery
                            if d.topic.endswith("._fence"):
                                self.fences.append(json.loads(d.payload))
                            elif not d.redelivered or d.key not in self.keys:
                                self.keys[d.key] += 1
                            self.topics[d.key] = d.topic
                            self._sub.ack([d.pub_id])
            except UserError:
                pass
            self._stop.wait(0.2)

    def events(self) -> dict[str, int]:
        """event id -> its sequence number here."""
        return {k.split(":")[0]: int(k.split(":")[1]) for k in list(self.keys)}

    def close(self) -> None:
        self._stop.set()
        if self._sub is not None:
            self._sub.close()
        self._thread.join(5)


def pool_lines(net, node: str, event: str) -> list[dict]:
    return [r for r in net.records(node, "pool") if r["event"] == event]


def publish_event(net, node: str, topic: str) -> tuple[bool, str, str]:
    with net.client(node) as c:
        r = c.publish(topic, size=100)
        return r.accepted, r.pub_id, r.reason


def assign(net, at: str, body: dict, publisher: str = "") -> None:
    with net.client(at) as c:
        r = c.publish("_pools.assign.c1", payload=json.dumps(body).encode(), publisher=publisher)
        assert r.accepted, r.reason


@pytest.fixture(scope="module")
def instances(net):
    """i1 of A and i2 of B subscribed at n2, and c1's assignment (term 1, version 1: A -> i1, B -> i2, nothing for
    C) applied at n1, as the leader would send it."""
    got = [Instance(net, "A", "i1"), Instance(net, "B", "i2")]
    with net.client("n2") as c:
        wait_until(lambda: {"pools.assign.c1"} <= {i.name for i in c.subscriptions(remote=True) if i.node == "n1"},
                   SPREAD, what="c1's assignment subscription known at n2")
    assign(net, "n2", {"term": 1, "version": 1, "connections": {"A": "i1", "B": "i2"}})
    wait_until(lambda: pool_lines(net, "n1", "applied"), SPREAD, what="the assignment applied at c1")
    try:
        yield got
    finally:
        for i in got:
            i.close()


def test_events_become_one_durable_publication_per_application_numbered_per_application(net, instances) -> None:
    a, b = instances
    assert pool_lines(net, "n1", "applied")[0]["version"] == 1
    # C wants t3 and has no instance for c1: refused before anything is stored (never accepted and lost)
    ok, _pid, why = publish_event(net, "n1", "ev.t3.src7")
    assert not ok and "no instance of application C" in why
    # a type no application wants is an ordinary publication
    assert publish_event(net, "n1", "ev.t9.src7")[0]
    sent: dict[str, str] = {}
    for k in range(12):
        topic = f"ev.{'t1' if k % 3 else 't2'}.src{k % 4}"
        ok, pid, why = publish_event(net, "n1", topic)
        assert ok, why
        sent[pid] = topic
    t1 = [p for p, t in sent.items() if t.startswith("ev.t1.")]
    wait_until(lambda: len(a.keys) == len(t1) and len(b.keys) == len(sent), SPREAD, what="every event at i1 and i2")
    # each event once per interested application, numbered 1..n per application in publishing order
    assert set(a.events()) == set(t1) and set(b.events()) == set(sent)
    assert max(a.keys.values()) == 1 and max(b.keys.values()) == 1
    assert [a.events()[p] for p in t1] == list(range(1, len(t1) + 1))
    assert [b.events()[p] for p in sent] == list(range(1, len(sent) + 1))
    # the topic names application, instance, consumer and type; the key ends with the map version
    key = next(iter(b.keys))
    assert b.topics[key] == f"pool.B.i2.c1.{sent[key.split(':')[0]].split('.')[1]}" and key.endswith(":1")


def test_the_consumer_beats_with_its_load(net, instances) -> None:
    """Non-durable `_pools.hb.c1` heartbeats every pools.heartbeat: they register c1 and carry its load."""
    beats: list[dict] = []
    with net.client("n2") as c:
        sub = c.subscribe("_pools.hb.>")
        try:
            got = threading.Thread(target=lambda: [beats.append(json.loads(ev.delivery.payload)) for ev in sub
                                                   if ev.WhichOneof("kind") == "delivery"], daemon=True)
            got.start()
            wait_until(lambda: "_pools.hb.>" in {i.pattern for i in c.subscriptions(remote=True) if i.node == "n2"},
                       SPREAD, what="the heartbeat subscription")
            for k in range(5):
                assert publish_event(net, "n1", f"ev.t2.src{k}")[0]
            wait_until(lambda: any(b["load"].get("B", 0) > 0 for b in beats), 10 * BEAT + SPREAD,
                       what="a heartbeat with B's load")
        finally:
            sub.close()
    b = beats[-1]
    assert (b["role"], b["name"], b["node"], b["types"], b["state"]) == ("consumer", "c1", "n1", ["t1", "t2", "t3"],
                                                                        "active")
    assert set(b["load"]) == {"A", "B"}
    assert any(r["load"].get("B", 0) > 0 for r in pool_lines(net, "n1", "load"))


def test_a_stale_or_foreign_assignment_is_refused_and_the_map_kept(net, instances) -> None:
    # the one in force again (as a redelivery after a crash would bring it): taken as no news, no line
    assign(net, "n2", {"term": 1, "version": 1, "connections": {"A": "i1", "B": "i2"}})
    assign(net, "n2", {"term": 0, "version": 5, "connections": {"A": "i9", "B": "i2"}})     # an older term
    assign(net, "n2", {"term": 1, "version": 6, "connections": {"A": "i9"}}, publisher="mallory")
    assign(net, "n2", {"term": 1, "version": "x"})                                          # malformed
    wait_until(lambda: len(pool_lines(net, "n1", "refused")) >= 3, SPREAD, what="three refused lines")
    reasons = [r["reason"] for r in pool_lines(net, "n1", "refused")]
    assert len(reasons) == 3           # the queue is read in order: the repeat came first and left no line
    assert any("stale term 0 < 1" in r for r in reasons) and any("mallory" in r for r in reasons)
    with net.client("n1") as c:
        assert c.stats()["pools"]["consumer"]["connections"] == {"A": "i1", "B": "i2"}


def test_kill_9_of_the_consumer_with_events_in_flight_loses_and_duplicates_nothing(net, instances) -> None:
    """Events stored at n1 whose copies n2 has not acknowledged (n2 is frozen) when n1 is killed -9, and a
    publisher running through the kill: each event reaches each interested application once, and the numbers
    per application go on without a gap or a repeat (they are stored in the event's own transaction)."""
    a, b = instances
    before_a, before_b = len(a.keys), len(b.keys)
    accepted: list[str] = []
    maybe = 0
    n2 = net.nodes["n2"].proc
    n2.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: stopped(n2.pid), 5.0, 0.005, what="n2 to stop")
        with net.client("n1") as c:
            start = c.stats()["neighbours"]["n2"]
        for k in range(10):
            ok, pid, why = publish_event(net, "n1", f"ev.t1.src{k}")
            assert ok, why
            accepted.append(pid)
        with net.client("n1") as c:
            # sent towards the frozen n2 and not acknowledged: in flight, only in n1's spool
            wait_until(lambda: c.stats()["neighbours"]["n2"]["inflight"] > start["inflight"], 2 * HOLD, 0.01,
                       what="n1 to send the events' copies to the frozen n2")

        stop = threading.Event()

        def publisher() -> None:
            nonlocal maybe
            while not stop.is_set():
                try:
                    ok, pid, _why = publish_event(net, "n1", "ev.t2.src9")
                    if ok:
                        accepted.append(pid)
                except UserError:
                    maybe += 1                  # the call failed around the kill: stored or not, never half
                    return
        t = threading.Thread(target=publisher)
        t.start()
        time.sleep(0.2)
        net.kill("n1")                          # kill -9 while events are in flight and being published
        stop.set()
        t.join(10)
    finally:
        n2.send_signal(signal.SIGCONT)
    net.start("n1")
    for k in range(5):
        ok, pid, why = publish_event(net, "n1", f"ev.t1.src{k}")
        assert ok, why
        accepted.append(pid)
    wait_until(lambda: set(b.events()) >= set(accepted), 4 * SPREAD, what="every accepted event at i2")
    print(f"accepted {len(accepted)} events around the kill, {maybe} call(s) failed by it")
    time.sleep(2 * FAST["metrics_interval"])    # anything duplicated would have arrived by now
    assert max(a.keys.values()) == 1 and max(b.keys.values()) == 1
    # no gap and no repeat: B saw 1..n, A 1..m (an event the failed call stored counts in both or neither)
    assert sorted(b.events().values()) == list(range(1, len(b.keys) + 1))
    assert sorted(a.events().values()) == list(range(1, len(a.keys) + 1))
    t1_new = [p for p in a.events() if p in set(accepted)]
    assert len(t1_new) == 15 and len(b.keys) - before_b in (len(accepted), len(accepted) + maybe)
    assert len(a.keys) - before_a == 15


def test_an_application_moves_only_once_its_new_instance_is_subscribed(net, instances) -> None:
    """Version 2 moves A from i1 to i4, whose subscription does not exist yet: the events keep going to i1 until
    n1's interest table holds i4's, then the move happens between two events (fence_sent names the last one i1
    gets) and the next events go to i4, numbered on."""
    a, _b = instances
    assign(net, "n2", {"term": 1, "version": 2, "connections": {"A": "i4", "B": "i2"}})

    def consumer() -> dict:
        with net.client("n1") as c:
            return c.stats()["pools"]["consumer"]
    wait_until(lambda: consumer()["version"] == 2, SPREAD, what="version 2 accepted at c1")
    assert consumer()["connections"]["A"] == "i1" and consumer()["applied_version"] == 1
    held = [publish_event(net, "n1", f"ev.t1.src{k}")[1] for k in range(3)]
    wait_until(lambda: set(a.events()) >= set(held), SPREAD, what="the events meanwhile at i1")
    last = max(a.events().values())
    i4 = Instance(net, "A", "i4")
    try:
        wait_until(lambda: consumer()["applied_version"] == 2, SPREAD, what="the move to i4 applied at c1")
        wait_until(lambda: i4.fences, SPREAD, what="the fence at i4")
        fence = pool_lines(net, "n1", "fence_sent")[-1]
        assert (fence["app"], fence["old"], fence["new"], fence["seq"]) == ("A", "i1", "i4", last)
        # both instances have it, beside the events: i1 knows where its share ends, i4 where its begins
        wait_until(lambda: len(a.fences) == 2, SPREAD, what="the fence at i1")
        assert i4.fences == [a.fences[-1]] and a.fences[-1] == {k: v for k, v in fence.items()
                                                                   if k not in ("ts", "node", "event")}
        assert a.fences[0]["old"] is None and a.fences[0]["seq"] == 0      # its first connection
        moved = [publish_event(net, "n1", f"ev.t1.src{k}")[1] for k in range(3)]
        wait_until(lambda: len(i4.keys) == 3, SPREAD, what="the events after the move at i4")
        assert [i4.events()[p] for p in moved] == [last + 1, last + 2, last + 3]
        assert all(k.endswith(":2") for k in i4.keys) and max(a.events().values()) == last
    finally:
        i4.close()
        with net.client("n2") as c:
            c.unsubscribe(i4.name)


def test_get_pools_at_a_node_that_is_no_replica_is_one_clear_error(net) -> None:
    with net.client("n1") as c, pytest.raises(UserError, match="n1 is not a pool controller replica"):
        c.get_pools()


def test_calls_cancelled_by_their_deadline_leave_the_numbering_whole(net, instances) -> None:
    """A publish whose client gives up mid-store (its deadline) is stored or not, and the consumer's numbers
    stay those of its spool: later events are accepted and numbered on without a gap or a repeat."""
    _a, b = instances
    before = len(b.keys)
    from node.client import NodeClient
    gave_up = 0
    for k in range(40):                       # deadlines around the time a store takes
        with NodeClient(net.nodes["n1"].mgmt, timeout=0.001 * (1 + k % 20)) as hasty:
            try:
                hasty.publish(f"ev.t2.src{k}", size=10)
            except UserError:
                gave_up += 1
    print(f"{gave_up} of 40 hasty calls gave up")
    after = [publish_event(net, "n1", f"ev.t2.src{k}") for k in range(3)]
    assert all(ok for ok, _p, _w in after), [w for _o, _p, w in after]
    wait_until(lambda: {p for _o, p, _w in after} <= set(b.events()), SPREAD, what="the later events at i2")
    time.sleep(0.5)                           # the hasty calls' stored events arrive meanwhile too
    assert max(b.keys.values()) == 1 and len(b.keys) > before
    assert sorted(b.events().values()) == list(range(1, len(b.keys) + 1))


def test_a_transform_that_objects_inside_the_transaction_refuses_the_event_whole(net, instances) -> None:
    """The spool's number for (c1, B) moved on behind the consumer's back (here: by hand): the event's own
    transaction finds it and refuses the event, storing nothing of it; the consumer takes the spool's numbers
    and the next event is numbered after them."""
    import sqlite3
    _a, b = instances
    spool = net.nodes["n1"].cfg.spool_path
    with sqlite3.connect(spool, timeout=10) as c:
        row = c.execute("SELECT seq FROM pool_seq WHERE consumer='c1' AND app='B'").fetchone()
        moved = (row[0] if row else 0) + 5
        c.execute("INSERT OR REPLACE INTO pool_seq VALUES ('c1', 'B', ?)", (moved,))
    def data_publications() -> int:   # heartbeats and load reports (`_pools.*`) go on meanwhile: not counted
        return sum(1 for r in net.records("n1", "publication") if not r["topic"].startswith("_pools."))

    published = data_publications()
    ok, _pid, why = publish_event(net, "n1", "ev.t2.src1")
    assert not ok and "sequence of c1/B is" in why
    assert data_publications() == published          # nothing of it was stored
    ok, pid, why = publish_event(net, "n1", "ev.t2.src1")
    assert ok, why
    wait_until(lambda: pid in b.events(), SPREAD, what="the next event at i2")
    assert b.events()[pid] == moved + 1
