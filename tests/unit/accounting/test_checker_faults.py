"""Faults the loss checker used to pass: a fragment row gone from a spool, one branch of a fan-out dropped, a
record line that could not be written. Each run directory is written with the node's own Records writer and
Spool (real pieces and publication copies); the fault is then injected into the files, as a bug would leave
them, and the checker must fail the repetition."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from node import schema
from node.piece import Piece, split
from node.records import Records
from node.rpc import link_pb2
from node.spool import Spool
from testbed import accounting, cli
from testbed.accounting import check_run, pubsub
from testbed.accounting.verdict import Partial, Place
from testbed.experiment import summary
from testbed.experiment.record_failures import RecordFailures

from tests.unit.experiment.experiment_scenarios import ring_scenario

pytestmark = pytest.mark.timeout(60)

T0 = 1_700_000_000.0
CHUNK = 1000


def pieces(msg_id: str, dst: str, payload: bytes, state: str = "queued", kind: str = "") -> list[Piece]:
    """The pieces an originator cuts `payload` into (node/piece.py split), CHUNK bytes each."""
    cut = split(len(payload), CHUNK)
    return [Piece(msg_id, dst, off, len(payload), 1, "n1", "user", ["user"], 1, T0, T0 + 3600, kind, len(cut),
                  payload[off:off + n], state) for off, n in cut]


def spool(path: Path, held: list[Piece] = ()) -> None:
    s = Spool(path)
    s.open()
    if held:
        s.run_sync(Spool.op_insert(list(held)))
    s.close()


def drop_rows(path: Path, where: str, *args: object) -> int:
    """The fault: frag rows deleted behind the node's back."""
    with sqlite3.connect(path) as c:
        n = c.execute(f"DELETE FROM frag WHERE {where}", args).rowcount
    c.close()
    return n


