"""A pool controller leader cut off from the other replicas (node/pools/controller.py, host.py), in real daemons in
network namespaces: how a deposed leader's command reaches a consumer late, and that it is refused there.

Four nodes, every pair linked by a veth pair: n1 is consumer c1 and the node of instances i1 and i2 (their clients
beat through r-nodes' daemons, so that they reach whichever replica leads); r1, r2, r3 are the replicas, whose Raft
runs between addresses of their own routed over the direct links. A cut is iptables in the leader's namespace
dropping everything on its link(s), as the testbed's partition fault drops a host's traffic.

The drill: the leader L (term t) is cut off from n1 and then commits a move of c1 (i1 announces its leave): its
assignment of term t waits in L's spool (store and forward) for the link to n1. L is then cut off from the other
replicas too; they elect a leader of term t+1, whose assignment (the same move) reaches c1 over its own link.
When the cuts heal, L's assignment arrives and c1 refuses it (a `refused` line with both terms) and keeps its map;
the events published throughout reach A once each.
"""
from __future__ import annotations

import collections
import json
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from node.errors import UserError
from nodenet_support import FAST, wait_until
from testbed import registry
from testbed.localnet import NetnsLinks

pytestmark = pytest.mark.timeout(120)
NAMES = ["n1", "r1", "r2", "r3"]
EDGES = [(a, b) for i, a in enumerate(NAMES) for b in NAMES[i + 1:]]
REPLICAS = {r: f"10.254.0.{k}:7100" for k, r in enumerate(("r1", "r2", "r3"), start=1)}
BEAT = 0.2
CRASH = 50 * BEAT          # the whole drill stays well within it: the cut-off leader never counts c1 silent
HOLD = FAST["session"]["hold_time"]
SPREAD = 5 * HOLD
ELECTION = 1.4 + 2 * SPREAD


@pytest.fixture(scope="module")
def net():
    from testbed.localnet import LocalNet
    pools = {"enabled": True, "replicas": REPLICAS, "password": "p" * 16, "heartbeat": BEAT, "crash_timeout": CRASH,
             "apps": {"A": {"types": ["t1"], "instances": {"i1": "n1", "i2": "n1"}}}}
    work = Path(tempfile.mkdtemp(prefix="wanbed-pool-partition-"))
    n = LocalNet.build(work, NAMES, EDGES, netns=NetnsLinks(100.0), **FAST, pools=pools,
                       per_node={"n1": {"pools": {**pools, "consumer": {"name": "c1", "types": ["t1"]}}}})
    try:
        for r, addr in REPLICAS.items():        # each replica's Raft address, routed over the direct links
            ip(n, r, "addr", "add", f"{addr.split(':')[0]}/32", "dev", "lo")
            for other, to in REPLICAS.items():
                if other != r:
                    ip(n, r, "route", "add", f"{to.split(':')[0]}/32", "via",
                       n.nodes[r].cfg.neighbours[other].split(":")[0])
        n.start()
        yield n
    finally:
        n.close()


def ip(net, node: str, *args: str) -> None:
    subprocess.run(["ip", "-n", net.netns[node], *args], check=True, capture_output=True)


def veth(net, node: str, peer: str) -> str:
    """The name of `node`'s end of its link to `peer`."""
    k = EDGES.index(tuple(sorted((node, peer), key=NAMES.index)))
    return f"{registry.prefix(net.run_id)}v{k}{'a' if EDGES[k][0] == node else 'b'}"


def cut(net, node: str, peers: list[str], undo: bool = False) -> None:
    """Drop (undo: stop dropping) everything on `node`'s links to `peers`, both ways."""
    for p in peers:
        for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
            subprocess.run(["ip", "netns", "exec", net.netns[node], "iptables", "-w", "-D" if undo else "-I", chain,
                            flag, veth(net, node, p), "-j", "DROP"], check=True, capture_output=True)


def lines(net, node: str, event: str) -> list[dict]:
    return [r for r in net.records(node, "pool") if r["event"] == event]


def leader(net) -> str:
    for r in REPLICAS:
        try:
            with net.client(r) as c:
                got = c.get_pools().leader
            if got:
                return got
        except UserError:
            pass
    return ""


