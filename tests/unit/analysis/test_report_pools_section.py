"""The report's pools section on hand-made runs: the two algorithms side by side with 95% intervals over their
repetitions, and the pools.jsonl lines by event per cell."""
from __future__ import annotations

import json
import math
from pathlib import Path

from spark_analysis.layout import Run
from spark_analysis.report import _table
from spark_analysis.sections import SECTIONS, pools


def run(tmp: Path, cell: str, rep: str, p99: float, moved: int, lost: int = 0) -> Run:
    d = tmp / cell / rep
    (d / "nodes" / "r1").mkdir(parents=True)
    (d / "nodes" / "r1" / "pools.jsonl").write_text(
        json.dumps({"ts": 1.0, "node": "r1", "event": "elected", "term": 1}) + "\n"
        + json.dumps({"ts": 2.0, "node": "r1", "event": "map", "version": 2}) + "\n" + '{"torn')
    acc = {"rebalance_p50_s": p99 / 2, "rebalance_p99_s": p99, "moved": moved, "balance_max_over_mean": 1.5,
           "fence_pause_p50_s": 0.01, "fence_pause_max_s": 0.2, "crash_detect_s": [2.0, 2.2], "failover_s": [],
           "events_lost": lost, "events_duplicated": 0, "affinity_violations": 0, "refused": 1}
    return Run(d, cell, rep, params={"pools.algorithm": cell.split("-", 1)[1].replace("-", "_")},
               summary={"pools": acc})


def test_algorithms_side_by_side_with_intervals_and_records_by_event(tmp_path: Path) -> None:
    runs = [run(tmp_path, "algorithm-round-robin", "1", 0.4, 12), run(tmp_path, "algorithm-round-robin", "2", 0.6, 14),
            run(tmp_path, "algorithm-load-aware", "1", 0.3, 4, lost=1)]
    assert pools.SECTION in SECTIONS and pools.SECTION.wanted(runs) and not pools.SECTION.wanted(
        [Run(tmp_path, "x", "1", summary={"pools": None})])
    built = pools.SECTION.build(type("D", (), {"runs": runs})())
    t = built["compare"].set_index(["metric", "cell"])
    rr = t.loc[("re-balance p99 (s)", "algorithm-round-robin")]
    assert (rr["n"], rr["mean"]) == (2, 0.5) and rr["lo"] < 0.5 < rr["hi"]
    la = t.loc[("connections moved", "algorithm-load-aware")]
    assert la["mean"] == 4.0 and math.isnan(la["lo"])                  # one repetition: no interval
    assert t.loc[("crash detection (s)", "algorithm-round-robin")]["mean"] == 2.1
    assert math.isnan(t.loc[("fail-over (s)", "algorithm-load-aware")]["mean"])
    ev = built["events"].set_index(["cell", "event"])
    assert ev.loc[("algorithm-round-robin", "elected")].tolist() == [2, 1.0]
    page = pools.SECTION.html(built, type("P", (), {"table": staticmethod(_table)})())
    assert "<h2 id=\"pools\">" in page and "1 cell metrics show lost" in page
    assert set(pools.SECTION.tables(built)) == {"pools_compare", "pools_events"}
