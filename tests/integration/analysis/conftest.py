"""One SparkSession (local[2]) for the whole analysis test session."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from spark_analysis.session import get_session

    session = get_session("local[2]", app="wanbed-analysis-tests")
    yield session
    session.stop()
