"""`python -m spark_analysis report DIR`: turn run directories into tables and a report."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from testbed.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m spark_analysis", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    r = sub.add_parser("report", help="ingest run directories and write the comparison report")
    r.add_argument("dir", help="a run or a whole experiment directory (local path or file://)")
    r.add_argument("--out", help="report folder (default: DIR/report)")
    r.add_argument("--master", default="local[*]", help="Spark master URL (default: local[*])")
    r.add_argument("--plots", default="png", help="plot formats (only png is implemented)")
    return parser


def report(directory: str, out: str | None = None, master: str = "local[*]", spark=None) -> Path:
    """Build the report for DIR; returns the path of report.html. Raises UserError on bad input."""
    from . import compare, records, report as rep
    from .layout import find_runs

    runs = find_runs(directory)
    owned = False
    if spark is None:
        from pyspark.sql import SparkSession

        from .session import get_session
        owned = SparkSession.getActiveSession() is None  # never stop a session someone else made
        spark = get_session(master)
    try:
        subs = records.read(spark, runs, "submission")
        dels = records.read(spark, runs, "delivery")
        per_run, delay = compare.per_run(subs, dels)
    finally:
        if owned:
            spark.stop()
    if per_run.empty:
        raise UserError(f"no submission or delivery records found under {directory}.")
    summary, delays = compare.summarize(per_run, delay)
    out_dir = Path(out) if out else Path(str(directory).removeprefix("file://")) / "report"
    page = rep.write(out_dir, str(directory), per_run, summary, delays)
    rep.console_summary(summary)
    return page


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return 2
    try:
        page = report(args.dir, args.out, args.master)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    print(f"report written to {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
