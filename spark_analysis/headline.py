"""The report's first screen: the headline sentence (fragmenting vs non-fragmenting, with 95% CIs) and
the table with one row per cell and mode and a column per headline metric."""
from __future__ import annotations

import math

import pandas as pd

from .stats import LOG_T, NO_CI, RAW_T_FLOOR, ci95, fmt_interval

# (metric in the summary table, column title); lost, late and saturation come from the health table.
# The delay is over delivered messages only: the delivered share stands beside it.
# Model-unit columns (from summary.json, as the console and README show them) come first; a column no run
# has is left out. The records' own figures are in wall seconds.
HEADLINE_METRICS = [("throughput_2plus_Bps", "thr2+B/s (B per model s, in the window)"),
                    ("throughput_2plus_per_model_h", "thr2+/h (msg per model h)"),
                    ("delay_model_s", "mean delay of delivered msgs (model s)"),
                    ("throughput_multi", "throughput 2+ frag (msg per wall s, whole run)"),
                    ("latency_mean", "mean delay of delivered msgs (wall s)"),
                    ("delivery_prob", "delivered share (Wilson)")]
# from summary.json: absent for runs without it
OPTIONAL_METRICS = frozenset({"throughput_2plus_Bps", "throughput_2plus_per_model_h", "delay_model_s"})
# the loss checker's verdict per run (summary.json via the health table); never the records' shortfall
CHECKER_METRICS = [("lost", "lost (checker, runs' mean)"), ("late", "late (checker, runs' mean)")]
MAX_SENTENCES = 8


