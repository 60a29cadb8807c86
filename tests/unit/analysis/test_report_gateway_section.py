"""The report's gateway section on a small hand-made run directory: per cell the connectors' measures with 95%
intervals over repetitions, the totals per run, the decisions by action, o1's queue over time."""
from __future__ import annotations

import json
import math
from pathlib import Path

from spark_analysis.layout import Run
from spark_analysis.report import _table
from spark_analysis.sections import SECTIONS, gateway


def acc(max_queue: int, above: float, rate: float, decisions: dict) -> dict:
    return {"node": "gw", "gamma": 1.0, "threshold": 200, "lower": 150, "actions": ["throttle"],
            "outgoing": {"o1": {"max_queue": max_queue, "above_threshold_s": above, "deactivated_s": 0.0,
                                "delivered_rate": rate, "sent": 10},
                         "o3": {"max_queue": 3, "above_threshold_s": 0.0, "deactivated_s": 0.0,
                                "delivered_rate": None, "sent": None}},
            "throttled": 5, "deferred": 4, "dropped": 0,
            "refused": {"throttled": 1, "no_credits": 0, "locked": 0, "not_permitted": 0},
            "decisions": decisions, "samples": 3}


def run(tmp: Path, cell: str, rep: str, account: dict | None, actions: list[str] = ()) -> Run:
    d = tmp / cell / rep
    (d / "nodes" / "gw").mkdir(parents=True)
    (d / "nodes" / "gw" / "metrics.jsonl").write_text("".join(
        json.dumps({"ts": 100.0 + i * 0.1, "node": "gw", "neighbours": {"o1": {"queue_messages": q}},
                    **({"gateway": {"outgoing": {"o1": {"queue": q + 1}}}} if i else {})}) + "\n"
        for i, q in enumerate((190, 210, 205))) + "partial")
    (d / "nodes" / "gw" / "gateway.jsonl").write_text("".join(
        json.dumps({"kind": "gateway", "ts": 100.0, "node": "gw", "action": a}) + "\n" for a in actions))
    return Run(d, cell, rep, summary={"time_scale": 0.1, "gateway": account})


def test_measures_per_cell_with_intervals_and_decisions_per_action(tmp_path: Path) -> None:
    runs = [run(tmp_path, "g1", "1", acc(250, 100.0, 0.9, {"throttle": 2}), ["throttle", "restore"]),
            run(tmp_path, "g1", "2", acc(230, 80.0, 1.1, {"throttle": 1}), ["throttle"]),
            run(tmp_path, "g0", "1", acc(1800, 3200.0, 1.0, {}))]
    assert gateway.SECTION in SECTIONS and gateway.SECTION.wanted(runs)
    gt = gateway.build(runs)
    o1 = gt.connectors.set_index(["cell", "connector"]).loc[("g1", "o1")]
    assert (o1["reps"], o1["max_queue"], o1["above_threshold_s"], o1["delivered_rate"]) == (2, 240.0, 90.0, 1.0)
    assert o1["max_queue_lo"] < 240.0 < o1["max_queue_hi"]
    one = gt.connectors.set_index(["cell", "connector"]).loc[("g0", "o1")]
    assert one["max_queue"] == 1800.0 and math.isnan(one["max_queue_lo"])       # one repetition: no interval
    assert gt.decisions.values.tolist() == [["g1", "restore", 1, 2], ["g1", "throttle", 2, 2]]
    assert gt.totals["throttled"].tolist() == [5, 5, 5] and gt.totals["decisions"].tolist() == [2, 1, 0]
    # o1's queue: the neighbour counter where a line has no gateway section; model s at time_scale 0.1
    first = gt.queue[(gt.queue["cell"] == "g1") & (gt.queue["rep"] == "1")]
    assert first["queue"].tolist() == [190, 211, 206] and [round(t, 6) for t in first["t"]] == [0.0, 1.0, 2.0]
    assert set(gt.named()) == {"gateway_connectors", "gateway_totals", "gateway_decisions", "gateway_queue"}
    page = gateway.section_html(gt, _table, lambda fig, name, alt: f"<img {name}>")
    assert 'id="gateway"' in page and "gateway-decisions-table" in page and "<img gateway_queue>" in page
    assert "240 [" in gateway.shown(gt).set_index(["cell", "connector"]).loc[("g1", "o1"), "max_queue"]


def test_runs_without_a_gateway_show_nothing(tmp_path: Path) -> None:
    runs = [run(tmp_path, "c", "1", None)]
    assert not gateway.SECTION.wanted(runs)
    gt = gateway.build(runs)
    assert not gt.present and gateway.SECTION.tables(gt) == {} and gateway.section_html(gt, _table) == ""
