"""The routing account (testbed/accounting/routing.py, summary.json `routing`) on a hand-written ring of four.

n1-n2 10 ms, n2-n3 10 ms, n3-n4 10 ms, n4-n1 25 ms; n1-n2 goes to 40 ms at 120 s and back at 160 s, so n1's
better path to n3 is via n2 (20 ms against 35), then via n4 (35 against 50), then via n2 again. The workload
window is 100-200 s.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from node import schema
from testbed.accounting import routing
from testbed.accounting.records import RecordReader
from testbed.subsystems import SUBSYSTEMS

LINKS = (("n1-n2", "n1", "n2", 0.010), ("n2-n3", "n2", "n3", 0.010), ("n3-n4", "n3", "n4", 0.010),
         ("n4-n1", "n4", "n1", 0.025))


def write(path: Path, records: list[dict], kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for r in records:
        assert schema.validate(kind, r) == [], r
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def route(ts: float, node: str, dst: str, hop: str, cost: float | None, reason: str) -> dict:
    return {"ts": ts, "node": node, "dst": dst, "next_hop": hop, "cost": cost, "reason": reason}


def metrics(ts: float, node: str, costs: dict[str, float]) -> dict:
    return {"ts": ts, "node": node, "spool_messages": 0, "spool_bytes": 0, "neighbours": {}, "delivered": 0,
            "routing": {"mode": "dynamic", "links": {p: {"cost": c, "up": True} for p, c in costs.items()}}}


def event(ts: float, name: str, target: str, **params: object) -> dict:
    return {"ts": ts, "node": "testbed", "event": name, "target": target, **params}


@pytest.fixture
def run(tmp_path: Path) -> Path:
    topo = {"links": [{"name": n, "a": a, "b": b, "a_to_b": {"delay": d}, "b_to_a": {"delay": d}}
                      for n, a, b, d in LINKS]}
    (tmp_path / "topology.json").write_text(json.dumps(topo))
    before = {"a_to_b": {"delay": 0.010}, "b_to_a": {"delay": 0.010}}
    write(tmp_path / "events.jsonl", [
        event(120.0, "link_set", "n1-n2", direction="both", before=before, delay=0.040),
        event(160.0, "link_set", "n1-n2", direction="both", before={"a_to_b": {"delay": 0.040},
                                                                    "b_to_a": {"delay": 0.040}}, delay=0.010),
        # applied with the change before it (faults given the same time): one phase boundary, not two
        event(160.003, "link_set", "n2-n3", direction="both", before=before, delay=0.010),
        event(200.0, "workload_end", "all")], "event")
    write(tmp_path / "nodes/n1/routes.jsonl", [
        route(90.0, "n1", "n2", "n2", 10, "initial"), route(90.0, "n1", "n3", "n2", 20, "initial"),
        route(90.0, "n1", "n4", "n4", 25, "initial"),
        route(122.0, "n1", "n2", "n2", 40, "cost"),                # a new cost on the same hop: not a move
        route(125.0, "n1", "n3", "n4", 35, "switch"), route(165.0, "n1", "n3", "n2", 20, "switch")], "route")
    write(tmp_path / "nodes/n3/routes.jsonl", [route(90.0, "n3", "n1", "n2", 20, "initial")], "route")
    write(tmp_path / "nodes/n2/routes.jsonl", [route(95.0, "n2", "n4", "n3", None, "static")], "route")
    write(tmp_path / "nodes/n1/metrics.jsonl", [
        metrics(t, "n1", {"n2": c}) for t, c in ((100, 10), (105, 10), (110, 11), (115, 10), (121, 25), (130, 40),
                                                 (140, 40), (150, 40), (161, 20), (170, 10), (180, 10), (190, 10))],
          "metrics")
    return tmp_path


def test_moves_matches_and_the_better_path_share(run: Path) -> None:
    acc = routing.account(run, RecordReader(run), wall_duration=100.0, time_scale=1.0)
    assert acc is not None
    pairs = {(p["node"], p["dst"]): p for p in acc["pairs"]}
    assert set(pairs) == {("n1", "n2"), ("n1", "n3"), ("n1", "n4"), ("n3", "n1")}     # the static load left out
    assert pairs[("n1", "n3")]["moves"] == 2 and pairs[("n1", "n2")]["moves"] == 0
    assert acc["moves"] == 2 and acc["moves_per_hour"] == pytest.approx(72.0)
    # n1 -> n3 was on the worse path 5 s after each change: 90 of 100 s; n3 -> n1 never left n2: 60 of 100 s
    assert pairs[("n1", "n3")]["right_share"] == pytest.approx(0.9)
    assert pairs[("n3", "n1")]["right_share"] == pytest.approx(0.6)
    assert not pairs[("n1", "n2")]["varies"] and pairs[("n1", "n3")]["varies"]
    assert acc["better_share"] == pytest.approx(0.75)
    # checkpoints just before 120 and 160 and at 200: only n3 -> n1 before 160 (via n2 at 50 against 35) is wrong
    assert acc["checkpoints"] == 3
    assert acc["table_match"] == pytest.approx(11 / 12, abs=1e-4)
    wrong = [t for t in acc["tables"] if not t["match"]]
    assert [(t["checkpoint"], t["node"], t["dst"], t["right"], t["right_cost"]) for t in wrong] == \
        [(2, "n3", "n1", ["n4"], 35.0)]
    # on the time-weighted costs n1-n2 is 22 ms: the modal routes (via n2) are Dijkstra's
    assert acc["modal_match"] == 1.0
    links = {(r["node"], r["neighbour"], r["phase"]): r for r in acc["links"]}
    assert links[("n1", "n2", 0)]["settled"] == 10.5 and links[("n1", "n2", 1)]["configured_ms"] == 40.0
    assert links[("n1", "n2", 1)]["settled"] == 40.0
    assert acc["cost_error_max"] == pytest.approx(0.05)


def test_tie_keeps_every_equal_next_hop_right() -> None:
    graph = {"a": {"b": 1.0, "c": 2.0}, "b": {"a": 1.0, "d": 2.0}, "c": {"a": 2.0, "d": 1.0},
             "d": {"b": 2.0, "c": 1.0}}
    assert routing.right_hops(graph, "a", "d") == ({"b", "c"}, 3.0)


def test_no_dynamic_routes_no_account(tmp_path: Path) -> None:
    write(tmp_path / "nodes/n2/routes.jsonl", [route(95.0, "n2", "n4", "n3", None, "static")], "route")
    assert routing.account(tmp_path, RecordReader(tmp_path), 100.0, 1.0) is None
    assert "routing" in [s.name for s in SUBSYSTEMS]
