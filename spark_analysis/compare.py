"""Per-run figures computed with Spark, then mean and 95% CI over repetitions per cell and mode."""
from __future__ import annotations

import math

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .stats import Interval, metric_ci, wilson

# message sizes in fragments, as the thesis' Fig. 6.8 groups them (1, 2-10, 11-20, ... 91-100), then 101+
BUCKETS = [(1, 1, "1"), (2, 10, "2-10"), *((lo, lo + 9, f"{lo}-{lo + 9}") for lo in range(11, 100, 10)),
           (101, None, "101+")]
BUCKET_ORDER = [b[2] for b in BUCKETS]
# undelivered: accepted messages without a delivery record. The records cannot tell a copy still held in a
# spool from a lost one, so "lost" is only ever the loss checker's verdict (summary.json, the health table)
RUN_METRICS = ["submitted", "accepted", "delivered", "undelivered", "duplicates", "throughput_multi", "delivery_prob",
               "overhead_ratio", "latency_mean", "latency_p50", "hops_mean"]
# per-run metrics the testbed's summary.json computes (the records alone do not know the workload window
# or the time scale), in model units as the console and README show them: metric -> path in summary.json.
# throughput_2plus_Bps (`thr2+B/s`) = bytes of messages of 2+ fragments delivered within the workload window
# per model second, the thesis' "throughput of large transfers" (Brachman 1989, Figs 6.3-6.10);
# throughput_2plus_per_model_h (`thr2+/h`) = messages of 2+ fragments delivered per model hour of workload;
# delay_model_s = mean delay of the delivered messages in model seconds, delay_p99_model_s their 99th
# percentile; lost = the loss checker's lost copies. The records' own figures (throughput_multi, latency_*)
# are in wall seconds. The routing metrics are summary.json's `routing` (testbed/accounting/routing.py):
# route_moves (next-hop changes in the workload window, every node and destination) and per model hour,
# nexthop_match (share of next hops equal to Dijkstra's on the configured costs at the end of each phase),
# better_path_share (share of time on the better path, over the routes whose better path changed),
# modal_route_match (share of routes whose most-held next hop is Dijkstra's on the mean costs) and
# cost_error_max (the settled link costs' worst relative error, links of 10 ms and more). MQ rate control
# (testbed/accounting/rates.py): rate_overflowed = submissions refused by a full client queue, all clients;
# rate_starved_s = model seconds, summed over the clients, each had messages queued while its rate was below a
# tenth of R/N.
SUMMARY_METRICS = {"throughput_2plus_Bps": ("throughput", "model_bytes_per_s_2plus"),
                   "throughput_2plus_per_model_h": ("throughput", "per_model_hour"),
                   "delay_model_s": ("delay", "overall", "mean_model_s"),
                   "delay_p99_model_s": ("delay", "overall", "p99_model_s"),
                   "lost": ("lost",),
                   "route_moves": ("routing", "moves"),
                   "route_moves_per_hour": ("routing", "moves_per_hour"),
                   "nexthop_match": ("routing", "table_match"),
                   "better_path_share": ("routing", "better_share"),
                   "modal_route_match": ("routing", "modal_match"),
                   "cost_error_max": ("routing", "cost_error_max"),
                   "rate_overflowed": ("rate_control", "overflowed_total"),
                   "rate_starved_s": ("rate_control", "starved_s_total")}
# ci95 = (hi - lo) / 2; ci_centre = the value [ci95_lo, ci95_hi] bounds (geometric mean for t on logs)
CI_COLUMNS = ["ci95", "ci95_lo", "ci95_hi", "ci_centre", "ci_method"]


def _bucket_col(nfrag):
    expr = None
    for lo, hi, label in BUCKETS:
        cond = (nfrag >= lo) if hi is None else ((nfrag >= lo) & (nfrag <= hi))
        expr = F.when(cond, label) if expr is None else expr.when(cond, label)
    return expr


def _to_pandas(df: DataFrame) -> pd.DataFrame:
    """Collect a small aggregate (avoids pyspark's pandas-version-dependent toPandas)."""
    return pd.DataFrame([r.asDict() for r in df.collect()], columns=df.columns)


def _recipients(dst):
    """Recipients of a submission: dst is a node name or the JSON text of a list of them."""
    as_list = F.from_json(dst, "array<string>")
    return F.when(dst.startswith("["), F.size(as_list)).otherwise(F.lit(1))


