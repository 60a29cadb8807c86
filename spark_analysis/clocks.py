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
    return _corrected({n: clock.models[m] for n, m in clock.machine_of.items() if m in clock.models}, ts, node)


def _corrected(models: dict[str, clockmodel.ClockModel], ts: Column, key: Column) -> Column:
    """`ts` less the offset of the model `key` names (no model: as it is)."""
    if not models:
        return ts

    def lookup(field: str) -> Column:
        pairs = [x for k, model in sorted(models.items()) for x in (F.lit(k), F.lit(float(getattr(model, field))))]
        return F.coalesce(F.create_map(*pairs)[key], F.lit(0.0))

    return ts - (lookup("offset") + lookup("drift") * (ts - lookup("at")))


def deliveries_of_runs(df: DataFrame, by_run: dict[int, clockmodel.Clocks | None], run: Column) -> DataFrame:
    """deliveries() of the records of several runs in one frame: `run` holds each row's key in `by_run`, whose
    clocks apply to that run's rows only (one lookup keyed by run and node, however many runs)."""
    models = {f"{i}/{n}": c.models[m] for i, c in by_run.items() if c is not None
              for n, m in c.machine_of.items() if m in c.models}
    if not models:
        return df

    def key(node: str) -> Column:
        return F.concat(run.cast("string"), F.lit("/"), F.col(node))

    return df.withColumns({"deliver_ts": _corrected(models, F.col("deliver_ts"), key("node")),
                           "submit_ts": _corrected(models, F.col("submit_ts"), key("src")),
                           "ts": _corrected(models, F.col("ts"), key("node"))})


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
