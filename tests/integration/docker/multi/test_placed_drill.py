"""The nemesis drill's quick cell over the rig's two engines, with the second machine's clock 0.5 s ahead.

Placement: n1, n3, n6 on m1 and n2, n4, n5 on m2, so four ring links cross the engines and the timeline's kill -9s
of n4 and n5, their restarts, the pause of n2 and both partitions hit hosts of m2; a link fault (down, then up)
on the crossing link n5-n6 is added. The loss checker must find 0 lost and 0 duplicated, and events.jsonl names
the machine of every node fault. The same run is the clock test: m2's clock service and its daemons run
WANBED_TEST_MACHINE_CLOCK_OFFSET ahead; the agents' exchange must find that offset within half the probe's
round trip, and the delays corrected by machines.json are never negative and carry no offset."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from node import clockmodel
from testbed import image
from testbed.accounting import check_run
from testbed.agent.placed import TEST_MACHINE_OFFSET_ENV
from testbed.runtime.docker import run_containers

from .conftest import Machines

pytestmark = [pytest.mark.xdist_group("docker"), pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[4]
DRILL = REPO / "scenarios" / "drill-nemesis.yaml"
ON_M2 = ("n2", "n4", "n5")
CROSSING = "n5-n6"
OFFSET = 0.5          # s: m2's clock ahead of the controller's; far above any delay of the drill's quick cell
LINK_FAULT = [{"at": "7s", "action": "link_down", "target": CROSSING},
              {"at": "8s", "action": "link_up", "target": CROSSING}]


def _scenario(tmp_path: Path, machines: Machines) -> Path:
    s = yaml.safe_load(DRILL.read_text())
    s.update(runtime="docker", shaper="wire", capture="none")
    s["placement"] = {"machines": [{"name": e.name, "engine": e.host, "cores": 1,
                                    "address": machines.addresses[e.name]} for e in machines.engines],
                      "strategy": {h: "m2" if h in ON_M2 else "m1" for h in (f"n{i}" for i in range(1, 7))}}
    s["quick"]["faults"] = s["quick"]["faults"] + LINK_FAULT
    # one cell of the two: the faults and the placement do not depend on the mode
    s["quick"]["sweep"] = {"grid": {"nodes.all.mode": ["fragmenting"]}, "reps": 1}
    path = tmp_path / "drill.yaml"
    path.write_text(yaml.safe_dump(s, sort_keys=False))
    return path


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_nemesis_drill_and_clock_offset_over_two_engines(machines: Machines, node_image: image.BuildResult,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "testbed", "run", str(_scenario(tmp_path, machines)), "--quick",
                        "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=540,
                       env={**os.environ, TEST_MACHINE_OFFSET_ENV: f"m2={OFFSET}"})
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    [rep] = [p.parent for p in out.glob("*/*/summary.json")]
    topo = json.loads((rep / "topology.json").read_text())
    machine = {h["name"]: h["machine"] for h in topo["hosts"]}
    assert {h for h, m in machine.items() if m == "m2"} == set(ON_M2)
    assert run_containers(topo["run_id"], machines.engines[0]) == []
    assert run_containers(topo["run_id"], machines.engines[1]) == []

    # -- the drill: every fault applied, those of m2's hosts named with their machine; nothing lost
    evs = _jsonl(rep / "events.jsonl")
    assert not [e for e in evs if e["event"] == "fault_failed"], evs
    node_faults = [e for e in evs if e["event"] in ("kill", "restart", "pause", "resume")]
    assert {(e["event"], e["target"]) for e in node_faults if e.get("machine") == "m2"} >= \
        {("kill", "n4"), ("restart", "n4"), ("kill", "n5"), ("restart", "n5"), ("pause", "n2"), ("resume", "n2")}
    assert all(e["machine"] == machine[e["target"]] for e in node_faults)
    assert [e["machines"] for e in evs if e["event"] == "partition"] == [["m1", "m2"], ["m1", "m2"]]
    assert [(e["event"], e["machines"]) for e in evs if e["target"] == CROSSING] == \
        [("link_down", ["m1", "m2"]), ("link_up", ["m1", "m2"])]
    v = check_run(rep)
    print(f"placed drill: {wall:.1f} s wall; accepted {v.accepted}, delivered {v.delivered}, lost {v.lost}, "
          f"duplicate {v.duplicate}, late {v.late}")
    assert v.accepted > 0 and v.delivered == v.accepted
    assert v.lost == 0 and v.duplicate == 0 and v.extra_deliveries == 0 and v.late == 0
    assert v.problems == 0, (v.first_problems, v.spool_problems)
    summary = json.loads((rep / "summary.json").read_text())
    assert summary["complete"] and summary["lost"] == 0 and summary["duplicates"] == 0

    # -- the clocks: each machine's offset found within half its best probe's round trip, at start and end
    doc = json.loads((rep / clockmodel.MACHINES_FILE).read_text())
    for name, injected in (("m1", 0.0), ("m2", OFFSET)):
        for when in ("start", "end"):
            est = doc["machines"][name][when]
            print(f"{name} {when}: offset {est['offset'] * 1e3:.3f} ms, round trip {est['rtt'] * 1e3:.3f} ms")
            assert abs(est["offset"] - injected) <= est["rtt"] / 2 + 1e-6, (name, when, est)
    assert "clock" in summary and summary["clock"]["machines"]["m2"]["offset_s"] == pytest.approx(OFFSET, abs=0.01)

    # -- the delays: raw ones carry the offset (negative from m2 to m1), corrected ones neither
    clocks = clockmodel.load(rep)
    assert clocks is not None and not clocks.problem
    raw: dict[tuple[str, str], list[float]] = {("m1", "m2"): [], ("m2", "m1"): []}
    fixed: dict[tuple[str, str], list[float]] = {("m1", "m2"): [], ("m2", "m1"): []}
    for d in rep.glob("nodes/*/deliveries.jsonl"):
        for rec in _jsonl(d):
            if rec.get("kind", "delivery") != "delivery" or "submit_ts" not in rec:
                continue
            pair = (machine[rec["src"]], machine[rec["node"]])
            if pair in raw:
                raw[pair].append(rec["deliver_ts"] - rec["submit_ts"])
                fixed[pair].append(clocks.correct(rec["node"], rec["deliver_ts"])
                                   - clocks.correct(rec["src"], rec["submit_ts"]))
    assert all(raw.values()), {k: len(x) for k, x in raw.items()}
    print("smallest delays m1->m2, m2->m1: raw "
          + ", ".join(f"{min(x) * 1e3:.1f} ms" for x in raw.values()) + "; corrected "
          + ", ".join(f"{min(x) * 1e3:.1f} ms" for x in fixed.values()))
    assert min(raw[("m2", "m1")]) < 0 and min(raw[("m1", "m2")]) >= OFFSET     # the offset is there uncorrected
    slack = 2 * clocks.uncertainty
    assert min(min(x) for x in fixed.values()) >= -slack                      # not negative once corrected
    assert min(fixed[("m1", "m2")]) < OFFSET / 2                              # nor inflated by the offset
