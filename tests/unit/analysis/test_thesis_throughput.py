"""The thesis' throughput (bytes/s of 2+ fragment messages in the workload window) from summary.json, and
sweep series that keep a second swept key apart (Fig. 6.4: one line per mode and link rate)."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from spark_analysis import compare
from spark_analysis.headline import sentences
from spark_analysis.layout import Run


def run(cell: str, rep: str, mode: str, rbsad: int, rate: str, bps: float | None) -> Run:
    summary = {"throughput": {"model_bytes_per_s_2plus": bps}} if bps is not None else {}
    return Run(Path("/nowhere"), cell, rep, {"nodes.all.mode": mode, "nodes.all.resources.rbsad": rbsad,
                                            "link_defaults.rate": rate}, summary)


def per_run(runs: list[Run]) -> pd.DataFrame:
    rows = [{"cell": r.cell, "rep": r.rep, "mode": r.mode, **{m: 1.0 for m in compare.RUN_METRICS}} for r in runs]
    return pd.DataFrame(rows)


def grid() -> list[Run]:
    runs = []
    for mode, base in (("fragmenting", 1000.0), ("non-fragmenting", 500.0)):
        for rbsad in (0, 400):
            for rate in ("4000bit", "8000bit"):
                cell = f"mode-{mode}_rbsad-{rbsad}_rate-{rate}"
                for rep, jitter in (("1", 0.9), ("2", 1.0), ("3", 1.1)):
                    runs.append(run(cell, rep, mode, rbsad, rate, base * jitter * (2 if rate == "8000bit" else 1)))
    return runs


def test_summary_metric_joined_per_run_and_summarised_with_positive_ci() -> None:
    runs = grid()
    pr = compare.add_summary_metrics(per_run(runs), runs)
    assert pr["throughput_2plus_Bps"].notna().all()
    summary, _ = compare.summarize(pr, pd.DataFrame(columns=["cell", "mode", "bucket", "mean_delay_s", "messages"]))
    sel = summary[(summary["metric"] == "throughput_2plus_Bps")
                  & (summary["cell"] == "mode-fragmenting_rbsad-0_rate-4000bit")].iloc[0]
    assert sel["n"] == 3 and sel["ci_method"] == "t on logs" and 0 < sel["ci95_lo"] < 1000 < sel["ci95_hi"]


def test_runs_without_the_value_get_no_column() -> None:
    runs = [run("c", "1", "fragmenting", 0, "4000bit", None)]
    assert "throughput_2plus_Bps" not in compare.add_summary_metrics(per_run(runs), runs).columns


def test_sweep_series_separate_the_other_swept_key_and_use_the_thesis_metric() -> None:
    runs = grid()
    pr = compare.add_summary_metrics(per_run(runs), runs)
    summary, _ = compare.summarize(pr, pd.DataFrame(columns=["cell", "mode", "bucket", "mean_delay_s", "messages"]))
    table = compare.sweeps(summary, runs)["nodes.all.resources.rbsad"]
    assert set(table["metric"]) == {"throughput_2plus_Bps"}
    assert set(table["series"]) == {"fragmenting, rate=4000bit", "fragmenting, rate=8000bit",
                                    "non-fragmenting, rate=4000bit", "non-fragmenting, rate=8000bit"}
    one = table[table["series"] == "non-fragmenting, rate=8000bit"]
    assert list(one["value"]) == [0.0, 400.0] and all(math.isclose(m, 1000.0) for m in one["mean"])
    # the comparison carries both measures; the headline sentence speaks in messages/s
    comp = compare.comparison(summary, runs)
    assert {"throughput_2plus_Bps", "throughput_multi"} <= set(comp["metric"])
    assert "msg per wall s" in " ".join(sentences(comp))