class Instance:
    """An instance of A: its durable subscription at n1 (each delivery counted, then acknowledged) and heartbeats
    published at `beat_at` (`state` "active", or "leaving" once it announces its leave)."""

    def __init__(self, net, name: str, beat_at: str) -> None:
        self.net, self.name, self.beat_at, self.state = net, name, beat_at, "active"
        self.events: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self.sub = net.client("n1").subscribe(f"pool.A.{name}.>", name=f"pool-A-{name}", durable=True)
        for target in (self._read, self._beat):
            threading.Thread(target=target, daemon=True).start()

    def _read(self) -> None:
        try:
            for ev in self.sub:
                if ev.WhichOneof("kind") == "delivery":
                    if not ev.delivery.key.startswith("fence:"):
                        self.events[ev.delivery.key.split(":")[0]] += 1
                    self.sub.ack([ev.delivery.pub_id])
        except UserError:
            pass

    def _beat(self) -> None:
        with self.net.client(self.beat_at) as c:
            while not self._stop.wait(BEAT):
                body = {"role": "instance", "name": self.name, "app": "A", "node": "n1", "state": self.state,
                        "backlog": 0}
                try:
                    c.publish(f"_pools.hb.{self.name}", payload=json.dumps(body).encode())
                except UserError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self.sub.close()


def publish(net, k: int) -> list[str]:
    with net.client("n1") as c:
        out = []
        for j in range(k):
            r = c.publish(f"ev.t1.src{j}", size=10)
            assert r.accepted, r.reason
            out.append(r.pub_id)
        return out


def test_a_cut_off_leaders_late_assignment_is_refused_and_no_event_is_lost_or_duplicated(net) -> None:
    old = wait_until(lambda: leader(net), ELECTION, what="a leader")
    others = [r for r in REPLICAS if r != old]
    i1, i2 = Instance(net, "i1", others[0]), Instance(net, "i2", others[1])
    cuts: list[list[str]] = []
    try:
        wait_until(lambda: any(r["connections"] == {"A": "i1"} for r in lines(net, "n1", "applied")),
                   10 * BEAT + 2 * SPREAD, what="c1's assignment to i1")
        first = lines(net, "n1", "applied")[-1]
        sent = publish(net, 5)
        cut(net, old, ["n1"])
        cuts.append(["n1"])
        i1.state = "leaving"                  # heard by the leader through the other replicas' daemons
        wait_until(lambda: any(m.get("op") == "instance_leave" for m in lines(net, old, "map")), 10 * BEAT + SPREAD,
                   what="the leave committed by the leader")
        cut(net, old, others)                 # its assignment of c1's move waits in its spool, for n1
        cuts.append(others)
        sent += publish(net, 5)
        new_term = wait_until(lambda: [r["term"] for r in lines(net, "n1", "applied") if r["term"] > first["term"]],
                              ELECTION + SPREAD, what="the new leader's assignment applied at c1")[0]
        assert lines(net, "n1", "applied")[-1]["connections"] == {"A": "i2"}
        assert not lines(net, "n1", "refused")
        sent += publish(net, 5)
        for peers in cuts:
            cut(net, old, peers, undo=True)
        cuts.clear()
        refused = wait_until(lambda: lines(net, "n1", "refused"), 2 * SPREAD, what="the late assignment refused")
        assert refused[0]["term"] == first["term"] and refused[0]["highest_term"] >= new_term, refused
        assert f"stale term {first['term']} < " in refused[0]["reason"]
        print(f"leader {old} cut off at term {first['term']}; c1 applied term {new_term}, then refused: {refused[0]}")
        sent += publish(net, 5)
        with net.client("n1") as c:
            assert c.stats()["pools"]["consumer"]["connections"] == {"A": "i2"}     # the map kept
        wait_until(lambda: set(i1.events + i2.events) >= set(sent), SPREAD, what="every event at A")
        got = i1.events + i2.events
        assert set(got) == set(sent) and max(got.values()) == 1, got
        assert set(i2.events) >= set(sent[-5:])          # after the move, at i2
    finally:
        for peers in cuts:
            cut(net, old, peers, undo=True)
        i1.close()
        i2.close()
