"""testbed/reproduce: the `table:` output (its metrics per cell) and the routing account as CSV files."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from node.errors import UserError
from testbed.reproduce import routes, run, spec, table

pytestmark = pytest.mark.timeout(30)

FILE = """
title: "a routing table"
scenario: {scenario}
sweep: {{grid: {{routing.hysteresis: [0, 0.1]}}, reps: 2}}
plot: {{x: routing.hysteresis, y: route_moves}}
table: {{metrics: [route_moves, better_path_share, delay_p99_model_s, lost], nodes: [n1]}}
"""


@pytest.fixture
def figure(tmp_path: Path) -> Path:
    path = tmp_path / "paper-3.yaml"
    path.write_text(FILE.format(scenario=spec.REPO / "scenarios" / "drill-flap.yaml"))
    return path


def test_table_key_and_routing_metrics(figure: Path) -> None:
    r = spec.load(figure)
    assert r.table == spec.Table(metrics=["route_moves", "better_path_share", "delay_p99_model_s", "lost"],
                                 nodes=["n1"])
    run.check_metric(r)         # the routing metrics are metrics of the report's summary table


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace("route_moves, better", "moves_of_routes, better"), "table.metrics: 'moves_of_routes'"),
    (lambda t: t.replace("nodes: [n1]", "nodes: n1"), "table.nodes: expected a list"),
    (lambda t: t.replace("table: {", "table: {colour: red, "), "table: unknown key 'colour'"),
    (lambda t: t.replace("metrics: [route_moves, better_path_share, delay_p99_model_s, lost]", "metrics: []"),
     "table.metrics: expected at least one"),
])
def test_bad_tables_are_one_sentence(figure: Path, edit, message: str) -> None:
    figure.write_text(edit(figure.read_text()))
    with pytest.raises(UserError) as info:
        run.check_metric(spec.load(figure))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_metric_table_per_cell_with_saturation(tmp_path: Path) -> None:
    summary = tmp_path / "summary.csv"
    with open(summary, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["cell", "mode", "metric", "mean", "ci95", "ci95_lo", "ci95_hi", "ci_centre", "ci_method", "n"])
        w.writerow(["h-0", "fragmenting", "route_moves", 12, 3, 9, 15, 12, "t", 3])
        w.writerow(["h-0.1", "fragmenting", "route_moves", 2, "", "", "", "", "", 1])
    params = {"h-0": {"routing.hysteresis": 0}, "h-0.1": {"routing.hysteresis": 0.1}}
    reps = [{"cell": "h-0", "saturated": True}, {"cell": "h-0", "saturated": False}, {"cell": "h-0.1"}]
    rows = table.metric_table(summary, params, ["route_moves"], reps)
    assert rows[0] == {"cell": "h-0", "routing.hysteresis": 0, "reps": 2, "saturated": "1/2", "route_moves": 12.0,
                       "route_moves_lo": 9.0, "route_moves_hi": 15.0, "route_moves_n": 3}
    assert rows[1]["route_moves"] == 2.0 and rows[1]["saturated"] == "0/1"


def test_routing_csvs_from_the_summaries(tmp_path: Path) -> None:
    rep = tmp_path / "h-0" / "1"
    rep.mkdir(parents=True)
    (tmp_path / "experiment.json").write_text(json.dumps(
        {"cells": [{"id": "h-0", "reps": [{"rep": 1, "dir": "h-0/1"}]}]}))
    account = {"pairs": [{"node": "n1", "dst": "n3", "moves": 2, "modal_right": ["n2", "n4"]},
                         {"node": "n3", "dst": "n1", "moves": 0, "modal_right": ["n2"]}],
               "tables": [], "links": [{"node": "n1", "neighbour": "n2", "phase": 0, "settled": 10.5}]}
    (rep / "summary.json").write_text(json.dumps({"routing": account}))
    written = routes.write(tmp_path, tmp_path / "fig", ["n1"])
    assert [p.name for p in written] == ["routes.csv", "links.csv"]        # no checkpoint rows: no tables.csv
    with open(tmp_path / "fig" / "routes.csv", newline="") as f:
        got = list(csv.DictReader(f))
    assert [(r["cell"], r["node"], r["dst"], r["moves"], r["modal_right"]) for r in got] == \
        [("h-0", "n1", "n3", "2", "n2 n4")]
