"""Times of a run over several machines put on the controller's clock in Spark (machines.json, read by
node/clockmodel.py, the same model and correction summary.json uses). A run without machines.json ran on one
machine: its frames are returned as they are."""
from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from node import clockmodel


def load(run: Any) -> clockmodel.Clocks | None:
    return clockmodel.load(run.path)


def to_controller(clock: clockmodel.Clocks, ts: Column, node: Column) -> Column:
    """`ts` stamped on `node`'s machine, on the controller's clock: ts - (offset + drift * (ts - at))."""
    params = {n: clock.models[m] for n, m in clock.machine_of.items() if m in clock.models}
    if not params:
        return ts

    def lookup(field: str) -> Column:
        pairs = [x for n, model in sorted(params.items()) for x in (F.lit(n), F.lit(float(getattr(model, field))))]
        return F.coalesce(F.create_map(*pairs)[node], F.lit(0.0))

    return ts - (lookup("offset") + lookup("drift") * (ts - lookup("at")))


def deliveries(df: DataFrame, clock: clockmodel.Clocks | None) -> DataFrame:
    """deliver_ts (and ts) on the recipient's machine, submit_ts on the origin's: both corrected."""
    if clock is None:
        return df
    return (df.withColumn("deliver_ts", to_controller(clock, F.col("deliver_ts"), F.col("node")))
            .withColumn("submit_ts", to_controller(clock, F.col("submit_ts"), F.col("src")))
            .withColumn("ts", to_controller(clock, F.col("ts"), F.col("node"))))


def receipts(df: DataFrame, clock: clockmodel.Clocks | None) -> DataFrame:
    """A receipt's ts on the subscriber's machine, its publish_ts on the origin's; latency recomputed."""
    if clock is None:
        return df
    df = (df.withColumn("ts", to_controller(clock, F.col("ts"), F.col("node")))
          .withColumn("publish_ts", to_controller(clock, F.col("publish_ts"), F.col("origin"))))
    return df.withColumn("latency", F.col("ts") - F.col("publish_ts"))
