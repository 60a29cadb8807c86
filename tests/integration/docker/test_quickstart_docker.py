"""The quickstart scenario's quick variant end to end on runtime docker: same guarantees as on netns."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import image
from testbed.runtime.docker import run_containers
from tests.integration.support import recoveries

# One Docker engine and image cache for the session: the Docker tests run on one worker.
pytestmark = [pytest.mark.xdist_group("docker"), pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[3]
SCENARIO = REPO / "scenarios" / "quickstart.yaml"


@pytest.mark.skipif(not SCENARIO.exists(), reason="scenarios/quickstart.yaml is not in the tree")
def test_quickstart_quick_on_docker(node_image: image.BuildResult, tmp_path: Path) -> None:
    out = tmp_path / "qs"
    r = subprocess.run([sys.executable, "-m", "testbed", "run", str(SCENARIO), "--quick", "--set", "runtime=docker",
                        "--out", str(out)], capture_output=True, text=True, cwd=REPO, timeout=400)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    summaries = sorted(out.glob("*/*/summary.json"))
    assert len(summaries) >= 2, f"expected one summary per mode, found {summaries}"
    modes = set()
    for path in summaries:
        s = json.loads(path.read_text())
        where = f"{path.parent.relative_to(out)}"
        assert s["complete"], (where, s["reason"])
        assert s["offered"] > 0, where
        assert s["accepted"] == s["offered"], (where, s["refused_by_reason"])
        assert s["delivered"] == s["accepted"], where
        assert s["lost"] == 0 and s["duplicates"] == 0 and s["undelivered"] == 0, where
        assert s["schema"]["problems"] == 0, (where, s["schema"]["first"])
        topo = json.loads((path.parent / "topology.json").read_text())
        assert topo.get("runtime") == "docker", where
        # The daemons wrote their records into the run directory through the container mounts.
        assert list((path.parent / "nodes").glob("*/deliveries.jsonl")), where
        # Every container of the cell is gone after its teardown.
        assert run_containers(topo["run_id"]) == [], where
        modes.add(s["mode"])
    assert modes == {"fragmenting", "non-fragmenting"}


@pytest.mark.skipif(not SCENARIO.exists(), reason="scenarios/quickstart.yaml is not in the tree")
def test_ctrl_c_during_a_docker_run_leaves_nothing(node_image: image.BuildResult, tmp_path: Path) -> None:
    """SIGINT to `testbed run ... runtime=docker` while the daemons run: the cell tears down, exit 130."""
    import signal
    import time

    from testbed import registry
    from testbed.runtime.netns import list_netns

    out = tmp_path / "qs"
    p = subprocess.Popen([sys.executable, "-m", "testbed", "run", str(SCENARIO), "--quick", "--set",
                          "runtime=docker", "--out", str(out)], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    topo = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        found = list(out.glob("*/*/topology.json"))
        # topology.json is written once the network is up; wait for the daemons' records too.
        if found and list(found[0].parent.glob("nodes/*/metrics.jsonl")):
            topo = json.loads(found[0].read_text())
            break
        time.sleep(0.2)
    assert topo is not None, "the run never got its network and daemons up"
    p.send_signal(signal.SIGINT)
    output, _ = p.communicate(timeout=120)
    assert p.returncode == 130, output[-2000:]
    run_id = topo["run_id"]
    assert run_containers(run_id) == []
    assert [n for n in list_netns() if n.startswith(registry.prefix(run_id))] == []


DRILL = REPO / "scenarios" / "drill-relay-crash.yaml"
# The drill's quick timeline with the relay's outgoing link n3-n4 cut from CUT s until after the restart, so
# the killed relay provably holds messages: n1 sends n5 a message about every second (normal, mean 1 s,
# sd 0.25 s), each crosses n3, and between the cut and the kill (3 s) n3 can hand none of them on.
# A message needs at most MARGIN s to reach n3: 100 fragments of 1000 B (the thesis mix's largest) take
# 0.1 s per 8 Mbit/s link, two links, 5 ms delay each; MARGIN leaves more than twice that.
CUT, KILL, MARGIN = 1, 4, 0.5
DRILL_FAULTS = (f"[{{at: {CUT}s, action: link_down, target: n3-n4}}, {{at: {KILL}s, action: kill, target: n3}}, "
                "{at: 8s, action: restart, target: n3}, {at: 9s, action: link_up, target: n3-n4}, "
                "{at: 11s, action: link_down, target: n1-n2}, {at: 15s, action: link_up, target: n1-n2}]")


@pytest.mark.skipif(not DRILL.exists(), reason="scenarios/drill-relay-crash.yaml is not in the tree")
def test_relay_container_killed_and_restarted_loses_nothing(node_image: image.BuildResult, tmp_path: Path) -> None:
    """The drill on docker: kill and restart are container operations; the restarted container gets its
    links back and the relay's spool (in the run directory mount) carries every accepted message on."""
    out = tmp_path / "drill"
    r = subprocess.run([sys.executable, "-m", "testbed", "run", str(DRILL), "--quick", "--set", "runtime=docker",
                        "--set", f"faults={DRILL_FAULTS}", "--out", str(out)],
                       capture_output=True, text=True, cwd=REPO, timeout=400)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    [path] = sorted(out.glob("*/*/summary.json"))
    s = json.loads(path.read_text())
    assert s["complete"], s["reason"]
    assert s["accepted"] > 0
    assert s["lost"] == 0 and s["duplicates"] == 0 and s["delivered"] == s["accepted"]
    events = [json.loads(line) for line in (path.parent / "events.jsonl").read_text().splitlines()]
    by_kind = {e["event"]: e for e in events if e["event"] in ("kill", "restart")}
    assert by_kind["kill"]["scope"] == "container" and by_kind["kill"]["target"] == "n3"
    restart = by_kind["restart"]
    assert restart["scope"] == "container"
    # n3 is a relay of the chain: both of its data links and its management interface came back
    assert len(restart["replumbed"]) >= 3, restart
    assert not [e for e in events if e["event"] == "fault_failed"], events
    # the kill hit data in flight: the restarted relay found in its spool at least what n1 accepted for n5
    # from the cut until MARGIN s before the kill
    cut = next(e["ts"] for e in events if e["event"] == "link_down" and e["target"] == "n3-n4")
    subs = [json.loads(line) for line in (path.parent / "nodes" / "n1" / "submissions.jsonl").read_text().splitlines()]
    stuck = [x for x in subs if x["accepted"] and x["dst"] == "n5" and cut <= x["ts"] <= by_kind["kill"]["ts"] - MARGIN]
    found = recoveries(path.parent / "nodes" / "n3" / "node.log")
    print(f"n3 at its restart: {found[-1]}; n1 accepted {len(stuck)} messages for n5 between cut and kill")
    assert len(found) == 2 and stuck, (found, stuck)
    assert found[1]["queued"] + found[1]["held"] >= sum(x["fragments"] for x in stuck), (found, stuck)
