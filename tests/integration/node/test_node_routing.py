"""The routing stack with real daemons on loopback: link state flooded over real Link sessions, a
withdrawn link moving traffic at once, fail-over rules, SetRules/GetRoutes over real gRPC.

One network for the module (a square n1-n2-n3-n4-n1 plus a tail n3-n5), dynamic routing with fast
probes. Loopback links all measure well under one quantum, so every link costs one quantum and the
tables are hop counts; measured delays on shaped links are the business of the 9-broker scenario
(tests/e2e/test_gunduz_routing.py).
"""
from __future__ import annotations

import pytest

from node.errors import UserError
from nodenet_support import FAST, wait_until

NAMES = ["n1", "n2", "n3", "n4", "n5"]
EDGES = [("n1", "n2"), ("n2", "n3"), ("n3", "n4"), ("n4", "n1"), ("n3", "n5")]
PROBE = 0.1                       # seconds between probes
QUANTUM = 5.0                     # loopback latency (<1 ms) rounds up to one quantum: costs are hop counts
# A probe counts as lost after this long unanswered (the default is 1 s at this interval): on loopback none is
# lost, but a daemon's event loop stalled for over a second by a loaded machine would make one look lost.
PROBE_TIMEOUT = 5.0
ROUTING = {"mode": "dynamic", "nodes": NAMES, "monitor": {"interval": PROBE, "timeout": PROBE_TIMEOUT},
           "cost": {"quantum": QUANTUM}, "damping": {"enabled": False}}
HOLD = FAST["session"]["hold_time"]


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    import tempfile
    from pathlib import Path

    from testbed.localnet import LocalNet
    work = Path(tempfile.mkdtemp(prefix="wanbed-routing-"))
    n = LocalNet.build(work, NAMES, EDGES, routing=ROUTING, **FAST)
    try:
        n.start()
        yield n
    finally:
        n.close()


def table(net, node: str) -> dict[str, tuple[str, float, str]]:
    with net.client(node) as c:
        reply = c.routes(timeout=5.0)
    return {r.destination: (r.next_hop, r.cost, r.learned) for r in reply.routes}


def converged(net, node: str, want: dict[str, tuple[str, float]]) -> bool:
    t = table(net, node)
    return all(t.get(d, ("", 0, ""))[:2] == w for d, w in want.items())


def stored_seq(net, node: str) -> int:
    import sqlite3
    conn = sqlite3.connect(net.nodes[node].cfg.spool_path)     # its daemon is dead: nobody else writes
    try:
        return int(conn.execute("SELECT value FROM setting WHERE key='linkstate.seq'").fetchone()[0])
    finally:
        conn.close()


def link_up(net, node: str, peer: str) -> bool:
    with net.client(node) as c:
        return {lk.neighbour: lk.up for lk in c.routes().links}[peer]


def delivered(net, node: str) -> set[str]:
    return {r["msg_id"] for r in net.records(node, "delivery")}


def test_link_state_reaches_every_node_and_tables_are_shortest_paths(net) -> None:
    # ties (n1 -> n3 via n2 or n4, both 2 hops) go to the neighbour first in natural order: n2
    want = {"n2": ("n2", QUANTUM), "n3": ("n2", 2 * QUANTUM), "n4": ("n4", QUANTUM), "n5": ("n2", 3 * QUANTUM)}
    wait_until(lambda: converged(net, "n1", want), 10 * HOLD, what="n1's dynamic table")
    t = table(net, "n1")
    assert {d: v[2] for d, v in t.items()} == {d: "dynamic" for d in want}
    with net.client("n1") as c:
        reply = c.routes()
    assert reply.mode == "dynamic"
    links = {lk.neighbour: lk for lk in reply.links}
    assert set(links) == {"n2", "n4"} and all(lk.up for lk in links.values())
    assert all(lk.probes_answered > 0 and lk.loss == 0.0 and lk.cost == QUANTUM for lk in links.values())
    routes = net.records("n1", "route")
    assert {r["dst"] for r in routes} >= set(want) and all(r["node"] == "n1" for r in routes)
    # the first metrics line may still be due (one every metrics_interval)
    metrics = wait_until(lambda: net.records("n1", "metrics"), 4 * FAST["metrics_interval"],
                         what="n1's first metrics line")[-1]
    assert metrics["routing"]["mode"] == "dynamic" and "n2" in metrics["routing"]["links"]


def test_a_dead_next_hop_is_withdrawn_and_traffic_moves_without_loss(net) -> None:
    want = {"n3": ("n2", 2 * QUANTUM)}
    wait_until(lambda: converged(net, "n1", want), 10 * HOLD, what="n1 routes n3 via n2")
    with net.client("n2") as c:
        seq_before = c.stats()["routing"]["seq"]
    sent = []
    with net.client("n1") as c:
        for _ in range(20):
            sent.append(c.send(["n5"], size=2000).msg_id)
        net.kill("n2")           # copies queued or in flight for n2 must move to n4
        for _ in range(20):
            sent.append(c.send(["n5"], size=2000).msg_id)
    try:
        # the session's hold time notices the dead peer; the withdrawal is at once, not after probes
        wait_until(lambda: table(net, "n1")["n3"][0] == "n4", HOLD + 5.0, what="n1 moving n3 to n4")
        wait_until(lambda: set(sent) <= delivered(net, "n5"), 30.0, what="every message at n5")
        got = [r["msg_id"] for r in net.records("n5", "delivery") if r["msg_id"] in set(sent)]
        assert len(got) == len(sent), "a message was delivered twice"
        reasons = {r["reason"] for r in net.records("n1", "route") if r["dst"] == "n3"}
        assert reasons & {"withdrawn", "switch"}
        # its advert sequence number is in its spool, so a restarted n2 goes on counting from there
        assert stored_seq(net, "n2") >= seq_before
    finally:
        net.start("n2")
    wait_until(lambda: converged(net, "n1", {"n2": ("n2", QUANTUM)}), 10 * HOLD, what="n2 back in n1's table")
    with net.client("n2") as c:
        assert c.stats()["routing"]["seq"] > seq_before


def test_failover_rule_passes_over_a_down_neighbour(net) -> None:
    with net.client("n1") as c:
        assert c.set_rules([{"name": "to-n3", "match": {"dst": "n3"}, "failover": ["n4", "n2"]}]) == 1
        assert '"failover"' in c.routes().rules_json
        first = c.send(["n3"], size=500).msg_id
    wait_until(lambda: first in delivered(net, "n3"), 15.0, what="the first message at n3")
    assert [r["hops"] for r in net.records("n3", "delivery") if r["msg_id"] == first] == [2]
    net.kill("n4")
    try:
        wait_until(lambda: not link_up(net, "n1", "n4"), HOLD + 5.0, what="n1 noticing n4 is gone")
        with net.client("n1") as c:
            ids = [c.send(["n3"], size=500).msg_id for _ in range(5)]
        wait_until(lambda: set(ids) <= delivered(net, "n3"), 15.0, what="fail-over messages at n3 via n2")
    finally:
        with net.client("n1") as c:
            c.set_rules([])
        net.start("n4")


def test_bad_rules_are_refused_whole_and_the_old_ones_stay(net) -> None:
    with net.client("n2") as c:
        c.set_rules([{"match": {"dst": "n5"}, "to": "n3"}])
        with pytest.raises(UserError, match="not a neighbour|neighbour"):
            c.set_rules([{"match": {"dst": "n5"}, "to": "n5"}])
        assert '"n3"' in c.routes().rules_json
        c.set_rules([])
        assert c.routes().rules_json == "[]"
