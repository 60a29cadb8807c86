"""The gateway account (testbed/accounting/gateway.py, summary.json `gateway`) on hand-written record files."""
from __future__ import annotations

import json
from pathlib import Path

from node import schema
from testbed.accounting import gateway
from testbed.accounting.records import RecordReader
from testbed.scenario import load_text
from testbed.subsystems.gateway import SUBSYSTEM

SCENARIO = """\
name: emg
time_scale: 0.5
topology: {generator: star, params: {n: 4}}
gateway:
  node: hub
  gamma: 1
  threshold: 200
  outgoing: {n1: {rate: 1}, n2: {rate: 3}}
  incoming: {s: {neighbour: n3, throughput: 3}, in1: {user: in1, throughput: 5}}
"""


def metrics(ts: float, o1: int, deactivated: bool, sent: int, o2: int, section: bool = True) -> dict:
    rec = {"ts": ts, "node": "hub", "spool_messages": o1 + o2, "spool_bytes": 0, "delivered": 0,
           "neighbours": {"n1": {"queue_messages": o1}, "n2": {"queue_messages": o2}}}
    if section:
        rec["gateway"] = {"gamma": 1.0, "maxrate": None, "threshold": 200,
                          "outgoing": {"n1": {"queue": o1, "deactivated": deactivated, "rate": 2.0, "sent": sent}},
                          "incoming": {"s": {"throughput": 6.0, "deferred": 4}, "in1": {"throughput": 10.0,
                                                                                       "throttled": 1}},
                          "users": {}, "refused": {"throttled": 1, "no_credits": 1, "locked": 1, "not_permitted": 1},
                          "dropped": 2}
    return rec


def write(path: Path, records: list[dict], kind: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for r in records:
        assert kind is None or schema.validate(kind, r) == [], r
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def refusal(node: str, reason: str, accepted: bool = False) -> dict:
    return {"ts": 1.0, "node": node, "msg_id": "", "src": node, "dst": "n1", "size": 10, "accepted": accepted,
            "reason": reason}


def decision(action: str, queue: int = 231) -> dict:
    return {"kind": "gateway", "ts": 100.0, "node": "hub", "event": "queue_high", "action": action,
            "connector": "n1", "gamma": 1.0, "queue": queue, "threshold": 200, "maxrate": None, "values": {}}


def test_the_account_from_metrics_decisions_and_refusals(tmp_path: Path) -> None:
    scenario = load_text(SCENARIO, "emg.yaml")
    node = tmp_path / "nodes" / "hub"
    # wall samples 0.5 s apart = 1 model s at time_scale 0.5; the last line has no gateway section
    write(node / "metrics.jsonl", [metrics(100.0, 150, False, 0, 5), metrics(100.5, 210, False, 1, 7),
                                   metrics(101.0, 250, True, 2, 9), metrics(101.5, 190, True, 3, 4),
                                   metrics(102.0, 100, False, 4, 0), metrics(102.5, 90, False, 4, 3, section=False)],
          "metrics")
    write(node / gateway.DECISIONS_FILE, [decision("deactivate_lb"), decision("throttle"), decision("restore"),
                                          decision("throttle")])
    submissions = [refusal("hub", "throttled"), refusal("hub", "no credits left"),
                   refusal("hub", "locked until 2026-11-27T10:00:00+00:00"), refusal("hub", "not permitted on n2"),
                   refusal("hub", "throttled"), refusal("n3", "throttled"), refusal("hub", "", accepted=True),
                   refusal("hub", "queue full")]
    reader = RecordReader(tmp_path)
    acc = SUBSYSTEM.account(tmp_path, reader, scenario, submissions)["gateway"]
    assert reader.problems == 0
    assert acc["outgoing"]["n1"] == {"max_queue": 250, "above_threshold_s": 2.0, "deactivated_s": 2.0,
                                     "delivered_rate": 1.0, "sent": 4}
    # a connector the node reported no gateway state for: its queue from the neighbour counters
    assert acc["outgoing"]["n2"] == {"max_queue": 9, "above_threshold_s": 0.0, "deactivated_s": 0.0,
                                     "delivered_rate": None, "sent": None}
    assert acc["refused"] == {"throttled": 2, "no_credits": 1, "locked": 1, "not_permitted": 1}
    assert (acc["throttled"], acc["deferred"], acc["dropped"], acc["samples"]) == (6, 4, 2, 5)
    assert acc["decisions"] == {"deactivate_lb": 1, "restore": 1, "throttle": 2}
    assert (acc["node"], acc["gamma"], acc["threshold"], acc["lower"]) == ("hub", 1.0, 200, 150)
    assert SUBSYSTEM.problems({"gateway": acc}) == []
    line = SUBSYSTEM.console({"gateway": acc})[0]
    assert "n1 max 250 (2 s above)" in line and "dropped 2" in line and "4 decisions" in line


def test_no_gateway_no_account_and_a_silent_gateway_is_a_problem(tmp_path: Path) -> None:
    plain = load_text(SCENARIO.split("gateway:")[0], "plain.yaml")
    assert SUBSYSTEM.account(tmp_path, RecordReader(tmp_path), plain, []) == {"gateway": None}
    assert SUBSYSTEM.problems({"gateway": None}) == [] and SUBSYSTEM.console({"gateway": None}) == []
    scenario = load_text(SCENARIO, "emg.yaml")
    node = tmp_path / "nodes" / "hub"
    write(node / "metrics.jsonl", [metrics(1.0, 10, False, 0, 0, section=False)], "metrics")
    (node / gateway.DECISIONS_FILE).write_text(json.dumps(decision("none", queue=5)) + "\nnot json\n")
    reader = RecordReader(tmp_path)
    acc = gateway.account(tmp_path, reader, scenario, [])
    assert acc["outgoing"]["n1"]["max_queue"] == 10 and acc["samples"] == 0 and acc["decisions"] == {"none": 1}
    assert reader.problems == 1 and "gateway.jsonl:2" in reader.samples[0]
    assert "wrote no `gateway` section" in SUBSYSTEM.problems({"gateway": acc})[0]


def test_a_decision_between_two_samples_counts_for_the_highest_queue(tmp_path: Path) -> None:
    """The gateway acts on a queue the metrics lines (one a second) may never show: its decisions' queue counts."""
    scenario = load_text(SCENARIO, "emg.yaml")
    node = tmp_path / "nodes" / "hub"
    write(node / "metrics.jsonl", [metrics(100.0, 150, False, 0, 5), metrics(100.5, 199, True, 1, 7)], "metrics")
    write(node / gateway.DECISIONS_FILE, [decision("deactivate_lb")])       # at queue 231, between the samples
    acc = SUBSYSTEM.account(tmp_path, RecordReader(tmp_path), scenario, [])["gateway"]
    assert acc["outgoing"]["n1"]["max_queue"] == 231
    assert acc["outgoing"]["n2"]["max_queue"] == 7
