"""The Routing section end to end: a sweep over routing.policy, one run with route records."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest

from spark_analysis.__main__ import report

from .runtree import make_tree

POLICY = {"frag": "dynamic", "nofrag": "shortest"}


def _delays(cell_dir: Path) -> list[float]:
    """Delay of the first delivery of every message in the cell's repetitions."""
    first: dict[tuple[str, str], dict] = {}
    for f in sorted(cell_dir.glob("*/nodes/*/deliveries.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            key = (f.parts[-4], r["msg_id"])
            if key not in first or r["deliver_ts"] < first[key]["deliver_ts"]:
                first[key] = r
    return [r["deliver_ts"] - r["submit_ts"] for r in first.values()]


def test_routing_section_and_delay_per_policy(spark, tmp_path: Path) -> None:
    root = tmp_path / "exp"
    make_tree(root, messages=30, dup={("frag", "1"): 2})
    exp = json.loads((root / "experiment.json").read_text())
    for cell in exp["cells"]:
        cell["params"] = {"routing.policy": POLICY[cell["id"]]}
    (root / "experiment.json").write_text(json.dumps(exp))
    (root / "frag/1/nodes/a/routes.jsonl").write_text(
        json.dumps({"ts": 1_700_000_001.0, "node": "a", "dst": "b", "next_hop": "b", "cost": None,
                    "reason": "unreachable"}) + "\n")

    page = report(str(root), str(tmp_path / "out"), spark=spark)

    text = Path(page).read_text()
    assert 'id="routing"' in text and 'id="routing-changes-table"' in text and 'id="routing-policy-table"' in text
    changes = pd.read_csv(tmp_path / "out" / "routing_changes.csv", dtype={"rep": str})
    assert changes[["cell", "rep", "node", "unreachable"]].values.tolist() == [["frag", "1", "a", 1]]
    policy = pd.read_csv(tmp_path / "out" / "routing_policy_delay.csv").set_index("policy")
    for cell, name in POLICY.items():
        delays = _delays(root / cell)
        row = policy.loc[name]
        assert (row["setting"], row["runs"], row["messages"]) == ("all", 2, len(delays))
        assert row["mean_delay_s"] == pytest.approx(statistics.fmean(delays), rel=1e-9)
        assert min(delays) <= row["p50_delay_s"] <= row["p95_delay_s"] <= max(delays)
