"""One SparkSession (local[2]) for the whole analysis test session, and the report of the synthetic run tree
that several modules read (built once: a report is most of a test's time). The same tree is also reported by
spark-submit in a JVM of its own (test_hadoop_fs.py); that report is started with the session, when a
collected test needs it, so it runs beside the tests before it instead of after them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .runtree import make_tree

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def spark():
    from spark_analysis.session import get_session

    session = get_session("local[2]", app="wanbed-analysis-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory):
    """(expected figures, root) of a 2-cell, 2-rep tree with losses and duplicates."""
    root = tmp_path_factory.mktemp("runs") / "synthetic"
    expected = make_tree(root, messages=100, lose={("frag", "2"): 3}, dup={("frag", "2"): 2, ("nofrag", "1"): 1})
    return expected, root


@pytest.fixture(scope="session")
def built(spark, synthetic):
    """(expected figures, report folder, report.html) of the synthetic tree, reported locally with PNG and
    SVG plots."""
    from spark_analysis.__main__ import report

    expected, root = synthetic
    out = root.parent / "out"
    page = report(str(root), str(out), spark=spark, plots="png,svg")
    return expected, out, page


class Submitted:
    """A report of the synthetic tree by spark-submit, running (started by `submit`)."""

    def __init__(self, root: Path, tmp: Path) -> None:
        from spark_analysis.__main__ import main
        from spark_analysis.session import QUICK_JVM_OPTIONS, quick_jvm

        self.out = tmp / "o"
        zip_path = tmp / "wanbed-analysis.zip"
        assert main(["bundle", "--out", str(zip_path)]) == 0
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        if quick_jvm():   # spark-submit starts the driver JVM itself: the session's switch reaches it this way
            env["SPARK_SUBMIT_OPTS"] = f"{env.get('SPARK_SUBMIT_OPTS', '')} {QUICK_JVM_OPTIONS}".strip()
        self.stderr = tmp / "stderr.txt"
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(
                [str(spark_submit()), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                 "--py-files", str(zip_path), str(REPO / "spark_analysis" / "submit_entry.py"),
                 "report", root.as_uri(), "--out", str(self.out), "--quiet", "--no-pcap", "--hadoop-fs"],
                cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=err)

    def wait(self) -> tuple[int, str]:
        """(exit status, the end of stderr)."""
        try:
            rc = self.proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        return rc, self.stderr.read_text(errors="replace")[-2000:]


def spark_submit() -> Path:
    return Path(sys.executable).parent / "spark-submit"


@pytest.fixture(scope="session", autouse=True)
def submit(request, tmp_path_factory):
    """The spark-submit report (None without spark-submit or when no collected test needs it)."""
    wanted = any("submitted" in getattr(item, "fixturenames", ()) for item in request.session.items)
    if not wanted or not spark_submit().is_file():
        yield None
        return
    job = Submitted(request.getfixturevalue("synthetic")[1], tmp_path_factory.mktemp("submit"))
    yield job
    if job.proc.poll() is None:       # the tests stopped early: this process was started here, end it
        job.proc.kill()
        job.proc.wait()


@pytest.fixture(scope="session")
def submitted(submit):
    return submit
