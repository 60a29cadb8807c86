"""Tables derived from the packet table: flows, RTT samples, link utilisation against the configured rate."""
from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from .layout import Run
from .tcp_analysis import analyse_connection

_S, _L, _D = StringType(), LongType(), DoubleType()
_TCP_OUT = StructType([StructField(n, t) for n, t in [
    ("kind", _S), ("cell", _S), ("rep", _S), ("link", _S), ("direction", _S), ("proto", _L), ("src", _S),
    ("sport", _L), ("dst", _S), ("dport", _L), ("packets", _L), ("bytes", _L), ("payload_bytes", _L),
    ("first_ts", _D), ("last_ts", _D), ("duration", _D), ("throughput_bps", _D), ("goodput_bps", _D),
    ("data_segments", _L), ("retransmissions", _L), ("retrans_bytes", _L), ("out_of_order", _L),
    ("rtt_samples", _L), ("rtt_mean", _D), ("rtt_p50", _D), ("rtt_min", _D), ("rtt_max", _D),
    ("ts", _D), ("rel_seq", _L), ("rtt", _D)]])


@dataclass
class TrafficTables:
    flows: DataFrame        # one row per (connection, direction); UDP/other flows without TCP columns
    rtt: DataFrame          # one row per RTT sample
    utilisation: DataFrame  # per link, direction and 1 s bin: bits/s and fraction of the configured rate
    links: DataFrame        # per link and direction: totals, mean/peak utilisation, retransmissions, RTT


def _tcp(packets: DataFrame) -> DataFrame:
    ep1 = F.concat_ws(":", "src", F.col("sport").cast("string"))
    ep2 = F.concat_ws(":", "dst", F.col("dport").cast("string"))
    tcp = packets.where(F.col("proto") == 6).withColumn("conn", F.when(ep1 < ep2, F.concat_ws("|", ep1, ep2))
                                                        .otherwise(F.concat_ws("|", ep2, ep1)))

    def per_connection(pdf):
        return analyse_connection(pdf)

    cols = ["cell", "rep", "link", "pos", "ts", "direction", "src", "dst", "sport", "dport", "length", "payload",
            "flags", "seq", "ack"]
    return tcp.select(*cols, "conn").groupBy("cell", "rep", "link", "conn").applyInPandas(
        lambda pdf: per_connection(pdf[cols]), _TCP_OUT)


def _other_flows(packets: DataFrame) -> DataFrame:
    g = (packets.where(F.col("proto") != 6)
         .groupBy("cell", "rep", "link", "direction", "proto", "src", "sport", "dst", "dport")
         .agg(F.count(F.lit(1)).alias("packets"), F.sum("length").alias("bytes"),
              F.sum("payload").alias("payload_bytes"), F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts")))
    g = g.withColumn("duration", F.col("last_ts") - F.col("first_ts"))
    rate = F.when(F.col("duration") > 0, F.col("bytes") * 8 / F.col("duration"))
    return (g.withColumn("throughput_bps", rate)
            .withColumn("goodput_bps", F.when(F.col("duration") > 0, F.col("payload_bytes") * 8 / F.col("duration"))))


def link_rates(spark: SparkSession, runs: list[Run]) -> DataFrame:
    """Configured rate (bit/s, null = unlimited) per run, link and direction, from topology.json."""
    rows = []
    for run in runs:
        f = run.path / "topology.json"
        try:
            topo = json.loads(f.read_text()) if f.is_file() else {}
        except ValueError:
            topo = {}
        for lk in topo.get("links", []):
            for direction in ("a_to_b", "b_to_a"):
                rate = (lk.get(direction) or {}).get("rate")
                rows.append((run.cell, run.rep, lk.get("name"), direction, float(rate) if rate else None))
    schema = StructType([StructField("cell", _S), StructField("rep", _S), StructField("link", _S),
                         StructField("direction", _S), StructField("rate_bps", _D)])
    return spark.createDataFrame(rows, schema)


def derive(spark: SparkSession, packets: DataFrame, runs: list[Run], scratch: str, bin_s: float = 1.0) -> TrafficTables:
    """Flows, RTT samples and utilisation; the per-connection pass is written once to `scratch` (Parquet)."""
    _tcp(packets).write.mode("overwrite").parquet(scratch)
    tcp = spark.read.parquet(scratch)
    flow_cols = [f.name for f in _TCP_OUT.fields if f.name not in ("kind", "ts", "rel_seq", "rtt")]
    tcp_flows = tcp.where(F.col("kind") == "flow").select(*flow_cols)
    other = _other_flows(packets)
    for c in flow_cols:
        if c not in other.columns:
            other = other.withColumn(c, F.lit(None).cast(dict((f.name, f.dataType) for f in _TCP_OUT.fields)[c]))
    flows = tcp_flows.unionByName(other.select(*[F.col(c).cast(tcp_flows.schema[c].dataType) for c in flow_cols]))
    rtt = tcp.where(F.col("kind") == "rtt").select("cell", "rep", "link", "src", "sport", "dst", "dport", "ts",
                                                   "rel_seq", "rtt")
    rates = link_rates(spark, runs)
    util = (packets.withColumn("bin", F.floor(F.col("ts") / bin_s) * bin_s)
            .groupBy("cell", "rep", "link", "direction", "bin")
            .agg(F.sum("length").alias("bytes"), F.count(F.lit(1)).alias("packets"))
            .withColumn("bits_per_s", F.col("bytes") * 8 / bin_s)
            .join(rates, ["cell", "rep", "link", "direction"], "left")
            .withColumn("utilisation", F.col("bits_per_s") / F.col("rate_bps")))
    per_dir = (util.groupBy("cell", "rep", "link", "direction")
               .agg(F.sum("bytes").alias("bytes"), F.sum("packets").alias("packets"),
                    F.first("rate_bps", ignorenulls=True).alias("rate_bps"),
                    F.avg("utilisation").alias("mean_utilisation"), F.max("utilisation").alias("peak_utilisation")))
    retx = (flows.groupBy("cell", "rep", "link", "direction")
            .agg(F.sum("retransmissions").alias("retransmissions"), F.sum("data_segments").alias("data_segments")))
    rtt_d = (rtt.join(flows.select("cell", "rep", "link", "src", "sport", "dst", "dport", "direction"),
                      ["cell", "rep", "link", "src", "sport", "dst", "dport"])
             .groupBy("cell", "rep", "link", "direction")
             .agg(F.count(F.lit(1)).alias("rtt_samples"), F.min("rtt").alias("rtt_min"),
                  F.percentile_approx("rtt", 0.5).alias("rtt_p50"), F.percentile_approx("rtt", 0.99).alias("rtt_p99")))
    links = (per_dir.join(retx, ["cell", "rep", "link", "direction"], "left")
             .join(rtt_d, ["cell", "rep", "link", "direction"], "left")
             # RTT inflation: how far the typical sample sits above the best one (queueing on the path)
             .withColumn("rtt_inflation", F.col("rtt_p50") / F.col("rtt_min")))
    return TrafficTables(flows, rtt, util, links)
