"""Provenance: experiment.json records what made the runs, report.html shows it; model units from summary.json."""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[3]


def test_experiment_json_carries_provenance_without_secrets(monkeypatch) -> None:
    from testbed.experiment import runner
    from testbed.scenario import loader

    sets = ["nodes.all.control_token=s3cret", "seed=7"]
    base = loader.load_text((REPO / "scenarios" / "quickstart.yaml").read_text(), overrides=sets)
    monkeypatch.setattr(sys, "argv", ["testbed", "run", "scenarios/quickstart.yaml", "--set", sets[0],
                                      "--set=" + sets[0], "--set", "seed=7"])
    doc = runner._experiment_doc(base, "scenarios/quickstart.yaml", [], "running", 1.7e9, False, sets)
    prov = doc["provenance"]
    assert "s3cret" not in json.dumps(doc, default=str)
    assert prov["command"][:3] == ["testbed", "run", "scenarios/quickstart.yaml"] and "seed=7" in prov["command"]
    assert prov["wanbed_version"] and prov["kernel"] == os.uname().release and prov["host_cpus"] == os.cpu_count()
    assert prov["date"] == "2023-11-14T22:13:20+00:00" and prov["shaper"]
    assert prov["scenario"]["seed"] == 7 and prov["scenario"]["nodes"]["all"]["control_token"] == loader.HIDDEN
    assert prov["git_commit"] is None or len(prov["git_commit"]) >= 40


def test_report_shows_provenance_and_time_scale() -> None:
    from spark_analysis.report import provenance_html

    page = provenance_html({"time_scale": 0.025, "provenance": {
        "wanbed_version": "0.1.0", "git_commit": "abc123", "command": ["testbed", "run", "a b.yaml"],
        "scenario": {"name": "quickstart", "seed": 1}, "seeds": [1, 2], "shaper": "netem", "kernel": "6.1",
        "host_cpus": 2, "date": "2026-01-01T00:00:00+00:00"}})
    for text in ("0.025 wall seconds per model second", "abc123", "testbed run &#x27;a b.yaml&#x27;", "1, 2",
                 "netem", "host CPUs", "resolved scenario", "name: quickstart"):
        assert text in page, text
    assert provenance_html({}) == ""


def test_model_unit_columns_come_from_summary_json() -> None:
    from spark_analysis.compare import RUN_METRICS, add_summary_metrics, summarize
    from spark_analysis.headline import cell_table, cell_table_display
    from spark_analysis.layout import Run

    runs = pd.DataFrame([{"cell": "c", "mode": "fragmenting", "rep": r, **dict.fromkeys(RUN_METRICS, 1.0),
                          "copies_accepted": 1, "delivered_copies": 1} for r in ("1", "2")])
    summaries = [Run(Path("x"), "c", r, {}, {"throughput": {"per_model_hour": v, "model_bytes_per_s_2plus": 10.0},
                                             "delay": {"overall": {"mean_model_s": 40.0 * v}}})
                 for r, v in (("1", 2.0), ("2", 8.0))]
    runs = add_summary_metrics(runs, summaries)
    summary, _ = summarize(runs, pd.DataFrame(columns=["cell", "mode", "bucket", "mean_delay_s", "messages"]))
    shown = cell_table_display(cell_table(summary))
    assert shown.loc[0, "thr2+/h (msg per model h)"].startswith("4 [")          # geometric mean of 2 and 8
    assert shown.loc[0, "mean delay of delivered msgs (model s)"].startswith("160 [")
    assert "mean delay of delivered msgs (wall s)" in shown and "delivered share (Wilson)" in shown
    assert "throughput 2+ frag (msg per wall s, whole run)" not in shown     # one throughput definition
    assert not math.isnan(cell_table(summary).loc[0, "delay_model_s_lo"])


def test_report_page_has_provenance_and_no_empty_resource_plot(tmp_path) -> None:
    from spark_analysis.report import ReportTables, write

    resources = pd.DataFrame({"cell": ["c"] * 3, "rep": ["1"] * 3, "run_mode": ["fragmenting"] * 3, "t": [0, 1, 2],
                              "pool_occupancy": [math.nan] * 3, "buffers_used": [0.0, 2.0, 1.0]})
    delays = pd.DataFrame(columns=["cell", "mode", "bucket", "mean_delay_s", "ci95_lo", "ci95_hi", "ci_centre",
                                   "ci_method", "n", "messages"])
    tables = ReportTables(pd.DataFrame(), pd.DataFrame(), delays, resources=resources,
                          experiment={"time_scale": 0.5, "provenance": {"git_commit": "feedbeef"}})
    page = write(tmp_path, "src", tables).read_text()
    assert 'id="provenance"' in page and "feedbeef" in page and "0.5 wall seconds per model second" in page
    assert not (tmp_path / "pool_occupancy.png").exists() and (tmp_path / "buffer_use.png").is_file()
    # empty sections are left out, with their links
    for anchor in ("comparison", "sweeps", "delay", "network"):
        assert f'id="{anchor}"' not in page and f'href="#{anchor}"' not in page, anchor
    assert 'id="resources"' in page


def test_timestamps_are_shown_as_times() -> None:
    from spark_analysis.report import _table

    page = _table(pd.DataFrame({"first_ts": [1.796e9], "bytes": [1.796e9]}))
    assert "2026-11-30 " in page and " UTC" in page and "1.796e+09" in page    # bytes stay a number
