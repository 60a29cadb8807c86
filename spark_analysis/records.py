"""Read the JSON-lines records of runs with Spark, after checking each line against node/schema.py."""
from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (ArrayType, BooleanType, DoubleType, LongType, MapType, StringType, StructField,
                               StructType)

from node.schema import validate
from node.errors import UserError

from . import clocks
from .layout import Run
from .storage import HadoopPath

# per-node files (nodes/<node>/NAME) and per-run files (NAME in the rep directory) of each record kind;
# workload.jsonl holds the submissions the driver could not hand to a node (killed or paused daemon)
FILES = {"submission": "submissions.jsonl", "delivery": "deliveries.jsonl", "metrics": "metrics.jsonl",
         "report": "reports.jsonl", "rate": "rates.jsonl"}
RUN_FILES = {"submission": "workload.jsonl", "event": "events.jsonl", "host": "host.jsonl"}
KINDS = ("submission", "delivery", "metrics", "report", "event", "host", "rate")

_NEIGHBOUR = StructType([StructField(n, LongType()) for n in (
    "queue_messages", "queue_bytes", "inflight", "frags_out", "bytes_out", "frags_in", "bytes_in",
    "duplicates_in", "retransmissions", "reconnects", "refused_in", "refused_out")] + [StructField("up", BooleanType())])
_RESOURCES = StructType([
    StructField("buffers", StructType([StructField("usage", ArrayType(LongType())),
                                       StructField("limits", ArrayType(LongType())),
                                       StructField("free_pool", LongType())])),
    StructField("recipient", StructType([StructField("capacity", LongType()), StructField("used", LongType()),
                                         StructField("reserved", LongType()),
                                         StructField("reservation_queue_length", LongType())])),
])

SCHEMAS = {
    "delivery": StructType([
        StructField("ts", DoubleType()), StructField("node", StringType()),
        StructField("msg_id", StringType()), StructField("src", StringType()),
        StructField("dst", StringType()), StructField("size", LongType()),
        StructField("fragments", LongType()), StructField("mode", StringType()),
        StructField("submit_ts", DoubleType()), StructField("deliver_ts", DoubleType()),
        StructField("hops", LongType()),
    ]),
    "submission": StructType([
        StructField("ts", DoubleType()), StructField("node", StringType()),
        StructField("msg_id", StringType()), StructField("src", StringType()),
        StructField("dst", StringType()),  # str or list: a list arrives as its JSON text
        StructField("size", LongType()), StructField("accepted", BooleanType()),
        StructField("reason", StringType()),
    ]),
    "metrics": StructType([
        StructField("ts", DoubleType()), StructField("node", StringType()),
        StructField("spool_messages", LongType()), StructField("spool_bytes", LongType()),
        StructField("delivered", LongType()), StructField("mode", StringType()),
        StructField("neighbours", MapType(StringType(), _NEIGHBOUR)), StructField("resources", _RESOURCES),
    ]),
    "report": StructType([
        StructField("ts", DoubleType()), StructField("node", StringType()), StructField("event", StringType()),
        StructField("msg_id", StringType()), StructField("dst", StringType()), StructField("reason", StringType()),
    ]),
    "event": StructType([
        StructField("ts", DoubleType()), StructField("node", StringType()), StructField("event", StringType()),
        StructField("target", StringType()),
    ]),
    "rate": StructType([
        StructField("ts", DoubleType()), StructField("node", StringType()), StructField("event", StringType()),
        StructField("client", StringType()), StructField("weight", LongType()), StructField("rate_bps", DoubleType()),
        StructField("queue_bytes", LongType()), StructField("sent_bytes", LongType()),
        StructField("periodic", BooleanType()), StructField("queue_mean_bytes", DoubleType()),
    ]),
    "host": StructType([
        StructField("ts", DoubleType()), StructField("node", StringType()), StructField("cpu_percent", DoubleType()),
        StructField("mem_percent", DoubleType()), StructField("procs", MapType(StringType(), DoubleType())),
    ]),
}


def check_file(kind: str, path: Path | HadoopPath) -> None:
    """Raise UserError naming the file and line of the first record that breaks the schema."""
    with path.open("r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise UserError(f"{path}:{lineno}: not valid JSON ({e}).") from None
            problems = validate(kind, record)
            if problems:
                raise UserError(f"{path}:{lineno}: {kind} record does not match node/schema.py: "
                                f"{'; '.join(problems)}.")


def read(spark: SparkSession, runs: list[Run], kind: str) -> DataFrame:
    """One DataFrame of all `kind` records of the runs, with columns cell, rep, run_mode, frag_size added."""
    frames = []
    for run in runs:
        files = run.files(FILES[kind]) if kind in FILES else []
        if kind in RUN_FILES and (run.path / RUN_FILES[kind]).is_file():
            files = [*files, run.path / RUN_FILES[kind]]
        files = [p for p in files if p.stat().st_size > 0]
        for p in files:
            check_file(kind, p)
        if not files:
            continue
        df = spark.read.schema(SCHEMAS[kind]).json([str(p) for p in files])
        if kind == "delivery":       # several machines: the delays on the controller's clock (machines.json)
            df = clocks.deliveries(df, clocks.load(run))
        frames.append(df.withColumn("cell", F.lit(run.cell)).withColumn("rep", F.lit(run.rep))
                      .withColumn("run_mode", F.lit(run.mode).cast("string"))
                      .withColumn("frag_size", F.lit(run.fragment_size)))
    if not frames:
        return empty(spark, kind)
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def empty(spark: SparkSession, kind: str) -> DataFrame:
    """A typed empty table of `kind` with the run columns."""
    extra = StructType(SCHEMAS[kind].fields + [StructField("cell", StringType()), StructField("rep", StringType()),
                                               StructField("run_mode", StringType()),
                                               StructField("frag_size", LongType())])
    # built in the JVM: an empty Python-side DataFrame needs Python workers for nothing
    return spark.range(0).select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in extra.fields])
