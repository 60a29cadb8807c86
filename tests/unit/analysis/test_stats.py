"""The report's 95% intervals (spark_analysis/stats.py) and the headline built on them."""
from __future__ import annotations

import math
import random

import pandas as pd
import pytest

from spark_analysis.headline import cell_table, cell_table_display, sentences
from spark_analysis.stats import (LOG_T, NO_CI, RAW_T, RAW_T_FLOOR, WILSON, ci95, fmt_interval, mean_ci, metric_ci,
                                  t975, wilson)


def test_t_quantiles_are_exact_between_table_rows() -> None:
    # a hand table's "next larger row" gave 2.060 (df 25) for df 22: intervals too narrow
    assert t975(22) == pytest.approx(2.0739, abs=1e-4) and t975(21) == pytest.approx(2.0796, abs=1e-4)
    assert t975(1) == pytest.approx(12.706, abs=1e-3) and t975(4) == pytest.approx(2.776, abs=1e-3)
    assert t975(10 ** 6) == pytest.approx(1.960, abs=1e-3)


def test_wilson_stays_inside_0_1() -> None:
    iv = wilson(30, 30, mean=1.0, n=3)
    assert iv.method == WILSON and iv.centre == 1.0 and iv.hi == 1.0 and 0 < iv.lo < 1
    zero = wilson(0, 10, n=2)
    assert zero.lo == 0.0 and 0 < zero.hi < 1
    # more deliveries than accepted copies (a record without its submission) counts as all delivered
    assert wilson(12, 10, n=1).hi == 1.0 and wilson(0, 0, n=2).method == NO_CI
    # the textbook example: 81 of 263, 95% Wilson interval [0.2553, 0.3662]
    assert (wilson(81, 263, n=1).lo, wilson(81, 263, n=1).hi) == pytest.approx((0.2553, 0.3662), abs=1e-4)


def test_positive_values_never_give_a_bound_at_or_below_zero() -> None:
    rng = random.Random(5)
    for _ in range(500):
        n = rng.randint(2, 6)
        vals = [rng.lognormvariate(0, 2) for _ in range(n)]
        iv = ci95(vals, positive=True)
        assert iv.method == LOG_T and 0 < iv.lo <= iv.centre <= iv.hi
    # the case the raw t interval got wrong: two spread delays
    raw, logs = ci95([0.2, 5.0]), ci95([0.2, 5.0], positive=True)
    assert raw.lo < 0 < logs.lo


def test_one_value_gives_no_interval() -> None:
    for positive in (True, False):
        iv = ci95([3.0, None, math.nan], positive=positive)
        assert iv.n == 1 and iv.mean == 3.0 and iv.centre == pytest.approx(3.0)
        assert math.isnan(iv.lo) and math.isnan(iv.hi) and iv.method == NO_CI
    empty = ci95([])
    assert empty.n == 0 and math.isnan(empty.mean)


def test_known_numbers() -> None:
    # t on logs of 1 and 100: log mean ln 10, s = ln(100)/sqrt(2), half-width 12.706 * s / sqrt(2)
    iv = ci95([1.0, 100.0], positive=True)
    h = t975(1) * math.log(100) / 2
    assert iv.centre == pytest.approx(10.0) and iv.mean == pytest.approx(50.5)
    assert iv.lo == pytest.approx(10 * math.exp(-h)) and iv.hi == pytest.approx(10 * math.exp(h))
    # raw t of 1, 2, 3: mean 2, s = 1, half-width 4.303 / sqrt(3)
    raw, t2 = ci95([1.0, 2.0, 3.0]), t975(2)
    assert t2 == pytest.approx(4.303, abs=1e-3)
    assert raw.method == RAW_T and raw.half_width == pytest.approx(t2 / math.sqrt(3))
    assert (raw.lo, raw.hi) == pytest.approx((2 - t2 / math.sqrt(3), 2 + t2 / math.sqrt(3)))
    assert mean_ci([1.0, 2.0, 3.0]) == pytest.approx((2.0, t2 / math.sqrt(3), 3))


def test_zero_or_negative_falls_back_to_raw_t() -> None:
    assert ci95([0.0, 1.0], positive=True).method == RAW_T_FLOOR
    assert metric_ci("overhead_ratio", [0, 2]).method == RAW_T
    assert metric_ci("latency_mean", [1.0, 2.0]).method == LOG_T
    assert metric_ci("throughput_multi", [0.5, 0.7]).method == LOG_T


