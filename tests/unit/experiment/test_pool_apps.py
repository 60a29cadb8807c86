"""An application instance's decisions (testbed/experiment/pool_apps.py InstanceLogic) on made-up deliveries: the
fence holds a moved consumer's events until the predecessor's Acked, receipts come before acks, a dead
predecessor's receipts (a torn last line included) are not processed again; and the pool fault actions on the
instance client processes (real processes, pointed at a port where no node listens)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed import cleanup, registry
from testbed.accounting.records import RecordReader
from testbed.experiment import pool_apps
from testbed.experiment.pool_apps import (ACKED, InstanceLogic, ReceiptFiles, claim_takeover, instance_dir,
                                          mark_killed, read_event_ids)
from testbed.experiment.pool_manager import PoolApps


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


def test_a_torn_last_line_of_a_killed_instance_is_skipped_and_its_event_counted_once(tmp_path: Path) -> None:
    dead_dir = instance_dir(tmp_path, "h1", "A", "a1")
    files = ReceiptFiles(tmp_path)
    files.write(InstanceLogic("A", "a1", "h1").on_backlog(event("a1", 1), "h1", "a1").receipts)
    files.close()
    receipts = dead_dir / "receipts.jsonl"
    with open(receipts, "a") as f:         # a1 killed while writing e2's line: no newline, e2 not acked
        f.write('{"ts":1.5,"node":"h1","subscription":"pool.A.a1","pub_id":"c1-pa')
    problems: list[str] = []
    seen = read_event_ids(receipts, problems)
    assert seen == {"c1-e1"} and len(problems) == 1 and "receipts.jsonl:2" in problems[0]
    succ = InstanceLogic("A", "a2", "h2", seen=seen)
    assert succ.on_backlog(event("a1", 1), "h1", "a1").receipts == []       # on record: acked, no second line
    files = ReceiptFiles(tmp_path)
    files.write(succ.on_backlog(event("a1", 2), "h1", "a1").receipts)       # e2 again from the backlog
    files.close()
    reader = RecordReader(tmp_path)
    recs = list(reader.records(receipts, "receipt"))
    # the fragment is one bad line of its own; e2's line is whole: each event once, none lost
    assert sorted(r["event_id"] for r in recs) == ["c1-e1", "c1-e2"] and reader.problems == 1
    assert read_event_ids(receipts) == {"c1-e1", "c1-e2"}


def test_only_the_first_successor_of_a_killed_instance_claims_its_backlog(tmp_path: Path) -> None:
    assert not claim_takeover(tmp_path, "a2")             # not killed: a leave's handover, nothing to drain
    mark_killed(tmp_path, 4242, 1.0)
    assert claim_takeover(tmp_path, "a2") and not claim_takeover(tmp_path, "a3")


def _wait_for(what, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if what():
            return True
        time.sleep(0.05)
    return False


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_pool_faults_start_leave_and_kill_instance_processes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(registry, "REGISTRY_DIR", tmp_path / "registry")
    run_id = registry.new_run_id()
    registry.register(run_id, "test")

    def recorded() -> list[int]:
        rec = registry.load(run_id)
        assert rec is not None
        return cleanup._recorded_pids(rec.state)

    apps = PoolApps({"A": {"a1": "h1", "a2": "h2"}}, {("A", "a2")}, tmp_path, address=lambda n: "127.0.0.1:1",
                    tokens={}, heartbeat=0.2, crash_timeout=1.0, run_id=run_id)
    try:
        with pytest.raises(ValueError, match="has not started"):
            apps.fault("pool_leave", "A.a2")
        with pytest.raises(ValueError, match="no application instance"):
            apps.fault("pool_join", "A.a9")
        joined = apps.fault("pool_join", "A.a2")
        a2 = joined["pid"]
        assert joined == {"host": "h2", "app": "A", "instance": "a2", "pid": a2} and a2 != os.getpid()
        assert not _gone(a2) and recorded() == [a2]          # `testbed clean` would find it
        with pytest.raises(ValueError, match="running already"):
            apps.fault("pool_join", "A.a2")
        apps.fault("pool_leave", "A.a2")                     # over its stdin: the process itself says so
        a2_dir = tmp_path / "subscribers" / "h2" / "pool.A.a2"
        assert _wait_for(lambda: pool_apps.read_info(a2_dir).get("state") == "leaving")
        assert pool_apps.read_info(a2_dir)["pid"] == a2

        a1 = apps.fault("pool_join", "A.a1")["pid"]
        a1_dir = tmp_path / "subscribers" / "h1" / "pool.A.a1"
        assert _wait_for(lambda: pool_apps.read_info(a1_dir).get("pid") == a1)
        killed = apps.fault("pool_kill", "A.a1")
        assert killed["pid"] == a1 and _gone(a1)              # kill -9 of that pid: gone at once
        assert json.loads((a1_dir / "killed.json").read_text())["pid"] == a1
        info = pool_apps.read_info(a1_dir)
        assert (info["state"], info["pid"]) == ("killed", a1) and info["killed"] is not None
        assert recorded() == [a2]
        with pytest.raises(ValueError, match="has ended"):
            apps.fault("pool_kill", "A.a1")
    finally:
        apps.stop()
    assert _gone(a2) and recorded() == []
    info = pool_apps.read_info(a2_dir)
    assert info["state"] == "leaving" and info["received"] == 0    # its own last words, on SIGTERM
    assert pool_apps.read_info(a1_dir)["state"] == "killed"