def bytes_relayed(metrics: DataFrame) -> DataFrame:
    """Per run: bytes every node sent to its neighbours (the largest value each counter reached)."""
    per_nb = (metrics.select("cell", "rep", "node", F.explode_outer("neighbours").alias("nb", "c"))
              .groupBy("cell", "rep", "node", "nb").agg(F.max("c.bytes_out").alias("bytes_out")))
    return per_nb.groupBy("cell", "rep").agg(F.sum("bytes_out").alias("bytes_relayed"))


def per_run(subs: DataFrame, dels: DataFrame, metrics: DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per run with RUN_METRICS, one row per run and size bucket with mean delay).

    delivery_prob = unique (message, recipient) deliveries / accepted copies (submissions x recipients);
    overhead_ratio = (bytes relayed on links - bytes delivered) / bytes delivered (null without metrics)."""
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
        F.first("nfrag").alias("nfrag"), F.count(F.lit(1)).alias("copies"), F.min("hops").alias("hops"),
        F.first("size").alias("size"))
    uniq = uniq.withColumn("delay", F.col("deliver_ts") - F.col("submit_ts"))
    d_agg = uniq.groupBy(keys).agg(
        F.countDistinct("msg_id").alias("delivered"),
        F.sum(F.col("copies") - 1).alias("duplicates"),
        F.countDistinct(F.when(F.col("nfrag") >= 2, F.col("msg_id"))).alias("multi"),
        (F.max("deliver_ts") - F.min("submit_ts")).alias("duration"),
        F.count(F.lit(1)).alias("delivered_copies"), F.avg("delay").alias("latency_mean"),
        F.percentile_approx("delay", 0.5, 10000).alias("latency_p50"), F.avg("hops").alias("hops_mean"),
        F.sum("size").alias("bytes_delivered"))
    s_agg = subs.groupBy(keys).agg(F.count(F.lit(1)).alias("submitted"),
                                   F.sum(F.col("accepted").cast("long")).alias("accepted"),
                                   F.sum(F.when(F.col("accepted"), _recipients(F.col("dst"))).otherwise(0))
                                   .alias("copies_accepted"))
    accepted_ids = subs.where(F.col("accepted") & (F.col("msg_id") != "")).select(*keys, "msg_id").distinct()
    undelivered = (accepted_ids.join(dels.select(*keys, "msg_id").distinct(), [*keys, "msg_id"], "left_anti")
                   .groupBy(keys).agg(F.count(F.lit(1)).alias("undelivered")))
    runs = (run_mode.join(s_agg, keys, "left").join(d_agg, keys, "left").join(undelivered, keys, "left")
            .fillna(0, ["submitted", "accepted", "delivered", "duplicates", "multi", "undelivered", "copies_accepted",
                        "delivered_copies", "bytes_delivered"]))
    if metrics is not None:
        runs = runs.join(bytes_relayed(metrics), keys, "left")
    else:
        runs = runs.withColumn("bytes_relayed", F.lit(None).cast("long"))
    runs = (runs.withColumn("throughput_multi", F.when(F.col("duration") > 0, F.col("multi") / F.col("duration")))
            .withColumn("delivery_prob", F.when(F.col("copies_accepted") > 0,
                                                F.least(F.lit(1.0), F.col("delivered_copies") / F.col("copies_accepted"))))
            .withColumn("overhead_ratio", F.when((F.col("bytes_delivered") > 0) & F.col("bytes_relayed").isNotNull(),
                                                 (F.col("bytes_relayed") - F.col("bytes_delivered"))
                                                 / F.col("bytes_delivered"))))
    extra = ["copies_accepted", "delivered_copies", "bytes_delivered", "bytes_relayed"]
    runs_pd = _to_pandas(runs.select(*keys, "mode", *RUN_METRICS, *extra)).sort_values(keys).reset_index(drop=True)
    delivered_b = (uniq.withColumn("bucket", _bucket_col(F.col("nfrag"))).groupBy(*keys, "bucket")
                   .agg(F.avg("delay").alias("mean_delay_s"), F.count(F.lit(1)).alias("messages")))
    # the accepted copies per bucket too: a mean delay over the delivered ones says nothing of those still
    # held at the run's end, so the delivered share stands beside every delay (Brachman Fig. 6.8)
    accepted_b = (subs.where(F.col("accepted"))
                  .withColumn("nfrag", F.greatest(F.lit(1).cast("long"),
                                                  F.ceil(F.col("size") / F.col("frag_size")).cast("long")))
                  .withColumn("bucket", _bucket_col(F.col("nfrag"))).where(F.col("bucket").isNotNull())
                  .groupBy(*keys, "bucket").agg(F.sum(_recipients(F.col("dst"))).alias("accepted")))
    delay_pd = (delivered_b.join(accepted_b, [*keys, "bucket"], "full").join(run_mode, keys)
                .select(*keys, "mode", "bucket", "mean_delay_s", "messages", "accepted")
                .fillna(0, ["messages", "accepted"]))
    delay_pd = _to_pandas(delay_pd)
    return runs_pd, delay_pd


def add_summary_metrics(per_run_pd: pd.DataFrame, runs: list) -> pd.DataFrame:
    """SUMMARY_METRICS taken from each run's summary.json (a column only when some run has the value)."""
    by_run = {(r.cell, r.rep): r.summary or {} for r in runs}
    out = per_run_pd.copy()
    for metric, path in SUMMARY_METRICS.items():
        values = []
        for cell, rep in zip(out["cell"], out["rep"]):
            v = by_run.get((cell, str(rep)), {})
            for key in path:
                v = v.get(key) if isinstance(v, dict) else None
            values.append(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan)
        if any(not math.isnan(v) for v in values):
            out[metric] = values
    return out