def _num(v) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def cell_table(summary: pd.DataFrame, health: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per cell and mode: n, each headline metric's centre and 95% bounds, lost and late (the
    loss checker's, per run in health; NaN without its verdict) and saturated runs / runs."""
    cols = ["cell", "mode", "n"] + [f"{m}{s}" for m, _ in [*HEADLINE_METRICS, *CHECKER_METRICS]
                                    for s in ("", "_lo", "_hi")] + ["saturated_runs"]
    if summary is None or summary.empty or "metric" not in summary:
        return pd.DataFrame(columns=cols)
    rows = []
    for (cell, mode), g in summary.groupby(["cell", "mode"], sort=True):
        by_metric = g.set_index("metric")
        row: dict = {"cell": cell, "mode": mode, "n": int(g["n"].max())}
        for metric, _ in [*HEADLINE_METRICS, *CHECKER_METRICS]:
            r = by_metric.loc[metric] if metric in by_metric.index else None
            centre = "ci_centre" if r is not None and "ci_centre" in r else "mean"
            row[metric] = _num(r[centre]) if r is not None else math.nan
            row[f"{metric}_lo"] = _num(r.get("ci95_lo")) if r is not None else math.nan
            row[f"{metric}_hi"] = _num(r.get("ci95_hi")) if r is not None else math.nan
        row["saturated_runs"] = "–"
        h = _health_rows(health, cell, mode)
        if h is not None and len(h):
            for metric, _ in CHECKER_METRICS:
                if metric in h:     # counts: the interval never goes below 0
                    iv = ci95(h[metric].tolist(), nonnegative=True)
                    if iv.n:
                        row.update({metric: iv.mean, f"{metric}_lo": iv.lo, f"{metric}_hi": iv.hi})
            if "saturated" in h:
                row["saturated_runs"] = f"{_count_true(h['saturated'])}/{len(h)}"
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def _count_true(values: pd.Series) -> int:
    """Runs flagged True (None/NaN: unknown, not counted)."""
    return sum(1 for v in values if v is not None and v == v and bool(v))


def _health_rows(health: pd.DataFrame | None, cell: str, mode: str) -> pd.DataFrame | None:
    if health is None or health.empty or "cell" not in health:
        return None
    sel = health[health["cell"] == cell]
    return sel[sel["mode"] == mode] if "mode" in sel else sel


def cell_table_display(table: pd.DataFrame) -> pd.DataFrame:
    """The cell table as text: "centre [lo, hi]" per metric."""
    out = table[["cell", "mode", "n"]].copy()
    model = any(table[m].notna().any() for m in ("throughput_2plus_Bps", "throughput_2plus_per_model_h"))
    for metric, title in [*HEADLINE_METRICS, *CHECKER_METRICS]:
        if metric in OPTIONAL_METRICS and table[metric].isna().all():
            continue    # runs without the testbed's summary.json value
        if metric == "throughput_multi" and model:
            continue    # the model-unit throughput stands for it: one definition per table (summary has both)
        out[title] = [fmt_interval(c, lo, hi) for c, lo, hi in
                      zip(table[metric], table[f"{metric}_lo"], table[f"{metric}_hi"])]
    out["saturated runs"] = table["saturated_runs"]
    return out


def _side(metric_rows: dict, label: str, metric: str, unit: str) -> str:
    """One mode's "centre unit [lo, hi]" for a metric."""
    r = metric_rows.get(metric)
    if r is None:
        return "–"
    text = fmt_interval(r[f"{label}_ci_centre"], r[f"{label}_ci95_lo"], r[f"{label}_ci95_hi"])
    return text.replace(" [", f" {unit} [", 1) if text != "–" else text


def _word(r: pd.Series | None) -> str:
    sep = None if r is None else r.get("ci_separate")
    if sep is None or (isinstance(sep, float) and math.isnan(sep)):
        return "cannot be compared (no CI with n < 2)"
    return "separate" if bool(sep) else "overlap"


def _verdict(thr: pd.Series | None, lat: pd.Series | None) -> str:
    """Whether the modes' intervals separate, said once when throughput and delay agree."""
    a, b = _word(thr), _word(lat)
    if a == b:
        return f"the intervals {a} for both throughput and delay"
    return f"the throughput intervals {a} and the delay intervals {b}"


def _methods(rows: list[pd.Series]) -> str:
    found = {r[f"{s}_ci_method"] for r in rows for s in ("frag", "nonfrag") if f"{s}_ci_method" in r}
    found.discard(NO_CI)
    if not found:
        return "no CI"
    if found == {LOG_T}:
        return "geometric means; 95% CI, t on logs"
    raw = "t on raw values" + (" floored at 0" if RAW_T_FLOOR in found else "")
    if LOG_T not in found:
        return f"means; 95% CI, {raw} (a value was not > 0)"
    return f"geometric means, 95% CI t on logs; means, {raw} where a value was not > 0"


def _share_text(r: pd.Series | None) -> str:
    """What share of the accepted copies the delays cover, per mode ("" without it)."""
    if r is None:
        return ""
    shares = [_num(r.get(f"{side}_ci_centre")) for side in ("frag", "nonfrag")]
    if any(math.isnan(v) for v in shares):
        return ""
    return f" (covering {shares[0]:.0%} and {shares[1]:.0%} of the accepted copies)"


def _n_text(r: pd.Series) -> str:
    fn, nn = int(r["frag_n"]), int(r["nonfrag_n"])
    return f"n = {fn} repetitions per mode" if fn == nn else f"n = {fn} fragmenting, {nn} non-fragmenting repetitions"


def sentences(comparison: pd.DataFrame) -> list[str]:
    """One sentence per setting (the cells' parameters other than the mode) where both modes were run."""
    if comparison is None or comparison.empty or "setting" not in comparison:
        return []
    settings = list(dict.fromkeys(comparison["setting"]))
    out = []
    for setting in settings[:MAX_SENTENCES]:
        rows = {r["metric"]: r for _, r in comparison[comparison["setting"] == setting].iterrows()}
        # messages/s over the whole run: on the quickstart the bytes/s within the workload window
        # (throughput_2plus_Bps, the thesis' figures' measure, a column of the cell table) is dominated by
        # the few 31-100 fragment messages and its 3-repetition intervals overlap where these separate
        thr_metric, unit = "throughput_multi", "msg per wall s"
        thr, lat, share = rows.get(thr_metric), rows.get("latency_mean"), rows.get("delivery_prob")
        if thr is None and lat is None:
            continue
        ref = thr if thr is not None else lat
        prefix = f"At {setting}: f" if len(settings) > 1 else "F"
        out.append(
            f"{prefix}ragmenting delivered messages of 2+ fragments at"
            f" {_side(rows, 'frag', thr_metric, unit)}"
            f" vs {_side(rows, 'nonfrag', thr_metric, unit)} non-fragmenting, and the mean delay"
            f" of delivered messages was {_side(rows, 'frag', 'latency_mean', 'wall s')} vs"
            f" {_side(rows, 'nonfrag', 'latency_mean', 'wall s')}{_share_text(share)} ({_n_text(ref)}; "
            f"{_methods([r for r in (thr, lat) if r is not None])}); {_verdict(thr, lat)}.")
    if len(settings) > MAX_SENTENCES:
        out.append(f"... and {len(settings) - MAX_SENTENCES} more settings (see the comparison table).")
    return out
