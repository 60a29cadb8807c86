"""The report's Publish/subscribe section (spark_analysis/sections/pubsub.py), the parts that need no Spark: the
minimum tree, the brokers' graph, the verdicts and the HTML (tests/integration/analysis/test_pubsub_report.py
runs the Spark side on a synthetic run directory)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from spark_analysis.sections import pubsub
from spark_analysis.layout import Run, find_runs
from spark_analysis.report import _table


def _adj(*links: tuple[str, str]) -> dict[str, set[str]]:
    return pubsub.mta_graph(links)


def test_line_tree_is_two_links() -> None:
    adj = _adj(("o", "a"), ("a", "b"))
    assert pubsub.tree_links(adj, "o", ["a", "b"]) == pubsub.Tree(2, ())
    assert pubsub.tree_links(adj, "o", ["b"]).links == 2
    assert pubsub.tree_links(adj, "o", ["a"]).links == 1


def test_origin_as_target_costs_nothing_and_unreachable_targets_are_named() -> None:
    adj = _adj(("o", "a"), ("x", "y"))
    assert pubsub.tree_links(adj, "o", ["o"]) == pubsub.Tree(0, ())
    assert pubsub.tree_links(adj, "o", ["o", "a", "y", "nowhere"]) == pubsub.Tree(1, ("nowhere", "y"))


def test_branches_share_the_common_links() -> None:
    # o - a - b and o - c: targets b and c need o-a, a-b, o-c
    adj = _adj(("o", "a"), ("a", "b"), ("o", "c"))
    assert pubsub.tree_links(adj, "o", ["b", "c"]).links == 3
    # a star: one link per leaf
    star = _adj(*[("h", f"l{i}") for i in range(5)])
    assert pubsub.tree_links(star, "h", [f"l{i}" for i in range(5)]).links == 5
    assert pubsub.tree_links(star, "l0", ["l1", "l2"]).links == 3


def test_equal_length_paths_count_the_smallest_union() -> None:
    # o-p, o-q, p-x, q-x, p-y: x has two shortest paths; with y (only via p) the union o-p, p-x, p-y is 3 links
    adj = _adj(("o", "p"), ("o", "q"), ("p", "x"), ("q", "x"), ("p", "y"))
    assert pubsub.tree_links(adj, "o", ["x", "y"]) == pubsub.Tree(3, ())
    # longer: the choice two levels down decides (x2 via p1 shares p1 with y2)
    adj = _adj(("o", "p1"), ("o", "q1"), ("p1", "p2"), ("q1", "q2"), ("p2", "x3"), ("q2", "x3"), ("p1", "y2"))
    assert pubsub.tree_links(adj, "o", ["x3", "y2"]).links == 4
    # a ring of 6: the opposite node has two shortest paths; with its neighbours as targets too, 4 links
    ring = _adj(*[(f"r{i}", f"r{(i + 1) % 6}") for i in range(6)])
    assert pubsub.tree_links(ring, "r0", ["r3"]).links == 3
    assert pubsub.tree_links(ring, "r0", ["r2", "r3", "r4"]).links == 5
    assert pubsub.tree_links(ring, "r0", ["r1", "r2", "r3"]).links == 3


def test_budget_falls_back_to_a_greedy_upper_bound() -> None:
    # a 4x4 grid from a corner: many equal paths
    links = [(f"{i}{j}", f"{i + 1}{j}") for i in range(3) for j in range(4)]
    links += [(f"{i}{j}", f"{i}{j + 1}") for i in range(4) for j in range(3)]
    adj = _adj(*links)
    targets = ["33", "30", "03", "22"]
    exact = pubsub.tree_links(adj, "00", targets)
    # the two edges of the grid (3 + 3 links), 22 through 21 (2 more), 33 through 23 or 32 (2 more)
    assert exact.exact and exact.links == 10
    rough = pubsub.tree_links(adj, "00", targets, budget=1)
    assert not rough.exact and rough.links >= exact.links


def test_daemon_less_hosts_are_contracted() -> None:
    # o - r1 - r2 - a, r1 - b: r1 and r2 are plain routers; the brokers' graph is o-a, o-b, a-b
    links = [("o", "r1"), ("r1", "r2"), ("r2", "a"), ("r1", "b")]
    adj = pubsub.mta_graph(links, {"o", "a", "b"})
    assert adj == {"o": {"a", "b"}, "a": {"o", "b"}, "b": {"o", "a"}}
    assert pubsub.tree_links(adj, "o", ["a", "b"]).links == 2
    assert pubsub.mta_graph(links, None)["r1"] == {"o", "r2", "b"}


def _row(kind: str, missing: int = 0, duplicates: int = 0) -> dict:
    return {"kind": kind, "missing": missing, "duplicates": duplicates}


def test_verdicts() -> None:
    assert pubsub.verdict(_row(pubsub.DURABLE)) == "ok"
    assert pubsub.verdict(_row(pubsub.DURABLE, missing=2)) == "FAIL: 2 durable missing"
    assert (pubsub.verdict(dict(_row(pubsub.DURABLE, missing=2), checker_late=2, checker_lost=0))
            == "FAIL: 2 durable missing (checker: 2 late, 0 lost)")
    assert pubsub.verdict(_row(pubsub.LIVE, missing=2)) == "missing allowed (at most once)"
    assert pubsub.verdict(_row(pubsub.LIVE, duplicates=1)) == "FAIL: 1 duplicates"


def test_no_section_without_pubsub_records(tmp_path: Path) -> None:
    run = tmp_path / "c" / "1"
    (run / "nodes" / "a").mkdir(parents=True)
    (run / "nodes" / "a" / "deliveries.jsonl").write_text("")
    (run / "nodes" / "a" / "publications.jsonl").write_text("")      # empty: nothing was published
    runs = find_runs(tmp_path)
    assert not pubsub.any_records(runs)
    pt = pubsub.build(None, runs)                                     # no Spark needed for nothing
    assert not pt.present and pt.latency.empty and pt.fanout.empty and pt.losses.empty
    assert pubsub.section_html(None, _table) == "" and pubsub.section_html(pubsub.PubSubTables(), _table) == ""
    (run / "subscribers" / "a" / "s").mkdir(parents=True)             # a subscriber client, even idle, counts
    assert pubsub.any_records(runs)


def test_client_counts_and_checker(tmp_path: Path) -> None:
    run = tmp_path / "c" / "1"
    for node, name, durable, dup in (("a", "d", True, 0), ("b", "s", False, 2), ("c", "t", False, 1)):
        d = run / "subscribers" / node / name
        d.mkdir(parents=True)
        (d / "subscriber.json").write_text(json.dumps({"node": node, "name": name, "durable": durable,
                                                       "deliveries": 5, "received": 4, "redelivered": 1,
                                                       "duplicates": dup, "dropped": 3, "streams": 2}))
    d = run / "subscribers" / "c" / "nojson"
    d.mkdir(parents=True)
    (d / "receipts.jsonl").write_text(json.dumps({"durable": True}) + "\n")
    (run / "nodes").mkdir()
    r = Run(run, "c", "1", summary={"pubsub": {"total": {"late_durable": 2, "lost_durable": 0}}})
    counts = pubsub.client_counts(r)
    assert counts[pubsub.DURABLE] == {"subscriptions": 2, "duplicates": 0, "redelivered": 1, "dropped": 3,
                                      "deliveries": 5, "streams": 2}
    assert counts[pubsub.LIVE]["subscriptions"] == 2 and counts[pubsub.LIVE]["duplicates"] == 3
    assert pubsub.checker_counts(r) == (2, 0)
    assert pubsub.checker_counts(Run(run, "c", "1", summary={"pubsub": None})) == (None, None)


def _tables() -> pubsub.PubSubTables:
    lat = pd.DataFrame([["c", "t.x", "durable", 1, 9, 4.0, 8.0, 9.0, 9.0],
                        ["c", "t.x", "non-durable", 1, 8, 4.0, 7.0, 8.0, 8.0]], columns=pubsub.LATENCY_COLUMNS)
    cdf = pd.DataFrame([["c", "t.x", k, f"t.x ({k})", q, q * 10] for k in pubsub.KINDS for q in (0.5, 0.9)],
                       columns=pubsub.CDF_COLUMNS)
    fan = pd.DataFrame([["c", "1", 15, 27, 31900, 26000, 31900 / 26000, 38, 32, 38 / 32, 31900 / 27, 26000 / 27,
                         2, 0]], columns=pubsub.FANOUT_COLUMNS)
    loss_rows = [["c", "1", pubsub.DURABLE, 1, 15, 14, 0, 1, 0, 2, 0, 16, 2, 1, 0, ""],
                 ["c", "1", pubsub.LIVE, 2, 14, 13, 1, 2, 0, 0, 3, 14, 2, None, None, ""]]
    losses = pd.DataFrame(loss_rows, columns=pubsub.LOSS_COLUMNS)
    losses["verdict"] = [pubsub.verdict(r) for r in losses.to_dict("records")]
    return pubsub.PubSubTables(True, lat, cdf, fan, losses, ["a note"])


def test_section_html_flags_durable_losses() -> None:
    figures = []
    text = pubsub.section_html(_tables(), _table, lambda fig, name, alt: figures.append(name) or "<img>")
    assert text.startswith('<h2 id="pubsub">Publish/subscribe</h2>')
    for table_id in ("pubsub-latency-table", "pubsub-fanout-table", "pubsub-losses-table"):
        assert f'id="{table_id}"' in text
    assert "FAILURE" in text and "c/1 durable: 1 durable missing (checker: 1 late, 0 lost)" in text
    assert "<li>a note</li>" in text
    assert "missing allowed (at most once)" in text
    assert "payload plus its" in text and "not counted" in text.lower()
    assert figures == ["pubsub_latency_c"]


def test_report_writes_the_pubsub_tables_only_when_present(tmp_path: Path) -> None:
    from spark_analysis import report

    empty = pd.DataFrame(columns=["cell", "mode", "bucket", "mean_delay_s", "ci95", "n", "messages"])
    base = report.ReportTables(pd.DataFrame(), pd.DataFrame(), empty)
    without = report.write(tmp_path / "a", "synthetic", base).read_text()
    assert "pubsub" not in without and not list((tmp_path / "a").glob("pubsub*"))
    base.sections["pubsub"] = pubsub.PubSubTables()
    assert report.write(tmp_path / "b", "synthetic", base).read_text() == without
    base.sections["pubsub"] = _tables()
    text = report.write(tmp_path / "c", "synthetic", base).read_text()
    assert 'href="#pubsub"' in text and 'id="pubsub"' in text and "data:image/png;base64," in text
    assert (tmp_path / "c" / "pubsub_latency_c.png").is_file()
    fan = pd.read_csv(tmp_path / "c" / "pubsub_fanout.csv")
    assert fan["ratio"].iloc[0] == pytest.approx(31900 / 26000)
    assert (tmp_path / "c" / "tables" / "pubsub_losses.parquet").is_file()
    assert math.isnan(pd.read_csv(tmp_path / "c" / "pubsub_losses.csv")["checker_late"].iloc[1])
