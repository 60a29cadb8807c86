"""`python -m spark_analysis report DIR`: turn run directories into tables and a report."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from node.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m spark_analysis", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    r = sub.add_parser("report", help="ingest run directories and write the comparison report")
    r.add_argument("dir", help="a run, a cell or a whole experiment directory: a local path, file://, hdfs:// "
                   "or s3a:// (the Spark/Hadoop configuration decides how it is reached)")
    r.add_argument("--out", help="local report folder (default: DIR/report; required when DIR is not local)")
    r.add_argument("--master", default=None, help="Spark master URL (default: the one spark-submit was given, "
                   "else local[*])")
    r.add_argument("--plots", default="png", help="plot formats, comma-separated: png, svg (default: png)")
    r.add_argument("--no-pcap", action="store_true", help="skip the packet captures")
    r.add_argument("--chunk-mb", type=float, default=32.0, help="bytes per pcap parse task, in MiB (default 32)")
    r.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    r.add_argument("--hadoop-fs", action="store_true",
                   help="list DIR through Hadoop's FileSystem API even when it is a local path or file://")
    b = sub.add_parser("bundle", help="write the zip that spark-submit --py-files needs (this package and the "
                       "two modules it imports from the repository)")
    b.add_argument("--out", default="wanbed-analysis.zip", help="zip file to write (default: wanbed-analysis.zip)")
    return parser


CORE_STEPS = 5      # starting Spark, reading records, delivery metrics, pcaps, writing the report


def steps(runs) -> int:
    """Progress steps of a report: the core ones and one per section built (every section while the runs
    are not listed yet)."""
    from .sections import SECTIONS

    return CORE_STEPS + sum(1 for s in SECTIONS if runs is None or s.wanted(runs))


def report(directory: str, out: str | None = None, master: str | None = None, spark=None, plots: str = "png",
           pcaps: bool = True, chunk_bytes: int = 32 << 20, quiet: bool = True, hadoop_fs: bool = False) -> Path:
    """Build the report for DIR; returns the path of report.html. Raises UserError on bad input.

    DIR on hdfs:// or s3a:// (or any DIR with hadoop_fs=True) is listed through the Spark session's
    Hadoop FileSystem, so the session is started before the runs are found."""
    from .layout import find_runs
    from .progress import StageProgress
    from .storage import is_local

    if chunk_bytes < 4096:
        raise UserError("--chunk-mb must be at least 0.004 (4 KiB per parse task).")
    remote = hadoop_fs or not is_local(str(directory))
    if remote and not out and not is_local(str(directory)):
        raise UserError(f"{directory} is not a local path: give --out, a local folder for the report.")
    runs = None if remote else find_runs(directory)
    # the report's modules (pandas, scipy, matplotlib) take seconds to import: only once DIR holds runs
    from . import report as rep
    formats = rep.parse_formats(plots)
    out_dir = Path(out) if out else Path(str(directory).removeprefix("file://")) / "report"
    progress = StageProgress(steps(runs), enabled=not quiet)
    owned = False
    if spark is None:
        from pyspark.sql import SparkSession

        from .session import get_session
        owned = SparkSession.getActiveSession() is None  # never stop a session someone else made
        with progress.step(f"starting Spark ({master or 'default master'})"):
            spark = get_session(master)
    else:
        progress.step("Spark session given")
    try:
        if runs is None:
            runs = find_runs(directory, spark, hadoop=True)
            progress.steps = steps(runs)
        tables = _build(spark, runs, out_dir, progress, pcaps, chunk_bytes)
    finally:
        if owned:
            spark.stop()
    with progress.step("writing report"):
        if not remote:
            _topology_page(runs, tables.topology_run, out_dir)
        page = rep.write(out_dir, str(directory), tables, formats=formats)
    rep.console_summary(tables.summary, tables.health, comparison=tables.comparison)
    return page


def _topology_page(runs, which: str, out_dir: Path) -> None:
    """topology.html beside report.html: the dashboard's page of the run the report draws, self-contained.
    Without the page's libraries (`make setup`) there is none, and the report says nothing of it."""
    from testbed.dashboard import export
    page = out_dir / "topology.html"
    page.unlink(missing_ok=True)           # never a stale one from an earlier report into this folder
    run = next((r for r in runs if f"{r.cell}/{r.rep}" == which and isinstance(r.path, Path)), None)
    if run is None:
        return
    try:
        export.write(run.path, page)
    except Exception as exc:                 # noqa: BLE001 - a side page: the report stands without it, and says why
        print(f"report: no topology.html ({exc})", file=sys.stderr)
        page.unlink(missing_ok=True)