def unique_deliveries(dels: DataFrame) -> DataFrame:
    """First delivery of each (message, recipient) with its delay and hops, and the run's mode."""
    dels = dels.withColumn("mode", F.coalesce(F.col("mode"), F.col("run_mode"), F.lit("unknown")))
    return (dels.groupBy("cell", "rep", "msg_id", "dst")
            .agg(F.min("deliver_ts").alias("deliver_ts"), F.first("submit_ts").alias("submit_ts"),
                 F.first("mode").alias("mode"), F.min("hops").alias("hops"))
            .withColumn("delay", F.col("deliver_ts") - F.col("submit_ts")))


CDF_POINTS = [i / 100 for i in range(1, 100)] + [0.999]


def latency_cdf(uniq: DataFrame) -> pd.DataFrame:
    """Delay quantiles (pooled over repetitions) per cell and mode: columns cell, mode, q, delay_s, n_runs."""
    agg = (uniq.groupBy("cell", "mode")
           .agg(F.percentile_approx("delay", CDF_POINTS, 10000).alias("qs"), F.countDistinct("rep").alias("n_runs"),
                F.count(F.lit(1)).alias("messages")))
    rows = []
    for r in agg.orderBy("cell", "mode").collect():       # the CSV's order as the other tables': by cell and mode
        for q, v in zip(CDF_POINTS, r["qs"] or []):
            rows.append({"cell": r["cell"], "mode": r["mode"], "q": q, "delay_s": v, "n_runs": r["n_runs"],
                         "messages": r["messages"]})
    return pd.DataFrame(rows, columns=["cell", "mode", "q", "delay_s", "n_runs", "messages"])


def hop_counts(uniq: DataFrame) -> pd.DataFrame:
    """Deliveries per hop count, cell and mode (all repetitions)."""
    return _to_pandas(uniq.groupBy("cell", "mode", "hops").agg(F.count(F.lit(1)).alias("deliveries"),
                                                                F.countDistinct("rep").alias("n_runs"))
                      .orderBy("cell", "mode", "hops"))


def refusals(subs: DataFrame) -> pd.DataFrame:
    """Refused submissions per run and reason."""
    return _to_pandas(subs.where(~F.col("accepted")).groupBy("cell", "rep", "reason")
                      .agg(F.count(F.lit(1)).alias("refused")).orderBy("cell", "rep", "reason"))


def resources_over_time(metrics: DataFrame) -> pd.DataFrame:
    """Mean over nodes, per run and 1 s since the run's first sample: recipient pool occupancy
    ((used + reserved) / capacity) and buffers in use (all classes); `t0` is that first sample's wall clock
    (the report marks the run's phases and faults from it)."""
    m = metrics.where(F.col("resources").isNotNull())
    start = m.groupBy("cell", "rep").agg(F.min("ts").alias("t0"))
    rec = F.col("resources.recipient")
    m = (m.join(start, ["cell", "rep"])
         .withColumn("t", F.floor(F.col("ts") - F.col("t0")))
         .withColumn("pool_occupancy", (F.coalesce(rec.used, F.lit(0)) + F.coalesce(rec.reserved, F.lit(0)))
                     / rec.capacity)
         .withColumn("buffers_used", F.aggregate(F.coalesce(F.col("resources.buffers.usage"),
                                                            F.array().cast("array<long>")),
                                                 F.lit(0).cast("long"), lambda acc, x: acc + x)))
    return _to_pandas(m.groupBy("cell", "rep", "run_mode", "t")
                      .agg(F.avg("pool_occupancy").alias("pool_occupancy"),
                           F.avg("buffers_used").alias("buffers_used"), F.max("buffers_used").alias("buffers_used_max"),
                           F.min("t0").alias("t0"))
                      .orderBy("cell", "rep", "t"))


