"""An application instance's decisions (testbed/experiment/pool_apps.py InstanceLogic) on made-up deliveries: the
fence holds a moved consumer's events until the predecessor's Acked, receipts come before acks, a dead
predecessor's receipts are not processed again; and the pool fault actions on the instance clients."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.experiment.pool_apps import ACKED, Dead, InstanceLogic, PoolApps, read_event_ids


def delivery(topic: str, pub_id: str, key: str = "", payload: dict | None = None, publisher: str = "") -> SimpleNamespace:
    return SimpleNamespace(topic=topic, pub_id=pub_id, key=key, payload=json.dumps(payload or {}).encode(),
                           publisher=publisher, origin="c1", publish_ts=1.0, size=10, hops=1)


def event(me: str, seq: int, event_id: str | None = None) -> SimpleNamespace:
    return delivery(f"pool.A.{me}.c1.alarm", f"c1-p{me}{seq}", f"{event_id or f'c1-e{seq}'}:{seq}:3")


def fence(me: str, seq: int, old: str | None, new: str, version: int = 3) -> SimpleNamespace:
    body = {"consumer": "c1", "app": "A", "seq": seq, "old": old, "new": new, "version": version, "term": 1}
    return delivery(f"pool.A.{me}.c1._fence", f"c1-f{me}{version}", payload=body)


def test_a_moved_consumers_events_wait_for_the_predecessors_acked() -> None:
    old, new = InstanceLogic("A", "a1", "h1"), InstanceLogic("A", "a2", "h2")
    old.on_delivery(fence("a1", 0, None, "a1", version=2))
    assert [r["seq"] for r in old.on_delivery(event("a1", 1)).receipts] == [1]
    # the consumer moves A after seq 2: a2 gets 3 early, and holds it
    out = new.on_delivery(fence("a2", 2, "a1", "a2"))
    assert [r["control"] for r in out.receipts] == ["_fence"] and out.ack == ["c1-fa23"]
    out = new.on_delivery(event("a2", 3))
    assert out.receipts == [] and out.ack == []                          # held: neither processed nor acked
    old.on_delivery(fence("a1", 2, "a1", "a2"))
    out = old.on_delivery(event("a1", 2))
    assert [r["seq"] for r in out.receipts] == [2] and out.ack == ["c1-pa12"]
    (topic, body), = out.publish                                         # a1 tells a2 it is done with seq 2
    assert topic == f"pool.A.a2.c1.{ACKED}" and json.loads(body)["seq"] == 2
    out = new.on_delivery(delivery(topic, "a1-x", payload=json.loads(body), publisher="A"))
    assert [r.get("seq") for r in out.receipts] == [None, 3] and out.ack == ["a1-x", "c1-pa23"]
    assert new.received == 1 and len(new.pauses) == 1
    (topic, body), = out.publish                                         # a2 tells the consumer the pause ended
    assert topic == "_pools.done.c1" and json.loads(body) == {"consumer": "c1", "app": "A", "seq": 2,
                                                              "instance": "a2", "version": 3, "term": 1}
    assert new.on_delivery(event("a2", 3)).ack == ["c1-pa23"] and new.duplicates == 1   # again: acked, no line


def test_a_successor_skips_what_its_dead_predecessor_recorded(tmp_path: Path) -> None:
    f = tmp_path / "receipts.jsonl"
    f.write_text(json.dumps({"event_id": "c1-e1"}) + "\n" + '{"event_id": "c1-e2"}\n{"torn')
    assert read_event_ids(f) == {"c1-e1", "c1-e2"}
    succ = InstanceLogic("A", "a2", "h2", seen=read_event_ids(f))
    out = succ.on_backlog(event("a1", 1), "h1", "a1")
    assert out.receipts == [] and out.ack == ["c1-pa11"]                  # processed before the crash
    out = succ.on_backlog(event("a1", 3), "h1", "a1")
    rec, = out.receipts
    assert (rec["subscription"], rec["node"], rec["instance"], rec["event_id"]) == ("pool.A.a1", "h1", "a2", "c1-e3")
    assert succ.on_backlog(fence("a1", 2, "a1", "a3"), "h1", "a1").ack == ["c1-fa13"]
    # its own held event above the dead one's fence opens once the backlog is drained: the pause ends
    succ.on_delivery(fence("a2", 2, "a1", "a2"))
    assert succ.on_delivery(event("a2", 3, "c1-e4")).ack == []
    out = succ.drained("a1")
    assert [r["seq"] for r in out.receipts] == [3] and [t for t, _b in out.publish] == ["_pools.done.c1"]


def test_a_fence_from_a_user_and_a_foreign_topic_are_refused() -> None:
    lg = InstanceLogic("A", "a1", "h1")
    d = fence("a1", 0, None, "a1")
    d.publisher = "mallory"
    out = lg.on_delivery(d)
    assert "only the consumer's node" in out.refused and out.ack == [d.pub_id] and out.receipts == []
    assert "is not pool.A.a1" in lg.on_delivery(event("a9", 1)).refused


def test_pool_faults_start_leave_and_kill_instances(tmp_path: Path) -> None:
    dead = Dead()
    dead.add("A", "a1")
    assert dead.claim("A", "a1", "a2") and not dead.claim("A", "a1", "a3") and not dead.claim("A", "a2", "a3")
    apps = PoolApps({"A": {"a1": "h1", "a2": "h2"}}, {("A", "a2")}, tmp_path, address=lambda n: "127.0.0.1:1",
                    reachable=lambda n: False, tokens={}, heartbeat=0.2, crash_timeout=1.0)
    with pytest.raises(ValueError, match="has not started"):
        apps.fault("pool_leave", "A.a2")
    with pytest.raises(ValueError, match="no application instance"):
        apps.fault("pool_join", "A.a9")
    assert apps.fault("pool_join", "A.a2") == {"host": "h2", "app": "A", "instance": "a2"}
    with pytest.raises(ValueError, match="running already"):
        apps.fault("pool_join", "A.a2")
    apps.fault("pool_leave", "A.a2")
    assert apps.clients[("A", "a2")].state == "leaving"
    apps.stop()
    info = json.loads((tmp_path / "subscribers" / "h2" / "pool.A.a2" / "instance.json").read_text())
    assert info["state"] == "leaving" and info["received"] == 0
