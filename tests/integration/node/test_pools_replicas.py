"""The pool controller in real daemons (node/pools/host.py): three replicas elect a leader, which registers a
consumer and an instance from their heartbeats and publishes the consumer's assignment; after a kill -9 of the
leader another one takes office and its first assignment, under its newer term, is applied at the consumer; an
instance that falls silent is crashed after pools.crash_timeout, one that announces its leave hands its consumer
over at once and is gone once silent.

Four nodes, every pair linked: n1 is consumer c1 and also runs instance i1's client (so no kill cuts it off);
r1, r2 and r3 are the replicas.
"""
from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path

import pytest

from node.errors import UserError
from nodenet_support import FAST, wait_until
from testbed.localnet import free_port

pytestmark = pytest.mark.timeout(180)
NAMES = ["n1", "r1", "r2", "r3"]
EDGES = [(a, b) for i, a in enumerate(NAMES) for b in NAMES[i + 1:]]
BEAT = 0.2
SPREAD = 5 * FAST["session"]["hold_time"]
ELECTION = 1.4 + 2 * SPREAD          # pysyncobj's longest election timeout, and the word getting round


@pytest.fixture(scope="module")
def net():
    from testbed.localnet import LocalNet
    taken: set[int] = set()
    replicas = {r: f"127.0.0.1:{free_port(taken)}" for r in ("r1", "r2", "r3")}
    pools = {"enabled": True, "replicas": replicas, "password": "p" * 16, "heartbeat": BEAT,
             "crash_timeout": 10 * BEAT, "apps": {"A": {"types": ["t1"], "instances": {"i1": "n1", "i2": "n1", "i3": "n1"}}}}
    work = Path(tempfile.mkdtemp(prefix="wanbed-pool-replicas-"))
    n = LocalNet.build(work, NAMES, EDGES, **FAST, pools=pools,
                       per_node={"n1": {"pools": {**pools, "consumer": {"name": "c1", "types": ["t1"]}}}})
    try:
        n.start()
        yield n
    finally:
        n.close()


def lines(net, node: str, event: str) -> list[dict]:
    return [r for r in net.records(node, "pool") if r["event"] == event]


def leader(net, at: str) -> str:
    try:
        with net.client(at) as c:
            return c.get_pools().leader
    except UserError:
        return ""


class InstanceClient:
    """An instance of A at n1: its durable subscription (deliveries acknowledged) and its heartbeats, which say
    `state` ("active", or "leaving" once it announces its leave)."""

    def __init__(self, net, name: str = "i1") -> None:
        self.net, self.name, self.state, self.events, self._stop = net, name, "active", [], threading.Event()
        self.sub = net.client("n1").subscribe(f"pool.A.{name}.>", name=f"pool-A-{name}", durable=True)
        self._threads = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._beat, daemon=True)]
        for t in self._threads:
            t.start()

    def _read(self) -> None:
        try:
            for ev in self.sub:
                if ev.WhichOneof("kind") == "delivery":
                    self.events.append(ev.delivery.key)
                    self.sub.ack([ev.delivery.pub_id])
        except UserError:
            pass

    def _beat(self) -> None:
        with self.net.client("n1") as c:
            while not self._stop.wait(BEAT):
                body = json.dumps({"role": "instance", "name": self.name, "app": "A", "node": "n1",
                                   "state": self.state, "backlog": 0}).encode()
                try:
                    c.publish(f"_pools.hb.{self.name}", payload=body)
                except UserError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self.sub.close()


