"""The SparkSession used by the report: local by default, no UI, few shuffle partitions, quiet logs.

WANBED_SPARK_QUICK_JVM=1 in the environment starts the driver JVM for short jobs on little data: C1 compiler
only and the serial collector. A report of a small run is mostly JIT warm-up, and these take about 40% off the
JVM's CPU time; on large inputs C2's faster code wins, so it is off by default (the test suite turns it on).
"""
from __future__ import annotations

import os
import sys
import tempfile
import warnings
from pathlib import Path

from pyspark.sql import SparkSession

_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
"""


# The environment switch and the JVM flags it adds (also what a spark-submit driver can be given in SPARK_SUBMIT_OPTS).
QUICK_JVM_ENV = "WANBED_SPARK_QUICK_JVM"
QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto"


def quick_jvm() -> bool:
    return os.environ.get(QUICK_JVM_ENV, "") not in ("", "0")


def driver_java_options() -> str:
    """The local driver JVM's options: the quiet log configuration, and the short-job flags when asked for."""
    options = f"-Dlog4j2.configurationFile=file:{_log4j_file()}"
    return f"{options} {QUICK_JVM_OPTIONS}" if quick_jvm() else options


def _log4j_file() -> str:
    path = Path(tempfile.gettempdir()) / "wanbed-spark-log4j2.properties"
    if not path.is_file() or path.read_text() != _LOG4J:
        path.write_text(_LOG4J)
    return str(path)


def default_master() -> str | None:
    """None under spark-submit (its --master and --conf rule), else local[*]."""
    # spark-submit starts the JVM first and hands the Python driver its gateway through these variables
    return None if os.environ.get("PYSPARK_GATEWAY_PORT") else "local[*]"


def get_session(master: str | None = "local[*]", app: str = "wanbed-analysis") -> SparkSession:
    """master None = default_master(): keep what spark-submit configured."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers must run this interpreter (numpy, pyarrow and this package live in its venv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # requirements.lock pins pandas below 3; a cluster's Python may still have pandas 3, which pyspark warns about
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
    master = master or default_master()
    builder = SparkSession.builder.master(master) if master else SparkSession.builder
    spark = (
        builder
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.extraJavaOptions", driver_java_options())
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
