"""`python -m spark_analysis report DIR`: turn run directories into tables and a report."""
from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m spark_analysis", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    r = sub.add_parser("report", help="ingest run directories and write the comparison report")
    r.add_argument("dir", help="a run, a cell or a whole experiment (local, file://, hdfs://, s3a://)")
    r.add_argument("--out", help="report folder (default: DIR/report)")
    r.add_argument("--master", default="local[*]", help="Spark master URL (default: local[*])")
    r.add_argument("--plots", default="png", help="plot formats, comma separated: png,svg")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return 2
    print("spark_analysis report is not available yet (tracked in issue #9)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
