"""`testbed run` of the quickstart's quick variant with its hosts placed on the rig's two engines: links across
machines are split over the agents' wire halves, daemons run on both engines, nothing is lost or duplicated,
and the mean delay stays as close to the same scenario's on one engine as its own run-to-run noise allows
(message by message: the same seeded messages in both runs); and
`testbed up` of a placed network driven by later processes (exec, a link change, a partition, down)."""
from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from testbed import image, netstate
from testbed.docker_engine import Engine, docker
from testbed.network import partition_chain
from testbed.runtime.docker import run_containers
from tests.integration.support import skip_while_a_network_is_up

from .conftest import Machines

pytestmark = [pytest.mark.xdist_group("docker-multi"), pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[4]
SCENARIO = REPO / "scenarios" / "quickstart.yaml"
# A link across machines needs at least the tunnel's one-way delay (tens of us here): both runs get 40 model ms,
# 1 wall ms at the scenario's time_scale 0.025.
DELAY = "40ms"


def _scenario(tmp_path: Path, name: str, placement: dict | None) -> Path:
    s = yaml.safe_load(SCENARIO.read_text())
    s.update(runtime="docker", shaper="wire", capture="none")
    s["link_defaults"]["delay"] = DELAY
    # One cell of the two: what a split link does to a delay does not depend on the mode, and each run of the
    # pair costs about 40 s of the suite's time.
    s["quick"]["sweep"] = {"grid": {"nodes.all.mode": ["fragmenting"]}, "reps": 1}
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
    assert len(paths) == 1, paths
    return [{"summary": json.loads(x.read_text()), "topology": json.loads((x.parent / "topology.json").read_text())}
            for x in paths], seen


# Compares the delays of two runs made one after the other: another test's run beside only one of them (the
# single-engine Docker tests run on another worker) moves its delays by more than the bound.
@pytest.mark.alone
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
        diff, se = _paired_delay_difference(tmp_path / "placed", tmp_path / "alone", where)
        print(f"{where}: mean delay {mean:.4f} s placed, {ref:.4f} s on one engine (paired difference "
              f"{diff * 1e3:+.1f} ms, standard error {se * 1e3:.1f} ms); tunnel jitter {jitter * 1e3:.3f} ms; "
              f"links across machines: {', '.join(crossing)}")
        # Both runs queue the same seeded messages, and the queues make the same scenario's mean delay vary by
        # 5-7% from run to run on one engine; paired message by message, that noise is the standard error of the
        # mean difference. 4 standard errors, not 2-3: a message's delay carries over to the ones queued behind
        # it, so the differences are not independent.
        assert abs(diff) <= max(0.05 * ref, 2 * jitter, 4 * se), (where, mean, ref, diff, se, jitter)


def _paired_delay_difference(placed: Path, alone: Path, mode: str) -> tuple[float, float]:
    """The mean of the per-message delay differences (placed - alone) and its standard error. The k-th message
    an origin submitted is the same message in both runs (same seed): its recipient and size must match."""
    def by_origin(run: Path) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for path in run.glob(f"mode-{mode}/*/nodes/*/deliveries.jsonl"):
            for line in path.read_text().splitlines():
                r = json.loads(line)
                out.setdefault(r["src"], []).append(r)
        return {src: sorted(rs, key=lambda r: r["submit_ts"]) for src, rs in out.items()}

    a, b = by_origin(placed), by_origin(alone)
    assert a.keys() == b.keys() and all(len(a[k]) == len(b[k]) for k in a), "the two runs delivered different sets"
    diffs = []
    for src in a:
        for x, y in zip(a[src], b[src]):
            assert (x["dst"], x["size"]) == (y["dst"], y["size"]), ("the seeded workloads differ", src, x, y)
            diffs.append(x["delay"] - y["delay"])
    assert len(diffs) >= 2, diffs
    return statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=180)


def _rtt(r: subprocess.CompletedProcess) -> float:
    """The smallest round trip of a ping's output, ms."""
    assert r.returncode == 0, r.stdout + r.stderr
    return min(float(x) for x in re.findall(r"time=([0-9.]+) ms", r.stdout))


def _rules(engine: Engine, container: str) -> str:
    """`iptables -S` in a container's network namespace, entered by its init's pid as its engine reports it."""
    pid = docker(["inspect", "--format", "{{.State.Pid}}", container], engine=engine).stdout.strip()
    return subprocess.run(["nsenter", "-t", pid, "-n", "iptables", "-w", "-S"], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.testbed_up
def test_up_link_change_and_down_across_two_engines(machines: Machines, node_image: image.BuildResult,
                                                    tmp_path: Path) -> None:
    """`testbed up` of a placed network, then later processes: exec on the host's own engine, a link change
    through the agents' halves, a partition and heal through the agents, and `down` leaving nothing on either
    engine."""
    skip_while_a_network_is_up()
    m1, m2 = machines.engines
    machines_yaml = ", ".join(f"{{name: {e.name}, engine: '{e.host}', cores: 1, "
                              f"address: {machines.addresses[e.name]}}}" for e in machines.engines)
    scenario = tmp_path / "up.yaml"
    scenario.write_text("name: placedup\ntopology: {generator: linear, params: {n: 2}}\nlink_defaults: {delay: 5ms}\n"
                        f"runtime: docker\nshaper: wire\nplacement:\n  machines: [{machines_yaml}]\n"
                        "  strategy: {n1: m1, n2: m2}\n")
    r = _cli("up", str(scenario), "--run-dir", str(tmp_path / "run"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    run_id = netstate.running()[0].run_id
    try:
        assert {".agent-" in c for c in run_containers(run_id, m1)} == {True, False}
        assert {".agent-" in c for c in run_containers(run_id, m2)} == {True, False}
        topo = json.loads((tmp_path / "run" / "topology.json").read_text())
        n1 = next(h["data_address"] for h in topo["hosts"] if h["name"] == "n1")
        ping = ("exec", "n2", "--", "ping", "-c", "3", "-i", "0.2", "-W", "2", n1)
        assert _rtt(_cli(*ping)) >= 2 * 5.0 - 0.5       # n2 is a container of m2: exec went to its engine
        r = _cli("link", "n1", "n2", "--delay", "20ms")
        assert r.returncode == 0, r.stderr
        assert _rtt(_cli(*ping)) >= 2 * 20.0 - 0.5
        # A partition from a later process: the agents (reached through the network's state) put the run's chain
        # in n2's container on m2's engine; heal removes it.
        chain = partition_chain(run_id)
        n2 = next(h["netns"] for h in topo["hosts"] if h["name"] == "n2")
        assert _cli("partition", "n1", "n2").returncode == 0
        assert f"-N {chain}" in _rules(m2, n2)
        assert _cli("exec", "n2", "--", "ping", "-c", "1", "-W", "1", n1).returncode != 0
        r = _cli("heal")
        assert r.returncode == 0, r.stderr
        assert chain not in _rules(m2, n2)
        assert _rtt(_cli(*ping)) >= 2 * 20.0 - 0.5
    finally:
        r = _cli("down")
    assert r.returncode == 0, r.stderr
    assert run_containers(run_id, m1) == [] and run_containers(run_id, m2) == []
