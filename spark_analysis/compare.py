"""Per-run figures computed with Spark, then mean and 95% CI over repetitions per cell and mode."""
from __future__ import annotations

import math

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

BUCKETS = [(1, 1, "1"), (2, 10, "2-10"), (11, 20, "11-20"), (21, 50, "21-50"), (51, None, "51+")]
BUCKET_ORDER = [b[2] for b in BUCKETS]
RUN_METRICS = ["submitted", "accepted", "delivered", "lost", "duplicates", "throughput_multi"]

# two-sided 95% Student t quantiles (0.975) by degrees of freedom
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
         18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


def t975(df: int) -> float:
    if df in _T975:
        return _T975[df]
    larger = [k for k in _T975 if k > df]
    return _T975[min(larger)] if larger else 1.960


def mean_ci(values) -> tuple[float, float, int]:
    """Mean, 95% CI half-width (NaN when n < 2) and n of the non-null values."""
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    n = len(vals)
    if n == 0:
        return math.nan, math.nan, 0
    m = sum(vals) / n
    if n < 2:
        return m, math.nan, n
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (n - 1))
    return m, t975(n - 1) * sd / math.sqrt(n), n


def _bucket_col(nfrag):
    expr = None
    for lo, hi, label in BUCKETS:
        cond = (nfrag >= lo) if hi is None else ((nfrag >= lo) & (nfrag <= hi))
        expr = F.when(cond, label) if expr is None else expr.when(cond, label)
    return expr


def _to_pandas(df: DataFrame) -> pd.DataFrame:
    """Collect a small aggregate (avoids pyspark's pandas-version-dependent toPandas)."""
    return pd.DataFrame([r.asDict() for r in df.collect()], columns=df.columns)


def per_run(subs: DataFrame, dels: DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per run with RUN_METRICS, one row per run and size bucket with mean delay)."""
    keys = ["cell", "rep"]
    dels = dels.withColumn("mode", F.coalesce(F.col("mode"), F.col("run_mode")))
    dels = dels.withColumn("nfrag", F.greatest(F.col("fragments"),
                                               F.ceil(F.col("size") / F.col("frag_size")).cast("long")))
    run_mode = (dels.groupBy(keys).agg(F.first("mode").alias("del_mode"))
                .join(subs.select(*keys, "run_mode").union(dels.select(*keys, "run_mode")).distinct(), keys, "full")
                .select(*keys, F.coalesce("del_mode", "run_mode", F.lit("unknown")).alias("mode"))
                .groupBy(keys).agg(F.first("mode").alias("mode")))
    # one delivery per (message, recipient): the first; the rest are duplicates
    uniq = dels.groupBy(*keys, "msg_id", "dst").agg(
        F.min("deliver_ts").alias("deliver_ts"), F.first("submit_ts").alias("submit_ts"),
        F.first("nfrag").alias("nfrag"), F.count(F.lit(1)).alias("copies"))
    uniq = uniq.withColumn("delay", F.col("deliver_ts") - F.col("submit_ts"))
    d_agg = uniq.groupBy(keys).agg(
        F.countDistinct("msg_id").alias("delivered"),
        F.sum(F.col("copies") - 1).alias("duplicates"),
        F.countDistinct(F.when(F.col("nfrag") >= 2, F.col("msg_id"))).alias("multi"),
        (F.max("deliver_ts") - F.min("submit_ts")).alias("duration"))
    s_agg = subs.groupBy(keys).agg(F.count(F.lit(1)).alias("submitted"),
                                   F.sum(F.col("accepted").cast("long")).alias("accepted"))
    accepted_ids = subs.where(F.col("accepted") & (F.col("msg_id") != "")).select(*keys, "msg_id").distinct()
    lost = (accepted_ids.join(dels.select(*keys, "msg_id").distinct(), [*keys, "msg_id"], "left_anti")
            .groupBy(keys).agg(F.count(F.lit(1)).alias("lost")))
    runs = (run_mode.join(s_agg, keys, "left").join(d_agg, keys, "left").join(lost, keys, "left")
            .fillna(0, ["submitted", "accepted", "delivered", "duplicates", "multi", "lost"]))
    runs = runs.withColumn("throughput_multi", F.when(F.col("duration") > 0, F.col("multi") / F.col("duration")))
    runs_pd = _to_pandas(runs.select(*keys, "mode", *RUN_METRICS)).sort_values(keys).reset_index(drop=True)
    delay_pd = (uniq.withColumn("bucket", _bucket_col(F.col("nfrag"))).join(run_mode, keys)
                .groupBy(*keys, "mode", "bucket")
                .agg(F.avg("delay").alias("mean_delay_s"), F.count(F.lit(1)).alias("messages")))
    delay_pd = _to_pandas(delay_pd)
    return runs_pd, delay_pd


def summarize(runs: pd.DataFrame, delay: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Mean, CI and n over repetitions: (per cell/mode/metric, per cell/mode/bucket)."""
    rows = []
    for (cell, mode), g in runs.groupby(["cell", "mode"], sort=True):
        for metric in RUN_METRICS:
            m, ci, n = mean_ci(g[metric].tolist())
            rows.append({"cell": cell, "mode": mode, "metric": metric, "mean": m, "ci95": ci, "n": n})
    summary = pd.DataFrame(rows, columns=["cell", "mode", "metric", "mean", "ci95", "n"])
    rows = []
    for (cell, mode, bucket), g in delay.groupby(["cell", "mode", "bucket"], sort=True):
        m, ci, n = mean_ci(g["mean_delay_s"].tolist())
        rows.append({"cell": cell, "mode": mode, "bucket": bucket, "mean_delay_s": m, "ci95": ci, "n": n,
                     "messages": int(g["messages"].sum())})
    delays = pd.DataFrame(rows, columns=["cell", "mode", "bucket", "mean_delay_s", "ci95", "n", "messages"])
    if len(delays):
        delays["_o"] = delays["bucket"].map(BUCKET_ORDER.index)
        delays = delays.sort_values(["cell", "mode", "_o"]).drop(columns="_o").reset_index(drop=True)
    return summary, delays
