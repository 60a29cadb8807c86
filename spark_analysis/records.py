"""Read the JSON-lines records of runs with Spark, after checking each line against node/schema.py."""
from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
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


def _files(run: Run, kind: str) -> list[Path | HadoopPath]:
    """The run's non-empty files of `kind` records."""
    files = run.files(FILES[kind]) if kind in FILES else []
    if kind in RUN_FILES and (run.path / RUN_FILES[kind]).is_file():
        files = [*files, run.path / RUN_FILES[kind]]
    return [p for p in files if p.stat().st_size > 0]


def any_files(runs: list[Run], kinds: tuple[str, ...]) -> bool:
    """Whether some run has a non-empty file of one of these kinds (without one, read() finds no records)."""
    return any(_files(run, kind) for run in runs for kind in kinds)


def read(spark: SparkSession, runs: list[Run], kind: str) -> DataFrame:
    """One DataFrame of all `kind` records of the runs, with columns cell, rep, run_mode, frag_size added."""
    files: list[tuple[Path | HadoopPath, int]] = []
    for i, run in enumerate(runs):
        mine = _files(run, kind)
        for p in mine:
            check_file(kind, p)
        files += [(p, i) for p in mine]
    if not files:
        return empty(spark, kind)
    df = scan(spark, runs, files, SCHEMAS[kind])
    if kind == "delivery":       # several machines: the delays on the controller's clock (machines.json)
        df = clocks.deliveries_of_runs(df, {i: clocks.load(runs[i]) for _, i in files}, F.col(RUN))
    return with_run_columns(df, runs, ("cell", "rep", "run_mode", "frag_size"))


RUN = "_run"          # scan()'s column: the index of the row's run in the list of runs
_RUN_COLUMNS = {"cell": (StringType(), lambda r: r.cell), "rep": (StringType(), lambda r: r.rep),
                "run_mode": (StringType(), lambda r: r.mode), "frag_size": (LongType(), lambda r: r.fragment_size)}


def scan(spark: SparkSession, runs: list[Run], files: list[tuple[Path | HadoopPath, int]],
         schema: StructType) -> DataFrame:
    """The JSON-lines `files` (each with the index of its run in `runs`) as one scan, with column RUN.

    One scan for all the runs: a scan per run would be one more in every query plan per run, so a sweep's
    report would run as many tasks per stage as it has runs. Each row's run is found from the path of the
    file it came from (Spark's `_metadata.file_path`), its run directory being that path less as many
    components as the file lies below it."""
    with_runs = sorted({i for _, i in files})
    keys = _run_keys(spark, [runs[i] for i in with_runs])
    run_of = F.create_map(*[x for key, i in zip(keys, with_runs) for x in (F.lit(key), F.lit(i))])
    depths = sorted({_depth(p, runs[i]) for p, i in files})
    # a run directory is never below another run's, so at most one of the candidates is a run
    path = _uri_path(F.col("_metadata.file_path"))
    found = F.coalesce(*[run_of[F.regexp_extract(path, rf"^(.*)(/[^/]+){{{d}}}$", 1)] for d in depths])
    df = spark.read.schema(schema).json([str(p) for p, _ in files])
    # a path read back unlike its key would drop the file's records from every table: fail loudly instead
    return df.withColumn(RUN, F.when(found.isNull(), F.raise_error(F.concat(
        F.lit("records.scan: no run for "), F.col("_metadata.file_path")))).otherwise(found))


def with_run_columns(df: DataFrame, runs: list[Run], names: tuple[str, ...]) -> DataFrame:
    """scan()'s frame with the named run columns (cell, rep, run_mode, frag_size) in place of RUN."""
    for name in names:
        dtype, value = _RUN_COLUMNS[name]
        by_run = F.create_map(*[x for i, run in enumerate(runs) for x in (F.lit(i), F.lit(value(run)).cast(dtype))])
        df = df.withColumn(name, by_run[F.col(RUN)])
    return df.drop(RUN)


def _depth(path: Path | HadoopPath, run: Run) -> int:
    """How many path components `path` lies below the run's directory."""
    return len(str(path)[len(str(run.path)):].strip("/").split("/"))


def _uri_path(path: Column) -> Column:
    """A file URI's path, without scheme and authority: Spark writes file:/x where Hadoop's URI of the same
    file is file:///x (all the runs of a report are on one file system)."""
    return F.regexp_replace(path, r"^[A-Za-z][A-Za-z0-9+.-]*:(//[^/]*)?", "")


def _run_keys(spark: SparkSession, runs: list[Run]) -> list[str]:
    """Each run directory as it appears in a file's `_metadata.file_path` (after _uri_path): the path of the
    qualified Hadoop path's URI, which escapes some characters (a space, %, #) and not others, so it is
    asked of Hadoop."""
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    keys = []
    for run in runs:
        path = jvm.org.apache.hadoop.fs.Path(str(run.path))
        keys.append(path.getFileSystem(conf).makeQualified(path).toUri().getRawPath().rstrip("/"))
    return keys


def empty(spark: SparkSession, kind: str) -> DataFrame:
    """A typed empty table of `kind` with the run columns."""
    extra = StructType(SCHEMAS[kind].fields + [StructField("cell", StringType()), StructField("rep", StringType()),
                                               StructField("run_mode", StringType()),
                                               StructField("frag_size", LongType())])
    # built in the JVM: an empty Python-side DataFrame needs Python workers for nothing
    return spark.range(0).select(*[F.lit(None).cast(f.dataType).alias(f.name) for f in extra.fields])