def buffer_class_usage(metrics: DataFrame) -> pd.DataFrame:
    """Peak and mean use of each buffer class (index = hops made) per run, over nodes and time."""
    m = metrics.where(F.col("resources.buffers.usage").isNotNull()).select(
        "cell", "rep", "node", F.posexplode("resources.buffers.usage").alias("buffer_class", "used"))
    return _to_pandas(m.groupBy("cell", "rep", "buffer_class")
                      .agg(F.max("used").alias("peak"), F.avg("used").alias("mean")).orderBy("cell", "rep", "buffer_class"))


def health(runs: list, per_run_pd: pd.DataFrame, refused: pd.DataFrame, host: DataFrame,
           links: pd.DataFrame | None) -> pd.DataFrame:
    """One row per run: losses, late copies and duplicates (the loss checker's, from summary.json, and the
    records'), refusals, host saturation,
    completeness, peak link utilisation and retransmissions; `problems` lists what is wrong."""
    cpu = {(r["cell"], r["rep"]): r for r in host.where(F.col("node") == "testbed").groupBy("cell", "rep").agg(
        F.max("cpu_percent").alias("cpu_max"), F.count(F.lit(1)).alias("samples"),
        F.avg((F.col("cpu_percent") > 90).cast("double")).alias("above90")).collect()}
    rows = []
    for run in runs:
        s = run.summary or {}
        pr = per_run_pd[(per_run_pd["cell"] == run.cell) & (per_run_pd["rep"] == run.rep)]
        rec = pr.iloc[0] if len(pr) else None
        sat = s.get("saturation") if isinstance(s.get("saturation"), dict) else (s.get("host") or {})
        c = cpu.get((run.cell, run.rep))
        saturated = sat.get("saturated") if isinstance(sat, dict) and "saturated" in sat else (
            bool(c["above90"] and c["above90"] > 0.10) if c else None)
        ref = refused[(refused["cell"] == run.cell) & (refused["rep"] == run.rep)] if len(refused) else refused
        # `lost` and `late` are the loss checker's (testbed check: it also read the spools left at teardown);
        # from the delivery records alone a copy still held in a spool cannot be told from a lost one, so
        # the records' count is shown as `undelivered`, not as losses
        undelivered = int(rec["undelivered"]) if rec is not None else None
        row = {"cell": run.cell, "rep": run.rep, "mode": rec["mode"] if rec is not None else run.mode,
               "complete": s.get("complete"),
               "lost": s["lost"] if isinstance(s.get("lost"), int) and not isinstance(s.get("lost"), bool) else None,
               "late": s.get("late"), "undelivered": undelivered,
               # nothing delivered for stall_after while copies were held (a deadlock: late, not lost)
               "stalled": s.get("stalled"),
               "duplicates": int(rec["duplicates"]) if rec is not None else None,
               "summary_duplicates": s.get("duplicates"),
               "refused": "; ".join(f"{r.reason or '?'}: {r.refused}" for r in ref.itertuples()) if len(ref) else "",
               "host_cpu_max": c["cpu_max"] if c else None, "saturated": saturated}
        if links is not None and len(links):
            lk = links[(links["cell"] == run.cell) & (links["rep"] == run.rep)]
            row["peak_link_utilisation"] = lk["peak_utilisation"].max() if len(lk) else None
            row["tcp_retransmissions"] = int(lk["retransmissions"].fillna(0).sum()) if len(lk) else None
        problems = []
        for k in ("lost", "duplicates", "summary_duplicates"):
            if isinstance(row.get(k), (int, float)) and row[k] > 0:
                problems.append(f"{k}={row[k]}")
        if row["lost"] is None and undelivered:    # no checker verdict: say what the records can say
            problems.append(f"undelivered={undelivered} (no loss checker verdict)")
        if saturated:
            cause = sat.get("cause") if isinstance(sat, dict) else None
            problems.append(f"host saturated ({cause})" if cause else "host saturated")
        if "clock_uncertain" in s:      # a run over several machines (machines.json): its clock correction
            row["clock_uncertain"] = s["clock_uncertain"]
            if s["clock_uncertain"]:
                problems.append("clock uncertain")
        if s.get("stalled"):
            info = s.get("stall") if isinstance(s.get("stall"), dict) else {}
            problems.append(f"STALLED from model time {info.get('since_model_s')} s with {info.get('held')} copies held")
        if s and s.get("complete") is False:
            problems.append(f"incomplete ({s.get('reason', '')})")
        row["problems"] = ", ".join(problems)
        rows.append(row)
    return pd.DataFrame(rows)


