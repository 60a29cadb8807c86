"""`testbed run` of the quickstart's quick variant with its hosts placed on the rig's two engines: links across
machines are split over the agents' wire halves, daemons run on both engines, nothing is lost or duplicated,
and the mean delays stay within max(5%, 2 x the tunnel's jitter) of the same scenario on one engine."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from testbed import image
from testbed.runtime.docker import run_containers

from .conftest import Machines

pytestmark = [pytest.mark.xdist_group("testbed-up"), pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[4]
SCENARIO = REPO / "scenarios" / "quickstart.yaml"
# A link across machines needs at least the tunnel's one-way delay (tens of us here): both runs get 40 model ms,
# 1 wall ms at the scenario's time_scale 0.025.
DELAY = "40ms"


def _scenario(tmp_path: Path, name: str, placement: dict | None) -> Path:
    s = yaml.safe_load(SCENARIO.read_text())
    s.update(runtime="docker", shaper="wire", capture="none")
    s["link_defaults"]["delay"] = DELAY
    if placement is not None:
        s["placement"] = placement
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(s, sort_keys=False))
    return path


def _run(scenario: Path, out: Path, machines: Machines | None = None) -> tuple[list[dict], dict[str, set[str]]]:
    """The run's summaries and topology.json files; with `machines`, the run's containers seen on each engine
    while its first cell runs."""
    p = subprocess.Popen([sys.executable, "-m", "testbed", "run", str(scenario), "--quick", "--out", str(out)],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[str, set[str]] = {}
    if machines is not None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and p.poll() is None and not seen:
            found = list(out.glob("*/*/topology.json"))
            if found and list(found[0].parent.glob("nodes/*/metrics.jsonl")):
                run_id = json.loads(found[0].read_text())["run_id"]
                seen = {e.name: set(run_containers(run_id, e)) for e in machines.engines}
            time.sleep(0.2)
    output, _ = p.communicate(timeout=500)
    assert p.returncode == 0, output[-3000:]
    paths = sorted(out.glob("*/*/summary.json"))
    assert len(paths) == 2, paths
    return [{"summary": json.loads(x.read_text()), "topology": json.loads((x.parent / "topology.json").read_text())}
            for x in paths], seen


@pytest.mark.skipif(not SCENARIO.exists(), reason="scenarios/quickstart.yaml is not in the tree")
def test_quickstart_placed_on_two_engines(machines: Machines, node_image: image.BuildResult, tmp_path: Path) -> None:
    m1, m2 = machines.engines
    placement = {"machines": [{"name": e.name, "engine": e.host, "cores": 1, "address": machines.addresses[e.name]}
                              for e in machines.engines]}
    placed, seen = _run(_scenario(tmp_path, "placed", placement), tmp_path / "placed", machines)
    alone, _ = _run(_scenario(tmp_path, "alone", None), tmp_path / "alone")
    # While the cell ran, each engine held host containers and that machine's agent.
    for e in (m1, m2):
        assert any(".agent-" in c for c in seen[e.name]) and any(".agent-" not in c for c in seen[e.name]), seen
    by_mode = {r["summary"]["mode"]: r for r in alone}
    for r in placed:
        s, topo = r["summary"], r["topology"]
        where = s["mode"]
        assert s["complete"] and s["offered"] > 0, (where, s["reason"])
        assert s["accepted"] == s["offered"] and s["delivered"] == s["accepted"], where
        assert s["lost"] == 0 and s["duplicates"] == 0 and s["undelivered"] == 0, where
        machine = {h["name"]: h["machine"] for h in topo["hosts"]}
        assert set(machine.values()) == {"m1", "m2"}, machine
        crossing = [l["name"] for l in topo["links"] if machine[l["a"]] != machine[l["b"]]]
        assert crossing, machine
        # daemons of both machines delivered
        delivered_on = {machine[d.parent.name] for d in (tmp_path / "placed").glob("*/*/nodes/*/deliveries.jsonl")
                        if d.stat().st_size > 0}
        assert delivered_on == {"m1", "m2"}, delivered_on
        jitter = max(e["jitter"] for est in topo["tunnels"].values() for e in est.values())
        mean = s["delay"]["overall"]["mean_wall_s"]
        ref = by_mode[where]["summary"]["delay"]["overall"]["mean_wall_s"]
        print(f"{where}: mean delay {mean:.4f} s placed, {ref:.4f} s on one engine; tunnel jitter "
              f"{jitter * 1e3:.3f} ms; links across machines: {', '.join(crossing)}")
        assert abs(mean - ref) <= max(0.05 * ref, 2 * jitter), (where, mean, ref, jitter)
