"""The Spark analysis puts cross-machine times on the controller's clock (spark_analysis/clocks.py): delivery
delays and pub/sub receipt latencies of a run whose machine m2 runs 50 ms ahead come out within +-2 ms of the
true ones; a run without machines.json is read as it is. The run directory is the summary tests' synthetic one."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_analysis import records
from spark_analysis.layout import Run
from spark_analysis.sections import pubsub
from testbed.experiment.machines import write_machines
from tests.unit.experiment.test_summary_clocks import SHIFT, T0, TRAFFIC, lines, measured, write_run

TRUE = {t[0]: t[3] for t in TRAFFIC}
LATENCY = 0.040        # a publication at n1 (ctl) received at n2's subscriber (m2)


def _receipts(rep: Path, shift: float) -> None:
    lines(rep / "subscribers" / "n2" / "s" / "receipts.jsonl", [
        {"ts": T0 + 1 + LATENCY + shift, "node": "n2", "subscription": "s", "durable": False, "pub_id": "p1",
         "topic": "t", "origin": "n1", "publish_ts": T0 + 1, "latency": LATENCY + shift, "size": 10, "hops": 1}])


def _delays(spark, *reps: Path) -> list[dict[str, float]]:
    """Per run directory, its delays: the runs read together (one scan), each row's run found from its
    file's path."""
    rows = records.read(spark, [Run(rep, "c", rep.name) for rep in reps], "delivery").collect()
    assert {r["cell"] for r in rows} == {"c"}
    return [{r["msg_id"]: r["deliver_ts"] - r["submit_ts"] for r in rows if r["rep"] == rep.name} for rep in reps]


def _latency(spark, rep: Path) -> float:
    df = pubsub._read(spark, [Run(rep, "c", "1")], pubsub.receipt_files, "receipt", pubsub._schemas()["receipt"])
    return df.collect()[0]["latency"]


def test_spark_corrects_cross_machine_delays_and_latencies(spark, tmp_path: Path) -> None:
    # characters a file's URI escapes (space, #) in the run's path
    rep = write_run(tmp_path / "e x#1" / "c" / "1", SHIFT)
    _receipts(rep, SHIFT)
    assert _delays(spark, rep)[0]["a1"] == pytest.approx(TRUE["a1"] + SHIFT, abs=1e-6)  # no machines.json: as written
    plain = write_run(rep.parent / "2", SHIFT)            # the same run without machines.json, read beside it
    write_machines(rep, {"ctl": measured(0.0, 0.0002), "m2": measured(SHIFT, 0.0002)})
    got, as_written = _delays(spark, rep, plain)
    assert set(got) == set(TRUE) == set(as_written)
    for msg, delay in TRUE.items():
        assert got[msg] == pytest.approx(delay, abs=0.002), msg
    assert as_written["a1"] == pytest.approx(TRUE["a1"] + SHIFT, abs=1e-6)
    assert _latency(spark, rep) == pytest.approx(LATENCY, abs=0.002)