def comparison(summary: pd.DataFrame, runs: list, metrics: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Fragmenting vs non-fragmenting per setting: cells whose parameters differ only in the mode are
    paired; each metric's means (n beside) and the ratio fragmenting / non-fragmenting."""
    if metrics is None:
        metrics = tuple(dict.fromkeys((sweep_metric(summary), "throughput_multi", "latency_mean", "delivery_prob")))
    params = {r.cell: {k: v for k, v in r.params.items() if k != "nodes.all.mode"} for r in runs}
    cell_mode = summary[["cell", "mode"]].drop_duplicates()
    cell_mode = cell_mode.assign(setting=[_setting(params.get(c, {}), c) for c in cell_mode["cell"]])
    rows = []
    for setting, g in cell_mode.groupby("setting", sort=True):
        by_mode = {m: cells["cell"].tolist() for m, cells in g.groupby("mode")}
        if "fragmenting" not in by_mode or "non-fragmenting" not in by_mode:
            continue
        for metric in metrics:
            row = {"setting": setting, "metric": metric}
            for mode, label in (("fragmenting", "frag"), ("non-fragmenting", "nonfrag")):
                sel = summary[(summary["cell"].isin(by_mode[mode])) & (summary["mode"] == mode)
                              & (summary["metric"] == metric)]
                for col in ("mean", "ci95", "ci95_lo", "ci95_hi", "ci_centre"):
                    row[f"{label}_{col}"] = _first(sel, col)
                row[f"{label}_n"] = int(sel["n"].iloc[0]) if len(sel) else 0
                row[f"{label}_ci_method"] = str(sel["ci_method"].iloc[0]) if len(sel) and "ci_method" in sel else ""
            nf = row["nonfrag_mean"]
            row["ratio_frag_nonfrag"] = row["frag_mean"] / nf if nf and not math.isnan(nf) else math.nan
            row["ci_separate"] = _separate(row)
            rows.append(row)
    sides = [f"{label}_{col}" for label in ("frag", "nonfrag")
             for col in ("mean", "ci95", "ci95_lo", "ci95_hi", "ci_centre", "n", "ci_method")]
    return pd.DataFrame(rows, columns=["setting", "metric", *sides, "ratio_frag_nonfrag", "ci_separate"])


def _first(sel: pd.DataFrame, col: str) -> float:
    return float(sel[col].iloc[0]) if len(sel) and col in sel else math.nan


def _separate(row: dict) -> bool | None:
    """Whether the two modes' 95% CIs are disjoint; None when either has no CI."""
    bounds = [row[f"{s}_ci95_{b}"] for s in ("frag", "nonfrag") for b in ("lo", "hi")]
    if any(b is None or math.isnan(b) for b in bounds):
        return None
    flo, fhi, nlo, nhi = bounds
    return bool(fhi < nlo or nhi < flo)


def _setting(params: dict, cell: str) -> str:
    """The cell's parameters other than the mode, as a stable label ("all" when none)."""
    if not params:
        return "all"
    return ",".join(f"{k.split('.')[-1]}={v}" for k, v in sorted(params.items()))


def sweep_metric(summary: pd.DataFrame) -> str:
    """The metric the sweeps plot: the thesis' bytes/s of 2+ fragment messages when the runs' summaries
    have it, else the records' messages/s."""
    return "throughput_2plus_Bps" if (summary["metric"] == "throughput_2plus_Bps").any() else "throughput_multi"


def sweeps(summary: pd.DataFrame, runs: list, metric: str | None = None) -> dict[str, pd.DataFrame]:
    """Per swept numeric parameter (other than the mode): metric mean/ci/n by value and series
    (the thesis' figures: throughput vs RBSAD, transmission time, fragment size, interarrival). A series
    is the mode plus the values of the other swept keys, so a grid over two keys gives one line per
    (mode, other value) instead of mixing them."""
    metric = metric or sweep_metric(summary)
    params = {r.cell: r.params for r in runs}
    keys = sorted({k for p in params.values() for k in p if k != "nodes.all.mode"})
    out = {}
    for key in keys:
        vals = {c: p.get(key) for c, p in params.items()}
        if len({str(v) for v in vals.values()}) < 2:
            continue
        try:
            num = {c: float(v) for c, v in vals.items() if v is not None}
        except (TypeError, ValueError):
            continue
        sel = summary[(summary["metric"] == metric) & summary["cell"].isin(num)].copy()
        sel["value"] = sel["cell"].map(num)
        others = [k for k in keys if k != key and len({str(p.get(k)) for p in params.values()}) > 1]
        sel["series"] = [", ".join([str(mode), *(f"{k.split('.')[-1]}={params.get(cell, {}).get(k)}" for k in others)])
                         for mode, cell in zip(sel["mode"], sel["cell"])]
        sel["metric"] = metric
        out[key] = (sel[["value", "series", "mode", "cell", "metric", "mean", *CI_COLUMNS, "n"]]
                    .sort_values(["series", "value"]).reset_index(drop=True))
    return out


def _ci_cols(iv: Interval) -> dict:
    """The CI columns of one row: ci95 = (hi - lo) / 2 (the half-width for t on raw values), the bounds,
    the value they bound (geometric mean for t on logs) and the method."""
    return {"ci95": iv.half_width, "ci95_lo": iv.lo, "ci95_hi": iv.hi, "ci_centre": iv.centre,
            "ci_method": iv.method}


SHARE_COLUMNS = ["accepted", "delivered_share", "delivered_share_lo", "delivered_share_hi"]


def delivered_share(g: pd.DataFrame) -> dict:
    """A size bucket's delivered copies over its accepted ones, pooled over the repetitions in `g` (columns
    messages, accepted), with its Wilson 95% interval: the share its mean delay speaks for. Messages not
    delivered by the run's end are censored: the mean delay of the rest is only read beside this share.
    NaN without an `accepted` column (records from before it) or with none accepted."""
    if "accepted" not in g.columns:
        return {"accepted": math.nan, "delivered_share": math.nan, "delivered_share_lo": math.nan,
                "delivered_share_hi": math.nan}
    accepted = float(pd.to_numeric(g["accepted"], errors="coerce").fillna(0).sum())
    delivered = float(pd.to_numeric(g["messages"], errors="coerce").fillna(0).sum())
    iv = wilson(delivered, accepted, n=len(g))
    return {"accepted": int(accepted), "delivered_share": iv.centre, "delivered_share_lo": iv.lo,
            "delivered_share_hi": iv.hi}


def summarize(runs: pd.DataFrame, delay: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Mean, CI and n over repetitions: (per cell/mode/metric, per cell/mode/bucket)."""
    rows = []
    for (cell, mode), g in runs.groupby(["cell", "mode"], sort=True):
        for metric in [*RUN_METRICS, *(m for m in SUMMARY_METRICS if m in runs.columns)]:
            iv = metric_ci(metric, g[metric].tolist())
            if metric == "delivery_prob" and {"delivered_copies", "copies_accepted"} <= set(g.columns):
                # a proportion: Wilson on the cell's pooled counts stays inside [0, 1], t on the runs' values does not
                iv = wilson(float(g["delivered_copies"].fillna(0).sum()), float(g["copies_accepted"].fillna(0).sum()),
                            mean=iv.mean, n=iv.n)
            rows.append({"cell": cell, "mode": mode, "metric": metric, "mean": iv.mean, **_ci_cols(iv), "n": iv.n})
    summary = pd.DataFrame(rows, columns=["cell", "mode", "metric", "mean", *CI_COLUMNS, "n"])
    rows = []
    for (cell, mode, bucket), g in delay.groupby(["cell", "mode", "bucket"], sort=True):
        iv = metric_ci("mean_delay_s", g["mean_delay_s"].tolist())
        rows.append({"cell": cell, "mode": mode, "bucket": bucket, "mean_delay_s": iv.mean, **_ci_cols(iv),
                     "n": iv.n, "messages": int(g["messages"].sum()), **delivered_share(g)})
    delays = pd.DataFrame(rows, columns=["cell", "mode", "bucket", "mean_delay_s", *CI_COLUMNS, "n", "messages",
                                         *SHARE_COLUMNS])
    if len(delays):
        delays["_o"] = delays["bucket"].map(BUCKET_ORDER.index)
        delays = delays.sort_values(["cell", "mode", "_o"]).drop(columns="_o").reset_index(drop=True)
    return summary, delays
