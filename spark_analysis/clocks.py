"""Times of a run over several machines put on the controller's clock in Spark (machines.json, read by
node/clockmodel.py, the same model and correction summary.json uses). A run without machines.json ran on one
machine: its frames are returned as they are. The records of several runs are one frame (records.scan): the models
are looked up by run and node."""
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


def _run_models(by_run: dict[int, clockmodel.Clocks | None]) -> dict[str, clockmodel.ClockModel]:
    """The models of several runs' nodes, keyed "run/node" (see _run_node)."""
    return {f"{i}/{n}": c.models[m] for i, c in by_run.items() if c is not None
            for n, m in c.machine_of.items() if m in c.models}


def _run_node(run: Column, node: str) -> Column:
    return F.concat(run.cast("string"), F.lit("/"), F.col(node))


def deliveries_of_runs(df: DataFrame, by_run: dict[int, clockmodel.Clocks | None], run: Column) -> DataFrame:
    """deliveries() of the records of several runs in one frame: `run` holds each row's key in `by_run`, whose
    clocks apply to that run's rows only (one lookup keyed by run and node, however many runs)."""
    models = _run_models(by_run)
    if not models:
        return df
    return df.withColumns({"deliver_ts": _corrected(models, F.col("deliver_ts"), _run_node(run, "node")),
                           "submit_ts": _corrected(models, F.col("submit_ts"), _run_node(run, "src")),
                           "ts": _corrected(models, F.col("ts"), _run_node(run, "node"))})


def receipts_of_runs(df: DataFrame, by_run: dict[int, clockmodel.Clocks | None], run: Column) -> DataFrame:
    """receipts() of the records of several runs in one frame (as deliveries_of_runs)."""
    models = _run_models(by_run)
    if not models:
        return df
    df = df.withColumns({"ts": _corrected(models, F.col("ts"), _run_node(run, "node")),
                         "publish_ts": _corrected(models, F.col("publish_ts"), _run_node(run, "origin"))})
    return df.withColumn("latency", F.col("ts") - F.col("publish_ts"))
