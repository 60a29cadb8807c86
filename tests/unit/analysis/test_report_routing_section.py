"""The report's Routing section (spark_analysis/sections/routing.py) on tiny synthetic run directories: no Spark."""
from __future__ import annotations

import html
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from node.errors import UserError
from spark_analysis.sections import routing
from spark_analysis.layout import Run, find_runs
from spark_analysis.report import _table

T0 = 1000.0
CHANGE_AT = T0 + 30.0          # link_set b1-b2 delay 10 ms -> 60 ms
DOWN_AT = T0 + 100.0           # link_down b2-b3
UP_AT = T0 + 300.0             # link_up b2-b3: no route change follows


def _write(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _route(ts: float, node: str, dst: str, hop: str, cost: float | None, reason: str) -> dict:
    return {"ts": ts, "node": node, "dst": dst, "next_hop": hop, "cost": cost, "reason": reason}


def _link(name: str, a: str, b: str, there: float, back: float) -> dict:
    return {"name": name, "a": a, "b": b, "a_to_b": {"delay": there, "rate": None},
            "b_to_a": {"delay": back, "rate": None}}


def _metrics(ts: float, node: str, links: dict | None) -> dict:
    rec = {"ts": ts, "node": node, "spool_messages": 0, "spool_bytes": 0, "neighbours": {}, "delivered": 0}
    if links is not None:
        rec["routing"] = {"mode": "dynamic", "routes": 2, "changes": 4, "links": links}
    return rec


def _probe(latency_ms: float, answered: int = 10, up: bool = True) -> dict:
    return {"latency_ms": latency_ms, "sd_ms": 0.1, "jitter_ms": 0.1, "loss": 0.0, "probes_sent": answered,
            "probes_answered": answered, "cost": latency_ms, "suppressed": False, "up": up}


def make_run(root: Path, dynamic: bool = True) -> Path:
    """One run (cell c, rep 1): nodes b1, b2, b3 in a triangle; b1 measures its two links."""
    run = root / "c" / "1"
    # topology.json is the state at the end of the run: b1-b2 already at its new 60 ms
    (run / "topology.json").parent.mkdir(parents=True, exist_ok=True)
    (run / "topology.json").write_text(json.dumps({"links": [
        _link("b1-b2", "b1", "b2", 0.060, 0.060), _link("b2-b3", "b2", "b3", 0.020, 0.030),
        _link("b1-b3", "b1", "b3", 0.050, 0.040)]}))
    _write(run / "events.jsonl", [
        {"ts": CHANGE_AT, "node": "testbed", "event": "link_set", "target": "b1-b2", "direction": "both",
         "delay": 0.060},
        {"ts": DOWN_AT, "node": "testbed", "event": "link_down", "target": "b2-b3"},
        {"ts": T0 + 200.0, "node": "testbed", "event": "workload_end", "target": "all"},
        {"ts": UP_AT, "node": "testbed", "event": "link_up", "target": "b2-b3"}])
    metrics = [_metrics(T0, "b1", None)]
    for s in range(1, 60):
        ts = T0 + s
        if not dynamic:
            metrics.append(_metrics(ts, "b1", None))
            continue
        b2 = _probe(10.5 if ts < CHANGE_AT else 60.2, answered=0 if s == 1 else 10, up=s != 2)
        metrics.append(_metrics(ts, "b1", {"b2": b2, "b3": _probe(50.0)}))
    _write(run / "nodes/b1/metrics.jsonl", metrics)
    _write(run / "nodes/b2/metrics.jsonl", [_metrics(T0 + 0.5, "b2", None)])
    if dynamic:
        _write(run / "nodes/b1/routes.jsonl", [
            _route(T0 + 1, "b1", "b2", "b2", 10.0, "initial"), _route(T0 + 1, "b1", "b3", "b3", 50.0, "initial"),
            _route(CHANGE_AT + 2.5, "b1", "b2", "b3", 75.0, "switch"),
            _route(DOWN_AT + 1, "b1", "b4", "b3", None, "unreachable"),
            _route(DOWN_AT + 70, "b1", "b3", "b3", 52.0, "cost")])            # past the 60 s window
        _write(run / "nodes/b2/routes.jsonl", [_route(CHANGE_AT + 1, "b2", "b1", "b1", None, "static")])
        _write(run / "nodes/b3/routes.jsonl", [
            _route(CHANGE_AT + 4, "b3", "b1", "b1", 50.0, "cost"),
            _route(DOWN_AT + 7.25, "b3", "b2", "b1", 70.0, "withdrawn")])
    return run


@pytest.fixture
def tables(tmp_path: Path) -> routing.RoutingTables:
    make_run(tmp_path)
    return routing.build(find_runs(tmp_path))


def test_section_present_with_counts_per_node(tables: routing.RoutingTables) -> None:
    assert tables.present
    counts = tables.changes.set_index("node")
    assert counts.loc["b1", "changes"] == 5 and counts.loc["b1", "initial"] == 2
    assert counts.loc["b1", ["switch", "unreachable", "cost"]].tolist() == [1, 1, 1]
    assert counts.loc["b2", "static"] == 1 and counts.loc["b3", "withdrawn"] == 1
    assert counts.loc["b1", "mode"] == "dynamic" and counts.loc["b1", "metrics_changes"] == 4
    assert counts.loc["b1", "first_s"] == 1.0 and counts.loc["b1", "last_s"] == 170.0   # since the first metrics line
    assert counts["not_shown"].tolist() == [0, 0, 0]
    assert len(tables.timeline) == 8


def test_null_cost_is_infinite(tables: routing.RoutingTables) -> None:
    row = tables.timeline[tables.timeline["reason"] == "unreachable"].iloc[0]
    assert row["cost"] == math.inf and row["dst"] == "b4" and row["next_hop"] == "b3" and row["t_s"] == 101.0
    text = routing.section_html(tables, _table)
    assert "<td>inf</td>" in text


def test_convergence_from_event_to_last_route_change(tables: routing.RoutingTables) -> None:
    conv = tables.convergence
    assert conv["event"].tolist() == ["link_set", "link_down", "link_up"]      # workload_end is no link change
    first, down, up = (conv.iloc[i] for i in range(3))
    # b1 moves a next hop at +2.5 s and b3 changes a cost at +4 s; b2's static table load does not count
    assert (first["route_changes"], first["next_hop_changes"], first["nodes"]) == (2, 1, 1)
    assert (first["convergence_s"], first["settled_s"]) == (2.5, 4.0)
    assert first["window_s"] == 60.0 and first["result"] == "converged"
    assert first["change"] == "direction=both delay=60ms"
    # the change 70 s after the link went down is outside the 60 s window
    assert (down["route_changes"], down["convergence_s"], down["t_s"]) == (2, 7.25, 100.0)
    assert up["result"] == "no change" and math.isnan(up["convergence_s"]) and up["route_changes"] == 0


def test_convergence_window_ends_at_the_next_link_change() -> None:
    rr = routing.RunRouting(Run(Path("/nowhere"), "c", "1"),
                            {"n1": [routing.RouteChange(T0 + 3, "n1", "n2", "n3", 5.0, "switch"),
                                    routing.RouteChange(T0 + 12, "n1", "n2", "n2", 4.0, "switch")]},
                            {}, [{"ts": T0, "event": "link_down", "target": "n1-n2"},
                                 {"ts": T0 + 10, "event": "link_up", "target": "n1-n2"}], {}, [])
    rows = routing.convergence_rows(rr)
    assert [(r["window_s"], r["convergence_s"]) for r in rows] == [(10.0, 3.0), (60.0, 2.0)]


def test_measured_vs_configured_latency(tables: routing.RoutingTables) -> None:
    lat = tables.latency.set_index(["neighbour", "phase"])
    # b1 -> b3 never changed: configured = mean of 50 ms and 40 ms (the probe sees half a round trip)
    b3 = lat.loc[("b3", 0)]
    assert (b3["link"], b3["samples"], b3["measured_ms"]) == ("b1-b3", 29, 50.0)
    assert (b3["configured_ms"], b3["oneway_ms"]) == pytest.approx((45.0, 50.0))
    assert b3["diff_ms"] == pytest.approx(5.0) and b3["diff_pct"] == pytest.approx(100 * 5 / 45)
    # b1 -> b2 after the link_set: 60 ms both ways; before it the run directory does not say
    after = lat.loc[("b2", 1)]
    assert (after["samples"], after["from_s"], after["measured_ms"]) == (30, 30.0, pytest.approx(60.2))
    assert after["configured_ms"] == pytest.approx(60.0) and after["diff_pct"] == pytest.approx(0.2 / 60 * 100)
    before = lat.loc[("b2", 0)]
    assert before["samples"] == 27            # not before a probe was answered, not while the link was down
    assert before["measured_ms"] == pytest.approx(10.5) and math.isnan(before["configured_ms"])
    assert before["to_s"] == 30.0


def test_configured_delay_follows_link_set_directions() -> None:
    link = routing.LinkDelays("x-y", "x", "y", {"a_to_b": 0.03, "b_to_a": 0.02})
    changes = routing.delay_changes([
        {"ts": 5.0, "event": "link_set", "target": "x-y", "direction": "a_to_b", "delay": 0.01},
        {"ts": 8.0, "event": "link_set", "target": "x-y", "direction": "a_to_b", "delay": 0.03},
        {"ts": 9.0, "event": "link_set", "target": "x-y", "loss": 0.1}])                  # no delay: no step
    assert routing.configured_delay(link, "a_to_b", changes, 6.0) == 0.01
    assert routing.configured_delay(link, "a_to_b", changes, 8.0) == 0.03
    assert routing.configured_delay(link, "a_to_b", changes, 1.0) is None
    assert routing.configured_delay(link, "b_to_a", changes, 1.0) == 0.02


def test_section_absent_without_routing_records(tmp_path: Path) -> None:
    make_run(tmp_path, dynamic=False)
    rt = routing.build(find_runs(tmp_path))
    assert not rt.present and rt.changes.empty and rt.latency.empty and rt.convergence.empty
    text = routing.section_html(rt, _table)
    assert "static routing" in text and "<table" not in text


def test_timeline_keeps_the_last_changes_per_node(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    rr = routing.read_run(find_runs(run)[0])
    counts, timeline = routing.change_rows(rr, cap=3)
    b1 = [r for r in timeline if r["node"] == "b1"]
    assert [r["t_s"] for r in b1] == [32.5, 101.0, 170.0]
    assert {c["node"]: c["not_shown"] for c in counts} == {"b1": 2, "b2": 0, "b3": 0}


def test_bad_route_line_names_file_and_line(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    f = run / "nodes/b3/routes.jsonl"
    f.write_text(f.read_text() + json.dumps(_route(T0 + 400, "b3", "b2", "b1", "far", "cost")) + "\n")
    with pytest.raises(UserError, match=rf"{f}:3: route record is not valid: field 'cost'"):
        routing.build(find_runs(tmp_path))


def test_bad_routing_metrics_is_one_error(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    f = run / "nodes/b2/metrics.jsonl"
    f.write_text(f.read_text() + json.dumps(dict(_metrics(T0 + 1, "b2", None), routing=[1])) + "\n")
    with pytest.raises(UserError, match=rf"{f}:2: 'routing' must be an object"):
        routing.build(find_runs(tmp_path))


def test_html_section_lists_every_table(tables: routing.RoutingTables) -> None:
    text = routing.section_html(tables, _table)
    for table_id in ("routing-changes-table", "routing-timeline-table", "routing-latency-table",
                     "routing-convergence-table"):
        assert f'id="{table_id}"' in text
    assert "routing-policy-table" not in text and html.escape(routing.NO_SWEEP_NOTE) in text


def test_policy_cells_only_for_a_routing_sweep() -> None:
    runs = [Run(Path("a"), "p-dyn_m-f", "1", {"routing.policy": "dynamic", "nodes.all.mode": "fragmenting"}),
            Run(Path("b"), "p-sh_m-f", "1", {"routing.policy": "shortest", "nodes.all.mode": "fragmenting"}),
            Run(Path("c"), "p-dyn_m-n", "1", {"routing": "dynamic", "nodes.all.mode": "non-fragmenting"})]
    cells = routing.policy_cells(runs)
    assert cells == {"p-dyn_m-f": ("mode=fragmenting", "dynamic"), "p-sh_m-f": ("mode=fragmenting", "shortest"),
                     "p-dyn_m-n": ("mode=non-fragmenting", "dynamic")}
    assert routing.policy_cells([Run(Path("a"), "x", "1", {"nodes.all.mode": "fragmenting"})]) == {}
    assert routing.policy_cells(runs[:1]) == {}


def test_report_writes_the_routing_tables(tables: routing.RoutingTables, tmp_path: Path) -> None:
    from spark_analysis import report

    empty = pd.DataFrame(columns=["cell", "mode", "bucket", "mean_delay_s", "ci95", "n", "messages"])
    page = report.write(tmp_path / "out", "synthetic", report.ReportTables(pd.DataFrame(), pd.DataFrame(), empty,
                                                                          sections={"routing": tables}))
    text = page.read_text()
    assert 'id="routing"' in text and 'id="routing-convergence-table"' in text
    conv = pd.read_csv(tmp_path / "out" / "routing_convergence.csv")
    assert conv["convergence_s"].tolist()[:2] == [2.5, 7.25]
    assert (tmp_path / "out" / "tables" / "routing_timeline.parquet").is_file()