def jsonl(path: Path, kind: str, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for r in records:
        assert schema.validate(kind, r) == [], r
    with open(path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def accepted(node: str, msg_id: str, dsts: list[str], size: int) -> dict:
    """An accepted.jsonl line as the workload driver writes it."""
    return {"ts": T0, "node": node, "msg_id": msg_id, "dst": dsts, "size": size}


def submitted(rec: Records, msg_id: str, dst: str, size: int) -> None:
    rec.write("submission", ts=T0, msg_id=msg_id, src=rec.node, dst=dst, size=size, accepted=True, reason="",
              originator="", priority=1, fragments=1, kind="")


# ---- a fragment row gone ----------------------------------------------------------------------------

def test_a_copy_missing_one_fragment_is_lost_not_late(tmp_path: Path) -> None:
    rep = tmp_path / "c" / "1"
    rec = Records(rep / "nodes" / "n1", "n1")
    submitted(rec, "m1", "n3", 3 * CHUNK)
    rec.close()
    whole = pieces("m1", "n3", bytes(range(250)) * 12)
    # copy-until-ack: n1 still holds the first two pieces, n2 the last; together the whole message
    spool(rep / "nodes" / "n1" / "spool.db", whole[:2])
    spool(rep / "nodes" / "n2" / "spool.db", whole[2:])
    spool(rep / "nodes" / "n3" / "spool.db")
    v = check_run(rep)
    assert (v.late, v.lost) == (1, 0) and v.ok()
    assert v.late_pairs[("m1", "n3")] == [Place("n1", "queued", 2), Place("n2", "queued", 1)]

    assert drop_rows(rep / "nodes" / "n2" / "spool.db", "msg_id='m1' AND off=?", 2 * CHUNK) == 1
    v = check_run(rep)
    assert (v.late, v.lost) == (0, 1) and not v.ok()
    assert v.partly_held == {("m1", "n3"): Partial(2 * CHUNK, 3 * CHUNK, [Place("n1", "queued", 2)])}
    assert "m1->n3 2000 of 3000 bytes at n1 (queued)" in "\n".join(accounting.verdict_details(v))
    assert v.to_dict()["partly_held"][0]["held_bytes"] == 2 * CHUNK


# ---- one branch of a fan-out dropped ---------------------------------------------------------------------

def publication_copy(pub_id: str, at: str, hop: str, targets: list[str], size: int) -> list[Piece]:
    """A broker's stored copy for next hop `hop`, responsible for `targets` (node/broker/broker.py _copies)."""
    body = link_pb2.Publication(pub_id=pub_id, origin=at, topic="t.a", targets=targets, payload=b"p" * size,
                                size=size).SerializeToString()
    return pieces(f"pub.{pub_id}.{at}.0.{hop}", hop, body, kind="pub")


def test_a_publication_held_on_another_branch_does_not_make_a_receipt_late(tmp_path: Path) -> None:
    rep = tmp_path / "c" / "1"
    rec = Records(rep / "nodes" / "p", "p")
    rec.write("publication", ts=T0, pub_id="p-1", topic="t.a", size=1500, expected=["b/d", "c/d"],
              expected_durable=["b/d", "c/d"], targets=["b", "c"])
    rec.close()
    for node in ("b", "c"):
        d = rep / "subscribers" / node / "d"
        d.mkdir(parents=True)
        (d / "subscriber.json").write_text(json.dumps({"node": node, "name": "d", "durable": True}))
    to_b, to_c = publication_copy("p-1", "p", "b", ["b"], 1500), publication_copy("p-1", "p", "c", ["c"], 10)
    assert len(to_b) == 2 and len(to_c) == 1
    spool(rep / "nodes" / "p" / "spool.db", to_b + to_c)
    acc = pubsub.account(rep)
    assert (acc["total"]["late_durable"], acc["total"]["lost_durable"]) == (2, 0) and acc["ok"]

    drop_rows(rep / "nodes" / "p" / "spool.db", "msg_id=?", "pub.p-1.p.0.c")      # c's branch is gone
    acc = pubsub.account(rep)
    assert (acc["total"]["late_durable"], acc["total"]["lost_durable"]) == (1, 1) and not acc["ok"]
    assert acc["lost_pairs"] == [["p-1", "c/d"]]

    drop_rows(rep / "nodes" / "p" / "spool.db", "msg_id=? AND off>0", "pub.p-1.p.0.b")  # b's copy, in part
    acc = pubsub.account(rep)
    assert (acc["total"]["late_durable"], acc["total"]["lost_durable"]) == (0, 2)


# ---- a record line that could not be written ------------------------------------------------------------

def failed_write_rep(rep: Path) -> Records:
    """n1 accepted m1 for n2 (the driver saw it), but its submission line could not be written; the origin row
    has been pruned since and the copy is nowhere: only the driver's record knows it."""
    (rep / "nodes" / "n1" / "submissions.jsonl").mkdir(parents=True)   # what open() fails on, as on a full disk
    rec = Records(rep / "nodes" / "n1", "n1")
    submitted(rec, "m1", "n2", 100)
    rec.close()
    jsonl(rep / "accepted.jsonl", "accepted", [accepted("n1", "m1", ["n2"], 100)])
    for node in ("n1", "n2"):
        spool(rep / "nodes" / node / "spool.db")
    return rec


def test_a_failed_submission_line_is_caught_by_the_drivers_record_and_the_count(tmp_path: Path) -> None:
    rep = tmp_path / "c" / "1"
    rec = failed_write_rep(rep)
    assert rec.failed == 1
    v = check_run(rep)
    assert (v.accepted, v.lost) == (1, 1) and not v.ok()
    assert v.client.client_only == [("m1", "n2")] and v.client.reconciled == 0
    assert "the driver's accepted set and the nodes' records disagree" in accounting.verdict_line("c/1", v)
    assert any(line.startswith("1 copies accepted per the driver's accepted.jsonl have no submission line")
               for line in accounting.verdict_details(v))
    # what the cell records from the nodes' Stats (testbed/experiment/cell.py)
    failures = RecordFailures()
    failures.saw("n1", "daemon run 1", {"records_failed": rec.failed})
    failures.saw("n2", "daemon run 1", {"records_failed": 0})
    jsonl(rep / "events.jsonl", "event", [{"ts": T0, "node": "testbed", "event": "records_failed", "target": "all",
                                           "counts": failures.counts()}])
    v = check_run(rep)
    assert v.records_failed == {"n1": 1, "n2": 0} and v.failed_writes == 1
    assert "1 record lines the nodes could not write" in accounting.verdict_line("c/1", v)
    s = summary.summarize(rep, ring_scenario([{}], n=2), complete=True)
    assert s["records_failed"] == {"n1": 1, "n2": 0} and s["accounting"]["ok"] is False
    assert s["accounting"]["client"]["client_only_pairs"] == [["m1", "n2"]]
    said = summary.check(s)
    assert any("record lines the nodes could not write (n1: 1)" in p for p in said)
    assert any("1 copies the driver saw accepted have no submission line" in p for p in said)


def test_a_failed_record_write_alone_fails_the_repetition(tmp_path: Path) -> None:
    rep = tmp_path / "c" / "1"
    rec = Records(rep / "nodes" / "n1", "n1")
    submitted(rec, "m1", "n2", 100)
    rec.close()
    jsonl(rep / "nodes" / "n2" / "deliveries.jsonl", "delivery", [
        {"ts": T0, "node": "n2", "msg_id": "m1", "src": "n1", "dst": "n2", "size": 100, "fragments": 1,
         "mode": "fragmenting", "submit_ts": T0, "deliver_ts": T0 + 1, "hops": 1}])
    jsonl(rep / "accepted.jsonl", "accepted", [accepted("n1", "m1", ["n2"], 100)])
    for node in ("n1", "n2"):
        spool(rep / "nodes" / node / "spool.db")
    assert check_run(rep).ok()
    jsonl(rep / "events.jsonl", "event", [{"ts": T0, "node": "testbed", "event": "records_failed", "target": "all",
                                           "counts": {"n1": 0, "n2": 3}}])
    v = check_run(rep)
    assert v.delivered == 1 and v.client.reconciled == 1 and not v.ok()
    assert "record lines the nodes could not write: n2: 3" in "\n".join(accounting.verdict_details(v))


def test_a_node_acceptance_the_driver_never_saw_is_a_mismatch_unless_its_call_went_unanswered(
        tmp_path: Path) -> None:
    rep = tmp_path / "c" / "1"
    rec = Records(rep / "nodes" / "n1", "n1")
    submitted(rec, "m1", "n2", 100)
    submitted(rec, "m2", "n2", 700)
    rec.close()
    (rep / "accepted.jsonl").write_text(json.dumps(accepted("n1", "m1", ["n2"], 100)) + "\n")
    for node in ("n1", "n2"):
        spool(rep / "nodes" / node / "spool.db", pieces("m1", "n2", b"x" * 100) + pieces("m2", "n2", b"y" * 700)
              if node == "n1" else [])
    v = check_run(rep)
    assert (v.late, v.lost) == (2, 0) and v.client.node_only == [("m2", "n2")] and not v.ok()
    assert "1 copies accepted per a node's submission line were never accepted per the driver: m2->n2" in \
        accounting.verdict_details(v)
    # the driver's call for it failed after it was sent: the node took it, the driver never heard
    jsonl(rep / "workload.jsonl", "submission", [
        {"ts": T0, "node": "n1", "msg_id": "", "src": "n1", "dst": ["n2"], "size": 700, "accepted": False,
         "reason": "node unreachable: deadline exceeded", "maybe_accepted": True}])
    v = check_run(rep)
    assert v.client.node_only == [] and v.client.unanswered == [("m2", "n2")] and v.ok()


@pytest.mark.parametrize("lines, problem", [
    (None, "accepted.jsonl is missing, though the driver counted 2 acceptances"),
    (1, "accepted.jsonl lists 1 acceptances, the driver counted 2"),
    (2, ""),
])
def test_the_drivers_record_must_hold_every_acceptance_it_counted(tmp_path: Path, lines: int | None,
                                                                  problem: str, capsys) -> None:
    rep = tmp_path / "e" / "c" / "1"
    rec = Records(rep / "nodes" / "n1", "n1")
    submitted(rec, "m1", "n2", 100)
    submitted(rec, "m2", "n2", 100)
    rec.close()
    for node in ("n1", "n2"):
        spool(rep / "nodes" / node / "spool.db", pieces("m1", "n2", b"x" * 100) + pieces("m2", "n2", b"y" * 100)
              if node == "n1" else [])
    jsonl(rep / "events.jsonl", "event", [{"ts": T0, "node": "testbed", "event": "workload_end", "target": "all",
                                           "accepted": 2}])
    if lines is not None:
        jsonl(rep / "accepted.jsonl", "accepted", [accepted("n1", f"m{i}", ["n2"], 100) for i in (1, 2)][:lines])
    v = check_run(rep)
    assert v.client.problem == problem and v.ok() is (not problem)
    assert cli.main(["check", str(rep)]) == (1 if problem else 0)
    out = capsys.readouterr().out
    assert (f"driver's record: {problem}" in out) if problem else out.splitlines()[0].endswith("— OK")


def test_record_failures_add_up_over_daemon_restarts() -> None:
    f = RecordFailures()
    first, second = object(), object()
    f.saw("n1", first, {"records_failed": 2})
    f.saw("n1", first, {"records_failed": 5})
    f.saw("n1", second, {"records_failed": 1})      # restarted: its count starts again from 0
    f.saw("n2", first, {"records_failed": 0})
    f.saw("n3", first, {"delivered": 4})            # a node that does not say: nothing learnt
    assert f.counts() == {"n1": 6, "n2": 0}
