"""The pools account (testbed/accounting/pools.py) on a hand-made run directory: pairs received, lost,
duplicated, affinity, re-balance times; and the pub/sub account leaving control topics to their subsystem."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from node import schema
from testbed.accounting import pools, pubsub
from testbed.accounting.records import RecordReader
from testbed.experiment.runner import _fails_check
from testbed.subsystems.pools import SUBSYSTEM


def write(path: Path, kind: str, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for r in records:
        assert schema.validate(kind, r) == [], r
    with open(path, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))


def pub(node: str, pub_id: str, topic: str, expected: list[str] = (), **extra) -> dict:
    return {"ts": 1.0, "node": node, "pub_id": pub_id, "topic": topic, "size": 10, "expected": list(expected),
            "expected_durable": list(expected), "targets": sorted({e.split("/")[0] for e in expected}), **extra}


def pool(node: str, ts: float, event: str, **fields) -> dict:
    return {"ts": ts, "node": node, "event": event, **fields}


def receipt(node: str, inst: str, pub_id: str, event_id: str, seq: int, routed: str | None = None) -> dict:
    routed = routed or inst
    return {"ts": 3.0, "node": node, "subscription": f"pool.A.{routed}", "durable": True, "pub_id": pub_id,
            "topic": f"pool.A.{routed}.c1.alarm", "origin": "c1", "publish_ts": 1.0, "latency": 2.0, "size": 10,
            "hops": 1, "key": f"{event_id}:{seq}:1", "app": "A", "instance": inst, "consumer": "c1", "seq": seq,
            "event_id": event_id}


def run_dir(tmp_path: Path) -> Path:
    rep = tmp_path
    for n in ("c1", "r1", "h1", "h2"):
        (rep / "nodes" / n).mkdir(parents=True)
    (rep / "nodes" / "c1" / "node.yaml").write_text(yaml.safe_dump(
        {"name": "c1", "pools": {"apps": {"A": {"types": ["alarm"]}, "B": {"types": ["trap"]}}}}))
    events = [pub("c1", f"c1-e{i}", f"ev.alarm.c1-{i % 2 + 1}") for i in range(1, 5)]
    copies = [pub("c1", f"c1-d{i}", f"pool.A.{'a1' if i <= 2 else 'a2'}.c1.alarm",
                  [f"{'h1/pool.A.a1' if i <= 2 else 'h2/pool.A.a2'}"], derived_from=f"c1-e{i}", key=f"c1-e{i}:{i}:1")
              for i in range(1, 5)]
    control = [pub("r1", "r1-x", "_pools.assign.c1", ["c1/pools.assign.c1"])]
    write(rep / "nodes" / "c1" / "publications.jsonl", "publication", events + copies)
    write(rep / "nodes" / "r1" / "publications.jsonl", "publication", control)
    write(rep / "nodes" / "r1" / "pools.jsonl", "pool", [
        pool("r1", 10.0, "map", version=1, term=1, op="instance_join", algorithm={"A": "round_robin"},
             moves=[{"consumer": "c1", "app": "A", "old": None, "new": "a1"}]),
        pool("r1", 20.0, "map", version=2, term=1, op="instance_join", algorithm={"A": "round_robin"},
             moves=[{"consumer": "c1", "app": "A", "old": "a1", "new": "a2"}])])
    write(rep / "nodes" / "c1" / "pools.jsonl", "pool", [
        # two cuts before the first event (seq 0): the later map's instance is the one in force
        pool("c1", 9.9, "fence_sent", consumer="c1", app="A", old=None, new="a9", seq=0, term=1, version=0),
        pool("c1", 10.25, "applied", consumer="c1", term=1, version=1, connections={"A": "a1"}),
        pool("c1", 10.3, "fence_sent", consumer="c1", app="A", old="a9", new="a1", seq=0, term=1, version=1),
        pool("c1", 20.5, "applied", consumer="c1", term=1, version=2, connections={"A": "a2"}),
        pool("c1", 20.6, "fence_sent", consumer="c1", app="A", old="a1", new="a2", seq=2, term=1, version=2),
        # a first connection waits for no predecessor: not a handover's pause
        pool("c1", 20.65, "fence_done", consumer="c1", app="A", old=None, new="a9", seq=0, term=1, version=0,
             pause_s=0.05),
        pool("c1", 20.7, "fence_done", consumer="c1", app="A", old="a1", new="a2", seq=2, term=1, version=2,
             pause_s=0.1)])
    for node, inst, state in (("h1", "a1", "active"), ("h2", "a2", "active")):
        d = rep / "subscribers" / node / f"pool.A.{inst}"
        d.mkdir(parents=True)
        (d / "instance.json").write_text(json.dumps({"app": "A", "instance": inst, "node": node, "state": state,
                                                     "fence_pauses_s": [0.125] if inst == "a2" else []}))
    return rep


def test_a_clean_handover_is_ok_and_timed(tmp_path: Path) -> None:
    rep = run_dir(tmp_path)
    write(rep / "subscribers/h1/pool.A.a1/receipts.jsonl", "receipt",
          [receipt("h1", "a1", "c1-d1", "c1-e1", 1), receipt("h1", "a1", "c1-d2", "c1-e2", 2)])
    write(rep / "subscribers/h2/pool.A.a2/receipts.jsonl", "receipt",
          [receipt("h2", "a2", "c1-d3", "c1-e3", 3), receipt("h2", "a2", "c1-d4", "c1-e4", 4)])
    acc = pools.account(rep)
    assert (acc["events_published"], acc["events_expected"], acc["events_received"]) == (4, 4, 4)
    assert (acc["events_lost"], acc["events_duplicated"], acc["affinity_violations"]) == (0, 0, 0) and acc["ok"]
    assert acc["rebalance_s"] == [0.25, 0.5] and acc["rebalance_p99_s"] == 0.5 and acc["moved"] == 2
    assert acc["balance_max_over_mean"] == 2.0
    assert (acc["fence_pause_s"], acc["fence_pause_p50_s"], acc["fence_pause_p99_s"], acc["fences"]) == \
        ([0.1], 0.1, 0.1, 1)
    assert pools.problems(acc) == [] and SUBSYSTEM.check_ok(SUBSYSTEM.checked(rep))
    assert not SUBSYSTEM.fails({"pools": acc}) and not SUBSYSTEM.fails({"pools": None})
    # the assignment's own subscription (the node's, not a client's) is not the pub/sub account's to miss
    assert pubsub.account(rep)["total"]["lost_durable"] == 0


def test_a_lost_a_duplicated_and_a_misrouted_event_fail(tmp_path: Path) -> None:
    rep = run_dir(tmp_path)
    write(rep / "subscribers/h1/pool.A.a1/receipts.jsonl", "receipt",
          [receipt("h1", "a1", "c1-d1", "c1-e1", 1), receipt("h1", "a1", "c1-d3", "c1-e3", 3, routed="a1")])
    write(rep / "subscribers/h2/pool.A.a2/receipts.jsonl", "receipt", [receipt("h2", "a2", "c1-d3", "c1-e3", 3)])
    acc = pools.account(rep)
    assert (acc["events_lost"], acc["events_duplicated"], acc["affinity_violations"]) == (2, 1, 1)
    assert acc["lost_pairs"] == [["A", "c1-e2"], ["A", "c1-e4"]] and not acc["ok"]
    said = " ".join(pools.problems(acc))
    assert "2 pooled events lost" in said and "1 pooled events duplicated" in said and "affinity" in said
    assert not SUBSYSTEM.check_ok(SUBSYSTEM.checked(rep)) and "FAILED" in pools.line(acc)
    assert SUBSYSTEM.fails({"pools": acc})                  # testbed run fails the repetition too
    assert _fails_check({"pools": acc, "accounting": {"ok": True}})
    assert pools.account(tmp_path / "nothing") is None


def test_a_killed_instances_torn_last_receipt_line_is_counted_apart_not_as_a_problem(tmp_path: Path) -> None:
    rep = run_dir(tmp_path)
    a1 = rep / "subscribers/h1/pool.A.a1"
    write(a1 / "receipts.jsonl", "receipt", [receipt("h1", "a1", "c1-d1", "c1-e1", 1)])
    (a1 / "killed.json").write_text(json.dumps({"pid": 4242, "ts": 2.5}) + "\n")
    with open(a1 / "receipts.jsonl", "a") as f:     # SIGKILL while writing e2's line; the successor ends it
        f.write('{"ts":3.0,"node":"h1","subscription":"pool.A.a1","pub_id":"c1-d2","to' + "\n")
    write(a1 / "receipts.jsonl", "receipt", [receipt("h1", "a2", "c1-d2", "c1-e2", 2, routed="a1")])
    write(rep / "subscribers/h2/pool.A.a2/receipts.jsonl", "receipt",
          [receipt("h2", "a2", "c1-d3", "c1-e3", 3), receipt("h2", "a2", "c1-d4", "c1-e4", 4)])
    reader = RecordReader(rep)
    acc = pools.account(rep, reader)
    pubsub.account(rep, reader)                      # the pub/sub account reads the same receipts
    assert acc["torn_tail"] == 1 and acc["events_received"] == 4 and acc["ok"]
    assert reader.problems == 0 and "1 killed instances' torn last receipt lines skipped" in pools.line(acc)
    # the same line where no kill explains it (no killed.json) is a problem; so are two in a killed one's file
    (a1 / "killed.json").unlink()
    reader = RecordReader(rep)
    assert pools.account(rep, reader)["torn_tail"] == 0 and reader.problems == 1
    (a1 / "killed.json").write_text("{}\n")
    with open(a1 / "receipts.jsonl", "a") as f:
        f.write('{"torn' + "\n")
    reader = RecordReader(rep)
    assert pools.account(rep, reader)["torn_tail"] == 0 and reader.problems == 2


def test_refused_lines_are_counted_and_stale_term_ones_apart(tmp_path: Path) -> None:
    rep = run_dir(tmp_path)
    write(rep / "nodes" / "c1" / "pools.jsonl", "pool", [
        pool("c1", 30.0, "refused", consumer="c1", term=1, version=2, reason="stale term 1 < 2", highest_term=2),
        pool("c1", 31.0, "refused", consumer="c1", reason="assignment: term is missing", pub_id="r1-y")])
    acc = pools.account(rep)
    assert (acc["refused"], acc["refused_stale"]) == (2, 1)