def test_a_throughput_of_zero_in_some_repetitions_keeps_its_interval_at_or_above_zero() -> None:
    # Fig. 6.10 at 800 s: 2+ fragment B/s of 34.55, 0, 0 (nothing large delivered in two windows); raw t gave
    # [-38, 61]: the mean of a throughput cannot be below 0, so the bound is cut there and the method says so
    iv = metric_ci("throughput_2plus_Bps", [34.55, 0.0, 0.0])
    h = t975(2) * 34.55 / math.sqrt(3) / math.sqrt(3)      # s of (34.55, 0, 0) is 34.55 / sqrt(3)
    assert iv.method == RAW_T_FLOOR and iv.centre == pytest.approx(34.55 / 3)
    assert iv.lo == 0.0 and iv.hi == pytest.approx(34.55 / 3 + h)
    # an interval that stays above 0 is left as it is; a metric not among the positive ones is never cut
    many = ci95([0.0] + [10.0] * 7, positive=True)
    assert many.method == RAW_T and many.lo > 0
    assert metric_ci("overhead_ratio", [0, 0, 6]).lo < 0 and metric_ci("overhead_ratio", [0, 0, 6]).method == RAW_T
    # counts cannot be negative either
    assert metric_ci("undelivered", [0, 0, 6]).lo == 0.0 and metric_ci("duplicates", [0, 0, 6]).method == RAW_T_FLOOR


def test_the_wording_of_the_intervals_names_the_floor_only_where_one_was_cut() -> None:
    from spark_analysis.headline import _methods
    from spark_analysis.plots import ci_label as _ci_label
    rows = lambda *m: [pd.Series({"frag_ci_method": m[0], "nonfrag_ci_method": m[1]})]
    assert _methods(rows(LOG_T, LOG_T)) == "geometric means; 95% CI, t on logs"
    assert _methods(rows(RAW_T, RAW_T)) == "means; 95% CI, t on raw values (a value was not > 0)"
    assert "floored" not in _methods(rows(LOG_T, RAW_T))
    assert "t on raw values floored at 0 where" in _methods(rows(LOG_T, RAW_T_FLOOR))
    assert _methods(rows(NO_CI, NO_CI)) == "no CI"
    assert _ci_label(pd.DataFrame({"ci_method": [RAW_T, RAW_T_FLOOR]})) == "mean over reps, 95% CI (t, floored at 0)"
    assert _ci_label(pd.DataFrame({"ci_method": [LOG_T, RAW_T]})) == "over reps, 95% CI (t on logs; t where a value ≤ 0)"


def test_separation() -> None:
    a, b, c = ci95([1.0, 1.1], True), ci95([10.0, 10.5], True), ci95([1.0, 20.0], True)
    assert a.separates_from(b) is True and a.separates_from(c) is False
    assert a.separates_from(ci95([2.0])) is None


def test_fmt_interval() -> None:
    assert fmt_interval(1.23456, 1.0, 2.0) == "1.23 [1, 2]"
    assert fmt_interval(1.0, math.nan, math.nan) == "1 [–]"
    assert fmt_interval(math.nan, 0, 1) == "–"


def _summary() -> pd.DataFrame:
    rows = []
    for cell, mode, thr, lat in (("f", "fragmenting", [2.0, 2.2], [1.0, 1.1]),
                                 ("n", "non-fragmenting", [0.5, 0.55], [1.0, 3.0])):
        for metric, vals in (("throughput_multi", thr), ("latency_mean", lat), ("delivery_prob", [1.0, 0.9]),
                             ("lost", [0, 0])):
            iv = metric_ci(metric, vals)
            rows.append({"cell": cell, "mode": mode, "metric": metric, "mean": iv.mean, "ci95": iv.half_width,
                         "ci95_lo": iv.lo, "ci95_hi": iv.hi, "ci_centre": iv.centre, "ci_method": iv.method,
                         "n": iv.n})
    return pd.DataFrame(rows)


