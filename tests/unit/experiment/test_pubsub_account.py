"""The pub/sub account (testbed/accounting/pubsub.py) on hand-made run directories: every class of receipt."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from node import schema
from node.broker import store
from node.rpc import link_pb2
from node.spool import SCHEMA as SPOOL_SCHEMA
from testbed.accounting import pubsub
from testbed.experiment import summary


def write(path: Path, kind: str, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for r in records:
        assert schema.validate(kind, r) == [], r
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def pub(pub_id: str, topic: str, expected: list[str], durable: list[str]) -> dict:
    return {"ts": 1.0, "node": "p", "pub_id": pub_id, "topic": topic, "size": 10, "expected": expected,
            "expected_durable": durable, "targets": sorted({e.split("/")[0] for e in expected})}


def receipt(node: str, name: str, durable: bool, pub_id: str, topic: str) -> dict:
    return {"ts": 2.0, "node": node, "subscription": name, "durable": durable, "pub_id": pub_id, "topic": topic,
            "origin": "p", "publish_ts": 1.0, "latency": 1.0, "size": 10, "hops": 2}


def spool(path: Path, frag_ids: list[str] = (), queued: list[tuple[str, str]] = ()) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    c = sqlite3.connect(path)
    c.executescript(SPOOL_SCHEMA + store.SCHEMA)
    for m in frag_ids:
        # a whole stored copy (pub.<pub_id>.<node>.<hops>.<addressee>) for the subscribers at its addressee
        copy = link_pb2.Publication(pub_id=m.split(".")[1], targets=[m.rsplit(".", 1)[1]]).SerializeToString()
        c.execute("INSERT INTO frag VALUES (?,?,0,?,0,'p','','[]',1,0,0,'pub',1,'queued',?)",
                  (m, "b", len(copy), copy))
    for name, pub_id in queued:
        c.execute("INSERT INTO pub_queue(name, pub_id, hops, expires_ts, body) VALUES (?,?,1,9e9,x'00')", (name, pub_id))
    c.commit()
    c.close()


def subscriber(rep: Path, node: str, name: str, durable: bool, **extra) -> None:
    d = rep / "subscribers" / node / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "subscriber.json").write_text(json.dumps({"node": node, "name": name, "pattern": "t.>", "durable": durable,
                                                   "received": 0, "deliveries": 0, "redelivered": 0,
                                                   "duplicates": 0, "dropped": 0, "streams": 1, **extra}))


def test_a_run_without_publications_has_no_account(tmp_path: Path) -> None:
    (tmp_path / "nodes" / "a").mkdir(parents=True)
    assert pubsub.account(tmp_path) is None and pubsub.problems(None) == []


def test_every_class_of_receipt(tmp_path: Path) -> None:
    rep = tmp_path
    # p1: both receive; p2: the durable one queued at its node (late), the live one missing (allowed);
    # p3: durable copy still on its way (a frag row of a copy); p4: durable lost; r9: unexpected receipt
    write(rep / "nodes" / "p" / "publications.jsonl", "publication", [
        pub("p-1", "t.a", ["b/d", "c/l"], ["b/d"]), pub("p-2", "t.a", ["b/d", "c/l"], ["b/d"]),
        pub("p-3", "t.b", ["b/d"], ["b/d"]), pub("p-4", "t.b", ["b/d"], ["b/d"])])
    spool(rep / "nodes" / "p" / "spool.db", frag_ids=["pub.p-3.p.0.b"])
    spool(rep / "nodes" / "b" / "spool.db", queued=[("d", "p-2")])
    write(rep / "subscribers" / "b" / "d" / "receipts.jsonl", "receipt",
          [receipt("b", "d", True, "p-1", "t.a"), receipt("b", "d", True, "r-9", "t.c")])
    write(rep / "subscribers" / "c" / "l" / "receipts.jsonl", "receipt", [receipt("c", "l", False, "p-1", "t.a")])
    subscriber(rep, "b", "d", True, duplicates_by_topic={"t.a": 1}, redelivered_by_topic={"t.b": 2})
    subscriber(rep, "c", "l", False)
    acc = pubsub.account(rep)
    a, b = acc["topics"]["t.a"], acc["topics"]["t.b"]
    assert (a["published"], a["expected_durable"], a["received_durable"], a["late_durable"]) == (2, 2, 1, 1)
    assert (a["expected_live"], a["received_live"], a["missing_live"], a["duplicates"]) == (2, 1, 1, 1)
    assert (b["expected_durable"], b["late_durable"], b["lost_durable"], b["redelivered"]) == (2, 1, 1, 2)
    assert acc["lost_pairs"] == [["p-4", "b/d"]] and acc["unexpected_receipts"] == 1 and not acc["ok"]
    said = " | ".join(pubsub.problems(acc))
    assert "1 durable receipts lost" in said and "2 durable receipts still on their way" in said
    assert "1 duplicate" in said
    # summary.check says the same
    assert all(p in summary.check({"complete": True, "pubsub": acc}) for p in pubsub.problems(acc))
