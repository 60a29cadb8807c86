"""One SparkSession (local[2]) for the whole analysis test session, and the report of the synthetic run tree
that several modules read (built once: a report is most of a test's time)."""
from __future__ import annotations

import pytest

from .runtree import make_tree


@pytest.fixture(scope="session")
def spark():
    from spark_analysis.session import get_session

    session = get_session("local[2]", app="wanbed-analysis-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def built(spark, tmp_path_factory):
    """(expected figures, report folder, report.html) of a 2-cell, 2-rep tree with losses and duplicates,
    reported locally with PNG and SVG plots."""
    from spark_analysis.__main__ import report

    root = tmp_path_factory.mktemp("runs") / "synthetic"
    expected = make_tree(root, messages=100, lose={("frag", "2"): 3}, dup={("frag", "2"): 2, ("nofrag", "1"): 1})
    out = root.parent / "out"
    page = report(str(root), str(out), spark=spark, plots="png,svg")
    return expected, out, page