def test_headline_sentence_and_cell_table() -> None:
    from spark_analysis.compare import comparison
    from spark_analysis.layout import Run
    from pathlib import Path

    summary = _summary()
    runs = [Run(Path("a"), "f", "1", {"nodes.all.mode": "fragmenting"}),
            Run(Path("b"), "n", "1", {"nodes.all.mode": "non-fragmenting"})]
    comp = comparison(summary, runs)
    text = sentences(comp)
    assert len(text) == 1
    s = text[0]
    assert s.startswith("Fragmenting delivered messages of 2+ fragments at 2.1 msg per wall s [")
    assert "mean delay of delivered messages" in s
    assert "n = 2 repetitions per mode" in s and "t on logs" in s
    assert "the throughput intervals separate and the delay intervals overlap" in s
    health = pd.DataFrame([{"cell": "f", "mode": "fragmenting", "lost": 0, "saturated": False},
                           {"cell": "f", "mode": "fragmenting", "lost": 2, "saturated": True}])
    cells = cell_table(summary, health)
    assert list(cells["cell"]) == ["f", "n"] and cells.loc[0, "saturated_runs"] == "1/2"
    assert cells.loc[0, "lost"] == 1.0 and cells.loc[0, "throughput_multi_lo"] > 0
    shown = cell_table_display(cells)
    assert shown.loc[0, "throughput 2+ frag (msg per wall s, whole run)"].startswith("2.1 [")
    assert "thr2+/h (msg per model h)" not in shown      # no run has summary.json's value
    assert sentences(pd.DataFrame()) == [] and cell_table(pd.DataFrame()).empty


def _synthetic_runs() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Three repetitions per mode, everything delivered (every proportion 1.0); one repetition with no
    duplicates and nothing undelivered, the others with a few."""
    rows = []
    for cell, mode in (("f", "fragmenting"), ("n", "non-fragmenting")):
        for rep, extra in (("1", 0), ("2", 3), ("3", 5)):
            rows.append({"cell": cell, "mode": mode, "rep": rep, "submitted": 100, "accepted": 100,
                         "delivered": 100 - extra, "undelivered": extra, "duplicates": extra,
                         "throughput_multi": 0.0 if rep == "1" else 2.0, "delivery_prob": 1.0,
                         "overhead_ratio": 0.5, "latency_mean": 1.0 + extra, "latency_p50": 1.0, "hops_mean": 2.0,
                         "copies_accepted": 100, "delivered_copies": 100})
    delays = pd.DataFrame([{"cell": r["cell"], "mode": r["mode"], "rep": r["rep"], "bucket": "1",
                            "mean_delay_s": r["latency_mean"], "messages": 10} for r in rows])
    return pd.DataFrame(rows), delays


def test_no_interval_leaves_its_parameters_range() -> None:
    from spark_analysis.compare import summarize
    summary, _ = summarize(*_synthetic_runs())
    assert "lost" not in set(summary["metric"]) and "undelivered" in set(summary["metric"])
    prob = summary[summary["metric"] == "delivery_prob"]
    assert (prob["ci_method"] == WILSON).all()
    assert ((prob["ci95_lo"] >= 0) & (prob["ci95_hi"] <= 1) & (prob["ci_centre"] == 1.0)).all()
    counts = summary[summary["metric"].isin(["submitted", "accepted", "delivered", "undelivered", "duplicates",
                                              "throughput_multi"])]
    assert (counts["ci95_lo"] >= 0).all()
    # the headline table: the checker's lost and late (a count of 0 in one run) stay at or above 0
    health = pd.DataFrame([{"cell": "f", "mode": "fragmenting", "lost": v, "late": v} for v in (0, 0, 4)])
    cells = cell_table(summary, health)
    assert cells.loc[0, "lost_lo"] == 0.0 and cells.loc[0, "late_lo"] == 0.0
    assert 0 <= cells.loc[0, "delivery_prob_lo"] <= cells.loc[0, "delivery_prob_hi"] <= 1
    assert math.isnan(cells.loc[1, "lost"])   # no checker verdict: nothing is called lost


def test_console_summary_off_a_terminal_is_not_folded() -> None:
    import io

    from rich.console import Console

    from spark_analysis.compare import summarize
    from spark_analysis.report import console_summary
    summary, _ = summarize(*_synthetic_runs())
    buf = io.StringIO()
    console_summary(summary, console=Console(file=buf, width=80, force_terminal=False))
    lines = buf.getvalue().splitlines()
    head = next(line for line in lines if line.startswith("cell"))
    assert head.split() == ["cell", "mode", "n", "delivered", "undelivered", "duplicates", "thr2+/wall_s",
                            "delivery_prob", "delay_wall_s", "overhead_ratio"]
    assert len(head) > 80 and not any("ghput" in line.split() for line in lines)
