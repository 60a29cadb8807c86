"""Store-and-forward deadlock end to end: `testbed run scenarios/brachman-deadlock.yaml --quick`.

A loaded 4-MTA unidirectional ring, non-fragmenting: with one shared transit pool
(`buffer_classes: false`) the run stops delivering and summary.json says
stalled, with its copies held in the spools (late, never lost); with buffer
classes the same load drains and nothing is stalled.
"""
from __future__ import annotations

import json

import pytest

from tests.e2e.test_testbed_run import REPO, leftovers, quick_run_in_tempdir

SCENARIO = REPO / "scenarios" / "brachman-deadlock.yaml"


@pytest.mark.root
@pytest.mark.timeout(180)
def test_shared_pool_stalls_and_buffer_classes_do_not() -> None:
    with quick_run_in_tempdir(SCENARIO, 150.0) as run:
        assert leftovers(run["run_ids"]) == []
        out = run["out"]
        shared, classes = (json.loads(next(out.glob(f"*buffer-classes-{on}/1/summary.json")).read_text())
                           for on in ("false", "true"))
        log = f"stdout:\n{run['stdout'][-3000:]}"
        assert shared["stalled"] is True, log
        assert shared["stall"]["held"] == shared["late"] > 0 and shared["lost"] == 0, log
        assert shared["drain"]["stalled"] is True, "the drain waited out its bound on a stalled network"
        assert classes["stalled"] is False and classes["late"] == 0 and classes["lost"] == 0, log
        assert classes["delivered"] > 0
        assert "STALLED" in run["stdout"]
