"""Report plots: asymmetric CI bars and the per-run link-throughput panels."""
from __future__ import annotations

import math

import pandas as pd

from spark_analysis import plots


def _util(runs: list[tuple[str, str]], links: int = 7) -> pd.DataFrame:
    rows = []
    for cell, rep in runs:
        for i in range(links):
            for b in range(5):
                rows.append({"cell": cell, "rep": rep, "link": f"l{i}", "direction": "a_to_b", "bin": 100.0 + b,
                             "bits_per_s": 1000.0 * (i + 1), "rate_bps": 8000.0})
    return pd.DataFrame(rows)


def test_interval_bars_are_asymmetric_and_skip_missing() -> None:
    g = pd.DataFrame({"mean": [5.0, 2.0], "ci_centre": [4.0, 2.0], "ci95_lo": [1.0, math.nan],
                      "ci95_hi": [16.0, math.nan]})
    y, (below, above) = plots.interval_bars(g)
    assert y == [4.0, 2.0] and below == [3.0, 0.0] and above == [12.0, 0.0]
    old = pd.DataFrame({"mean": [1.0], "ci95": [0.5]})  # a table without the bounds
    assert plots.interval_bars(old) == ([1.0], [[0.5], [0.5]])


def test_link_panels_one_per_run_or_first_rep_per_cell() -> None:
    few = [("a", "1"), ("a", "2"), ("b", "1"), ("b", "2")]
    shown, note = plots.link_panel_runs(_util(few, 1))
    assert shown == few and "all 4 runs" in note
    many = [(f"c{i}", r) for i in range(5) for r in ("1", "2", "10")]
    shown, note = plots.link_panel_runs(_util(many, 1))
    assert shown == [(f"c{i}", "1") for i in range(5)] and "first repetition" in note and "15 runs" in note


def test_link_plot_names_top_links_and_draws_rates() -> None:
    fig, _ = plots.link_throughput_plot(_util([("a", "1"), ("b", "1")]))
    ax = fig.axes[0]
    names = [t.get_text() for t in ax.get_legend().get_texts()]
    assert names == [f"l{i} a_to_b" for i in (6, 5, 4, 3, 2)]  # the five busiest, largest first
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == 5 and all(ln.get_ydata()[0] == 8.0 for ln in dashed)  # kbit/s
    assert len([a for a in fig.axes if a.get_visible()]) == 2
    plots.pyplot().close(fig)


def test_delay_axis_goes_logarithmic_when_one_bucket_dominates() -> None:
    def delays(values: list[float]) -> pd.DataFrame:
        return pd.DataFrame({"cell": "c", "mode": "fragmenting", "bucket": ["1", "2-10", "11-20"][:len(values)],
                             "mean_delay_s": values, "ci_centre": values, "ci95_lo": values, "ci95_hi": values,
                             "ci_method": "t on logs"})
    assert plots.delay_plot(delays([1.0, 2.0, 1000.0])).axes[0].get_yscale() == "log"
    flat = plots.delay_plot(delays([10.0, 20.0, 30.0])).axes[0]
    assert flat.get_yscale() == "linear" and "wall s" in flat.get_ylabel()
