"""The Publish/subscribe section end to end with Spark, on a synthetic experiment whose figures are known:

cell "ps" (one rep, pub/sub only, no mail): nodes o, a, b, c on links o-a, a-b, o-c; subscriptions a/s1
(non-durable, t.x), b/d1 (durable, t.>), c/s2 (non-durable, t.y). Published at o: 10 on t.x (1000 B, targets
a and b: a tree of 2 links), 4 on t.y (500 B, targets b and c: 3 links); at b: 1 on t.z (100 B, target b
itself: 0 links). The report is made once (Spark is slow to warm up); a mail-only run has no section
(the unit tests check that such a report is unchanged, byte for byte).
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from node.schema import validate, validate_optional
from spark_analysis.sections import pubsub
from spark_analysis.__main__ import report
from spark_analysis.layout import find_runs

T0 = 1_700_000_000.0
TX = [f"o-x{i}" for i in range(10)]
TY = [f"o-y{i}" for i in range(4)]
MIN_BYTES = 10 * 1000 * 2 + 4 * 500 * 3 + 100 * 0
MIN_COPIES = 10 * 2 + 4 * 3
# o: no restart; a: restarted (its counters drop); b: restarted by an event, its counter already past the old value
LINK_BYTES = (15000 + 5000) + (6000 + 4000) + (700 + 1200)
COPIES = (12 + 10) + (6 + 4) + (2 + 4)
RECEIPTS = 14 + 8 + 5


def _write(path: Path, kind: str | None, records: list[dict]) -> None:
    for r in records:
        if kind is not None:
            assert validate(kind, r) == [] and validate_optional(kind, r) == [], r
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _pub(ts: float, node: str, pub_id: str, topic: str, size: int, expected: list[str], durable: list[str],
         targets: list[str]) -> dict:
    return {"ts": ts, "node": node, "pub_id": pub_id, "topic": topic, "size": size, "expected": expected,
            "expected_durable": durable, "targets": targets, "key": "", "priority": 1, "publisher": "gen"}


def _receipt(node: str, sub: str, durable: bool, pub_id: str, topic: str, latency: float, origin: str = "o",
             size: int = 1000) -> dict:
    publish_ts = T0 + 1.0
    return {"ts": publish_ts + latency, "node": node, "subscription": sub, "durable": durable, "pub_id": pub_id,
            "topic": topic, "origin": origin, "publish_ts": publish_ts, "latency": latency, "size": size, "hops": 2}


def _metrics(ts: float, node: str, **broker: int) -> dict:
    rec = {"ts": ts, "node": node, "spool_messages": 0, "spool_bytes": 0, "neighbours": {}, "delivered": 0}
    if broker:
        rec["broker"] = {"published": 0, "copies_out": 0, "copies_out_bytes": 0, "live_out": 0, "live_out_bytes": 0,
                         **broker}
    return rec


def _client(run: Path, node: str, name: str, durable: bool, **counts: int) -> None:
    d = run / "subscribers" / node / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "subscriber.json").write_text(json.dumps({"node": node, "name": name, "pattern": "t.>", "durable": durable,
                                                   "deliveries": 0, "received": 0, "redelivered": 0, "duplicates": 0,
                                                   "dropped": 0, "streams": 1, **counts}))


def make_pubsub_run(run: Path) -> None:
    links = [{"name": f"{a}-{b}", "a": a, "b": b, "a_to_b": {"delay": 0.01}, "b_to_a": {"delay": 0.01}}
             for a, b in (("o", "a"), ("a", "b"), ("o", "c"))]
    run.mkdir(parents=True)
    (run / "topology.json").write_text(json.dumps({"hosts": [], "links": links}))
    (run / "summary.json").write_text(json.dumps({"pubsub": {"total": {"late_durable": 1, "lost_durable": 0}}}))
    pubs = [_pub(T0 + 1, "o", p, "t.x", 1000, ["a/s1", "b/d1"], ["b/d1"], ["a", "b"]) for p in TX]
    pubs += [_pub(T0 + 1, "o", p, "t.y", 500, ["b/d1", "c/s2"], ["b/d1"], ["c", "b"]) for p in TY]
    _write(run / "nodes/o/publications.jsonl", "publication", pubs)
    _write(run / "nodes/b/publications.jsonl", "publication",
           [_pub(T0 + 2, "b", "b-z0", "t.z", 100, ["b/d1"], ["b/d1"], ["b"])])
    # b/d1 (durable) misses o-x9; latencies 10, 20, ... ms
    durable = [_receipt("b", "d1", True, p, "t.x", 0.01 * (i + 1)) for i, p in enumerate(TX[:9])]
    durable += [_receipt("b", "d1", True, p, "t.y", 0.1, size=500) for p in TY]
    durable += [_receipt("b", "d1", True, "b-z0", "t.z", 0.001, origin="b", size=100)]
    _write(run / "subscribers/b/d1/receipts.jsonl", "receipt", durable)
    # a/s1 (non-durable) misses o-x8 and o-x9; latencies 1 .. 8 ms
    _write(run / "subscribers/a/s1/receipts.jsonl", "receipt",
           [_receipt("a", "s1", False, p, "t.x", 0.001 * (i + 1)) for i, p in enumerate(TX[:8])])
    # c/s2 (non-durable) gets every t.y and one publication nobody expected; latencies 10 .. 50 ms
    _write(run / "subscribers/c/s2/receipts.jsonl", "receipt",
           [_receipt("c", "s2", False, p, "t.y", 0.01 * (i + 1), size=500) for i, p in enumerate([*TY, "o-late"])])
    _client(run, "b", "d1", True, deliveries=16, received=14, redelivered=2, streams=2)
    _client(run, "a", "s1", False, deliveries=9, received=8, duplicates=1, dropped=3)
    _client(run, "c", "s2", False, deliveries=5, received=5)
    _write(run / "nodes/o/metrics.jsonl", "metrics", [
        _metrics(T0 + 1, "o"),                                      # before the broker reported: ignored
        _metrics(T0 + 2, "o", copies_out_bytes=0, live_out_bytes=0),
        _metrics(T0 + 5, "o", copies_out_bytes=10000, live_out_bytes=3000, copies_out=8, live_out=6),
        _metrics(T0 + 10, "o", copies_out_bytes=15000, live_out_bytes=5000, copies_out=12, live_out=10)])
    _write(run / "nodes/a/metrics.jsonl", "metrics", [
        _metrics(T0 + 1, "a", copies_out_bytes=2000, copies_out=2),
        _metrics(T0 + 5, "a", copies_out_bytes=6000, copies_out=6),
        _metrics(T0 + 8, "a", copies_out_bytes=1000, copies_out=1),     # restarted: from 0 again
        _metrics(T0 + 10, "a", copies_out_bytes=4000, copies_out=4)])
    _write(run / "nodes/b/metrics.jsonl", "metrics", [
        _metrics(T0 + 2, "b", live_out_bytes=500, live_out=1),
        _metrics(T0 + 5, "b", live_out_bytes=700, live_out=2),
        _metrics(T0 + 7, "b", live_out_bytes=900, live_out=3),          # after the restart event: a new lifetime
        _metrics(T0 + 9, "b", live_out_bytes=1200, live_out=4)])
    _write(run / "nodes/c/metrics.jsonl", "metrics", [_metrics(T0 + 3, "c")])
    _write(run / "events.jsonl", "event", [
        {"ts": T0 + 5.5, "node": "testbed", "event": "kill", "target": "b", "scope": "process"},
        {"ts": T0 + 6.0, "node": "testbed", "event": "restart", "target": "b", "scope": "process"}])


def make_mail_run(run: Path) -> None:
    _write(run / "nodes/a/submissions.jsonl", "submission", [
        {"ts": T0, "node": "a", "msg_id": "m1", "src": "a", "dst": "b", "size": 100, "accepted": True,
         "reason": ""}])
    _write(run / "nodes/b/deliveries.jsonl", "delivery", [
        {"ts": T0 + 1, "node": "b", "msg_id": "m1", "src": "a", "dst": "b", "size": 100, "fragments": 1,
         "mode": "fragmenting", "submit_ts": T0, "deliver_ts": T0 + 1, "hops": 1}])
    _write(run / "nodes/a/metrics.jsonl", "metrics", [_metrics(T0, "a")])
    (run / "summary.json").write_text("{}")


@pytest.fixture(scope="module")
def experiment(spark, tmp_path_factory):
    """The report of the pub/sub cell: no mail records at all, which the report must accept."""
    root = tmp_path_factory.mktemp("runs") / "exp"
    make_pubsub_run(root / "ps" / "1")
    (root / "experiment.json").write_text(json.dumps({"name": "synthetic", "cells": [
        {"id": "ps", "params": {}, "reps": 1}]}))
    out = root.parent / "out"
    page = report(str(root), str(out), spark=spark)
    return root, out, Path(page).read_text()


def test_latency_per_topic_and_kind(experiment) -> None:
    _, out, _ = experiment
    lat = pd.read_csv(out / "pubsub_latency.csv", dtype={"rep": str}).set_index(["topic", "kind"])
    assert sorted(lat.index) == [("t.x", "durable"), ("t.x", "non-durable"), ("t.y", "durable"),
                                 ("t.y", "non-durable"), ("t.z", "durable")]
    assert set(lat["cell"]) == {"ps"}
    y = lat.loc[("t.y", "non-durable")]
    assert y["receipts"] == 5 and y["runs"] == 1
    assert (y["p50_ms"], y["p90_ms"], y["p99_ms"], y["max_ms"]) == pytest.approx((30.0, 50.0, 50.0, 50.0))
    x = lat.loc[("t.x", "non-durable")]
    assert x["receipts"] == 8 and (x["p50_ms"], x["max_ms"]) == pytest.approx((4.0, 8.0))
    assert lat.loc[("t.x", "durable"), "receipts"] == 9 and lat.loc[("t.x", "durable"), "max_ms"] == pytest.approx(90)
    cdf = pd.read_csv(out / "pubsub_latency_cdf.csv")
    # t.x and t.y have both kinds: a curve each; t.z only durable: named by its topic alone
    assert set(cdf["series"]) == {"t.x (durable)", "t.x (non-durable)", "t.y (durable)", "t.y (non-durable)", "t.z"}
    assert (out / "pubsub_latency_ps.png").is_file()


def test_fanout_against_the_minimum_tree(experiment) -> None:
    _, out, _ = experiment
    fan = pd.read_csv(out / "pubsub_fanout.csv", dtype={"rep": str})
    assert fan["cell"].tolist() == ["ps"]
    row = fan.iloc[0]
    assert (row["publications"], row["receipts"]) == (15, RECEIPTS)
    assert (row["min_bytes"], row["min_copies"]) == (MIN_BYTES, MIN_COPIES)
    assert (row["link_bytes"], row["copies"], row["restarts"]) == (LINK_BYTES, COPIES, 2)
    assert row["ratio"] == pytest.approx(LINK_BYTES / MIN_BYTES)
    assert row["copy_ratio"] == pytest.approx(COPIES / MIN_COPIES)
    assert row["bytes_per_receipt"] == pytest.approx(LINK_BYTES / RECEIPTS)
    assert row["unreachable_targets"] == 0


def test_losses_and_duplicates_per_kind(experiment) -> None:
    _, out, page = experiment
    losses = pd.read_csv(out / "pubsub_losses.csv", dtype={"rep": str}).set_index("kind")
    d, n = losses.loc["durable"], losses.loc["non-durable"]
    assert (d["subscriptions"], d["expected"], d["received"], d["unexpected"], d["missing"]) == (1, 15, 14, 0, 1)
    assert (d["duplicates"], d["redelivered"], d["dropped"], d["streams"]) == (0, 2, 0, 2)
    assert (d["checker_late"], d["checker_lost"]) == (1, 0)
    assert d["verdict"] == "FAIL: 1 durable missing (checker: 1 late, 0 lost)"
    assert (n["subscriptions"], n["expected"], n["received"], n["unexpected"], n["missing"]) == (2, 14, 13, 1, 2)
    assert (n["duplicates"], n["dropped"]) == (1, 3) and n["verdict"] == "FAIL: 1 duplicates"
    assert "FAILURE" in page and "ps/1 durable: 1 durable missing (checker: 1 late, 0 lost)" in page


def test_report_of_a_pubsub_only_run(experiment) -> None:
    _, out, page = experiment
    assert 'href="#pubsub"' in page and 'id="pubsub-fanout-table"' in page
    assert pd.read_csv(out / "runs.csv").empty          # no mail: the mail sections are empty, not an error


def test_restarts_from_counter_drops_and_events(spark, tmp_path) -> None:
    run_dir = tmp_path / "c" / "1"
    make_pubsub_run(run_dir)
    runs = find_runs(tmp_path)
    schema = pubsub._schemas()["metrics"]
    metrics = pubsub._read(spark, runs, lambda r: r.files("metrics.jsonl"), "metrics", schema, check=False)
    with_events = pubsub.counter_growth(spark, metrics, {("c", "1"): pubsub.restart_times(runs[0])})
    assert with_events[("c", "1")] == {"copies_out_bytes": 15000 + 10000, "live_out_bytes": 5000 + 1900,
                                       "copies_out": 12 + 10, "live_out": 10 + 6, "restarts": 2}
    # without the event, b's restart is invisible (its counter went on rising): only a's drop splits it
    drops_only = pubsub.counter_growth(spark, metrics, {})
    assert drops_only[("c", "1")]["live_out_bytes"] == 5000 + 1200 and drops_only[("c", "1")]["restarts"] == 1


def test_runs_without_pubsub(spark, tmp_path) -> None:
    make_mail_run(tmp_path / "mail" / "1")
    runs = find_runs(tmp_path)
    assert not pubsub.any_records(runs) and not pubsub.build(spark, runs).present