def _build(spark, runs, out_dir: Path, progress, pcaps: bool, chunk_bytes: int):
    from pyspark.sql import functions as F

    from . import compare, pcap_ingest, records, traffic
    from .layout import experiment_doc, run_timelines, run_topology
    from .report import ReportTables
    from .sections import SECTIONS, RunData

    # a capture that is not a pcap is refused now, not after the records are read and the metrics computed
    caps = pcap_ingest.find_captures(runs) if pcaps else []
    # nor are runs without records taken further: their empty tables would still cost Spark jobs
    if not records.any_files(runs, ("submission", "delivery")):
        _no_records(runs)
    with progress.step("reading node records (schema-checked)", spark):
        subs = records.read(spark, runs, "submission")
        dels = records.read(spark, runs, "delivery")
        metrics = records.read(spark, runs, "metrics")
        records.read(spark, runs, "report")
        records.read(spark, runs, "event")
        host = records.read(spark, runs, "host")
        per_run, delay = compare.per_run(subs, dels, metrics)
        per_run = compare.add_summary_metrics(per_run, runs)
    if per_run.empty:
        _no_records(runs)
    with progress.step("delivery metrics and comparisons", spark):
        summary, delays = compare.summarize(per_run, delay)
        uniq = compare.unique_deliveries(dels)
        tables = ReportTables(per_run, summary, delays, compare.comparison(summary, runs),
                              compare.sweeps(summary, runs), compare.latency_cdf(uniq), compare.hop_counts(uniq))
        tables.refusals = compare.refusals(subs)
        tables.resources = compare.resources_over_time(metrics)
        tables.buffer_classes = compare.buffer_class_usage(metrics)
    with progress.step(f"pcap ingestion ({len(caps)} captures) and flows", spark):
        if caps:
            parquet = out_dir / "parquet"
            packets = pcap_ingest.ingest(spark, caps, pcap_ingest.uri(parquet / "packets"), chunk_bytes)
            if packets is not None:
                tt = traffic.derive(spark, packets, runs, pcap_ingest.uri(parquet / "tcp"))
                tables.links = compare._to_pandas(tt.links.orderBy("cell", "rep", "link", "direction"))
                tables.flows = compare._to_pandas(tt.flows.orderBy(F.desc("bytes")).limit(1000))
                tables.utilisation = compare._to_pandas(tt.utilisation.orderBy("cell", "rep", "link", "direction",
                                                                               "bin"))
                tt.rtt.write.mode("overwrite").parquet(pcap_ingest.uri(parquet / "rtt"))
    tables.health = compare.health(runs, per_run, tables.refusals, host, tables.links if caps else None)
    tables.experiment = experiment_doc(runs)
    tables.timelines = run_timelines(runs)
    tables.topology, tables.daemons, tables.topology_run = run_topology(runs)
    data = RunData(spark, runs, subs, uniq)
    for section in SECTIONS:
        if section.wanted(runs):
            with progress.step(section.step, spark):
                tables.sections[section.name] = section.build(data)
    return tables


def _no_records(runs) -> None:
    """Refuse runs that hold no mail records, unless a section has records of its own to show."""
    from .sections import SECTIONS

    if any(s.has_records(runs) for s in SECTIONS):
        return
    alone = [s.alone for s in SECTIONS if s.alone]
    nor = f" (nor {', '.join(alone)})" if alone else ""
    raise UserError(f"no submission or delivery records{nor} found under the given directory.")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return 2
    if args.command == "bundle":
        from .bundle import write_bundle
        try:
            path = write_bundle(args.out)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            return e.exit_code
        print(f"wrote {path}")
        return 0
    if not math.isfinite(args.chunk_mb):
        print("error: --chunk-mb must be a finite number of MiB.", file=sys.stderr)
        return 2
    try:
        page = report(args.dir, args.out, args.master, plots=args.plots, pcaps=not args.no_pcap,
                      chunk_bytes=int(args.chunk_mb * (1 << 20)), quiet=args.quiet,
                      hadoop_fs=args.hadoop_fs)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    print(f"report written to {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
