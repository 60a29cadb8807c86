"""Run trees listed and read through Hadoop's FileSystem API (the hdfs:// / s3a:// code path), on file://."""
from __future__ import annotations

import pandas as pd
import pytest

from spark_analysis import pcap_ingest
from spark_analysis.__main__ import main, report
from spark_analysis.layout import find_runs
from spark_analysis.records import check_file
from spark_analysis.session import QUICK_JVM_OPTIONS, quick_jvm
from spark_analysis.storage import HadoopPath, resolve
from node.errors import UserError

from .runtree import make_tree

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("hfs") / "exp"
    make_tree(root, messages=30, lose={("frag", "1"): 2})
    return root


def test_find_runs_through_hadoop_equals_local(spark, tree):
    local = find_runs(tree)
    remote = find_runs(tree.as_uri(), spark, hadoop=True)
    assert all(isinstance(r.path, HadoopPath) for r in remote)
    assert [(r.cell, r.rep, r.params) for r in remote] == [(r.cell, r.rep, r.params) for r in local]
    assert [str(r.path) for r in remote] == [r.path.as_uri() for r in local]
    # a single run directory given directly
    one = find_runs(tree.as_uri() + "/frag/2", spark, hadoop=True)
    assert [(r.cell, r.rep, r.mode) for r in one] == [("frag", "2", "fragmenting")]


def test_hadoop_path_io(spark, tree):
    root = resolve(tree.as_uri(), spark, hadoop=True)
    f = root / "frag" / "1" / "nodes" / "b" / "deliveries.jsonl"
    local = tree / "frag" / "1" / "nodes" / "b" / "deliveries.jsonl"
    assert f.is_file() and not f.is_dir() and f.parent.is_dir()
    assert f.read_text() == local.read_text()
    assert f.stat().st_size == local.stat().st_size
    assert f.name == "deliveries.jsonl" and f.stem == "deliveries"
    assert sorted(p.name for p in root.glob("*/*/nodes/*/deliveries.jsonl")) == \
        sorted(p.name for p in tree.glob("*/*/nodes/*/deliveries.jsonl"))
    assert not (root / "nope").exists()
    with pytest.raises(FileNotFoundError):
        (root / "nope").stat()


def test_schema_violation_named_through_hadoop(spark, tmp_path):
    make_tree(tmp_path / "exp", messages=5)
    f = tmp_path / "exp" / "nofrag" / "1" / "nodes" / "b" / "deliveries.jsonl"
    lines = f.read_text().splitlines()
    lines[2] = lines[2].replace('"hops": 2', '"hops": "two"')
    f.write_text("\n".join(lines) + "\n")
    hp = resolve(f.as_uri(), spark, hadoop=True)
    with pytest.raises(UserError) as err:
        check_file("delivery", hp)
    assert f"{f.as_uri()}:3:" in str(err.value) and "'hops'" in str(err.value)


@pytest.fixture(scope="module")
def via_hadoop(spark, built, tmp_path_factory):
    """(spark-submit's process, report folder) of the shared tree (conftest) listed and read through Hadoop.

    The documented cluster invocation, with a local master: spark-submit runs the entry script from a folder
    outside the repository, so spark_analysis, node.schema and node.errors come from the zip. Without
    spark-submit (process None) the report is made in this process, through Hadoop all the same."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    _, local, _ = built
    tree, tmp = local.parent / "synthetic", tmp_path_factory.mktemp("submit")
    repo = Path(__file__).resolve().parents[3]
    submit = Path(sys.executable).parent / "spark-submit"
    if not submit.is_file():
        report(tree.as_uri(), str(tmp / "o"), spark=spark, hadoop_fs=True)
        return None, tmp / "o"
    zip_path = tmp / "wanbed-analysis.zip"
    assert main(["bundle", "--out", str(zip_path)]) == 0
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if quick_jvm():       # spark-submit starts the driver JVM itself: the session's switch reaches it this way
        env["SPARK_SUBMIT_OPTS"] = f"{env.get('SPARK_SUBMIT_OPTS', '')} {QUICK_JVM_OPTIONS}".strip()
    proc = subprocess.run([str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                           "--py-files", str(zip_path), str(repo / "spark_analysis" / "submit_entry.py"),
                           "report", tree.as_uri(), "--out", str(tmp / "o"), "--quiet", "--no-pcap", "--hadoop-fs"],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=240)
    return proc, tmp / "o"


def test_report_via_hadoop_matches_local(built, via_hadoop):
    _, local, _ = built                 # the local report of the shared tree (conftest)
    proc, out = via_hadoop
    assert proc is None or proc.returncode == 0, proc.stderr[-2000:]
    for table in ("runs", "summary", "delay_by_size"):
        a = pd.read_csv(local / f"{table}.csv", dtype={"rep": str, "bucket": str})
        b = pd.read_csv(out / f"{table}.csv", dtype={"rep": str, "bucket": str})
        pd.testing.assert_frame_equal(a, b)
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(runs["undelivered"]) == [0, 0, 0, 3] and sorted(runs["duplicates"]) == [0, 0, 1, 2]


def test_unknown_scheme_is_one_clear_error(spark, tmp_path):
    with pytest.raises(UserError) as err:
        find_runs("nosuchfs://host/x", spark)
    assert "nosuchfs://host/x" in str(err.value)


def test_remote_dir_needs_out(tmp_path, capsys):
    assert main(["report", "hdfs://namenode:8020/runs/quickstart"]) == 2
    assert "--out" in capsys.readouterr().err


def test_remote_without_session_is_user_error():
    with pytest.raises(UserError):
        resolve("s3a://bucket/runs")


def test_spark_submit_with_bundle(via_hadoop):
    """The report made by spark-submit from the bundle (the fixture) succeeds and holds the runs' figures."""
    proc, out = via_hadoop
    if proc is None:
        pytest.skip("spark-submit is not installed next to this interpreter (pip install pyspark provides it)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = pd.read_csv(out / "runs.csv", dtype={"rep": str})
    assert sorted(runs["undelivered"]) == [0, 0, 0, 3]


def test_bundle_bad_out(tmp_path, capsys):
    assert main(["bundle", "--out", str(tmp_path)]) == 2
    assert main(["bundle", "--out", str(tmp_path / "no" / "x.zip")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_not_a_pcap_is_one_line_error(spark, tmp_path, capsys):
    """A local capture that is not a pcap is refused before any Spark job runs (not after the records are
    read); a remote one is checked by its index task, and the failure inside that Spark task still reaches
    the driver as one sentence, no traceback."""
    make_tree(tmp_path / "exp", messages=5)
    (tmp_path / "exp" / "frag" / "1" / "pcap").mkdir()
    bogus = tmp_path / "exp" / "frag" / "1" / "pcap" / "a-b.pcap"
    bogus.write_bytes(b"this is not a capture file at all" * 4)
    sc = spark.sparkContext
    sc.setJobGroup("not-a-pcap", "report of a run with a bad capture")
    try:
        with pytest.raises(UserError) as err:
            report(str(tmp_path / "exp"), str(tmp_path / "o"), spark=spark)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert str(err.value) == f"{bogus} is not a readable pcap file (bad or missing magic number)."
    assert sc.statusTracker().getJobIdsForGroup("not-a-pcap") == []
    with pytest.raises(UserError) as err:
        pcap_ingest.ranges(spark, [pcap_ingest.Capture("frag", "1", "a-b", bogus.as_uri())])
    assert str(err.value) == f"{bogus.as_uri()} is not a readable pcap file (bad or missing magic number)."