def test_the_leader_registers_from_heartbeats_and_a_new_leader_takes_over_after_kill_9(net) -> None:
    wait_until(lambda: leader(net, "r1"), ELECTION, what="a leader")
    inst = InstanceClient(net)
    try:
        # c1's heartbeats register it, i1's register i1: the leader connects them and tells c1
        wait_until(lambda: any(r["connections"] == {"A": "i1"} for r in lines(net, "n1", "applied")),
                   10 * BEAT + 2 * SPREAD, what="c1's assignment to i1")
        first = lines(net, "n1", "applied")[-1]
        with net.client("n1") as c:
            for _ in range(5):
                r = c.publish("ev.t1.src1", size=10)
                assert r.accepted, r.reason
        # the five events (besides the fence of c1's move to i1, which came first)
        wait_until(lambda: len([k for k in inst.events if not k.startswith("fence:")]) == 5, SPREAD,
                   what="the events at i1")
        old = leader(net, "r1")

        def view():                          # any replica answers and names the leader (a follower may lag)
            with net.client("r2") as c:
                return c.get_pools()
        # c1's heartbeats carried its load, which the leader entered (load commands): the follower has it too
        wait_until(lambda: [x.load for x in view().connections if x.load > 0], ELECTION + 10 * BEAT,
                   what="c1's load in the map at a follower")
        v = view()
        assert v.leader == old and [(x.consumer, x.app, x.instance) for x in v.connections] == [("c1", "A", "i1")]
        assert [(i.instance, i.node, i.state) for i in v.instances] == [("i1", "n1", "active")]
        assert lines(net, old, "elected") and lines(net, old, "map")
        killed = time.monotonic()
        net.kill(old)
        others = [r for r in ("r1", "r2", "r3") if r != old]
        wait_until(lambda: leader(net, others[0]) in others, ELECTION, what="a new leader")
        # the new leader's first assignment carries its newer term, and c1 applies it
        wait_until(lambda: lines(net, "n1", "applied")[-1]["term"] > first["term"], ELECTION,
                   what="the new term applied at c1")
        print(f"fail-over: new term applied at c1 {time.monotonic() - killed:.2f} s after the kill -9")
        assert lines(net, "n1", "applied")[-1]["connections"] == {"A": "i1"}
        assert not lines(net, "n1", "refused")
        # i1 falls silent: after crash_timeout the leader crashes it, and c1 is told A has no instance for it
        inst.close()
        silent = time.monotonic()
        wait_until(lambda: lines(net, "n1", "applied")[-1]["connections"] == {}, 10 * BEAT + ELECTION,
                   what="i1's crash applied at c1")
        assert time.monotonic() - silent >= 10 * BEAT - BEAT        # not before its silence was long enough
        new = leader(net, others[0])
        assert any(m["op"] == "instance_crash" for m in lines(net, new, "map"))
        with net.client("n1") as c:
            r = c.publish("ev.t1.src1", size=10)
        assert not r.accepted and "no instance of application A" in r.reason
    finally:
        inst.close()


def test_an_announced_leave_moves_the_consumer_at_once_and_silence_then_ends_the_instance(net) -> None:
    wait_until(lambda: leader(net, "r2") or leader(net, "r3"), ELECTION, what="a leader")
    i2, i3 = InstanceClient(net, "i2"), InstanceClient(net, "i3")
    try:
        wait_until(lambda: lines(net, "n1", "applied")[-1]["connections"] == {"A": "i2"}, 10 * BEAT + 2 * SPREAD,
                   what="c1 connected to i2 (round robin: the first active instance)")
        i2.state = "leaving"
        announced = time.monotonic()
        wait_until(lambda: lines(net, "n1", "applied")[-1]["connections"] == {"A": "i3"}, 10 * BEAT + SPREAD,
                   what="the leave applied at c1")
        assert time.monotonic() - announced < 10 * BEAT       # at once, not after a silence
        # the fence is recorded once it is stored for both instances, just after the map is applied
        wait_until(lambda: any((f["app"], f["old"], f["new"]) == ("A", "i2", "i3")
                               for f in lines(net, "n1", "fence_sent")), 10 * BEAT + SPREAD,
                   what="the fence from i2 to i3 sent at c1")
        i2.close()                                             # drained: it goes
        lead = leader(net, "r2") or leader(net, "r3")
        wait_until(lambda: any(m["op"] == "instance_gone" for m in lines(net, lead, "map")), 10 * BEAT + SPREAD,
                   what="i2 gone after its silence")
        assert lines(net, "n1", "applied")[-1]["connections"] == {"A": "i3"}
    finally:
        i2.close()
        i3.close()
